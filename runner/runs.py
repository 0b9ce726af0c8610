"""A pipeline run: config and input checks, window backfill, compiled IR, the run folder.

The orchestration behind the CLI. `run_locally` does a whole run in this process (`retrain
run`); an orchestrator's tasks each do one step in the TFX runtime (`prepare` ->
`retrain prepare-run`, `run_one_node` -> `retrain node run`, `summarize` -> `retrain
summary`). Both leave the same run folder (`core.run_folder`), and every reader takes
the run's outcome from its record (`governance.record`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from core import layout, metadata, nodes, run_folder, spans
from core import outcome as outcomes
from core.errors import BadInput
from core.results import NodeResult
from pipelines import config as config_lib
from pipelines.config import PipelineConfig
from runner import preflight
from serving.repository import signing
from task_host import proctitle

logger = logging.getLogger(__name__)

def backfill_nodes(config: PipelineConfig) -> tuple[str, ...]:
    return (config.example_gen_id, *nodes.BACKFILL_AFTER_INGEST)


class BackfillError(RuntimeError):
    """An earlier span could not be ingested (not a data-gate verdict)."""


def load_config(config_path: str, overrides: Mapping[str, Any], span: str | int | None) -> PipelineConfig:
    """Loads the config, checks the run's inputs and fixes the span (default: the latest).

    Raises:
      config_lib.ConfigError, preflight.InputError: naming the problem; nothing written.
    """
    try:
        wanted = spans.parse_span(span) if span not in (None, "") else None
    except spans.SpanError as e:
        raise preflight.InputError(str(e)) from e
    config = config_lib.load(config_path, overrides)
    resolved = preflight.check_run_inputs(config.data_root, wanted, config.schema_path, config.example_format,
                                          config_lib.load_gate_policy(config))
    from governance import quarantine

    held = quarantine.quarantined_spans(config.metadata_store, config.pipeline_name).get(resolved)
    if held:
        raise preflight.InputError(
            f"span {resolved} is quarantined (by {held['decided_by']} at {held['decided_at']}: {held['reason']});"
            f" release it first: retrain quarantine --pipeline {config.pipeline_name} --span {resolved} --release --reason ..."
        )
    return config_lib.replace(config, span=resolved)


def ingested_spans(where: metadata.Store, pipeline_name: str, example_gen_id: str = nodes.CSV_EXAMPLE_GEN) -> set[int]:
    """Spans the pipeline's ExampleGen has already ingested into its MLMD."""
    if not where.exists():
        return set()
    from ml_metadata.proto import metadata_store_pb2

    store = metadata.open_store(where, readonly=True)
    node_ctx = store.get_context_by_type_and_name("node", f"{pipeline_name}.{example_gen_id}")
    if node_ctx is None:
        return set()
    return {
        a.custom_properties["span"].int_value
        for a in store.get_artifacts_by_context(node_ctx.id)
        if a.state == metadata_store_pb2.Artifact.LIVE and "span" in a.custom_properties
    }


def spans_to_backfill(available: list[int], ingested: set[int], span: int, window_spans: int) -> list[int]:
    """Earlier spans of the window (and the previous span, the drift baseline) not yet ingested."""
    first, _ = spans.window(span, window_spans)
    earlier = [s for s in available if s < span]
    wanted = {s for s in earlier if s >= first}
    if earlier:
        wanted.add(earlier[-1])
    return sorted(wanted - ingested)


def compile_for_span(config: PipelineConfig, span: int | None = None):
    """Compiles the pipeline's IR for a span (default: the config's)."""
    from pipelines.factory import create_pipeline
    from runner import node_runner

    if span is not None:
        config = config_lib.replace(config, span=span)
    return node_runner.compile_pipeline(create_pipeline(config))


