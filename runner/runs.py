"""A pipeline run: config and input checks, window backfill, compiled IR, the run folder.

The orchestration behind the CLI. `run_locally` does a whole run in this process (`retrain
run`); an orchestrator's tasks each do one step in the TFX runtime (`prepare` ->
`retrain prepare-run`, `run_one_node` -> `retrain node run`, `summarize` -> `retrain
summary`). Both leave the same run folder (`core.run_folder`), and every reader takes
the run's outcome from its record (`governance.record`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from core import layout, nodes, run_folder, spans
from core import outcome as outcomes
from core.errors import BadInput
from core.results import NodeResult
from pipelines import config as config_lib
from pipelines.config import PipelineConfig
from runner import preflight

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
    resolved = preflight.check_run_inputs(config.data_root, wanted, config.schema_path, config.example_format)
    from governance import quarantine

    held = quarantine.quarantined_spans(config.metadata_path, config.pipeline_name).get(resolved)
    if held:
        raise preflight.InputError(
            f"span {resolved} is quarantined (by {held['decided_by']} at {held['decided_at']}: {held['reason']});"
            f" release it first: retrain quarantine --pipeline {config.pipeline_name} --span {resolved} --release --reason ..."
        )
    return config_lib.replace(config, span=resolved)


def ingested_spans(metadata_path: str, pipeline_name: str, example_gen_id: str = nodes.CSV_EXAMPLE_GEN) -> set[int]:
    """Spans the pipeline's ExampleGen has already ingested into its MLMD."""
    if not os.path.exists(metadata_path):
        return set()
    from ml_metadata.proto import metadata_store_pb2

    from core.mlmd import read_only_store

    store = read_only_store(metadata_path)
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
) -> list[int]:
    """Ingests, validates and gates the earlier spans the window lacks; returns those that passed.

    Raises:
      BackfillError: a span could not be ingested for a reason other than the gate.
    """
    from runner import node_runner

    if not config.backfill_window:
        return []
    from governance import quarantine

    todo = spans_to_backfill(
        spans.list_spans(config.data_root),
        # A quarantined span stays out: there is nothing to ingest it for.
        ingested_spans(config.metadata_path, config.pipeline_name, config.example_gen_id)
        | set(quarantine.quarantined_spans(config.metadata_path, config.pipeline_name)),
        config.span,
        config.window_spans,
    )
    passed = []
    for earlier in todo:
        try:
            spans.resolve_span(config.data_root, earlier, config.example_format)
            preflight.check_span_files(spans.span_dir(config.data_root, earlier), config.schema_path,
                                       config.example_format)
        except (spans.SpanError, preflight.InputError) as e:
            log(f"backfill: span {earlier} left out of the window: bad input: {e}")
            continue
        log(f"backfill: ingesting span {earlier} (window/baseline of {config.span})")
        results = node_runner.run_pipeline(
            compile_for_span(config, earlier), node_runner.new_run_id(), on_start, on_end,
            only=backfill_nodes(config),
        )
        last = results[-1]
        if last.status == "failed" and last.gate_stopped:
            log(f"backfill: span {earlier} stopped by the data gate; left out of the window")
        elif last.status == "failed":
            raise BackfillError(f"backfill of span {earlier} failed at {last.node_id}: {last.error}")
        else:
            passed.append(earlier)
    return passed


def _run_info(config: PipelineConfig, run_id: str, backfilled: list[int], ir) -> dict:
    from runner import node_runner

    return {
        "run_id": run_id, "span": config.span, "pipeline": config.pipeline_name,
        "metadata_path": config.metadata_path, "backfilled_spans": backfilled,
        "pipeline_root": os.path.abspath(config.pipeline_root), "nodes": node_runner.node_ids(ir),
    }


class StaleTemplate(RuntimeError):
    """The DAG's template does not match the pipeline's compiled nodes."""


def prepare(config: PipelineConfig, run_id: str, expect: str | None, log: Callable[[str], None],
            on_start=lambda i, n, node: None, on_end=lambda i, n, result: None) -> dict:
    """An orchestrated run's first step: checks the DAG, backfills, binds and writes the IR.

    Raises:
      StaleTemplate: the DAG was built from other pipeline code (before any work).
      BackfillError: an earlier span could not be ingested.
    """
    from airflow_tfx import template as dag_template
    from runner import node_runner

    folder = layout.run_dir(config.workdir, config.pipeline_name, run_id)
    log(f"run {run_id}: span {config.span}, run folder {folder}")
    ir = node_runner.bind_run_id(compile_for_span(config), run_id)
    if expect:  # before any work: a DAG whose graph is not the pipeline's must not run
        problem = dag_template.mismatch(dag_template.read(expect, check_fresh=False), ir)
        if problem:
            raise StaleTemplate(f"the DAG is stale: {problem}; run `make compile`")
    backfilled = backfill(config, log, on_start, on_end)
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
    start = time.monotonic()
    try:
        result = node_runner.run_node(ir, node_id)
    except Exception as e:  # the node's own failure: recorded, then reported by exit code
        logger.exception("Node %s failed", node_id)
        result = node_runner.failed_result(node_id, e, time.monotonic() - start)
    run_folder.write_result(folder, result)
    return result


def summarize(folder: str) -> dict:
    """The summary of a run folder's run, from its record."""
    from governance import record as record_lib
    from runner import summary as summary_lib

    return summary_lib.build_summary(record_lib.read_folder(folder))


def write_report(folder: str) -> dict:
    """Writes the governance report of a run folder's run; returns report.write's answer."""
    from governance import record as record_lib
    from governance import report as report_lib

    record = record_lib.read_folder(folder)
    return report_lib.write(record, run_folder.read_info(folder)["pipeline_root"])


def run_locally(config: PipelineConfig, run_id: str, log: Callable[[str], None],
                on_start=lambda i, n, node: None, on_end=lambda i, n, result: None) -> dict:
    """A whole run in this process: backfill, every node, the run folder, the summary and
    the governance report. Returns the summary (with `seconds`, `report`, `run_dir`)."""
    from runner import node_runner

    started = time.monotonic()
    folder = layout.run_dir(config.workdir, config.pipeline_name, run_id)
    try:
        backfilled = backfill(config, log, on_start, on_end)
    except BackfillError as e:
        return {"pipeline": config.pipeline_name, "run_id": run_id, "span": config.span,
                "outcome": outcomes.FAILED_BACKFILLING, "error": str(e),
                "seconds": round(time.monotonic() - started, 1)}
    log(f"span {config.span}:")
    ir = compile_for_span(config)
    run_folder.write_info(folder, _run_info(config, run_id, backfilled, ir))

    def record_result(i: int, n: int, result: NodeResult) -> None:
        run_folder.write_result(folder, result)
        on_end(i, n, result)

    node_runner.run_pipeline(ir, run_id, on_start, record_result)
    from governance import record as record_lib
    from governance import report as report_lib
    from runner import summary as summary_lib

    record = record_lib.read_folder(folder)  # read once: the summary and the report are views of it
    summary = summary_lib.build_summary(record)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["run_dir"] = folder
    try:
        written = report_lib.write(record, os.path.abspath(config.pipeline_root))
    except Exception as e:
        logger.exception("governance report of run %s failed", run_id)
        summary.update(report=None, report_error=f"{type(e).__name__}: {e}")
    else:
        summary.update(report=written["html"], report_json=written["json"], report_with_model=written.get("with_model"))
    return summary
