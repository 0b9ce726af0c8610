"""`retrain report`, `retrain models`, `retrain view`, `retrain lineage`, `retrain approve`, `retrain scorecard`,
`retrain attest`: governance in the CLI."""

from __future__ import annotations

import argparse
import json
import os
import sys

from core import exit_codes, layout
from core.errors import BadInput
from retrain import options


def add_parsers(sub) -> None:
    rep = sub.add_parser("report", help="write a run's governance report (HTML + JSON) from ML Metadata")
    options.add_run_dir_options(rep)

    models = sub.add_parser("models", help="every candidate model: run, span, metrics, blessed, pushed, served")
    models.add_argument("--config", default=options.DEFAULT_CONFIG)
    models.add_argument("--workdir", default="work")
    models.add_argument("--model", help="model name (default: the config's)")
    models.add_argument("--json", action="store_true")

    card = sub.add_parser("scorecard", help="the ML Test Score's 28 tests, each from this pipeline's run records:"
                                            " automated (passing or failing), manual or missing; section sums, score")
    card.add_argument("--pipeline", default="taxi", help="pipelines/<PIPELINE>/config.yaml (default taxi)")
    card.add_argument("--config", help="a config file instead of --pipeline's")
    card.add_argument("--workdir", default="work")
    card.add_argument("--json", action="store_true")
    card.add_argument("--explain", metavar="TEST", help="how to re-derive one test by hand from its evidence"
                                                        " (SECTION.NUMBER, e.g. data.5)")

    att = sub.add_parser("attest", help="record that a scorecard test done by hand was done (who, the evidence, until"
                                        " when) in ML Metadata; or list the attestations (--list)")
    att.add_argument("--pipeline", default="taxi", help="pipelines/<PIPELINE>/config.yaml (default taxi)")
    att.add_argument("--config", help="a config file instead of --pipeline's")
    att.add_argument("--workdir", default="work")
    att.add_argument("--test", help="the test: data.6, data.7, infrastructure.2, infrastructure.5 or infrastructure.7")
    att.add_argument("--by", help="who attests (a person's name)")
    att.add_argument("--evidence", help="an http(s) URL or a file (its SHA-256 is kept: a changed file voids it)")
    att.add_argument("--expires", help="YYYY-MM-DD, after today, at most a year ahead")
    att.add_argument("--note", default="")
    att.add_argument("--list", action="store_true", help="every attestation, its age and whether it counts")

    view = sub.add_parser("view", help="what the Models view in Airflow shows for a pipeline (JSON): serving, "
                                       "spans, versions, alerts, quarantine")
    view.add_argument("--pipeline", action="append", required=True, help="repeatable")
    view.add_argument("--workdir", default="work")

    lin = sub.add_parser("lineage", help="the chain from data spans to a pushed version")
    lin.add_argument("model")
    lin.add_argument("version", type=int)
    lin.add_argument("--config", help="default: pipelines/<model>/config.yaml")
    lin.add_argument("--workdir", default="work")

    app = sub.add_parser("approve", help="record a reviewer's decision on a candidate before it is pushed")
    app.add_argument("--config", default=options.DEFAULT_CONFIG)
    app.add_argument("--workdir", default="work")
    app.add_argument("--model-id", type=int, help="the candidate's MLMD model id (see the awaiting-approval message)")
    app.add_argument("--pipeline", help="with --run-id: find the candidate of an orchestrated run")
    app.add_argument("--run-id")
    app.add_argument("--decision", required=True, help="approve or reject (Airflow's Approve/Reject too)")
    app.add_argument("--reviewer", required=True)
    app.add_argument("--comment", default="")
    app.add_argument("--source", default="cli")


def cmd_report(args: argparse.Namespace) -> int:
    from core import run_folder
    from runner import runs

    folder = options.run_folder(args)
    # The pipeline's config (signing key, model card): the shipped one of the run's pipeline,
    # as the Airflow tasks use it, with the run's workdir.
    info = run_folder.read_info(folder)
    pipeline = args.pipeline or info.get("pipeline")
    config = None
    if pipeline and os.path.exists(options.pipeline_config_path(pipeline)):
        workdir = args.workdir or os.path.dirname(os.path.dirname(info["pipeline_root"]))  # <workdir>/pipeline_root/<name>
        config = options.load_config(options.pipeline_config_path(pipeline), workdir=workdir)
    try:
        written = runs.write_report(folder, config)
    except LookupError as e:
        sys.stderr.write(f"retrain report: {e}\n")
        return exit_codes.FAILED
    sys.stderr.write(f"outcome {written['report']['outcome']}\n")
    sys.stdout.write(f"REPORT {json.dumps({'html': written['html'], 'json': written['json'], 'with_model': written.get('with_model')})}\n")
    return exit_codes.OK


def _store(config):
    from core import metadata

    return metadata.open_store(config.metadata_store, readonly=True)


