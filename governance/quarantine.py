"""Span quarantine: a span found bad after it passed the gate is taken out of training.

Each decision (quarantine or release) is an MLMD execution of type `SpanQuarantine`
with the pipeline, span, action, who, when and why, so the record sits beside the
lineage it changes and is never edited, only superseded by a later decision. The span
window and drift-baseline resolvers (`components.resolvers.span_window`) skip a span whose latest
decision is "quarantine"; `retrain spans`, `retrain run` and the governance report show it.
"""

from __future__ import annotations

import datetime as dt
import getpass

from ml_metadata.proto import metadata_store_pb2

from core import metadata, metadata_queries

EXECUTION_TYPE = "SpanQuarantine"
QUARANTINE, RELEASE = "quarantine", "release"
_FIELDS = ("pipeline", "span", "action", "decided_by", "decided_at", "reason")


def _value(execution, key: str):
    value = execution.custom_properties[key]
    return getattr(value, value.WhichOneof("value"))


def decisions(store, pipeline: str) -> list[dict]:
    """Every decision of a pipeline, oldest first."""
    out = []
    for e in sorted(store.get_executions_by_type(EXECUTION_TYPE), key=lambda x: x.id):
        if all(k in e.custom_properties for k in _FIELDS) and _value(e, "pipeline") == pipeline:
            out.append({"id": e.id, **{k: _value(e, k) for k in _FIELDS}})
    return out


def current(store, pipeline: str) -> dict[int, dict]:
    """span -> its latest decision, for spans whose latest decision is "quarantine"."""
    latest: dict[int, dict] = {}
    for d in decisions(store, pipeline):
        latest[int(d["span"])] = d
    return {span: d for span, d in latest.items() if d["action"] == QUARANTINE}


def quarantined_spans(where: metadata.Store, pipeline: str) -> dict[int, dict]:
    """The quarantined spans in a metadata store (none if it does not exist yet)."""
    if not where.exists():
        return {}
    return current(metadata.open_store(where, readonly=True), pipeline)


def record(where: metadata.Store, pipeline: str, span: int, action: str, reason: str, by: str | None = None) -> dict:
    """Records a decision and returns it.

    Raises:
      ValueError: an unknown action, an empty reason, quarantining a span already in
        quarantine, or releasing one that is not.
    """
    if action not in (QUARANTINE, RELEASE):
        raise ValueError(f"action must be {QUARANTINE!r} or {RELEASE!r}, got {action!r}")
    if not reason.strip():
        raise ValueError("a reason is required: it is what a reviewer reads later")
    store = metadata.open_store(where)
    active = current(store, pipeline)
    if action == QUARANTINE and span in active:
        d = active[span]
        raise ValueError(f"span {span} is already quarantined (by {d['decided_by']} at {d['decided_at']}: {d['reason']})")
    if action == RELEASE and span not in active:
        raise ValueError(f"span {span} of pipeline {pipeline} is not quarantined")
    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=EXECUTION_TYPE))
    execution = metadata_store_pb2.Execution(type_id=type_id)
    execution.last_known_state = metadata_store_pb2.Execution.COMPLETE
    values = {
        "pipeline": pipeline, "span": int(span), "action": action,
        "decided_by": by or getpass.getuser(),
        "decided_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "reason": reason.strip(),
    }
    metadata_queries.set_props(execution, values)
    [execution_id] = store.put_executions([execution])
    return {"id": execution_id, **values}

