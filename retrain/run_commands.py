"""`retrain run`, `compile`, `prepare-run`, `node run`, `wait`, `summary`, `metadata`: running the pipeline.

Argument handling and printing only; the work is in `runner.runs`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import sys

from core import exit_codes, layout, logs
from core import outcome as outcomes
from core import results as results_lib
from core.errors import BadInput
from retrain import options


def add_parsers(sub) -> None:
    run = sub.add_parser("run", help="run the pipeline for one span with the local runner")
    options.add_run_options(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

    tune = sub.add_parser("tune", help="run the pipeline for one span with a hyperparameter search first"
                          " (TFX's Tuner over the model's SEARCH_SPACE); later runs train with the best values")
    options.add_run_options(tune)
    tune.add_argument("--trials", type=int, help="trials of the search (default: tuning.max_trials)")
    tune.add_argument("--trial-steps", type=int, help="training steps of each trial (default: tuning.trial_steps)")
    tune.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

    comp = sub.add_parser("compile", help="write the DAG template (node ids, edges, stages)")
    comp.add_argument("--config", default=options.DEFAULT_CONFIG)
    comp.add_argument("--out", required=True)

    prep = sub.add_parser("prepare-run", help="check inputs, backfill the window, bind the IR")
    options.add_run_options(prep)
    prep.add_argument("--run-id", required=True, help="the orchestrator's run id")
    prep.add_argument("--expect", help="DAG template the compiled nodes must match")

    node = sub.add_parser("node", help="run one node of a prepared run")
    node_sub = node.add_subparsers(dest="node_command", required=True)
    node_run = node_sub.add_parser("run")
    options.add_run_dir_options(node_run)
    node_run.add_argument("--node", required=True, dest="node_id")

    wait = sub.add_parser("wait", help="wait until earlier spans' work a prepared run depends on is decided")
    options.add_run_dir_options(wait)
    wait.add_argument("--for", dest="what", required=True, choices=["baseline", "window", "models"],
                      help="baseline: the drift baseline's gate; window: every window span's gate; "
                           "models: earlier months' runs finished (evaluation and push)")
    wait.add_argument("--timeout", type=float, default=0.0,
                      help="seconds to wait; 0: ask once (exit 75 while something is still open)")

    summ = sub.add_parser("summary", help="the summary of a prepared run")
    options.add_run_dir_options(summ)
    summ.add_argument("--json", action="store_true")
    summ.add_argument("--outcome-line", action="store_true",
                      help="after the summary, print the outcome as one JSON line (for an orchestrator)")
    summ.add_argument("--finish", action="store_true",
                      help="also end the run's span claim (the orchestrator's last task does this)")

    meta = sub.add_parser("metadata", help="the ML Metadata store")
    meta_sub = meta.add_subparsers(dest="metadata_command", required=True)
    init = meta_sub.add_parser("init", help="connect and create the schema (once, before parallel runs start)")
    init.add_argument("--config", default=options.DEFAULT_CONFIG)
    init.add_argument("--workdir", default="work")
    claims = meta_sub.add_parser("claims", help="which run holds which span (the parallel-run ledger)")
    claims.add_argument("--config", default=options.DEFAULT_CONFIG)
    claims.add_argument("--workdir", default="work")
    claims.add_argument("--json", action="store_true")
    release = meta_sub.add_parser("release", help="close the open claim of a span whose run died without closing it")
    release.add_argument("--config", default=options.DEFAULT_CONFIG)
    release.add_argument("--workdir", default="work")
    release.add_argument("--span", required=True)


def _load(args):
    """Config with the span resolved. Raises ConfigError/InputError (exit 2)."""
    from runner import runs

    return runs.load_config(args.config, options.overrides(args), args.span)


def _print_summary(summary: dict, as_json: bool) -> None:
    from runner import summary as summary_lib

    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(summary_lib.format_summary(summary) + "\n")


def cmd_run(args) -> int:
    from runner import runs

    config = _load(args)
    run_id = dt.datetime.now().isoformat(timespec="microseconds")
    log_path = layout.log_path(config.workdir, config.pipeline_name, run_id)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    err = sys.stderr
    err.write(f"retrain run: pipeline {config.pipeline_name}, span {config.span}, run {run_id}\n")
    err.write(f"  log: {log_path}\n")
    with open(log_path, "a", encoding="utf-8") as log_file, contextlib.redirect_stdout(log_file):
        logs.configure(log_file)  # the terminal shows progress and the summary; details go here
        summary = runs.run_locally(config, run_id, options.say(err), *options.progress(err))
    summary["log"] = log_path
    _print_summary(summary, args.json)
    return outcomes.exit_code(summary["outcome"])


def cmd_tune(args) -> int:
    """`retrain run` with the Tuner in the pipeline and a search forced (`tuning.force`)."""
    args.assignments = [*args.assignments, "tuning.enabled=true", "tuning.force=true"]
    if args.trials is not None:
        args.assignments.append(f"tuning.max_trials={args.trials}")
    if args.trial_steps is not None:
        args.assignments.append(f"tuning.trial_steps={args.trial_steps}")
    return cmd_run(args)


def compile_template(config_path: str, out: str) -> dict:
    """Writes the DAG template of a pipeline config (what `retrain compile` does); returns it."""
    from airflow_tfx import compiled_dag as dag_template
    from core import spans
    from pipelines import config as config_lib
    from pipelines.factory import NODE_STAGES
    from runner import runs

    config = config_lib.load(config_path)
    # Any span gives the same nodes and edges; the latest one keeps it a real, valid span.
    ir = runs.compile_for_span(config, spans.list_spans(config.data_root)[-1])
    template = dag_template.from_ir(ir, config_path, NODE_STAGES, {
        "metadata": config.metadata, "airflow": dict(config.airflow), "alerts": dict(config.alerts),
        "rollout": {"mode": config.rollout_settings.mode, "approval": config.rollout_settings.approval},
        # Where the span-arrival check looks (the DAG's RETRAIN_DATA_ROOT_<PIPELINE> wins).
        "data": {"root": dag_template.repo_relative(config.data_root), "format": config.example_format},
    })
    dag_template.write(template, out)
    return template


def cmd_compile(args) -> int:
    template = compile_template(args.config, args.out)
    sys.stdout.write(f"wrote {args.out}: {len(template['nodes'])} nodes, fingerprint {template['fingerprint'][:12]}\n")
    return exit_codes.OK


def cmd_prepare_run(args) -> int:
    from runner import runs

    config = _load(args)
    logs.configure(sys.stderr)
    try:
        prepared = runs.prepare(config, args.run_id, args.expect, options.say(), *options.progress(sys.stderr))
    except (runs.StaleTemplate, runs.BackfillError) as e:
        sys.stderr.write(f"retrain prepare-run: {e}\n")
        return exit_codes.FAILED
    sys.stdout.write(json.dumps(prepared) + "\n")
    return exit_codes.OK


def cmd_node_run(args) -> int:
    from runner import runs

    folder = options.run_folder(args)
    logs.configure(sys.stderr)
    result = runs.run_one_node(folder, args.node_id)  # an unknown node id is bad input (exit 2)
    # The last stdout line is the machine-readable result an orchestrator reads.
    sys.stdout.write(results_lib.result_line(result) + "\n")
    if result.status != results_lib.FAILED:
        return exit_codes.OK
    if result.approval_pending:
        return exit_codes.AWAITING_APPROVAL
    return exit_codes.GATE_STOPPED if result.gate_stopped else exit_codes.FAILED


def cmd_summary(args) -> int:
    # TensorFlow's warnings are not the summary (library noise is filtered in core/noise.py).
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from core import run_folder
    from runner import runs

    folder = options.run_folder(args)
    info = run_folder.read_info(folder)
    if args.finish:
        runs.finish_claim(info)
    summary = runs.summarize(folder)
    html = os.path.join(layout.report_dir(info["pipeline_root"], info["run_id"]), layout.REPORT_HTML)
    summary["report"] = html if os.path.exists(html) else None
    _print_summary(summary, args.json)
    if args.outcome_line:
        # For the orchestrator (the run_summary task's XCom, alerts on a refused candidate).
        sys.stdout.write(json.dumps({k: summary.get(k) for k in outcomes.OUTCOME_LINE_KEYS}, default=str) + "\n")
    return outcomes.exit_code(summary["outcome"])


def cmd_wait(args) -> int:
    from core import run_folder
    from runner import runs, span_ledger

    info = run_folder.read_info(options.run_folder(args))
    node = {v: k for k, v in span_ledger.WAIT_BEFORE.items()}[args.what]
    try:
        runs.wait_before_node(info, node, options.say(), timeout_s=args.timeout)
    except span_ledger.WaitTimeout as e:
        sys.stdout.write(f"not yet: {e}\n")
        return exit_codes.NOT_YET
    sys.stdout.write(f"ready: span {info['span']} {args.what}\n")
    return exit_codes.OK


def cmd_metadata(args) -> int:
    from core import metadata

    config = options.load_config(args.config, workdir=args.workdir)
    where = config.metadata_store
    store = metadata.open_store(where)  # creates the schema on first use
    if args.metadata_command == "init":
        sys.stdout.write(f"ML Metadata ready at {where.url}\n")
        return exit_codes.OK
    from runner import span_ledger

    if args.metadata_command == "release":
        from core import spans

        try:
            closed = span_ledger.release(store, config.pipeline_name, spans.parse_span(args.span))
        except (LookupError, spans.SpanError) as e:
            raise BadInput(str(e)) from e
        sys.stdout.write(f"closed: {closed.describe()}\n")
        return exit_codes.OK
    rows = sorted(span_ledger.claims(store, config.pipeline_name).values(), key=lambda c: c.span)
    if args.json:
        sys.stdout.write(json.dumps([c.__dict__ for c in rows], indent=2) + "\n")
    else:
        for c in rows:
            sys.stdout.write(f"{c.span}  attempt {c.attempt}  {c.kind:<8} {c.phase:<8} gate={c.gate or '-':<7} "
                             f"{'open' if c.active else 'closed':<6} run {c.owner}  {c.updated_at}\n")
    return exit_codes.OK


COMMANDS = {"run": cmd_run, "tune": cmd_tune, "compile": cmd_compile, "prepare-run": cmd_prepare_run, "node": cmd_node_run,
            "wait": cmd_wait, "summary": cmd_summary, "metadata": cmd_metadata}