def backfill(
    config: PipelineConfig,
    log: Callable[[str], None],
    on_start=lambda i, n, node: None,
    on_end=lambda i, n, result: None,
    owner: str = "",
) -> list[int]:
    """Ingests, validates and gates the earlier spans the window lacks; returns those that passed.

    Each span is claimed first (`runner.span_ledger`): a span another run is already
    ingesting is left to it (the window waits for its gate), never ingested twice.

    Raises:
      BackfillError: a span could not be ingested for a reason other than the gate.
    """
    from runner import node_runner, span_ledger

    if not config.backfill_window:
        return []
    from governance import quarantine

    todo = spans_to_backfill(
        spans.list_spans(config.data_root),
        # A quarantined span stays out: there is nothing to ingest it for.
        ingested_spans(config.metadata_store, config.pipeline_name, config.example_gen_id)
        | set(quarantine.quarantined_spans(config.metadata_store, config.pipeline_name)),
        config.span,
        config.window_spans,
    )
    passed = []
    store = metadata.open_store(config.metadata_store) if todo else None
    for earlier in todo:
        try:
            spans.resolve_span(config.data_root, earlier, config.example_format)
            preflight.check_span_files(spans.span_dir(config.data_root, earlier), config.schema_path,
                                       config.example_format, config_lib.load_gate_policy(config))
        except (spans.SpanError, preflight.InputError) as e:
            log(f"backfill: span {earlier} left out of the window: bad input: {e}")
            continue
        claim = span_ledger.take(store, config.pipeline_name, earlier, owner or node_runner.new_run_id(),
                                 span_ledger.BACKFILL)
        if claim is None:
            holder = span_ledger.claims(store, config.pipeline_name)[earlier]
            log(f"backfill: span {earlier} is being ingested by run {holder.owner}; the window waits for its gate")
            continue
        log(f"backfill: ingesting span {earlier} (window/baseline of {config.span})")
        results = node_runner.run_pipeline(
            compile_for_span(config, earlier), node_runner.new_run_id(), on_start, on_end,
            only=backfill_nodes(config),
        )
        last = results[-1]
        if last.status == "failed" and last.gate_stopped:
            span_ledger.update(store, claim, span_ledger.FINISHED, span_ledger.STOPPED)
            log(f"backfill: span {earlier} stopped by the data gate; left out of the window")
        elif last.status == "failed":
            span_ledger.update(store, claim, span_ledger.FINISHED, span_ledger.FAILED)
            raise BackfillError(f"backfill of span {earlier} failed at {last.node_id}: {last.error}")
        else:
            span_ledger.update(store, claim, span_ledger.FINISHED, span_ledger.PASSED)
            passed.append(earlier)
    return passed


# How long a run waits for earlier spans' work (another run's gate or model) before it
# gives up naming what it waited for. Orchestrators wait in their own sensors first.
WAIT_TIMEOUT_S = float(os.environ.get("RETRAIN_WAIT_TIMEOUT_S", 3 * 3600))


def claim_own_span(config: PipelineConfig, owner: str, log: Callable[[str], None],
                   timeout_s: float = WAIT_TIMEOUT_S):
    """Claims the run's own span; waits while another run holds it (e.g. ingests it as a
    backfill), so that this run's ingestion reuses that work instead of repeating it.

    Raises:
      span_ledger.WaitTimeout: the other claim stayed open longer than `timeout_s`.
    """
    from runner import span_ledger

    return span_ledger.take_waiting(metadata.open_store(config.metadata_store), config.pipeline_name, config.span,
                                    owner, span_ledger.RUN, log, timeout_s)


def wait_before_node(info: dict, node_id: str, log: Callable[[str], None], timeout_s: float = WAIT_TIMEOUT_S) -> None:
    """Before a node that reads other spans' results, waits until their work is decided."""
    from runner import span_ledger

    what = span_ledger.WAIT_BEFORE.get(node_id)
    if what is None or info.get("span") is None:
        return
    where = metadata.from_record(info["metadata"])
    waited = span_ledger.wait(lambda: metadata.open_store(where), info["pipeline"], int(info["span"]),
                              int(info.get("window_spans") or 1), what, info["run_id"], log, timeout_s)
    if waited > 1:
        log(f"{node_id}: waited {waited:.0f} s for earlier spans ({what})")


def record_node_outcome(info: dict, result: NodeResult) -> None:
    """The run's span claim follows its DataGate: gated (passed or stopped)."""
    from runner import span_ledger

    if result.node_id != nodes.DATA_GATE or (result.status == "failed" and not result.gate_stopped):
        return
    store = metadata.open_store(metadata.from_record(info["metadata"]))
    claim = span_ledger.owned(store, info["pipeline"], int(info["span"]), info["run_id"])
    if claim is not None and claim.active:
        span_ledger.update(store, claim, span_ledger.GATED,
                           span_ledger.STOPPED if result.gate_stopped else span_ledger.PASSED)


