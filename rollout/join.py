"""Request logs joined with their delayed labels by request key, on disk.

Both streams go into one SQLite file per model (`<workdir>/rollout/<model>/join.sqlite`):
each finished request-log file and each feedback file is read once (its path and size are
recorded), one example at a time, so millions of logged requests pass through in bounded
memory; the join itself is SQL, and the metrics stream out of it into fixed-size tallies
(rollout/live_metrics.py). What cannot be joined is counted, never joined:
  duplicate_label    a key labelled twice: none of its labels is used
  duplicate_request  a key logged twice (a retry): the first answer counts
  unmatched_label    a label whose request is not (yet) in the logs
  no_prediction      a logged example whose response has no usable score
  unreadable_log     a request-log file that is not TFRecords of PredictionLogs (or is cut
                     short): its records up to the damage are used, the rest is reported
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
from collections.abc import Iterable

import numpy as np

from core import tasks
from rollout import feedback, live_metrics
from serving.server.routing import example_keys

FILENAME = "join.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ingested (path TEXT PRIMARY KEY, kind TEXT, size INTEGER, records INTEGER);
CREATE TABLE IF NOT EXISTS predictions (key TEXT PRIMARY KEY, version INTEGER, prediction REAL, logged_at REAL);
CREATE TABLE IF NOT EXISTS labels (key TEXT PRIMARY KEY, label REAL, time REAL, place TEXT);
CREATE TABLE IF NOT EXISTS duplicate_labels (key TEXT PRIMARY KEY, count INTEGER);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS rejected (place TEXT, reason TEXT, detail TEXT);
"""
_BATCH = 5000


def _positive_index(classes: list[bytes]) -> int:
    return len(classes) - 1  # heads list (negative, positive); a binary classify answer ends with it


def predictions_of(log, task: str) -> list[float]:
    """The scores a logged response gave its examples: binary -> the positive class's score,
    multiclass -> the arg-max class, regression -> the value. [] if the response has none."""
    kind = log.WhichOneof("log_type")
    if kind == "classify_log":
        out = []
        for row in log.classify_log.response.result.classifications:
            scores = [c.score for c in row.classes]
            if not scores:
                return []
            out.append(scores[_positive_index(list(row.classes))] if task == tasks.BINARY
                       else float(int(np.argmax(scores))))
        return out
    if kind == "regress_log":
        return [r.value for r in log.regress_log.response.result.regressions]
    if kind != "predict_log":
        return []
    import tensorflow as tf  # the runtime side only: request logs are TF protos

    outputs = log.predict_log.response.outputs
    if not outputs:
        return []
    name = next((n for n in ("outputs", "probabilities", "scores", "predictions", "probability") if n in outputs),
                sorted(outputs)[0])
    values = tf.make_ndarray(outputs[name]).astype(np.float64)
    if values.ndim == 0:
        values = values.reshape(1)
    if task == tasks.MULTICLASS:
        return [float(v) for v in (values.argmax(axis=-1) if values.ndim > 1 else values)]
    if values.ndim > 1 and values.shape[-1] == 2 and task == tasks.BINARY:
        values = values[..., 1]
    return [float(v) for v in values.reshape(values.shape[0], -1)[:, 0]]


def logged_request_key(log) -> str | None:
    """The key this server logged with the request (`log_metadata.request_origin`)."""
    return log.log_metadata.request_origin or None


@dataclasses.dataclass
class Joined:
    """The live picture of each version over the same period."""

    tallies: dict[int, live_metrics.Tally]
    delays: dict[int, list[float]]  # label delay (s) quantiles per version: p50, p90
    counts: dict[str, int]
    rejected_examples: list[str]
    first_label: float | None
    last_label: float | None


