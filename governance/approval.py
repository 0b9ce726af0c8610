"""Human approval before push: decisions are files keyed by the candidate's MLMD model id
(`<pipeline_root>/approvals/<model id>.json`), written by `retrain approve` (directly, or by
the Airflow task that follows the human-in-the-loop prompt) and read by the ApprovalGate
node, which records them in MLMD."""

from __future__ import annotations

import datetime as dt
import json
import os

from core import files

DECISIONS = ("approve", "reject")


class ApprovalPending(RuntimeError):
    """No decision yet for this candidate: the run stops before the push and can be resumed."""

    def __init__(self, message: str, model_id: int):
        super().__init__(message)
        self.model_id = model_id


def decisions_dir(pipeline_root: str) -> str:
    return os.path.join(pipeline_root, "approvals")


def record(pipeline_root: str, model_id: int, decision: str, reviewer: str, comment: str = "", source: str = "cli") -> dict:
    """Writes a decision (atomically; a later decision for the same model replaces it).

    Raises:
      ValueError: unknown decision or empty reviewer.
    """
    decision = decision.strip().lower()
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")
    if not reviewer.strip():
        raise ValueError("a decision needs the reviewer's name")
    entry = {
        "model_id": int(model_id), "decision": decision, "reviewer": reviewer.strip(), "comment": comment,
        "decided_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "source": source,
    }
    files.write_text(os.path.join(decisions_dir(pipeline_root), f"{int(model_id)}.json"),
                     json.dumps(entry, indent=2, sort_keys=True))
    return entry


def read(pipeline_root: str, model_id: int) -> dict | None:
    path = os.path.join(decisions_dir(pipeline_root), f"{int(model_id)}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
