"""Upstream column changes, decided by the gate policy's `columns:` block (TF-free).

A span's columns are compared with the curated schema's features before a run:
- a **missing** column always stops the month (the model reads it);
- a **new** column (the source added one) stops it under `columns.new: stop` (the default,
  a structure change a person looks at) or, under `report`, is left out of the examples
  (CsvExampleGen's executor drops it, as a feature policy's `ingest: drop` column) and named
  in the run's summary, its governance report and an alert (`new_columns`).

When columns are both missing and new, each new column is compared with each missing one's
history: the latest earlier span folder that still has the missing column and whose files read. A new column
"looks renamed" when its values have the same kind (integer, number or text, as CSV ingestion
infers it) and their distribution lies within the gate's own drift limit for the missing
feature: the Kolmogorov-Smirnov distance for numbers, the L-infinity distance of the value
shares for text, held to `policy.threshold(measure, k, n_eff)` with the feature's
calibrated `k` (components/data_gate/policy.py). The message then names both. It is a hint:
the month still stops, since a missing column is a change a person confirms (rename the
column upstream, or in the schema and the model).

At most `SAMPLE_ROWS` rows of each side are read (the first rows of the span's files).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os

import numpy as np

from components.data_gate import policy as policy_lib
from core import csv_header, spans

# Rows read of each side to compare a new column with a missing one's history.
SAMPLE_ROWS = 200_000
INT, FLOAT, STRING, EMPTY = "integer", "number", "text", "empty"


@dataclasses.dataclass(frozen=True)
class RenameHint:
    """A new column whose values match a missing column's history."""

    new: str
    missing: str
    kind: str
    measure: str  # ks or linf
    value: float
    limit: float
    history_span: int
    rows: tuple[int, int]  # values compared: (new span, history span)

    def sentence(self) -> str:
        name = policy_lib.MEASURE_NAMES[self.measure].split(" (")[0]
        return (f"{self.new!r} looks like {self.missing!r} renamed: its values are {self.kind}s, like those of "
                f"{self.missing!r} in span {self.history_span} ({name} {self.value:.3f}, within the gate's limit "
                f"{self.limit:.3f}; {self.rows[0]} vs {self.rows[1]} values)")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "rows": list(self.rows)}


def compare(columns: list[str], expected: list[str] | set[str]) -> tuple[list[str], list[str]]:
    """(missing, new): the schema's features not among the columns, and the columns not in it."""
    have, want = set(columns), set(expected)
    return sorted(want - have), [c for c in dict.fromkeys(columns) if c not in want]


def _kind(values: list[str]) -> str:
    """The column's kind as CSV ingestion infers it: integer, number, text (or empty)."""
    kind = EMPTY
    for value in values:
        if not value:
            continue
        try:
            int(value)
            this = INT
        except ValueError:
            try:
                float(value)
                this = FLOAT
            except ValueError:
                return STRING
        if kind != FLOAT:
            kind = this
    return kind


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov distance."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b))))


def _linf(a: list[str], b: list[str]) -> float:
    """The largest difference of one value's share between the two sides."""
    values_a, counts_a = np.unique(np.asarray(a, dtype=object).astype(str), return_counts=True)
    values_b, counts_b = np.unique(np.asarray(b, dtype=object).astype(str), return_counts=True)
    share_a = dict(zip(values_a.tolist(), (counts_a / len(a)).tolist()))
    share_b = dict(zip(values_b.tolist(), (counts_b / len(b)).tolist()))
    return max(abs(share_a.get(v, 0.0) - share_b.get(v, 0.0)) for v in set(share_a) | set(share_b))


def match(new_values: list[str], old_values: list[str], policy: policy_lib.GatePolicy, old_name: str,
          ) -> tuple[str, str, float, float] | None:
    """(kind, measure, distance, limit) when the new values look like the old column's, else None."""
    new_values, old_values = [v for v in new_values if v], [v for v in old_values if v]
    if not new_values or not old_values:
        return None
    kind = _kind(new_values)
    if kind != _kind(old_values):
        return None
    n_eff = len(new_values) * len(old_values) / (len(new_values) + len(old_values))
    if kind == STRING:
        measure, value = "linf", _linf(new_values, old_values)
    else:
        measure = "ks"
        value = _ks(np.asarray(new_values, np.float64), np.asarray(old_values, np.float64))
    limit = policy_lib.threshold(measure, policy.k(old_name, measure)[0], n_eff)
    return (kind, measure, value, limit) if value <= limit else None


