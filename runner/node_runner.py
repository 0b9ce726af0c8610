"""Runs pipeline nodes from compiled IR through TFX's portable launcher, one at a time.

This is what `LocalDagRunner` does internally, opened up so that a caller sees each
node's outcome (complete, cached, skipped, failed) and its output URIs: the local CLI
uses it for progress, and an orchestrator task can run exactly one node of the IR.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable

from ml_metadata.proto import metadata_store_pb2
from tfx.dsl.compiler import compiler
from tfx.orchestration import metadata
from tfx.orchestration.local import runner_utils
from tfx.orchestration.portable import launcher, runtime_parameter_utils
from tfx.orchestration.portable.mlmd import execution_lib
from tfx.proto.orchestration import pipeline_pb2

from components.data_gate.component import is_gate_stop
from components.serving_skew.executor import is_skew_stop
from core import cost, files, metadata_queries
from core import metadata as core_metadata
from core.results import FAILED, NodeResult
from runner import beam_fixes

logger = logging.getLogger(__name__)

_STATE = metadata_store_pb2.Execution.State


def compile_pipeline(pipeline) -> pipeline_pb2.Pipeline:
    """Compiles a `tfx.dsl.Pipeline` to its IR (sync mode)."""
    return compiler.Compiler().compile(pipeline)


def new_run_id() -> str:
    return dt.datetime.now().isoformat(timespec="microseconds")


def bind_run_id(ir: pipeline_pb2.Pipeline, run_id: str) -> pipeline_pb2.Pipeline:
    """Returns a copy of the IR with the pipeline run id fixed (nodes share one run context)."""
    bound = pipeline_pb2.Pipeline()
    bound.CopyFrom(ir)
    runtime_parameter_utils.substitute_runtime_parameter(
        bound, {"pipeline-run-id": run_id}
    )
    return bound


def node_ids(ir: pipeline_pb2.Pipeline) -> list[str]:
    """Node ids in the IR's topological order."""
    return [n.pipeline_node.node_info.id for n in ir.nodes]


def _connection_config(ir: pipeline_pb2.Pipeline):
    deployment = runner_utils.extract_local_deployment_config(ir)
    conn = deployment.metadata_connection_config
    return core_metadata.with_password(getattr(conn, conn.WhichOneof("connection_config"))), deployment


def _artifacts(store, execution_id: int, event_types) -> dict[str, list[dict]]:
    """Artifacts an execution consumed or produced, by key, as {"id", "uri"}."""
    by_key = metadata_queries.artifacts_by_key(store, [execution_id], event_types)[execution_id]
    return {k: [{"id": a.id, "uri": a.uri} for a in v] for k, v in by_key.items()}


def run_order(ir: pipeline_pb2.Pipeline, late: Iterable[str] = ()) -> list[str]:
    """The IR's topological order with the `late` nodes moved before their first downstream node."""
    order = node_ids(ir)
    downstream = {n.pipeline_node.node_info.id: set(n.pipeline_node.downstream_nodes) for n in ir.nodes}
    for node in late:
        if node not in order:
            continue
        order.remove(node)
        first = next((i for i, other in enumerate(order) if other in downstream[node]), len(order))
        order.insert(first, node)
    return order


def run_node(ir: pipeline_pb2.Pipeline, node_id: str) -> NodeResult:
    """Runs one node of a run-id-bound IR and reports what happened.

    Raises:
      KeyError: no such node.
      Exception: whatever the node's executor raised (the execution is marked failed in MLMD).
    """
    nodes = {n.pipeline_node.node_info.id: n.pipeline_node for n in ir.nodes}
    if node_id not in nodes:
        raise KeyError(f"node {node_id!r} is not in pipeline {ir.pipeline_info.id}: {sorted(nodes)}")
    node = nodes[node_id]
    beam_fixes.apply()
    connection_config, deployment = _connection_config(ir)
    start = dt.datetime.now()
    component_launcher = launcher.Launcher(
        pipeline_node=node,
        mlmd_connection=metadata.Metadata(connection_config),
        pipeline_info=ir.pipeline_info,
        pipeline_runtime_spec=ir.runtime_spec,
        executor_spec=runner_utils.extract_executor_spec(deployment, node_id),
        custom_driver_spec=runner_utils.extract_custom_driver_spec(deployment, node_id),
    )
    # What it cost (core/cost.py): on the execution in MLMD and the node's result; a failed
    # node's cost rides its exception (`node_cost`) into the failed result the caller writes.
    failure = None
    with cost.measure(accelerated=node_id in ACCELERATED_NODES) as spent:
        try:
            info = component_launcher.launch()
        except Exception as e:  # noqa: BLE001  re-raised below, once the cost is known
            failure = e
    if failure is not None:
        failure.node_cost = dict(spent)
        raise failure
    seconds = (dt.datetime.now() - start).total_seconds()
    if info is None or info.execution_id is None:
        return NodeResult(node_id, "skipped", seconds=seconds)
    with metadata.Metadata(connection_config) as m:
        [execution] = m.store.get_executions_by_id([info.execution_id])
        _put_cost(m.store, execution, spent)
        status = "cached" if execution.last_known_state == _STATE.CACHED else "complete"
        if not execution_lib.is_execution_successful(execution):
            status = FAILED
        return NodeResult(
            node_id,
            status,
            info.execution_id,
            outputs=_artifacts(m.store, info.execution_id, metadata_queries.OUTPUT_EVENTS),
            inputs=_artifacts(m.store, info.execution_id, metadata_queries.INPUT_EVENTS),
            seconds=seconds,
            cost=dict(spent),
        )


