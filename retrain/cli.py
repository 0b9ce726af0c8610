"""`retrain`: run the retraining pipeline locally, or one step of it for an orchestrator.

    retrain run [--span 201612] [--window 6] [--json]   the whole pipeline, local runner
    retrain compile --out dags/compiled/taxi.json       the DAG template an orchestrator reads
    retrain prepare-run --run-id ID [--span S]          check inputs, backfill, bind the IR
    retrain node run --run-dir DIR --node NODE_ID       run one node of a prepared run
    retrain summary --run-dir DIR [--json]              a prepared run's summary
    retrain schema infer --out schemas/x/schema.pbtxt   bootstrap a schema to curate
    retrain schema calibrate [--spans A..B]             the data gate's limits from the spans' history
    retrain spans                                       list the spans in the data folder
    retrain quarantine --pipeline taxi --span S --reason R   take a span out of training
    retrain serve [--rest-port 8501 --grpc-port 8500]   serve pushed models (TF Serving's APIs)
    retrain rollback --model taxi [--to V] --reason R   serve an earlier version
    retrain serving-config [--base-path-prefix /models] TF Serving's models.config
    retrain report --run-dir DIR                        a run's governance report (HTML + JSON)
    retrain models [--config C]                         every candidate model, with report links
    retrain lineage taxi VERSION                        data span -> served version
    retrain approve --model-id N --decision approve     a reviewer's decision before push

Exit codes: 0 done (pushed, not blessed, cached or skipped); 1 a node failed; 2 bad input
(nothing was written); 3 the data gate stopped the span; 4 awaiting a reviewer's approval.
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
import warnings

from retrain import keras_env  # noqa: F401  (must precede any TensorFlow import)
from retrain import exit_codes

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_GATE = (
    exit_codes.OK, exit_codes.FAILED, exit_codes.BAD_INPUT, exit_codes.GATE_STOPPED
)
_DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipelines", "taxi", "config.yaml"
)
_OVERRIDABLE = ("window_spans", "train_steps", "eval_steps", "beam_mode")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=_DEFAULT_CONFIG, help="pipeline config YAML")
    p.add_argument("--span", help="span to ingest, YYYYMM (default: the latest)")
    p.add_argument("--window", type=int, dest="window_spans", help="spans to train on")
    p.add_argument("--train-steps", type=int, dest="train_steps")
    p.add_argument("--eval-steps", type=int, dest="eval_steps")
    p.add_argument("--workdir", default="work", help="outputs, MLMD and serving dir (default ./work)")
    p.add_argument("--data-root", dest="data_root", help="span folders (default: from config)")
    p.add_argument("--beam-mode", choices=["in_memory", "multi_processing"], dest="beam_mode")
    p.add_argument("--no-cache", action="store_true", help="re-run nodes whose inputs are unchanged")
    p.add_argument("--no-backfill", action="store_true", help="don't ingest missing window spans first")


def _add_run_dir_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help="the run folder prepare-run wrote")
    p.add_argument("--workdir", help="with --pipeline and --run-id, instead of --run-dir")
    p.add_argument("--pipeline", help="with --workdir: the pipeline name")
    p.add_argument("--run-id", help="with --workdir: the orchestrator's run id")


def _run_dir(args, command: str) -> str | None:
    """The prepared run's folder, or None after saying why there is none."""
    from retrain import runs

    folder = args.run_dir or (
        runs.run_dir(os.path.abspath(args.workdir), args.pipeline, args.run_id)
        if args.workdir and args.pipeline and args.run_id
        else None
    )
    if folder is None:
        sys.stderr.write(f"retrain {command}: give --run-dir, or --workdir, --pipeline and --run-id\n")
    elif not os.path.exists(os.path.join(folder, "run.json")):
        sys.stderr.write(
            f"retrain {command}: {folder} holds no prepared run (did prepare-run fail? see its log)\n"
        )
        folder = None
    return folder


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the pipeline for one span with the local runner")
    _add_run_options(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

    comp = sub.add_parser("compile", help="write the DAG template (node ids, edges, stages)")
    comp.add_argument("--config", default=_DEFAULT_CONFIG)
    comp.add_argument("--out", required=True)

    prep = sub.add_parser("prepare-run", help="check inputs, backfill the window, bind the IR")
    _add_run_options(prep)
    prep.add_argument("--run-id", required=True, help="the orchestrator's run id")
    prep.add_argument("--expect", help="DAG template the compiled nodes must match")

    node = sub.add_parser("node", help="run one node of a prepared run")
    node_sub = node.add_subparsers(dest="node_command", required=True)
    node_run = node_sub.add_parser("run")
    _add_run_dir_options(node_run)
    node_run.add_argument("--node", required=True, dest="node_id")

    summ = sub.add_parser("summary", help="the summary of a prepared run")
    _add_run_dir_options(summ)
    summ.add_argument("--json", action="store_true")

    schema = sub.add_parser("schema", help="schema bootstrap and data-gate calibration")
    schema_sub = schema.add_subparsers(dest="schema_command", required=True)
    infer = schema_sub.add_parser("infer", help="infer a schema from spans, to curate and check in")
    infer.add_argument("--config", default=_DEFAULT_CONFIG)
    infer.add_argument("--data-root", dest="data_root")
    infer.add_argument("--spans", help="FIRST..LAST (default: all)")
    infer.add_argument("--out", required=True, help="where to write schema.pbtxt")
    infer.add_argument("--force", action="store_true", help="overwrite an existing file")
    cal = schema_sub.add_parser(
        "calibrate", help="set the data gate's limits from the month-to-month history of the spans"
    )
    cal.add_argument("--config", default=_DEFAULT_CONFIG)
    cal.add_argument("--data-root", dest="data_root")
    cal.add_argument("--spans", help="FIRST..LAST (default: all)")
    cal.add_argument("--out", help="gate policy to write (default: the config's gate_policy)")
    cal.add_argument("--margin", type=float, default=None, help="limit = margin x largest observed (default 1.5)")
    cal.add_argument("--workdir", help="skip spans quarantined in this workdir's ML Metadata")

    ls = sub.add_parser("spans", help="list the spans of the data folder, with quarantine decisions")
    ls.add_argument("--config", default=_DEFAULT_CONFIG)
    ls.add_argument("--data-root", dest="data_root")
    ls.add_argument("--workdir", default="work", help="where ML Metadata records quarantines")

    from governance import commands as governance_commands
    from serving import commands as serving_commands

    serving_commands.add_parsers(sub, _DEFAULT_CONFIG)
    governance_commands.add_parsers(sub, _DEFAULT_CONFIG, _add_run_dir_options)
    return p


def _log_to(stream) -> None:
    """TFX/Beam/TF logs and Python warnings go to `stream` (a file, or stderr for a task log)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    import absl.logging  # TFX logs through absl; route it to the root logger

    absl.logging.set_verbosity(absl.logging.INFO)
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True


def _progress(stream):
    def on_start(i: int, n: int, node_id: str) -> None:
        stream.write(f"[{i:>2}/{n}] {node_id:<32}")
        stream.flush()

    def on_end(i: int, n: int, result) -> None:
        stream.write(f" {result.status:<9}{result.seconds:7.1f}s\n")
        if result.status == "failed" and result.error:  # the cause, not only "failed"
            stream.write(f"        {result.error}\n")
        stream.flush()

    return on_start, on_end


def _overrides(args) -> dict:
    overrides = {k: getattr(args, k) for k in _OVERRIDABLE}
    if args.data_root:
        overrides["data_root"] = os.path.abspath(args.data_root)
    overrides["workdir"] = os.path.abspath(args.workdir)
    if args.no_cache:
        overrides["enable_cache"] = False
    if args.no_backfill:
        overrides["backfill_window"] = False
    return overrides


def _load(args, command: str):
    """Config with the span resolved, or None after printing why (bad input)."""
    from pipelines import config as config_lib
    from retrain import preflight, runs

    try:
        return runs.load_config(args.config, _overrides(args), args.span)
    except (config_lib.ConfigError, preflight.InputError) as e:
        sys.stderr.write(f"retrain {command}: {e}\n")
        return None


def _exit_code(summary: dict) -> int:
    if summary["outcome"] == "stopped_by_data_gate":
        return EXIT_GATE
    if summary["outcome"] == "awaiting_approval":
        return exit_codes.AWAITING_APPROVAL
    # A candidate refused by a check (not blessed, failed serving check, rejected) is a
    # finished run; only a node that did not finish is a failure.
    if summary["outcome"].startswith(("failed_at_", "failed_backfilling")):
        return EXIT_FAILED
    return EXIT_OK


def _print_summary(summary: dict, as_json: bool) -> None:
    from retrain import summary as summary_lib

    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(summary_lib.format_summary(summary) + "\n")


def cmd_run(args) -> int:
    config = _load(args, "run")
    if config is None:
        return EXIT_BAD_INPUT
    run_id = dt.datetime.now().isoformat(timespec="microseconds")
    log_path = os.path.join(config.workdir, "logs", f"{config.pipeline_name}-{run_id.replace(':', '')}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    err = sys.stderr
    err.write(f"retrain run: pipeline {config.pipeline_name}, span {config.span}, run {run_id}\n")
    err.write(f"  log: {log_path}\n")
    with open(log_path, "a", encoding="utf-8") as log_file, contextlib.redirect_stdout(log_file):
        _log_to(log_file)  # the terminal shows progress and the summary; details go here
        summary = _run_locally(config, run_id, err)
    summary["log"] = log_path
    _print_summary(summary, args.json)
    return _exit_code(summary)


def _run_locally(config, run_id: str, err) -> dict:
    from retrain import node_runner, runs, summary as summary_lib

    on_start, on_end = _progress(err)
    started = time.monotonic()
    try:
        backfilled = runs.backfill(config, lambda m: err.write(m + "\n"), on_start, on_end)
    except runs.BackfillError as e:
        return {"run_id": run_id, "span": config.span, "outcome": "failed_backfilling", "error": str(e),
                "seconds": round(time.monotonic() - started, 1)}
    err.write(f"span {config.span}:\n")
    results = node_runner.run_pipeline(runs.compile_for_span(config), run_id, on_start, on_end)
    summary = summary_lib.build_summary(
        config.metadata_path, config.pipeline_name, run_id, config.span, results, backfilled
    )
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary.update(_governance_report(config.metadata_path, config.pipeline_name, config.pipeline_root, run_id))
    return summary


def _governance_report(metadata_path: str, pipeline: str, pipeline_root: str, run_id: str) -> dict:
    """Writes the run's governance report; a failure to write it is reported, not fatal."""
    from governance import report as report_lib
    from retrain.node_runner import read_only_store

    try:
        written = report_lib.write(read_only_store(metadata_path), pipeline, pipeline_root, run_id)
    except Exception as e:  # noqa: BLE001  the run's outcome stands; the summary says the report failed
        logging.exception("governance report of run %s failed", run_id)
        return {"report": None, "report_error": f"{type(e).__name__}: {e}"}
    return {"report": written["html"], "report_json": written["json"], "report_with_model": written.get("with_model")}


def cmd_compile(args) -> int:
    from airflow_tfx import template as dag_template
    from pipelines import config as config_lib
    from pipelines.factory import NODE_STAGES
    from retrain import runs, spans

    config = config_lib.load(args.config)
    # Any span gives the same nodes and edges; the latest one keeps it a real, valid span.
    ir = runs.compile_for_span(config, spans.list_spans(config.data_root)[-1])
    template = dag_template.from_ir(ir, args.config, NODE_STAGES)
    dag_template.write(template, args.out)
    sys.stdout.write(f"wrote {args.out}: {len(template['nodes'])} nodes, fingerprint {template['fingerprint'][:12]}\n")
    return EXIT_OK


def cmd_prepare_run(args) -> int:
    from airflow_tfx import template as dag_template
    from retrain import node_runner, runs

    config = _load(args, "prepare-run")
    if config is None:
        return EXIT_BAD_INPUT
    _log_to(sys.stderr)
    folder = runs.run_dir(config.workdir, config.pipeline_name, args.run_id)
    sys.stderr.write(f"run {args.run_id}: span {config.span}, run folder {folder}\n")
    ir = node_runner.bind_run_id(runs.compile_for_span(config), args.run_id)
    if args.expect:  # before any work: a DAG whose graph is not the pipeline's must not run
        problem = dag_template.mismatch(dag_template.read(args.expect, check_fresh=False), ir)
        if problem:
            sys.stderr.write(f"retrain prepare-run: the DAG is stale: {problem}; run `make compile`\n")
            return EXIT_FAILED
    try:
        backfilled = runs.backfill(config, lambda m: sys.stderr.write(m + "\n"), *_progress(sys.stderr))
    except runs.BackfillError as e:
        sys.stderr.write(f"retrain prepare-run: {e}\n")
        return EXIT_FAILED
    node_runner.write_ir(ir, os.path.join(folder, "pipeline.pb"))
    runs.write_run_info(folder, {
        "run_id": args.run_id, "span": config.span, "pipeline": config.pipeline_name,
        "metadata_path": config.metadata_path, "backfilled_spans": backfilled,
        "pipeline_root": os.path.abspath(config.pipeline_root),
    })
    sys.stdout.write(json.dumps({"run_dir": folder, "span": config.span, "backfilled_spans": backfilled}) + "\n")
    return EXIT_OK


def cmd_node_run(args) -> int:
    from retrain import node_runner, runs

    folder = _run_dir(args, "node run")
    if folder is None:
        return EXIT_BAD_INPUT
    _log_to(sys.stderr)
    ir = node_runner.load_ir(os.path.join(folder, "pipeline.pb"))
    start = time.monotonic()
    try:
        result = node_runner.run_node(ir, args.node_id)
    except KeyError as e:
        sys.stderr.write(f"retrain node run: {e}\n")
        return EXIT_BAD_INPUT
    except Exception as e:  # the node's own failure: recorded, then reported by exit code
        logging.exception("Node %s failed", args.node_id)
        result = node_runner.failed_result(args.node_id, e, time.monotonic() - start)
    runs.write_node_result(folder, result)
    # The last stdout line is the machine-readable result an orchestrator reads.
    sys.stdout.write("RESULT " + result.to_json() + "\n")
    if result.status != "failed":
        return EXIT_OK
    if result.approval_pending:
        return exit_codes.AWAITING_APPROVAL
    return EXIT_GATE if result.gate_stopped else EXIT_FAILED


def cmd_summary(args) -> int:
    # Library import chatter (Google client deprecation notes, TF warnings) is not the summary.
    warnings.simplefilter("ignore", FutureWarning)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from retrain import runs, summary as summary_lib

    folder = _run_dir(args, "summary")
    if folder is None:
        return EXIT_FAILED
    info = runs.read_run_info(folder)
    summary = summary_lib.build_summary(
        info["metadata_path"], info["pipeline"], info["run_id"], info["span"],
        runs.collect_results(folder), info["backfilled_spans"],
    )
    if info.get("pipeline_root"):
        from governance import report as report_lib

        html = os.path.join(report_lib.report_dir(info["pipeline_root"], info["run_id"]), "report.html")
        summary["report"] = html if os.path.exists(html) else None
    _print_summary(summary, args.json)
    return _exit_code(summary)


def _data_root(args) -> str:
    from pipelines import config as config_lib

    return os.path.abspath(args.data_root) if args.data_root else config_lib.load(args.config).data_root


def _chosen_spans(root: str, wanted: str | None) -> list[int]:
    """The spans under `root` within `FIRST..LAST` (all when None).

    Raises:
      spans.SpanError: a malformed range, or no span within it.
    """
    from retrain import spans

    available = spans.list_spans(root)
    if not wanted:
        return available
    lo, _, hi = wanted.partition("..")
    lo, hi = spans.parse_span(lo), spans.parse_span(hi or lo)
    chosen = [s for s in available if lo <= s <= hi]
    if not chosen:
        raise spans.SpanError(f"no spans within {wanted} under {root}")
    return chosen


def cmd_schema(args) -> int:
    return cmd_schema_calibrate(args) if args.schema_command == "calibrate" else cmd_schema_infer(args)


def cmd_schema_infer(args) -> int:
    from retrain import schema_tools, spans

    try:
        root = _data_root(args)
        chosen = _chosen_spans(root, args.spans)
        sys.stderr.write(f"inferring a schema from {len(chosen)} span(s) {chosen[0]}..{chosen[-1]}\n")
        path = schema_tools.infer_schema(root, chosen, args.out, force=args.force)
    except (spans.SpanError, FileExistsError) as e:
        sys.stderr.write(f"retrain schema infer: {e}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(f"wrote {path}: curate it (domains, presence limits) before checking it in\n")
    return EXIT_OK


def cmd_schema_calibrate(args) -> int:
    from pipelines import config as config_lib
    from retrain import schema_tools, spans

    try:
        config = config_lib.load(args.config, {"data_root": os.path.abspath(args.data_root) if args.data_root else None})
        out = args.out or config.gate_policy
        if not out:
            raise config_lib.ConfigError(
                f"{args.config} names no gate_policy file; pass --out schemas/<pipeline>/gate.yaml"
            )
        chosen = _chosen_spans(config.data_root, args.spans)
        written = schema_tools.calibrate_gate(
            config, chosen, out, margin=args.margin, workdir=args.workdir,
            progress=lambda m: sys.stderr.write(m + "\n"),
        )
    except (config_lib.ConfigError, spans.SpanError, ValueError) as e:
        sys.stderr.write(f"retrain schema calibrate: {e}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(
        f"wrote {written['policy']} ({written['features']} features watched, {written['opt_out']} opted out,"
        f" {written['pairs']} month pairs) and {written['table']}: review the change, then commit both\n"
    )
    return EXIT_OK


def cmd_spans(args) -> int:
    from governance import quarantine
    from pipelines import config as config_lib
    from retrain import spans

    try:
        config = config_lib.load(args.config, {"workdir": os.path.abspath(args.workdir)})
        root = os.path.abspath(args.data_root) if args.data_root else config.data_root
        held = quarantine.quarantined_spans(config.metadata_path, config.pipeline_name)
        for s in spans.list_spans(root):
            note = ""
            if s in held:
                d = held[s]
                note = f"\tQUARANTINED by {d['decided_by']} at {d['decided_at']}: {d['reason']}"
            sys.stdout.write(f"{s}\t{spans.span_dir(root, s)}{note}\n")
    except (config_lib.ConfigError, spans.SpanError) as e:
        sys.stderr.write(f"retrain spans: {e}\n")
        return EXIT_BAD_INPUT
    return EXIT_OK


_COMMANDS = {
    "run": cmd_run,
    "compile": cmd_compile,
    "prepare-run": cmd_prepare_run,
    "node": cmd_node_run,
    "summary": cmd_summary,
    "schema": cmd_schema,
    "spans": cmd_spans,
}


def main(argv: list[str] | None = None) -> int:
    from governance import commands as governance_commands
    from serving import commands as serving_commands

    args = _parser().parse_args(argv)
    code = {**_COMMANDS, **serving_commands.COMMANDS, **governance_commands.COMMANDS}[args.command](args)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    # TensorFlow's interpreter-exit finalizers print spurious tracebacks; the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
