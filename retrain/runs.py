"""A pipeline run: config and input checks, window backfill, compiled IR, the run folder.

Shared by `retrain run` (all in one process) and by an orchestrator whose tasks each run
one step in the TFX runtime (`retrain prepare-run`, `retrain node run`, `retrain
summary`): the run folder `<workdir>/runs/<run id>/` holds the run's bound IR
(`pipeline.pb`), `run.json` and one `nodes/<node id>.json` result per node.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Mapping

from pipelines import config as config_lib
from pipelines.config import PipelineConfig
from retrain import preflight, spans

# A backfilled span goes through validation and the gate too, so that only spans that
# passed reach the training window and serve as drift baselines.
_BACKFILL_AFTER_INGEST = ("StatisticsGen", "ImportSchemaGen", "ExampleValidator", "baseline_resolver", "DataGate")


def backfill_nodes(config: PipelineConfig) -> tuple[str, ...]:
    return (config.example_gen_id, *_BACKFILL_AFTER_INGEST)


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


def ingested_spans(metadata_path: str, pipeline_name: str, example_gen_id: str = "CsvExampleGen") -> set[int]:
    """Spans the pipeline's ExampleGen has already ingested into its MLMD."""
    if not os.path.exists(metadata_path):
        return set()
    from ml_metadata.proto import metadata_store_pb2

    from retrain.node_runner import read_only_store

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
    from retrain import node_runner

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
    from retrain import node_runner

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


def run_dir(workdir: str, pipeline_name: str, run_id: str) -> str:
    """`<workdir>/runs/<pipeline>/<run id with only safe characters>` (two pipelines' DAGs
    share scheduled run ids)."""
    return os.path.join(workdir, "runs", pipeline_name, re.sub(r"[^A-Za-z0-9._-]", "_", run_id))


def write_run_info(folder: str, info: dict) -> None:
    os.makedirs(os.path.join(folder, "nodes"), exist_ok=True)
    with open(os.path.join(folder, "run.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)


def read_run_info(folder: str) -> dict:
    with open(os.path.join(folder, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def write_node_result(folder: str, result) -> str:
    path = os.path.join(folder, "nodes", f"{result.node_id}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(result.to_json())
    return path


def collect_results(folder: str) -> list:
    """The node results recorded in a run folder, in the IR's order."""
    from retrain import node_runner

    ir = node_runner.load_ir(os.path.join(folder, "pipeline.pb"))
    results = []
    for node_id in node_runner.node_ids(ir):
        path = os.path.join(folder, "nodes", f"{node_id}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                results.append(node_runner.NodeResult.from_json(f.read()))
    return results