def cmd_models(args: argparse.Namespace) -> int:
    from governance import registry

    config = options.load_config(args.config, workdir=args.workdir)
    rows = registry.candidates(_store(config), config.pipeline_name, config.pipeline_root, config.workdir,
                               args.model or config.model_name)
    index = registry.write_index(rows, config.pipeline_name, config.pipeline_root)
    if args.json:
        sys.stdout.write(json.dumps({"index": index, "models": rows}, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(registry.format_table(rows) + f"\n\nindex: {index}\n")
    return exit_codes.OK


def cmd_view(args: argparse.Namespace) -> int:
    from governance import models_view

    views = {}
    for pipeline in args.pipeline:
        if not os.path.exists(options.pipeline_config_path(pipeline)):
            raise BadInput(f"no pipeline {pipeline!r}: {options.pipeline_config_path(pipeline)} does not exist")
        views[pipeline] = models_view.pipeline_view(options.load_config(options.pipeline_config_path(pipeline),
                                                                        workdir=args.workdir))
    sys.stdout.write(models_view.to_json(views) + "\n")
    return exit_codes.OK


def cmd_lineage(args: argparse.Namespace) -> int:
    from governance import registry

    config = options.load_config(args.config or options.pipeline_config_path(args.model), workdir=args.workdir)
    try:
        lines = registry.chain(_store(config), args.version)
    except LookupError as e:
        raise BadInput(str(e)) from e
    sys.stdout.write("\n".join(lines) + "\n")
    return exit_codes.OK


def cmd_approve(args: argparse.Namespace) -> int:
    from governance import approval

    config = options.load_config(args.config, workdir=args.workdir)
    model_id = args.model_id
    if model_id is None:
        if not (args.pipeline and args.run_id):
            raise BadInput("give --model-id, or --pipeline and --run-id")
        from core import nodes, run_folder

        trainer = run_folder.read_result(layout.run_dir(config.workdir, args.pipeline, args.run_id), nodes.TRAINER)
        if not trainer.outputs.get("model"):
            raise BadInput(f"run {args.run_id}'s Trainer produced no model ({trainer.status}): nothing to approve")
        model_id = trainer.outputs["model"][0]["id"]
    try:
        entry = approval.record(config.pipeline_root, model_id, args.decision, args.reviewer, args.comment, args.source)
    except ValueError as e:
        raise BadInput(str(e)) from e
    sys.stdout.write(f"model {model_id}: {entry['decision']} by {entry['reviewer']} recorded\n")
    return exit_codes.OK


def _pipeline_config(args):
    path = args.config or options.pipeline_config_path(args.pipeline)
    if not os.path.exists(path):
        raise BadInput(f"no pipeline {args.pipeline!r}: {path} does not exist")
    return options.load_config(path, workdir=args.workdir)


def cmd_scorecard(args: argparse.Namespace) -> int:
    from governance import scorecard

    config = _pipeline_config(args)
    store = _store(config) if config.metadata_store.exists() else None
    card = scorecard.compute(scorecard.read_reports(config.pipeline_root), scorecard.context(config, store))
    if args.explain:
        try:
            text = scorecard.explain(card, args.explain)
        except KeyError as e:
            raise BadInput(str(e.args[0])) from e
        if args.json:
            text = json.dumps(scorecard.find(card, args.explain), indent=2, default=str)
        sys.stdout.write(text + "\n")
    elif args.json:
        sys.stdout.write(json.dumps(card, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(scorecard.format_text(card) + "\n")
    return exit_codes.OK


def cmd_attest(args: argparse.Namespace) -> int:
    import datetime as dt

    from core import metadata
    from governance import attestation

    config = _pipeline_config(args)
    now = dt.datetime.now(dt.timezone.utc)
    if args.list:
        found = attestation.read(_store(config), config.pipeline_name) if config.metadata_store.exists() else []
        sys.stdout.write(attestation.format_list(found, now) + "\n")
        return exit_codes.OK
    missing = [f"--{k}" for k in ("test", "by", "evidence", "expires") if not getattr(args, k)]
    if missing:
        raise BadInput(f"{', '.join(missing)} required (or --list)")
    try:
        entry = attestation.entry(args.test, args.by, args.evidence, args.expires, args.note, now)
    except attestation.AttestationError as e:
        raise BadInput(str(e)) from e
    execution_id = attestation.record(metadata.open_store(config.metadata_store), config.pipeline_name, entry)
    sys.stdout.write(f"{entry['test']}: attested by {entry['by']} until {entry['expires']} (ML Metadata execution"
                     f" {execution_id}); evidence {entry['evidence']}"
                     + (f" sha256 {entry['evidence_sha256']}" if entry["evidence_sha256"] else "") + "\n")
    return exit_codes.OK


COMMANDS = {"scorecard": cmd_scorecard, "attest": cmd_attest, "report": cmd_report, "models": cmd_models, "view": cmd_view, "lineage": cmd_lineage, "approve": cmd_approve}