class Join:
    """A model's join database."""

    def __init__(self, folder: str, task: str):
        os.makedirs(folder, exist_ok=True)
        self.task = task
        self.path = os.path.join(folder, FILENAME)
        self._db = sqlite3.connect(self.path)
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _bump(self, name: str, by: int) -> None:
        if by:
            self._db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + ?",
                             (name, by, by))

    def counters(self) -> dict[str, int]:
        return dict(self._db.execute("SELECT name, value FROM counters"))

    def _new(self, path: str) -> bool:
        row = self._db.execute("SELECT size FROM ingested WHERE path = ?", (path,)).fetchone()
        return row is None

    def add_predictions(self, rows: Iterable[tuple[str, int, float, float]]) -> tuple[int, int]:
        """(key, version, prediction, logged_at) rows; returns (added, duplicates)."""
        added = duplicates = 0
        batch: list = []

        def flush():
            nonlocal added, duplicates
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO predictions VALUES (?, ?, ?, ?)", batch)
            changed = self._db.total_changes - before
            added += changed
            duplicates += len(batch) - changed
            batch.clear()

        for row in rows:
            batch.append(row)
            if len(batch) >= _BATCH:
                flush()
        flush()
        self._bump("duplicate_request", duplicates)
        return added, duplicates

    def ingest_logs(self, paths: Iterable[str], read_file) -> int:
        """Reads each new request-log file (`read_file(path)` yields PredictionLogs); returns
        how many examples were added."""
        total = 0
        for path in paths:
            if not self._new(path):
                continue
            missing, damaged = [0], []

            def rows(path=path):
                for log in _guarded(read_file(path), path, damaged):
                    key = logged_request_key(log)
                    scores = predictions_of(log, self.task)
                    if key is None or not scores:
                        missing[0] += max(1, len(scores))
                        continue
                    version = log.log_metadata.model_spec.version.value
                    logged_at = float(log.log_metadata.timestamp_secs)
                    for k, score in zip(example_keys(key, len(scores)), scores):
                        yield k, version, score, logged_at

            added, duplicates = self.add_predictions(rows())
            self._bump("no_prediction", missing[0])
            if damaged:
                self._bump("unreadable_log", 1)
                self._db.execute("INSERT INTO rejected VALUES (?, 'unreadable_log', ?)",
                                 (os.path.basename(path), damaged[0]))
            self._db.execute("INSERT INTO ingested VALUES (?, 'log', ?, ?)",
                             (path, os.path.getsize(path), added + duplicates))
            self._db.commit()
            total += added
        return total

    def ingest_feedback(self, paths: Iterable[str]) -> int:
        """Reads each new feedback file, streaming; returns how many labels were stored.

        Raises:
          feedback.FeedbackError: a file none of whose records can be used (nothing of it is kept).
        """
        total = 0
        for path in paths:
            if not self._new(path):
                continue
            rejected = feedback.Rejected()
            stored = 0
            try:
                for label in feedback.read(path, self.task, rejected):
                    stored += self._store_label(label)
            except feedback.FeedbackError:
                self._db.rollback()
                raise
            for reason, count in rejected.counts.items():
                self._bump(reason, count)
            self._db.executemany("INSERT INTO rejected VALUES (?, ?, ?)",
                                 [tuple(e.split(": ", 2)) for e in rejected.examples])
            self._db.execute("INSERT INTO ingested VALUES (?, 'feedback', ?, ?)",
                             (path, os.path.getsize(path), stored))
            self._db.commit()
            total += stored
        return total

    def _store_label(self, label: feedback.Label) -> int:
        """1 if stored; a key seen before is taken out of the join altogether (0 or -1)."""
        if self._db.execute("UPDATE duplicate_labels SET count = count + 1 WHERE key = ?", (label.key,)).rowcount:
            return 0
        try:
            self._db.execute("INSERT INTO labels VALUES (?, ?, ?, ?)", (label.key, label.label, label.time, label.where))
            return 1
        except sqlite3.IntegrityError:
            [first] = self._db.execute("SELECT place FROM labels WHERE key = ?", (label.key,)).fetchone()
            self._db.execute("DELETE FROM labels WHERE key = ?", (label.key,))
            self._db.execute("INSERT INTO duplicate_labels VALUES (?, 2)", (label.key,))
            self._db.execute("INSERT INTO rejected VALUES (?, 'duplicate_label', ?)",
                             (label.where, f"{label.key} also labelled at {first}; neither label is used"))
            return -1

    def joined(self, versions: Iterable[int], since: float | None = None) -> Joined:
        """Each version's tally over labels of requests logged at or after `since`."""
        wanted = sorted(set(versions))
        tallies = {v: live_metrics.Tally(self.task) for v in wanted}
        delays: dict[int, list[float]] = {v: [] for v in wanted}
        where = "" if since is None else " AND p.logged_at >= ?"
        args = () if since is None else (since,)
        cursor = self._db.execute(
            "SELECT p.version, p.prediction, l.label, l.time - p.logged_at FROM predictions p JOIN labels l "
            f"ON p.key = l.key WHERE 1 = 1{where}", args)
        first = last = None
        delay_sample = {v: _Delays() for v in wanted}
        while True:
            rows = cursor.fetchmany(_BATCH)
            if not rows:
                break
            array = np.array(rows, dtype=np.float64)
            for version in wanted:
                mine = array[array[:, 0] == version]
                if len(mine):
                    tallies[version].add(mine[:, 1], mine[:, 2])
                    delay_sample[version].add(mine[:, 3])
        span = self._db.execute("SELECT MIN(time), MAX(time) FROM labels").fetchone()
        if span:
            first, last = span
        for version in wanted:
            delays[version] = delay_sample[version].quantiles()
        counts = self.counters()
        counts["labels"] = self._db.execute("SELECT COUNT(*) FROM labels").fetchone()[0]
        counts["logged_examples"] = self._db.execute("SELECT COUNT(*) FROM predictions").fetchone()[0]
        counts["duplicate_label"] = self._db.execute("SELECT COALESCE(SUM(count), 0) FROM duplicate_labels").fetchone()[0]
        counts["unmatched_label"] = self._db.execute(
            "SELECT COUNT(*) FROM labels l WHERE NOT EXISTS (SELECT 1 FROM predictions p WHERE p.key = l.key)").fetchone()[0]
        examples = [f"{p}: {r}: {d}" for p, r, d in self._db.execute("SELECT * FROM rejected LIMIT 10")]
        return Joined(tallies, delays, counts, examples, first, last)


def _guarded(logs, path: str, damaged: list):
    """The logs of a file up to the first one that cannot be read; the reason goes to `damaged`."""
    count = 0
    try:
        for log in logs:
            yield log
            count += 1
    except Exception as e:  # noqa: BLE001  (tf.errors.DataLossError, protobuf's DecodeError): a damaged file
        damaged.append(f"unreadable after {count} records: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


class _Delays:
    """Label delays in log-spaced buckets (1 s to about 3 years, 1% apart): quantiles in fixed memory."""

    EDGES = np.concatenate([[-np.inf, 0.0], np.logspace(0, 8, 1852), [np.inf]])

    def __init__(self):
        self._counts = np.zeros(len(self.EDGES) - 1, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        self._counts += np.histogram(values, self.EDGES)[0]

    def quantiles(self, qs=(0.5, 0.9)) -> list[float]:
        total = self._counts.sum()
        if not total:
            return []
        cumulative = np.cumsum(self._counts)
        out = []
        for q in qs:
            i = int(np.searchsorted(cumulative, q * total))
            out.append(float(max(self.EDGES[i + 1], 0.0)) if i > 0 else 0.0)
        return out


def finite(value: float) -> float | None:
    return value if value is not None and math.isfinite(value) else None
