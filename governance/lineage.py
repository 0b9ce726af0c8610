"""ML Metadata queries: a pipeline run's executions and artifacts, and a model's chain."""

from __future__ import annotations

import dataclasses
from typing import Any

from ml_metadata.proto import metadata_store_pb2

_OUTPUT = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
_INPUT = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT)
STATES = {v: k for k, v in metadata_store_pb2.Execution.State.items()}


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


def run_nodes(store, pipeline: str, run_id: str) -> dict[str, NodeRun]:
    """Every node execution of one pipeline run, with its input and output artifacts.

    Returns {} when MLMD has no such run.
    """
    ctx = store.get_context_by_type_and_name("pipeline_run", run_id)
    if ctx is None:
        return {}
    executions = store.get_executions_by_context(ctx.id)
    nodes: dict[str, NodeRun] = {}
    prefix = f"{pipeline}."
    for execution in sorted(executions, key=lambda e: e.id):
        node_ctx = [c for c in store.get_contexts_by_execution(execution.id) if c.name.startswith(prefix)
                    and c.type_id == store.get_context_type("node").id]
        if not node_ctx:
            continue
        node_id = node_ctx[0].name[len(prefix):]
        nodes[node_id] = NodeRun(node_id, execution)  # the latest attempt wins
    events = store.get_events_by_execution_ids([n.execution.id for n in nodes.values()])
    by_exec = {n.execution.id: n for n in nodes.values()}
    artifact_ids = {e.artifact_id for e in events}
    artifacts = {a.id: a for a in store.get_artifacts_by_id(sorted(artifact_ids))}
    for e in events:
        node = by_exec[e.execution_id]
        key = e.path.steps[0].key if e.path.steps else ""
        target = node.outputs if e.type in _OUTPUT else node.inputs if e.type in _INPUT else None
        if target is not None and e.artifact_id in artifacts:
            target.setdefault(key, []).append(artifacts[e.artifact_id])
    return nodes


def producer(store, artifact_id: int):
    """(execution, node id) that output an artifact."""
    for e in store.get_events_by_artifact_ids([artifact_id]):
        if e.type in _OUTPUT:
            [execution] = store.get_executions_by_id([e.execution_id])
            names = [c.name for c in store.get_contexts_by_execution(execution.id)
                     if c.type_id == store.get_context_type("node").id]
            return execution, (names[0].split(".", 1)[1] if names else "?")
    return None, None


def run_id_of(store, execution) -> str | None:
    ctx_type = store.get_context_type("pipeline_run")
    for c in store.get_contexts_by_execution(execution.id):
        if c.type_id == ctx_type.id:
            return c.name
    return None


def consumers(store, artifact_id: int) -> list[tuple[Any, str]]:
    out = []
    for e in store.get_events_by_artifact_ids([artifact_id]):
        if e.type in _INPUT:
            [execution] = store.get_executions_by_id([e.execution_id])
            names = [c.name for c in store.get_contexts_by_execution(execution.id)
                     if c.type_id == store.get_context_type("node").id]
            out.append((execution, names[0].split(".", 1)[1] if names else "?"))
    return out


def _artifacts_of(store, execution_id: int, event_types) -> dict[str, list]:
    events = [e for e in store.get_events_by_execution_ids([execution_id]) if e.type in event_types]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    out: dict[str, list] = {}
    for e in events:
        if e.artifact_id in artifacts:
            out.setdefault(e.path.steps[0].key if e.path.steps else "", []).append(artifacts[e.artifact_id])
    return out


def outputs_of(store, execution_id: int) -> dict[str, list]:
    return _artifacts_of(store, execution_id, _OUTPUT)


def inputs_of(store, execution_id: int) -> dict[str, list]:
    return _artifacts_of(store, execution_id, _INPUT)
