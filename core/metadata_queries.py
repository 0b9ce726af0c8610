"""Reading ML Metadata: a run's node executions with their artifacts, and an artifact's
producer and consumers. Read-only; needs `ml_metadata` (the TFX runtime), not TFX."""

from __future__ import annotations

import dataclasses
from typing import Any

from ml_metadata.proto import metadata_store_pb2

OUTPUT_EVENTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
INPUT_EVENTS = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT)
STATES = {v: k for k, v in metadata_store_pb2.Execution.State.items()}


def set_props(item, values: dict[str, Any]) -> None:
    """Writes plain values as custom properties (int or string) of an execution or artifact."""
    for key, v in values.items():
        if isinstance(v, int) and not isinstance(v, bool):
            item.custom_properties[key].int_value = v
        else:
            item.custom_properties[key].string_value = str(v)


def value(v) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def props(item) -> dict[str, Any]:
    """Properties and custom properties of an artifact or execution, as plain values."""
    out = {k: value(v) for k, v in item.properties.items()}
    out.update({k: value(v) for k, v in item.custom_properties.items()})
    return out


@dataclasses.dataclass
class NodeRun:
    """One node's execution in a run, with its input and output artifacts by key."""

    node_id: str
    execution: Any
    inputs: dict[str, list] = dataclasses.field(default_factory=dict)
    outputs: dict[str, list] = dataclasses.field(default_factory=dict)

    @property
    def state(self) -> str:
        return STATES.get(self.execution.last_known_state, "UNKNOWN")

    @property
    def ok(self) -> bool:
        return self.state in ("COMPLETE", "CACHED")

    def output(self, key: str):
        return (self.outputs.get(key) or [None])[0]

    def exec_properties(self) -> dict[str, Any]:
        return props(self.execution)


def artifacts_by_key(store, execution_ids: list[int], event_types) -> dict[int, dict[str, list]]:
    """execution id -> {event key: [artifacts]} for the events of the given types."""
    events = [e for e in store.get_events_by_execution_ids(execution_ids) if e.type in event_types]
    artifacts = {a.id: a for a in store.get_artifacts_by_id(sorted({e.artifact_id for e in events}))}
    out: dict[int, dict[str, list]] = {i: {} for i in execution_ids}
    for e in events:
        if e.artifact_id in artifacts:
            key = e.path.steps[0].key if e.path.steps else ""
            out[e.execution_id].setdefault(key, []).append(artifacts[e.artifact_id])
    return out


def outputs_of(store, execution_id: int) -> dict[str, list]:
    return artifacts_by_key(store, [execution_id], OUTPUT_EVENTS)[execution_id]


def inputs_of(store, execution_id: int) -> dict[str, list]:
    return artifacts_by_key(store, [execution_id], INPUT_EVENTS)[execution_id]


def _contexts(store, execution) -> list:
    """An execution's contexts; none for one outside any pipeline (a RolloutDecision, a
    SpanQuarantine), where MLMD answers NotFound."""
    from ml_metadata import errors

    try:
        return list(store.get_contexts_by_execution(execution.id))
    except errors.NotFoundError:
        return []


def _node_id(store, execution) -> str:
    node_type = store.get_context_type("node").id
    names = [c.name for c in _contexts(store, execution) if c.type_id == node_type]
    return names[0].split(".", 1)[1] if names else "?"


def run_nodes(store, pipeline: str, run_id: str) -> dict[str, NodeRun]:
    """Every node execution of one pipeline run, with its input and output artifacts.

    Returns {} when MLMD has no such run.
    """
    ctx = store.get_context_by_type_and_name("pipeline_run", run_id)
    if ctx is None:
        return {}
    node_type = store.get_context_type("node").id
    nodes: dict[str, NodeRun] = {}
    prefix = f"{pipeline}."
    for execution in sorted(store.get_executions_by_context(ctx.id), key=lambda e: e.id):
        names = [c.name for c in store.get_contexts_by_execution(execution.id)
                 if c.name.startswith(prefix) and c.type_id == node_type]
        if names:
            node_id = names[0][len(prefix):]
            nodes[node_id] = NodeRun(node_id, execution)  # the latest attempt wins
    ids = [n.execution.id for n in nodes.values()]
    if ids:
        inputs = artifacts_by_key(store, ids, INPUT_EVENTS)
        outputs = artifacts_by_key(store, ids, OUTPUT_EVENTS)
        for n in nodes.values():
            n.inputs, n.outputs = inputs[n.execution.id], outputs[n.execution.id]
    return nodes


def producer(store, artifact_id: int):
    """(execution, node id) that output an artifact, or (None, None)."""
    for e in store.get_events_by_artifact_ids([artifact_id]):
        if e.type in OUTPUT_EVENTS:
            [execution] = store.get_executions_by_id([e.execution_id])
            return execution, _node_id(store, execution)
    return None, None


def consumers(store, artifact_id: int, key: str | None = None) -> list[tuple[Any, str]]:
    """(execution, node id) of every execution that read an artifact (under input `key`, if given)."""
    out = []
    for e in store.get_events_by_artifact_ids([artifact_id]):
        if e.type in INPUT_EVENTS and (key is None or (e.path.steps and e.path.steps[0].key == key)):
            [execution] = store.get_executions_by_id([e.execution_id])
            out.append((execution, _node_id(store, execution)))
    return out


def run_id_of(store, execution) -> str | None:
    ctx_type = store.get_context_type("pipeline_run")
    for c in _contexts(store, execution):
        if c.type_id == ctx_type.id:
            return c.name
    return None


# The rollout controller's decisions (rollout/controller.py writes them; reports read them).
ROLLOUT_DECISION = "RolloutDecision"
ROLLBACK_ACTION = "rollback"  # = rollout.sequential.ROLLBACK (core imports no rollout code)
_JSON_PROPS = ("live", "difference", "counts", "test", "srm", "routing", "maturity", "alerts")


def rollout_decisions(store, model: str, version: int | None = None) -> list[dict[str, Any]]:
    """Every recorded rollout decision of a model, oldest first (with `version`: those where
    it was the canary or the stable version)."""
    import json

    out = []
    for execution in sorted(store.get_executions_by_type(ROLLOUT_DECISION), key=lambda e: e.id):
        values = props(execution)
        if values.get("model") != model:
            continue
        if version is not None and version not in (values.get("canary_version"), values.get("stable_version")):
            continue
        for key in _JSON_PROPS:
            values[key] = json.loads(values.get(key) or "null")
        values["id"] = execution.id
        out.append(values)
    return out


def rolled_back_model_ids(store) -> set[int]:
    """Model artifact ids whose canary a recorded, applied decision rolled back."""
    from ml_metadata import errors as mlmd_errors

    try:
        executions = store.get_executions_by_type(ROLLOUT_DECISION)
    except mlmd_errors.NotFoundError:
        return set()
    rolled = [e.id for e in executions
              if props(e).get("action") == ROLLBACK_ACTION and props(e).get("applied")]
    if not rolled:
        return set()
    return {ev.artifact_id for ev in store.get_events_by_execution_ids(rolled)
            if ev.type in INPUT_EVENTS and [s.key for s in ev.path.steps] == ["canary"]}
