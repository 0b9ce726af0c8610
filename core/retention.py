"""Retention of what the product keeps about requests: request logs and delayed-label
(feedback) files older than `max_age_days` are deleted, and each deletion is logged.

The server applies it to its request logs whenever it closes a log file
(serving/server/request_log.py); the rollout DAG's decision task (`retrain rollout decide`)
applies it to the feedback files and the request logs of a pipeline (`apply`: the request
logs where `retrain serve --config` writes them, `layout.request_log_prefix`).
Every deletion is a log line and a line of `<folder>/deletions.jsonl` (when, which file,
its age, the limit), so an auditor can see that data was deleted, and when, without the
data itself.

TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterable

from core import files
from core.settings import Settings, SettingsError

logger = logging.getLogger(__name__)

AUDIT_FILE = "deletions.jsonl"
DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class RetentionSettings(Settings):
    """The `retention:` block of a pipeline config."""

    # Request logs and feedback (delayed-label) files older than this are deleted. Long
    # enough for the rollout's labels to arrive and the skew check to read a month's traffic.
    max_age_days: float = 30.0

    def check(self) -> None:
        if not self.max_age_days > 0:
            raise SettingsError(f"max_age_days: must be > 0, got {self.max_age_days}")


def expired(paths: Iterable[str], max_age_days: float, now: float | None = None) -> list[tuple[str, float]]:
    """(path, age in days) of the files whose last change is more than `max_age_days` ago."""
    now = time.time() if now is None else now
    out = []
    for path in paths:
        try:
            age = (now - os.path.getmtime(path)) / DAY
        except OSError:
            continue  # gone meanwhile
        if age > max_age_days:
            out.append((path, age))
    return out


def delete_expired(paths: Iterable[str], max_age_days: float, kind: str, now: float | None = None) -> list[str]:
    """Deletes the expired files among `paths` (`expired`), logging each deletion in the
    log and in `deletions.jsonl` beside the file; returns the paths deleted.

    Args:
      kind: what the files are ("request log", "feedback"), for the log line.
    """
    deleted = []
    for path, age in expired(paths, max_age_days, now):
        if os.path.basename(path) == AUDIT_FILE:
            continue
        try:
            os.remove(path)
        except OSError as e:
            logger.warning("retention: cannot delete %s %s: %s", kind, path, e)
            continue
        deleted.append(path)
        logger.info("retention: deleted %s %s (%.1f days old, max_age_days %g)", kind, path, age, max_age_days)
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "deleted": path, "kind": kind,
                 "age_days": round(age, 2), "max_age_days": max_age_days}
        files.append_jsonl(os.path.join(os.path.dirname(path) or ".", AUDIT_FILE), entry)
    return deleted


def files_in(folder: str) -> list[str]:
    """The regular files directly in `folder` (none if it does not exist), the audit file aside."""
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if n != AUDIT_FILE and os.path.isfile(os.path.join(folder, n)))


def apply(workdir: str, model_name: str, max_age_days: float) -> list[str]:
    """Deletes a model's feedback files and finished request logs older than `max_age_days`
    (the rollout DAG's decision task runs it with every decision); returns what it deleted."""
    from core import layout

    feedback = files_in(layout.feedback_dir(workdir, model_name))
    logs = [p for p in files_in(os.path.dirname(layout.request_log_prefix(workdir, model_name)))
            if p.endswith(".tfrecord")]  # finished files only: a `.part` is being written
    return (delete_expired(feedback, max_age_days, "feedback")
            + delete_expired(logs, max_age_days, "request log"))


def read_audit(folder: str) -> list[dict]:
    """The deletions recorded in `folder` (oldest first)."""
    return files.read_jsonl(os.path.join(folder, AUDIT_FILE))
