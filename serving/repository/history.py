"""A served model's history: every push and rollback, who, when and why (`<base>/history.jsonl`).

TF Serving ignores non-numeric entries of a model's base path, so the history lives beside
the versions it describes. Appends are single `write` calls of one line.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os

FILENAME = "history.jsonl"


def append(base_path: str, event: str, **fields) -> dict:
    entry = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "event": event,
        "user": fields.pop("user", None) or os.environ.get("RETRAIN_USER") or getpass.getuser(),
        **fields,
    }
    os.makedirs(base_path, exist_ok=True)
    with open(os.path.join(base_path, FILENAME), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def read(base_path: str) -> list[dict]:
    path = os.path.join(base_path, FILENAME)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