def column_values(folder: str, example_format: str, names: list[str], limit: int = SAMPLE_ROWS) -> dict[str, list[str]]:
    """Up to `limit` values (as text, '' for an empty cell or null) of each named column of a
    span folder's files, in file order; a column a file lacks is left out."""
    out: dict[str, list[str]] = {}
    suffix = spans.FILE_SUFFIXES.get(example_format)
    if suffix is None or example_format == "tfrecord":
        return out  # tf.Examples: no hint (reading them needs TensorFlow)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(suffix):
            continue
        if out and all(len(values) >= limit for values in out.values()):
            break
        path = os.path.join(folder, name)
        if example_format == "csv":
            found = _csv_values(path, names, limit)
        else:
            found = _table_values(path, names, limit)
        for column, values in found.items():
            have = out.setdefault(column, [])
            have.extend(values[:limit - len(have)])
    return out


def _csv_values(path: str, names: list[str], limit: int) -> dict[str, list[str]]:
    header, data_start = csv_header.read_header(path)
    wanted = {name: header.index(name) for name in names if name in header}
    if not wanted:
        return {}
    out: dict[str, list[str]] = {name: [] for name in wanted}
    with open(path, "rb") as f:
        f.seek(data_start)
        reader = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""))
        for count, row in enumerate(reader):
            if count >= limit:
                break
            if not row:
                continue
            for name, i in wanted.items():
                out[name].append(row[i] if i < len(row) else "")
    return out


def _table_values(path: str, names: list[str], limit: int) -> dict[str, list[str]]:
    """A columnar file's values (Parquet), nulls as ''."""
    import pyarrow.parquet as pq

    present = [n for n in names if n in pq.read_schema(path).names]
    if not present:
        return {}
    table = pq.read_table(path, columns=present).slice(0, limit)
    return {n: ["" if v is None else str(v) for v in table.column(n).to_pylist()] for n in present}


def _readable_values(folder: str, example_format: str, names: list[str], limit: int = SAMPLE_ROWS,
                     ) -> dict[str, list[str]] | None:
    """`column_values`, or None for a folder whose files do not read (a month the run's checks
    refused: never anyone's history)."""
    try:
        return column_values(folder, example_format, names, limit)
    except (OSError, ValueError, csv.Error):  # CsvInputError, UnicodeDecodeError and Arrow's errors are ValueErrors
        return None


def history(data_root: str, span: int, example_format: str, column: str) -> tuple[int, list[str]] | None:
    """(span, values) of the latest span before `span` whose files read whole and have the column."""
    for earlier in sorted((s for s in spans.list_spans(data_root) if s < span), reverse=True):
        found = _readable_values(spans.span_dir(data_root, earlier), example_format, [column])
        if found and column in found:
            return earlier, found[column]
    return None


def rename_hints(data_root: str, span: int, example_format: str, missing: list[str], new: list[str],
                 policy: policy_lib.GatePolicy) -> list[RenameHint]:
    """The new columns that look like a missing one renamed (at most one hint per new column)."""
    if not missing or not new:
        return []
    folder = spans.span_dir(data_root, span)
    new_values = column_values(folder, example_format, new)
    hints, taken = [], set()
    for old in missing:
        found = history(data_root, span, example_format, old)
        if found is None:
            continue
        earlier, old_values = found
        for name in new:
            if name in taken or name not in new_values:
                continue
            found = match(new_values[name], old_values, policy, old)
            if found:
                kind, measure, value, limit = found
                hints.append(RenameHint(name, old, kind, measure, value, limit, earlier,
                                        (sum(1 for v in new_values[name] if v), sum(1 for v in old_values if v))))
                taken.add(name)
                break
    return hints


def stop_message(where: str, missing: list[str], new: list[str], policy: policy_lib.GatePolicy,
                 hints: list[RenameHint]) -> str | None:
    """Why the span stops, or None when it goes on (no missing column; new ones under report)."""
    stops_new = new and policy.columns_new == "stop"
    if not missing and not stops_new:
        return None
    parts = []
    if missing:
        parts.append(f"missing column(s) {', '.join(missing)}")
    if new:
        parts.append(f"column(s) not in the schema {', '.join(new)}")
    text = f"{where} does not match the schema: {'; '.join(parts)}"
    if hints:
        text += ". " + "; ".join(h.sentence() for h in hints) + (
            ". If it is the same data, rename the column back upstream, or rename the feature in the schema, the"
            " gate policy and the model")
    elif stops_new and not missing:
        text += (f". The gate policy ({policy.path or 'gate.yaml'}) has columns.new: stop; with columns.new: report a"
                 " new column is left out of the examples, named in the run's summary and report, and the month"
                 " goes on")
    return text