def finish_claim(info: dict) -> None:
    """Ends the run's span claim: later months' model phase may go on."""
    from runner import span_ledger

    store = metadata.open_store(metadata.from_record(info["metadata"]))
    claim = span_ledger.owned(store, info["pipeline"], int(info["span"]), info["run_id"])
    if claim is not None and claim.active:
        span_ledger.update(store, claim, span_ledger.FINISHED)


def _run_info(config: PipelineConfig, run_id: str, backfilled: list[int], ir) -> dict:
    from pipelines.factory import analyzer_cache_choice, beam_choices
    from runner import node_runner

    return {
        "run_id": run_id, "span": config.span, "pipeline": config.pipeline_name,
        "metadata": config.metadata_store.url, "backfilled_spans": backfilled,
        "window_spans": config.window_spans,
        "pipeline_root": os.path.abspath(config.pipeline_root), "nodes": node_runner.node_ids(ir),
        # How each Beam node runs (pipelines/beam.py), and why: for the summary and the report.
        # With Transform's: whether it used tf.Transform's analyzer cache (pipelines/analyzer_cache.py), and why.
        "beam": {node: {"profile": c.profile, "reason": c.reason, "args": list(c.args),
                        **({"analyzer_cache": dataclasses.asdict(analyzer_cache_choice(config))}
                           if node == nodes.TRANSFORM else {})}
                 for node, c in beam_choices(config).items()},
        # The feature policy in force (core/feature_policy.py): the record shows it and never
        # prints the raw values of a sensitive feature.
        "feature_policy": _feature_policy(config),
    }


def _feature_policy(config: PipelineConfig) -> dict | None:
    from core import feature_policy

    policy = config.feature_policy_settings
    return feature_policy.to_dict(policy) if policy is not None else None


class StaleTemplate(RuntimeError):
    """The DAG's template does not match the pipeline's compiled nodes."""


def prepare(config: PipelineConfig, run_id: str, expect: str | None, log: Callable[[str], None],
            on_start=lambda i, n, node: None, on_end=lambda i, n, result: None) -> dict:
    """An orchestrated run's first step: checks the DAG, backfills, binds and writes the IR.

    Raises:
      StaleTemplate: the DAG was built from other pipeline code (before any work).
      BackfillError: an earlier span could not be ingested.
    """
    from airflow_tfx import compiled_dag as dag_template
    from runner import node_runner

    folder = layout.run_dir(config.workdir, config.pipeline_name, run_id)
    log(f"run {run_id}: span {config.span}, run folder {folder}")
    ir = node_runner.bind_run_id(compile_for_span(config), run_id)
    if expect:  # before any work: a DAG whose graph is not the pipeline's must not run
        problem = dag_template.mismatch(dag_template.read(expect, check_fresh=False), ir)
        if problem:
            raise StaleTemplate(f"the DAG is stale: {problem}; run `make compile`")
    claim = claim_own_span(config, run_id, log)
    try:
        backfilled = backfill(config, log, on_start, on_end, owner=run_id)
    except BaseException:
        # No run folder will exist for run_summary to close the claim from: close it here,
        # or later months would wait for a span nobody works on.
        from runner import span_ledger

        span_ledger.update(metadata.open_store(config.metadata_store), claim, span_ledger.FINISHED)
        raise
    node_runner.write_ir(ir, os.path.join(folder, layout.RUN_IR))
    run_folder.write_info(folder, _run_info(config, run_id, backfilled, ir))
    return {"run_dir": folder, "span": config.span, "backfilled_spans": backfilled}


class UnknownNode(BadInput):
    """The prepared run has no node with this id."""


