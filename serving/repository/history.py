"""A served model's history: every push and rollback, who, when and why (`<base>/history.jsonl`).

TF Serving ignores non-numeric entries of a model's base path, so the history lives beside
the versions it describes. Appends are single `write` calls of one line.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os

from core import files

FILENAME = "history.jsonl"


def append(base_path: str, event: str, **fields) -> dict:
    entry = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "event": event,
        "user": fields.pop("user", None) or os.environ.get("RETRAIN_USER") or getpass.getuser(),
        **fields,
    }
    files.append_jsonl(os.path.join(base_path, FILENAME), entry)
    return entry


def read(base_path: str) -> list[dict]:
    return files.read_jsonl(os.path.join(base_path, FILENAME))
