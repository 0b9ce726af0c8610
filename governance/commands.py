"""`retrain report`, `retrain models`, `retrain lineage`, `retrain approve`: governance in the CLI."""

from __future__ import annotations

import argparse
import json
import os
import sys

from retrain import exit_codes


def add_parsers(sub, default_config: str, add_run_dir_options) -> None:
    rep = sub.add_parser("report", help="write a run's governance report (HTML + JSON) from ML Metadata")
    add_run_dir_options(rep)

    models = sub.add_parser("models", help="every candidate model: run, span, metrics, blessed, pushed, served")
    models.add_argument("--config", default=default_config)
    models.add_argument("--workdir", default="work")
    models.add_argument("--model", help="model name (default: the config's)")
    models.add_argument("--json", action="store_true")

    lin = sub.add_parser("lineage", help="the chain from data spans to a pushed version")
    lin.add_argument("model")
    lin.add_argument("version", type=int)
    lin.add_argument("--config", help="default: pipelines/<model>/config.yaml")
    lin.add_argument("--workdir", default="work")

    app = sub.add_parser("approve", help="record a reviewer's decision on a candidate before it is pushed")
    app.add_argument("--config", default=default_config)
    app.add_argument("--workdir", default="work")
    app.add_argument("--model-id", type=int, help="the candidate's MLMD model id (see the awaiting-approval message)")
    app.add_argument("--pipeline", help="with --run-id: find the candidate of an orchestrated run")
    app.add_argument("--run-id")
    app.add_argument("--decision", required=True, help="approve or reject (Airflow's Approve/Reject too)")
    app.add_argument("--reviewer", required=True)
    app.add_argument("--comment", default="")
    app.add_argument("--source", default="cli")

    qua = sub.add_parser("quarantine", help="take a span out of training windows (recorded in ML Metadata), or --release it")
    qua.add_argument("--pipeline", help="pipeline name: uses pipelines/<name>/config.yaml")
    qua.add_argument("--config", help="pipeline config (instead of --pipeline)")
    qua.add_argument("--workdir", default="work")
    qua.add_argument("--span", required=True, help="YYYYMM")
    qua.add_argument("--reason", required=True, help="why: what a reviewer reads later")
    qua.add_argument("--by", help="who decides (default: the login name)")
    qua.add_argument("--release", action="store_true", help="undo an earlier quarantine")


def _config(path: str, workdir: str):
    from pipelines import config as config_lib

    return config_lib.load(path, {"workdir": os.path.abspath(workdir)})


def cmd_report(args: argparse.Namespace) -> int:
    from governance import report as report_lib
    from retrain import runs
    from retrain.cli import _run_dir
    from retrain.node_runner import read_only_store

    folder = _run_dir(args, "report")
    if folder is None:
        return exit_codes.BAD_INPUT
    info = runs.read_run_info(folder)
    pipeline_root = info.get("pipeline_root") or os.path.join(
        os.path.dirname(os.path.dirname(info["metadata_path"])), "pipeline_root", info["pipeline"])
    try:
        written = report_lib.write(read_only_store(info["metadata_path"]), info["pipeline"], pipeline_root, info["run_id"])
    except LookupError as e:
        sys.stderr.write(f"retrain report: {e}\n")
        return exit_codes.FAILED
    sys.stderr.write(f"outcome {written['report']['outcome']}\n")
    sys.stdout.write(f"REPORT {json.dumps({'html': written['html'], 'json': written['json'], 'with_model': written.get('with_model')})}\n")
    return exit_codes.OK


def cmd_models(args: argparse.Namespace) -> int:
    from governance import registry
    from retrain.node_runner import read_only_store

    config = _config(args.config, args.workdir)
    if not os.path.exists(config.metadata_path):
        sys.stderr.write(f"retrain models: no ML Metadata at {config.metadata_path} (no run yet?)\n")
        return exit_codes.BAD_INPUT
    store = read_only_store(config.metadata_path)
    rows = registry.candidates(store, config.pipeline_name, config.pipeline_root,
                               os.path.dirname(config.serving_model_dir), args.model or config.model_name)
    index = registry.write_index(rows, config.pipeline_name, config.pipeline_root)
    if args.json:
        sys.stdout.write(json.dumps({"index": index, "models": rows}, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(registry.format_table(rows) + f"\n\nindex: {index}\n")
    return exit_codes.OK


def cmd_lineage(args: argparse.Namespace) -> int:
    from governance import registry
    from retrain.node_runner import read_only_store

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = _config(args.config or os.path.join(repo, "pipelines", args.model, "config.yaml"), args.workdir)
    try:
        lines = registry.chain(read_only_store(config.metadata_path), args.version)
    except LookupError as e:
        sys.stderr.write(f"retrain lineage: {e}\n")
        return exit_codes.BAD_INPUT
    sys.stdout.write("\n".join(lines) + "\n")
    return exit_codes.OK


def cmd_approve(args: argparse.Namespace) -> int:
    from governance import approval

    config = _config(args.config, args.workdir)
    model_id = args.model_id
    if model_id is None:
        if not (args.pipeline and args.run_id):
            sys.stderr.write("retrain approve: give --model-id, or --pipeline and --run-id\n")
            return exit_codes.BAD_INPUT
        from retrain import runs

        trainer = os.path.join(runs.run_dir(config.workdir, args.pipeline, args.run_id), "nodes", "Trainer.json")
        if not os.path.exists(trainer):
            sys.stderr.write(f"retrain approve: run {args.run_id} has no Trainer result ({trainer})\n")
            return exit_codes.BAD_INPUT
        with open(trainer, encoding="utf-8") as f:
            model_id = json.load(f)["outputs"]["model"][0]["id"]
    try:
        entry = approval.record(config.pipeline_root, model_id, args.decision, args.reviewer, args.comment, args.source)
    except ValueError as e:
        sys.stderr.write(f"retrain approve: {e}\n")
        return exit_codes.BAD_INPUT
    sys.stdout.write(f"model {model_id}: {entry['decision']} by {entry['reviewer']} recorded\n")
    return exit_codes.OK


def cmd_quarantine(args: argparse.Namespace) -> int:
    from governance import quarantine
    from pipelines import config as config_lib
    from retrain import spans

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not (args.config or args.pipeline):
        sys.stderr.write("retrain quarantine: give --pipeline NAME or --config FILE\n")
        return exit_codes.BAD_INPUT
    path = args.config or os.path.join(repo, "pipelines", args.pipeline, "config.yaml")
    try:
        config = _config(path, args.workdir)
        span = spans.parse_span(args.span)
        action = quarantine.RELEASE if args.release else quarantine.QUARANTINE
        decision = quarantine.record(config.metadata_path, config.pipeline_name, span, action, args.reason, args.by)
    except (config_lib.ConfigError, spans.SpanError, ValueError) as e:
        sys.stderr.write(f"retrain quarantine: {e}\n")
        return exit_codes.BAD_INPUT
    effect = ("left out of every training window and drift baseline from now on" if action == quarantine.QUARANTINE
              else "back in training windows from the next run on")
    sys.stdout.write(
        f"span {span} of {config.pipeline_name}: {action} by {decision['decided_by']} at {decision['decided_at']}"
        f" (MLMD execution {decision['id']}): {effect}\n"
    )
    return exit_codes.OK


COMMANDS = {
    "report": cmd_report, "models": cmd_models, "lineage": cmd_lineage, "approve": cmd_approve,
    "quarantine": cmd_quarantine,
}
