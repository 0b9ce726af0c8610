"""Delayed labels ("feedback"): what happened to requests that were answered earlier.

Files arrive in `<workdir>/feedback/<model>/` (`core.layout.feedback_dir`), one record per
answered example, as JSON Lines (`*.jsonl`) or CSV with a header (`*.csv`):

    {"request_key": "trip-000123", "label": 1, "time": "2016-12-03T10:00:00Z"}
    request_key,label,time
    trip-000123,1,1480759200

  request_key  the request's key: its X-Request-Id header (gRPC: `x-request-id` metadata),
               else the hex SHA-256 of its body; `<key>/<i>` for the i-th example (from 0)
               of a request that carried several
  label        binary: 0/1 or true/false; multiclass: an integer class; regression: a number
  time         when the label became known: ISO 8601 with a zone, or Unix seconds

A record that cannot be used is never joined: it is counted by reason (`missing_key`,
`bad_label`, `bad_time`, `malformed`) with its file and line, and reported with the
decision. A file none of whose records can be used is an error (`FeedbackError`).
Duplicated and unknown keys are found by the join (rollout/join.py).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import os
from collections.abc import Iterator

from core import tasks
from core.errors import BadInput

SUFFIXES = (".jsonl", ".csv")
REASONS = ("missing_key", "bad_label", "bad_time", "malformed")
MAX_EXAMPLES = 5


class FeedbackError(BadInput):
    """A feedback file that cannot be read at all."""


@dataclasses.dataclass(frozen=True)
class Label:
    key: str
    label: float
    time: float  # Unix seconds
    where: str  # file:line


@dataclasses.dataclass
class Rejected:
    """Records refused, by reason, with the first few places."""

    counts: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    examples: list[str] = dataclasses.field(default_factory=list)

    def add(self, reason: str, where: str, detail: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {reason}: {detail}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def files(folder: str) -> list[str]:
    """Feedback files of a folder, in name order (files being written should carry another
    suffix until complete, e.g. `.part`)."""
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(SUFFIXES))


def parse_time(value) -> float:
    """Unix seconds from a number or an ISO 8601 string with a zone.

    Raises:
      ValueError: anything else (a time without a zone is ambiguous).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a time")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no time zone")
        return parsed.timestamp()
    raise ValueError(f"{value!r} is not a time")


def parse_label(value, task: str) -> float:
    """The label as a number, checked for the task.

    Raises:
      ValueError: a label the task cannot have.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if task == tasks.BINARY and text in ("true", "false"):
            return 1.0 if text == "true" else 0.0
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if isinstance(value, bool):
        if task != tasks.BINARY:
            raise ValueError(f"{value!r} is not a {task} label")
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    if task == tasks.BINARY and value not in (0, 1):
        raise ValueError(f"{value!r} is not 0 or 1")
    if task == tasks.MULTICLASS and (value < 0 or value != int(value)):
        raise ValueError(f"{value!r} is not a class index")
    return float(value)


def _records(path: str) -> Iterator[tuple[int, dict | None, str]]:
    """(line, record or None, problem) of a file."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            if path.endswith(".csv"):
                reader = csv.DictReader(f)
                missing = {"request_key", "label", "time"} - set(reader.fieldnames or ())
                if missing:
                    raise FeedbackError(f"feedback file {path}: the header lacks {', '.join(sorted(missing))} "
                                        "(expected request_key,label,time)")
                for row in reader:
                    if None in row or None in row.values():
                        yield reader.line_num, None, "not three columns"
                    else:
                        yield reader.line_num, row, ""
                return
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    yield number, None, f"not JSON ({e.msg})"
                    continue
                yield (number, record, "") if isinstance(record, dict) else (number, None, "not a JSON object")
    except UnicodeDecodeError as e:
        raise FeedbackError(f"feedback file {path}: not UTF-8 text (byte {e.start})") from e
    except OSError as e:
        raise FeedbackError(f"feedback file {path}: cannot read it: {e}") from e


def read(path: str, task: str, rejected: Rejected) -> Iterator[Label]:
    """The usable labels of one file; the rest go to `rejected`.

    Raises:
      FeedbackError: unreadable, not text, a CSV without the columns, or no usable record.
    """
    good = 0
    seen = 0
    for number, record, problem in _records(path):
        seen += 1
        where = f"{os.path.basename(path)}:{number}"
        if record is None:
            rejected.add("malformed", where, problem)
            continue
        key = record.get("request_key")
        if not isinstance(key, str) or not key.strip():
            rejected.add("missing_key", where, f"request_key is {key!r}")
            continue
        try:
            label = parse_label(record.get("label"), task)
        except ValueError as e:
            rejected.add("bad_label", where, str(e))
            continue
        try:
            time = parse_time(record.get("time"))
        except ValueError as e:
            rejected.add("bad_time", where, str(e))
            continue
        good += 1
        yield Label(key.strip(), label, time, where)
    if seen and not good:
        raise FeedbackError(f"feedback file {path}: none of its {seen} records can be used "
                            f"(first problems: {'; '.join(rejected.examples[:3])})")


def write(path: str, labels: list[dict]) -> None:
    """Writes a JSON Lines feedback file atomically (the simulator's and tests' writer)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = path + ".part"
    with open(partial, "w", encoding="utf-8") as f:
        for label in labels:
            f.write(json.dumps(label, sort_keys=True) + "\n")
    os.replace(partial, path)