# The nodes that train on an accelerator where one is visible: only they are charged
# accelerator-seconds (core/cost.py).
ACCELERATED_NODES = ("Trainer", "Tuner")


def _put_cost(store, execution, spent: dict) -> None:
    """The node's cost as custom properties of its execution (`cost_<figure>`); a store
    that refuses the write (a locked SQLite file) costs the figures, never the node."""
    for key, value in spent.items():
        if value is None:
            continue
        if isinstance(value, str):
            execution.custom_properties[f"cost_{key}"].string_value = value
        else:
            execution.custom_properties[f"cost_{key}"].double_value = float(value)
    try:
        store.put_executions([execution])
    except Exception as e:  # noqa: BLE001  ml_metadata's errors: the node itself succeeded
        logger.warning("cost of execution %s not recorded in ML Metadata: %s", execution.id, e)


_MAX_ERROR_CHARS = 1500


def describe_error(error: BaseException) -> str:
    """One readable message for a node's failure: the exception and its root cause.

    Beam and TFX wrap the executor's own error (e.g. "Columns do not match specified csv
    headers") in several layers; the innermost cause is what a person needs to read.
    """
    chain = [error]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain:
        chain.append(nxt)
    parts = []
    for e in (chain[0], chain[-1]) if len(chain) > 1 else (chain[0],):
        text = " ".join(str(e).split())
        parts.append(f"{type(e).__name__}: {text}" if text else type(e).__name__)
    message = parts[0] if len(parts) == 1 or parts[1] in parts[0] else f"{parts[0]} (caused by {parts[1]})"
    return message if len(message) <= _MAX_ERROR_CHARS else message[: _MAX_ERROR_CHARS - 3] + "..."


def failed_result(node_id: str, error: Exception, seconds: float) -> NodeResult:
    """The result of a node whose executor raised; tells a data-gate stop from a crash."""
    return NodeResult(
        node_id,
        FAILED,
        seconds=seconds,
        error=describe_error(error),
        # A verdict on the data (the data gate's, or serving skew's with action: block), not
        # a crash: the run stops (exit 3) and an orchestrator does not retry it.
        gate_stopped=is_gate_stop(error) or is_skew_stop(error),
        gate_report=getattr(error, "report_path", None),
        approval_pending=type(error).__name__ == "ApprovalPending",
        cost=getattr(error, "node_cost", None),
    )


def load_ir(path: str) -> pipeline_pb2.Pipeline:
    """Reads an IR written by `write_ir`."""
    ir = pipeline_pb2.Pipeline()
    with open(path, "rb") as f:
        ir.ParseFromString(f.read())
    return ir


def write_ir(ir: pipeline_pb2.Pipeline, path: str) -> None:
    """Writes the IR atomically (a reader never sees half a file)."""
    files.write_bytes(path, ir.SerializeToString())


def run_pipeline(
    ir: pipeline_pb2.Pipeline,
    run_id: str,
    on_start: Callable[[int, int, str], None] = lambda i, n, node: None,
    on_end: Callable[[int, int, NodeResult], None] = lambda i, n, result: None,
    only: Iterable[str] | None = None,
    late: Iterable[str] = (),
) -> list[NodeResult]:
    """Runs every node (or only those named) in topological order; stops at the first failure.

    Nodes in `late` run as late as the order allows (just before their first downstream
    node): a resolver that may wait for other runs then does not hold up this run's work.

    Returns:
      One result per node attempted; the last is `failed` if a node raised.
    """
    bound = bind_run_id(ir, run_id)
    wanted = set(only) if only is not None else None
    ids = [n for n in run_order(bound, late) if wanted is None or n in wanted]
    results = []
    for i, node_id in enumerate(ids, 1):
        on_start(i, len(ids), node_id)
        start = dt.datetime.now()
        try:
            result = run_node(bound, node_id)
        except Exception as e:  # the node's own error: report it, stop the run
            logger.exception("Node %s failed", node_id)
            result = failed_result(node_id, e, (dt.datetime.now() - start).total_seconds())
        results.append(result)
        on_end(i, len(ids), result)
        if result.status == FAILED:
            break
    return results
