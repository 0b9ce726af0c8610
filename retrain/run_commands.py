"""`retrain run`, `compile`, `prepare-run`, `node run`, `summary`: running the pipeline.

Argument handling and printing only; the work is in `runner.runs`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import sys
import warnings

from core import exit_codes, layout, logs
from core import outcome as outcomes
from core import results as results_lib
from retrain import options


def add_parsers(sub) -> None:
    run = sub.add_parser("run", help="run the pipeline for one span with the local runner")
    options.add_run_options(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")

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

    summ = sub.add_parser("summary", help="the summary of a prepared run")
    options.add_run_dir_options(summ)
    summ.add_argument("--json", action="store_true")


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


def cmd_compile(args) -> int:
    from airflow_tfx import template as dag_template
    from core import spans
    from pipelines import config as config_lib
    from pipelines.factory import NODE_STAGES
    from runner import runs

    config = config_lib.load(args.config)
    # Any span gives the same nodes and edges; the latest one keeps it a real, valid span.
    ir = runs.compile_for_span(config, spans.list_spans(config.data_root)[-1])
    template = dag_template.from_ir(ir, args.config, NODE_STAGES)
    dag_template.write(template, args.out)
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
    # Library import chatter (Google client deprecation notes, TF warnings) is not the summary.
    warnings.simplefilter("ignore", FutureWarning)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from core import run_folder
    from runner import runs

    folder = options.run_folder(args)
    summary = runs.summarize(folder)
    info = run_folder.read_info(folder)
    html = os.path.join(layout.report_dir(info["pipeline_root"], info["run_id"]), layout.REPORT_HTML)
    summary["report"] = html if os.path.exists(html) else None
    _print_summary(summary, args.json)
    return outcomes.exit_code(summary["outcome"])


COMMANDS = {"run": cmd_run, "compile": cmd_compile, "prepare-run": cmd_prepare_run, "node": cmd_node_run,
            "summary": cmd_summary}
