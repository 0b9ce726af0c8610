"""`retrain new` (a pipeline of your own from a folder of spans), `retrain sample-spans`
(monthly spans of a dataset bundled with scikit-learn, to try it on) and `retrain
scale-spans` (taxi-like months of any size, for runs at real volumes)."""

from __future__ import annotations

import argparse
import os
import sys

from core import exit_codes, tasks
from retrain import options


def add_parsers(sub) -> None:
    new = sub.add_parser(
        "new", help="generate a pipeline (schema, features, preprocessing, model, config, DAG) from a folder of spans")
    new.add_argument("name", help="pipeline name: a Python package name (pipelines/NAME, dags/NAME_retraining.py)")
    new.add_argument("--data", required=True, help="folder of span-YYYYMM/ sub-folders (*.csv or *.tfrecord.gz)")
    new.add_argument("--label", required=True, help="the column to predict")
    new.add_argument("--task", choices=tasks.TASKS, help="default: from the label's values")
    new.add_argument("--force", action="store_true", help="replace an existing pipeline of that name")

    sample = sub.add_parser("sample-spans", help="write monthly CSV spans of a dataset that ships with scikit-learn")
    from runner import datasets

    sample.add_argument("--dataset", required=True, choices=sorted(datasets.DATASETS))
    sample.add_argument("--out", required=True, help="folder to write span-YYYYMM/data.csv into")
    sample.add_argument("--first-span", default=str(datasets.FIRST_SPAN), help="YYYYMM")
    sample.add_argument("--spans", type=int, default=datasets.NUM_SPANS, help="how many monthly spans")

    scale = sub.add_parser("scale-spans", help="write taxi-like monthly spans of N rows, resampled from the embedded data")
    scale.add_argument("--rows", type=int, required=True, help="rows per span, e.g. 10000000")
    scale.add_argument("--span", dest="span_list", default="201612", help="YYYYMM, or several, comma-separated")
    scale.add_argument("--out", required=True, help="folder to write span-YYYYMM/data.csv into")
    scale.add_argument("--seed", type=int, default=0)


def cmd_new(args: argparse.Namespace) -> int:
    from retrain.run_commands import compile_template
    from runner import scaffold

    say = options.say()
    plan = scaffold.plan(options.REPO, args.name, args.data, args.label, args.task, args.force, progress=say)
    say(f"task: {plan.task} ({plan.task_reason})")
    say(f"features: {len(plan.numeric)} z-scored, {len(plan.bucket)} bucketized, {len(plan.categorical)} one-hot codes,"
        f" {len(plan.vocab)} vocabularies" + (f"; left out: {', '.join(plan.left_out)}" if plan.left_out else ""))
    found = plan.span_consistency
    say("event time: " + (f"{found['event_time']['feature']} ({found['event_time']['unit']}, assumed UTC)"
                          + (", derived: " + ", ".join(f"{c} ({k})" for c, k in found["derived"].items())
                             if found["derived"] else "")
                          if found else "none found (span_consistency is left for you to declare)"))
    if plan.identifiers:
        say(f"feature policy: {', '.join(plan.identifiers)} look like personal data or identifiers: forbidden in the"
            f" model and dropped from request logs (schemas/{plan.name}/feature_policy.yaml: review it)")
    advice = plan.eval_size.advice()
    if advice:
        say(f"warning: {advice}")
    written = scaffold.write(plan, compile_template, progress=say)
    for rel in written:
        sys.stdout.write(f"wrote {rel}\n")
    config = os.path.join("pipelines", plan.name, "config.yaml")
    sys.stdout.write(
        "\nNext:\n"
        f"  retrain run --config {config}   # train, evaluate, check and push the latest span\n"
        f"  retrain serve --config {config}   # TF Serving's REST and gRPC APIs on the pushed model\n"
        f"  edit pipelines/{plan.name}/features.py, model.py and the thresholds in {config}; then `make compile`\n"
        f"  Airflow: `make airflow` picks up dags/{plan.name}_retraining.py (DAG {plan.name}_retraining)\n"
    )
    return exit_codes.OK


def cmd_sample_spans(args: argparse.Namespace) -> int:
    from core import spans
    from runner import datasets

    counts = datasets.write_spans(args.dataset, args.out, spans.parse_span(args.first_span), args.spans)
    for span, rows in counts.items():
        sys.stdout.write(f"{spans.span_dir(args.out, span)}\t{rows} rows\n")
    return exit_codes.OK


def cmd_scale_spans(args: argparse.Namespace) -> int:
    from core import spans
    from runner import scale_spans

    say = options.say()
    targets = [spans.parse_span(s) for s in args.span_list.split(",") if s.strip()]

    def progress(span: int, done: int, total: int) -> None:
        say(f"span {span}: {done:,}/{total:,} rows")

    counts = scale_spans.write_spans(args.out, targets, args.rows, seed=args.seed, progress=progress)
    for span, rows in counts.items():
        path = os.path.join(spans.span_dir(args.out, span), "data.csv")
        sys.stdout.write(f"{path}\t{rows} rows\t{os.path.getsize(path):,} bytes\n")
    return exit_codes.OK


COMMANDS = {"new": cmd_new, "sample-spans": cmd_sample_spans, "scale-spans": cmd_scale_spans}
