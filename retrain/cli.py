"""`retrain`: run the retraining pipeline locally, bootstrap schemas, list spans.

    retrain run [--span 201612] [--window 6] [--json]   ingest a span, validate, train, push
    retrain schema infer --out schemas/x/schema.pbtxt   bootstrap a schema to curate
    retrain spans                                       list the spans in the data folder

Exit codes of `run`: 0 the run finished (pushed, or not blessed); 1 a node failed;
2 bad input (nothing was written); 3 the data gate stopped the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import sys
import time

from retrain import keras_env  # noqa: F401  (must precede any TensorFlow import)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_GATE = 0, 1, 2, 3
# A backfilled span goes through validation and the gate too, so that only spans that
# passed reach the training window and serve as drift baselines.
BACKFILL_NODES = (
    "CsvExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator",
    "baseline_resolver", "DataGate",
)
_DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipelines", "taxi", "config.yaml"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the pipeline for one span with the local runner")
    run.add_argument("--config", default=_DEFAULT_CONFIG, help="pipeline config YAML")
    run.add_argument("--span", help="span to ingest, YYYYMM (default: the latest)")
    run.add_argument("--window", type=int, dest="window_spans", help="spans to train on")
    run.add_argument("--train-steps", type=int, dest="train_steps")
    run.add_argument("--eval-steps", type=int, dest="eval_steps")
    run.add_argument("--workdir", default="work", help="outputs, MLMD and serving dir (default ./work)")
    run.add_argument("--data-root", dest="data_root", help="span folders (default: from config)")
    run.add_argument("--beam-mode", choices=["in_memory", "multi_processing"], dest="beam_mode")
    run.add_argument("--no-cache", action="store_true", help="re-run nodes whose inputs are unchanged")
    run.add_argument("--no-backfill", action="store_true", help="don't ingest missing window spans first")
    run.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

    schema = sub.add_parser("schema", help="schema bootstrap")
    schema_sub = schema.add_subparsers(dest="schema_command", required=True)
    infer = schema_sub.add_parser("infer", help="infer a schema from spans, to curate and check in")
    infer.add_argument("--config", default=_DEFAULT_CONFIG)
    infer.add_argument("--data-root", dest="data_root")
    infer.add_argument("--spans", help="FIRST..LAST (default: all)")
    infer.add_argument("--out", required=True, help="where to write schema.pbtxt")
    infer.add_argument("--force", action="store_true", help="overwrite an existing file")

    ls = sub.add_parser("spans", help="list the spans of the data folder")
    ls.add_argument("--config", default=_DEFAULT_CONFIG)
    ls.add_argument("--data-root", dest="data_root")
    return p


def _setup_logging(log_path: str):
    """TFX/Beam/TF logs and warnings go to a file; the terminal shows progress and the summary.

    Returns:
      The open log file, for redirecting what nodes print (Keras' fit progress) into it.
    """
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log_file = open(log_path, "a", encoding="utf-8")  # closed by logging.shutdown at exit
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    import absl.logging  # TFX logs through absl; route it to the root logger's file

    absl.logging.set_verbosity(absl.logging.INFO)
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    return log_file


def _progress(stream):
    def on_start(i: int, n: int, node_id: str) -> None:
        stream.write(f"[{i:>2}/{n}] {node_id:<32}")
        stream.flush()

    def on_end(i: int, n: int, result) -> None:
        stream.write(f" {result.status:<9}{result.seconds:7.1f}s\n")
        stream.flush()

    return on_start, on_end


def _ingested_spans(metadata_path: str, pipeline_name: str) -> set[int]:
    """Spans CsvExampleGen has already ingested into this pipeline's MLMD."""
    if not os.path.exists(metadata_path):
        return set()
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = metadata_path
    cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(cfg)
    node_ctx = store.get_context_by_type_and_name("node", f"{pipeline_name}.CsvExampleGen")
    if node_ctx is None:
        return set()
    return {
        a.custom_properties["span"].int_value
        for a in store.get_artifacts_by_context(node_ctx.id)
        if a.state == metadata_store_pb2.Artifact.LIVE and "span" in a.custom_properties
    }


def spans_to_backfill(available: list[int], ingested: set[int], span: int, window_spans: int) -> list[int]:
    """Earlier spans of the window (and the previous span, the drift baseline) not yet ingested."""
    from retrain import spans

    first, _ = spans.window(span, window_spans)
    earlier = [s for s in available if s < span]
    wanted = {s for s in earlier if s >= first}
    if earlier:
        wanted.add(earlier[-1])
    return sorted(wanted - ingested)


def cmd_run(args) -> int:
    from pipelines import config as config_lib
    from retrain import preflight, spans

    err = sys.stderr
    try:
        overrides = {
            k: getattr(args, k)
            for k in ("window_spans", "train_steps", "eval_steps", "data_root", "beam_mode")
        }
        if args.data_root:
            overrides["data_root"] = os.path.abspath(args.data_root)
        overrides["workdir"] = os.path.abspath(args.workdir)
        if args.no_cache:
            overrides["enable_cache"] = False
        if args.no_backfill:
            overrides["backfill_window"] = False
        span = spans.parse_span(args.span) if args.span else None
        config = config_lib.load(args.config, overrides)
        span = preflight.check_run_inputs(config.data_root, span, config.schema_path)
        config = config_lib.replace(config, span=span)
    except (config_lib.ConfigError, preflight.InputError, spans.SpanError) as e:
        err.write(f"retrain run: {e}\n")
        return EXIT_BAD_INPUT

    run_id = dt.datetime.now().isoformat(timespec="microseconds")
    log_path = os.path.join(config.workdir, "logs", f"{config.pipeline_name}-{run_id.replace(':', '')}.log")
    log_file = _setup_logging(log_path)
    with contextlib.redirect_stdout(log_file):  # TFX/TF import chatter, Keras' fit lines
        code, summary = _run(config, span, run_id, err)
    summary["log"] = log_path
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(_format_summary(summary))
    return code


def _format_summary(summary: dict) -> str:
    from retrain import summary as summary_lib

    return summary_lib.format_summary(summary) + f"\n  wall time        {summary['seconds']} s\n"


def _run(config, span: int, run_id: str, err) -> tuple[int, dict]:
    """Backfills what the window lacks, runs the pipeline, and builds the summary."""
    from pipelines import config as config_lib
    from pipelines.factory import create_pipeline
    from components.data_gate import is_gate_stop
    from retrain import node_runner, spans, summary as summary_lib

    err.write(f"retrain run: pipeline {config.pipeline_name}, span {span}, run {run_id}\n")
    err.write(f"  log: {os.path.join(config.workdir, 'logs')}\n")
    on_start, on_end = _progress(err)
    started = time.monotonic()

    backfilled: list[int] = []
    if config.backfill_window:
        todo = spans_to_backfill(
            spans.list_spans(config.data_root),
            _ingested_spans(config.metadata_path, config.pipeline_name),
            span,
            config.window_spans,
        )
        for earlier in todo:
            err.write(f"backfill: ingesting span {earlier} (window/baseline of {span})\n")
            ir = node_runner.compile_pipeline(create_pipeline(config_lib.replace(config, span=earlier)))
            results = node_runner.run_pipeline(
                ir, node_runner.new_run_id(), on_start, on_end, only=BACKFILL_NODES
            )
            last = results[-1]
            if last.status == "failed" and is_gate_stop(last.exception):
                err.write(f"backfill: span {earlier} stopped by the data gate; left out of the window\n")
                continue
            if last.status == "failed":
                return EXIT_FAILED, {
                    "run_id": run_id,
                    "span": span,
                    "outcome": f"failed_backfilling_span_{earlier}",
                    "error": last.error,
                    "seconds": round(time.monotonic() - started, 1),
                }
            backfilled.append(earlier)

    err.write(f"span {span}:\n")
    ir = node_runner.compile_pipeline(create_pipeline(config))
    results = node_runner.run_pipeline(ir, run_id, on_start, on_end)
    summary = summary_lib.build_summary(
        config.metadata_path, config.pipeline_name, run_id, span, results, backfilled
    )
    summary["seconds"] = round(time.monotonic() - started, 1)
    if summary["outcome"] == "stopped_by_data_gate":
        return EXIT_GATE, summary
    if summary["outcome"].startswith("failed"):
        return EXIT_FAILED, summary
    return EXIT_OK, summary


def _data_root(args) -> str:
    from pipelines import config as config_lib

    return os.path.abspath(args.data_root) if args.data_root else config_lib.load(args.config).data_root


def cmd_schema_infer(args) -> int:
    from retrain import schema_tools, spans

    try:
        root = _data_root(args)
        available = spans.list_spans(root)
        if args.spans:
            lo, _, hi = args.spans.partition("..")
            lo, hi = spans.parse_span(lo), spans.parse_span(hi or lo)
            chosen = [s for s in available if lo <= s <= hi]
            if not chosen:
                raise spans.SpanError(f"no spans within {args.spans} under {root}")
        else:
            chosen = available
        sys.stderr.write(f"inferring a schema from {len(chosen)} span(s) {chosen[0]}..{chosen[-1]}\n")
        path = schema_tools.infer_schema(root, chosen, args.out, force=args.force)
    except (spans.SpanError, FileExistsError) as e:
        sys.stderr.write(f"retrain schema infer: {e}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(f"wrote {path}: curate it (domains, drift_comparator thresholds) before checking it in\n")
    return EXIT_OK


def cmd_spans(args) -> int:
    from retrain import spans

    try:
        root = _data_root(args)
        for s in spans.list_spans(root):
            sys.stdout.write(f"{s}\t{spans.span_dir(root, s)}\n")
    except spans.SpanError as e:
        sys.stderr.write(f"retrain spans: {e}\n")
        return EXIT_BAD_INPUT
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        code = cmd_run(args)
    elif args.command == "schema":
        code = cmd_schema_infer(args)
    else:
        code = cmd_spans(args)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    # TensorFlow's interpreter-exit finalizers print spurious tracebacks; the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