def run_one_node(folder: str, node_id: str) -> NodeResult:
    """Runs one node of a prepared run and records its result in the run folder.

    Raises:
      UnknownNode: the prepared run has no such node (bad input: nothing ran).
    """
    from runner import node_runner

    ir = node_runner.load_ir(os.path.join(folder, layout.RUN_IR))
    known = node_runner.node_ids(ir)
    if node_id not in known:
        raise UnknownNode(f"node {node_id!r} is not in pipeline {ir.pipeline_info.id}: {sorted(known)}")
    info = run_folder.read_info(folder)
    # `ps` and `top` name the node and run, whichever host forked or started this process.
    proctitle.set_title(proctitle.node_title(ir.pipeline_info.id, node_id, str(info.get("run_id", ""))))
    if node_id != nodes.MODEL_RESOLVER:  # the model phase's order is the orchestrator's (Airflow: by DAG runs)
        wait_before_node(info, node_id, logger.info)
    start = time.monotonic()
    try:
        result = node_runner.run_node(ir, node_id)
    except Exception as e:  # the node's own failure: recorded, then reported by exit code
        logger.exception("Node %s failed", node_id)
        result = node_runner.failed_result(node_id, e, time.monotonic() - start)
    result = dataclasses.replace(result, worker=os.environ.get("RETRAIN_WORKER_NAME") or socket.gethostname())
    run_folder.write_result(folder, result)
    record_node_outcome(info, result)
    return result


def summarize(folder: str) -> dict:
    """The summary of a run folder's run, from its record."""
    from governance import record as record_lib
    from runner import summary as summary_lib

    return summary_lib.build_summary(record_lib.read_folder(folder))


def write_report(folder: str, config: PipelineConfig | None = None) -> dict:
    """Writes the governance report of a run folder's run; returns report.write's answer.
    With the pipeline's config, a signed version gets its report signed and its model card."""
    from governance import record as record_lib

    return _write_report(record_lib.read_folder(folder), run_folder.read_info(folder)["pipeline_root"], config)


def _write_report(record, pipeline_root: str, config: PipelineConfig | None) -> dict:
    from governance import report as report_lib
    from governance import scorecard

    key = signing.resolve_key(config.signing_key, config.workdir) if config and config.signing_enabled else None
    context = None
    if config is not None:
        from core import metadata

        store = metadata.open_store(config.metadata_store, readonly=True) if config.metadata_store.exists() else None
        context = scorecard.context(config, store)
    return report_lib.write(record, pipeline_root, sign_with=key,
                            model_card_settings=dict(config.model_card) if config else None, scorecard_context=context)


def run_locally(config: PipelineConfig, run_id: str, log: Callable[[str], None],
                on_start=lambda i, n, node: None, on_end=lambda i, n, result: None) -> dict:
    """A whole run in this process: backfill, every node, the run folder, the summary and
    the governance report. Returns the summary (with `seconds`, `report`, `run_dir`)."""
    from runner import node_runner, span_ledger

    started = time.monotonic()
    folder = layout.run_dir(config.workdir, config.pipeline_name, run_id)
    claim_own_span(config, run_id, log)
    info = {"metadata": config.metadata_store.url, "pipeline": config.pipeline_name, "span": config.span,
            "run_id": run_id}
    try:
        try:
            backfilled = backfill(config, log, on_start, on_end, owner=run_id)
        except BackfillError as e:
            return {"pipeline": config.pipeline_name, "run_id": run_id, "span": config.span,
                    "outcome": outcomes.FAILED_BACKFILLING, "error": str(e),
                    "seconds": round(time.monotonic() - started, 1)}
        log(f"span {config.span}:")
        ir = compile_for_span(config)
        info = _run_info(config, run_id, backfilled, ir)
        run_folder.write_info(folder, info)

        def before_node(i: int, n: int, node_id: str) -> None:
            wait_before_node(info, node_id, log)
            on_start(i, n, node_id)

        def record_result(i: int, n: int, result: NodeResult) -> None:
            run_folder.write_result(folder, result)
            record_node_outcome(info, result)
            on_end(i, n, result)

        node_runner.run_pipeline(ir, run_id, before_node, record_result, late=span_ledger.WAIT_BEFORE)
    finally:
        finish_claim(info)
    from governance import record as record_lib
    from runner import summary as summary_lib

    record = record_lib.read_folder(folder)  # read once: the summary and the report are views of it
    summary = summary_lib.build_summary(record)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["run_dir"] = folder
    try:
        written = _write_report(record, os.path.abspath(config.pipeline_root), config)
    except Exception as e:
        logger.exception("governance report of run %s failed", run_id)
        summary.update(report=None, report_error=f"{type(e).__name__}: {e}")
    else:
        summary.update(report=written["html"], report_json=written["json"], report_with_model=written.get("with_model"))
    return summary
