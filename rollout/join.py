"""Request logs joined with their delayed labels by request key, on disk.

Both streams go into one SQLite file per model (`<workdir>/rollout/<model>/join.sqlite`):
each finished request-log file is read once (by path: the server never rewrites one), each
feedback file once per content (by its SHA-256: a file replaced under the same name is read
again and its earlier records are dropped; a file renamed or copied is not read twice), one
example at a time, so millions of logged requests pass through in bounded memory; the join
itself is SQL, and the metrics stream out of it into fixed-size tallies
(rollout/live_metrics.py). What cannot be joined is counted, never joined:
  duplicate_label    a key labelled twice: none of its labels is used
  duplicate_request  a key logged twice (a retry): the first answer counts
  unmatched_label    a label whose request is not (yet) in the logs
  no_prediction      a logged example whose response has no usable score
  unreadable_log     a request-log file that is not TFRecords of PredictionLogs (or is cut
                     short): its records up to the damage are used, the rest is reported

The comparison (`Join.compare`) holds only what makes the two versions comparable:
  - split-routed requests (they named neither a version nor a label, serving/server/routing.py)
    answered by the version their key chose; label- and version-addressed requests, and
    split-routed ones answered by the other version (a version still loading), are tallied
    apart in `routing` and never compared;
  - mature requests: at least as old as the age by which `maturity_quantile` of requests
    are labelled in each arm (rollout/maturity.py);
and it counts every split-routed request per arm for the sample-ratio check (rollout/srm.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sqlite3
from collections.abc import Iterable

import numpy as np

from core import tasks
from rollout import feedback, live_metrics, maturity
from serving.server import routing

FILENAME = "join.sqlite"
SCHEMA_VERSION = 2  # 2: routes, key fractions and feedback tracked by digest
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ingested (path TEXT PRIMARY KEY, kind TEXT, size INTEGER, records INTEGER, digest TEXT);
CREATE INDEX IF NOT EXISTS ingested_digest ON ingested (digest);
CREATE TABLE IF NOT EXISTS predictions (key TEXT PRIMARY KEY, version INTEGER, prediction REAL, logged_at REAL,
                                        route INTEGER, fraction REAL, head INTEGER);
CREATE TABLE IF NOT EXISTS label_records (key TEXT, label REAL, time REAL, place TEXT, source TEXT);
CREATE INDEX IF NOT EXISTS label_records_key ON label_records (key);
CREATE INDEX IF NOT EXISTS label_records_source ON label_records (source);
CREATE TABLE IF NOT EXISTS labels (key TEXT PRIMARY KEY, label REAL, time REAL, place TEXT);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS feedback_rejections (source TEXT, reason TEXT, count INTEGER);
CREATE TABLE IF NOT EXISTS rejected (place TEXT, reason TEXT, detail TEXT, source TEXT);
"""
_BATCH = 5000
ARMS = ("stable", "canary")
ROUTE_CODE = {route: i for i, route in enumerate(routing.ROUTES)}


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


def logged_route(log) -> str:
    """How a logged request was routed, from the model_spec of its logged request."""
    kind = log.WhichOneof("log_type")
    if kind in ("predict_log", "classify_log", "regress_log"):
        return routing.route(getattr(log, kind).request.model_spec)
    return routing.SPLIT


@dataclasses.dataclass
class Comparison:
    """Both versions over the same period, on the same population (the module docstring)."""

    tallies: dict[str, live_metrics.Tally]  # "stable" / "canary": mature, split-routed, on their key
    delays: dict[str, list[float]]  # label delay (s) quantiles per arm (split-routed, labelled): p50, p90
    requests: dict[str, int]  # split-routed requests per arm, for the sample-ratio check
    routing: dict[str, dict]
    maturity: dict
    counts: dict[str, int]
    rejected_examples: list[str]
    first_label: float | None
    last_label: float | None


def _digest(path: str) -> str:
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    except OSError as e:
        raise feedback.FeedbackError(f"feedback file {path}: cannot read it: {e}") from e
    return sha.hexdigest()


class Join:
    """A model's join database."""

    def __init__(self, folder: str, task: str):
        os.makedirs(folder, exist_ok=True)
        self.task = task
        self.path = os.path.join(folder, FILENAME)
        self._db = sqlite3.connect(self.path)
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            # An older database: rebuilt from the files still on disk (they are read again).
            for (table,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                self._db.execute(f'DROP TABLE IF EXISTS "{table}"')
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
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
        out = dict(self._db.execute("SELECT name, value FROM counters"))
        for reason, count in self._db.execute("SELECT reason, SUM(count) FROM feedback_rejections GROUP BY reason"):
            out[reason] = out.get(reason, 0) + int(count)
        return out

    def _new(self, path: str) -> bool:
        row = self._db.execute("SELECT size FROM ingested WHERE path = ?", (path,)).fetchone()
        return row is None

    def add_predictions(self, rows: Iterable[tuple]) -> tuple[int, int]:
        """(key, version, prediction, logged_at, route (its index in routing.ROUTES), key
        fraction, first example of its request) rows; returns (added, duplicates)."""
        added = duplicates = 0
        batch: list = []

        def flush():
            nonlocal added, duplicates
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO predictions VALUES (?, ?, ?, ?, ?, ?, ?)", batch)
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
                    route, fraction = ROUTE_CODE[logged_route(log)], routing.key_fraction(key)
                    for i, (k, score) in enumerate(zip(routing.example_keys(key, len(scores)), scores)):
                        yield k, version, score, logged_at, route, fraction, int(i == 0)

            added, duplicates = self.add_predictions(rows())
            self._bump("no_prediction", missing[0])
            if damaged:
                self._bump("unreadable_log", 1)
                self._db.execute("INSERT INTO rejected VALUES (?, 'unreadable_log', ?, ?)",
                                 (os.path.basename(path), damaged[0], path))
            self._db.execute("INSERT INTO ingested VALUES (?, 'log', ?, ?, NULL)",
                             (path, os.path.getsize(path), added + duplicates))
            self._db.commit()
            total += added
        return total

    def ingest_feedback(self, paths: Iterable[str]) -> int:
        """Reads each feedback file whose content is new, streaming; returns how many label
        records were stored. A file replaced under the same name is read again, its earlier
        records dropped; one whose content was read under another name is not read again
        (renamed: its records follow the new name).

        Raises:
          feedback.FeedbackError: a file none of whose records can be used (nothing of it is
            kept; a replaced file's earlier records stay).
        """
        total = 0
        changed = False
        for path in paths:
            digest = _digest(path)
            known = self._db.execute("SELECT digest FROM ingested WHERE path = ? AND kind = 'feedback'",
                                     (path,)).fetchone()
            if known and known[0] == digest:
                continue
            elsewhere = self._db.execute("SELECT path FROM ingested WHERE digest = ? AND kind = 'feedback'",
                                         (digest,)).fetchone()
            if elsewhere and not known:
                if not os.path.exists(elsewhere[0]):  # renamed: the same records, under the new name
                    for table, column in (("ingested", "path"), ("label_records", "source"),
                                          ("feedback_rejections", "source"), ("rejected", "source")):
                        self._db.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (path, elsewhere[0]))
                else:  # a copy of a file read before: reading it again would label every key twice
                    self._db.execute("INSERT INTO ingested VALUES (?, 'feedback', ?, 0, ?)",
                                     (path, os.path.getsize(path), digest))
                    self._db.execute("INSERT INTO rejected VALUES (?, 'copied_feedback', ?, ?)",
                                     (os.path.basename(path), f"the same content as {os.path.basename(elsewhere[0])}; "
                                      "not read again", path))
                self._db.commit()
                continue
            if known:  # replaced under the same name: its earlier records go
                self._forget(path)
                self._bump("replaced_feedback", 1)
            rejected = feedback.Rejected()
            stored = 0
            try:
                batch = []
                for label in feedback.read(path, self.task, rejected):
                    batch.append((label.key, label.label, label.time, label.where, path))
                    if len(batch) >= _BATCH:
                        self._db.executemany("INSERT INTO label_records VALUES (?, ?, ?, ?, ?)", batch)
                        stored += len(batch)
                        batch.clear()
                self._db.executemany("INSERT INTO label_records VALUES (?, ?, ?, ?, ?)", batch)
                stored += len(batch)
            except feedback.FeedbackError:
                self._db.rollback()
                raise
            self._db.executemany("INSERT INTO feedback_rejections VALUES (?, ?, ?)",
                                 [(path, reason, count) for reason, count in rejected.counts.items() if count])
            self._db.executemany("INSERT INTO rejected VALUES (?, ?, ?, ?)",
                                 [(*e.split(": ", 2), path) for e in rejected.examples])
            self._db.execute("INSERT INTO ingested VALUES (?, 'feedback', ?, ?, ?)",
                             (path, os.path.getsize(path), stored, digest))
            self._db.commit()
            total += stored
            changed = True
        if changed:
            self.refresh_labels()
        return total

    def _forget(self, source: str) -> None:
        for table, column in (("label_records", "source"), ("feedback_rejections", "source"),
                              ("rejected", "source"), ("ingested", "path")):
            self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (source,))

    def refresh_labels(self) -> None:
        """The usable labels: keys with exactly one label record (a key labelled twice, in one
        file or two, has none)."""
        self._db.execute("DELETE FROM labels")
        self._db.execute("INSERT INTO labels SELECT key, MIN(label), MIN(time), MIN(place) FROM label_records "
                         "GROUP BY key HAVING COUNT(*) = 1")
        self._db.commit()

    def _duplicates(self, limit: int = 5) -> list[str]:
        out = []
        keys = self._db.execute("SELECT key FROM label_records GROUP BY key HAVING COUNT(*) > 1 LIMIT ?", (limit,))
        for (key,) in keys.fetchall():
            places = [p for (p,) in self._db.execute("SELECT place FROM label_records WHERE key = ? ORDER BY rowid",
                                                     (key,))]
            out.append(f"{places[-1]}: duplicate_label: {key} also labelled at {places[0]}; neither label is used")
        return out

    def compare(self, stable: int, canary: int, share: float, since: float | None = None, now: float | None = None,
                quantile: float = maturity.DEFAULT_QUANTILE) -> Comparison:
        """Stable and canary over requests logged at or after `since`, as of `now` (the
        module docstring says which requests are compared)."""
        import time

        now = time.time() if now is None else now
        since = -math.inf if since is None else since
        routes = ROUTE_CODE
        # [route][arm: stable, canary, other] -> requests, examples, labelled
        tally = np.zeros((len(routing.ROUTES), 3, 3), dtype=np.int64)
        off_key = np.zeros((2, 3), dtype=np.int64)  # split-routed, answered by the arm its key did not choose
        age_counts = [[np.zeros(len(maturity.EDGES), np.int64), np.zeros(len(maturity.EDGES), np.int64)]
                      for _ in ARMS]
        delays = [_Delays(), _Delays()]
        cursor = self._db.execute(
            "SELECT p.version, p.route, p.fraction, p.head, p.logged_at, l.key IS NOT NULL, "
            "COALESCE(l.time - p.logged_at, 0) FROM predictions p LEFT JOIN labels l ON p.key = l.key "
            "WHERE p.logged_at >= ?", (since,))
        while rows := cursor.fetchmany(_BATCH):
            version, route, fraction, head, logged_at, labelled, delay = np.array(rows, dtype=np.float64).T
            route = route.astype(np.int64)
            arm = np.where(version == stable, 0, np.where(version == canary, 1, 2))
            on_key = (fraction < share) == (arm == 1)
            for what, values in ((0, head), (1, np.ones(len(rows))), (2, labelled)):
                np.add.at(tally, (route, arm, what), values.astype(np.int64))
            split = (route == routes[routing.SPLIT]) & (arm < 2)
            for what, values in ((0, head), (1, np.ones(len(rows))), (2, labelled)):
                np.add.at(off_key, (arm[split & ~on_key], what), values[split & ~on_key].astype(np.int64))
            compared = split & on_key
            for a in (0, 1):
                mine = compared & (arm == a)
                total, done = maturity.counts(now - logged_at[mine], labelled[mine])
                age_counts[a][0] += total
                age_counts[a][1] += done
                delays[a].add(delay[mine & (labelled > 0)])
        horizons = {name: maturity.horizon(*age_counts[a], quantile) for a, name in enumerate(ARMS)}
        horizon = max(horizons.values())
        tallies = {name: live_metrics.Tally(self.task) for name in ARMS}
        if math.isfinite(horizon):
            cursor = self._db.execute(
                "SELECT p.version, p.prediction, l.label, p.fraction FROM predictions p JOIN labels l ON p.key = l.key "
                "WHERE p.logged_at >= ? AND p.logged_at <= ? AND p.route = ? AND p.version IN (?, ?)",
                (since, now - horizon, routes[routing.SPLIT], stable, canary))
            while rows := cursor.fetchmany(_BATCH):
                array = np.array(rows, dtype=np.float64)
                is_canary = array[:, 0] == canary
                on_key = (array[:, 3] < share) == is_canary
                for name, mask in (("stable", ~is_canary & on_key), ("canary", is_canary & on_key)):
                    if mask.any():
                        tallies[name].add(array[mask, 1], array[mask, 2])
        labelled_split = {name: int(tally[routes[routing.SPLIT], a, 2] - off_key[a, 2]) for a, name in enumerate(ARMS)}
        maturity_block = {
            "quantile": quantile, "horizon_s": horizon if math.isfinite(horizon) else None,
            "horizon_by_arm_s": {k: (v if math.isfinite(v) else None) for k, v in horizons.items()},
            "method": "current-status NPMLE of the label delay (isotonic regression of labelled on age)",
            "labelled": labelled_split,
            "mature_labelled": {name: tallies[name].count for name in ARMS},
            "requests": {name: int(age_counts[a][0].sum()) for a, name in enumerate(ARMS)},
        }
        names = ARMS + ("other",)
        routing_block = {
            route_name: {names[a]: {"requests": int(tally[r, a, 0]), "examples": int(tally[r, a, 1]),
                                    "labelled": int(tally[r, a, 2])} for a in range(3) if tally[r, a, 1]}
            for route_name, r in routes.items()}
        routing_block["split_off_key"] = {names[a]: {"requests": int(off_key[a, 0]), "examples": int(off_key[a, 1]),
                                                     "labelled": int(off_key[a, 2])} for a in range(2) if off_key[a, 1]}
        routing_block["compared"] = routing.SPLIT
        requests = {name: int(tally[routes[routing.SPLIT], a, 0]) for a, name in enumerate(ARMS)}
        first, last = self._db.execute("SELECT MIN(time), MAX(time) FROM labels").fetchone()
        counts = self.counters()
        counts["labels"] = self._db.execute("SELECT COUNT(*) FROM labels").fetchone()[0]
        counts["logged_examples"] = self._db.execute("SELECT COUNT(*) FROM predictions").fetchone()[0]
        counts["duplicate_label"] = self._db.execute(
            "SELECT COALESCE(SUM(n), 0) FROM (SELECT COUNT(*) AS n FROM label_records GROUP BY key HAVING n > 1)"
        ).fetchone()[0]
        counts["unmatched_label"] = self._db.execute(
            "SELECT COUNT(*) FROM labels l WHERE NOT EXISTS (SELECT 1 FROM predictions p WHERE p.key = l.key)").fetchone()[0]
        examples = [f"{p}: {r}: {d}" for p, r, d in self._db.execute("SELECT place, reason, detail FROM rejected LIMIT 10")]
        examples += self._duplicates()
        return Comparison(tallies, {name: delays[a].quantiles() for a, name in enumerate(ARMS)}, requests,
                          routing_block, maturity_block, counts, examples, first, last)


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
