"""`retrain schema infer|calibrate`, `retrain spans`, `retrain quarantine`: the data side."""

from __future__ import annotations

import argparse
import sys

from core import exit_codes
from core.errors import BadInput
from retrain import options


def add_parsers(sub) -> None:
    schema = sub.add_parser("schema", help="schema bootstrap and data-gate calibration")
    schema_sub = schema.add_subparsers(dest="schema_command", required=True)
    infer = schema_sub.add_parser("infer", help="infer a schema from spans, to curate and check in")
    infer.add_argument("--config", default=options.DEFAULT_CONFIG)
    infer.add_argument("--data-root", dest="data_root")
    infer.add_argument("--spans", help="FIRST..LAST (default: all)")
    infer.add_argument("--out", required=True, help="where to write schema.pbtxt")
    infer.add_argument("--force", action="store_true", help="overwrite an existing file")
    infer.add_argument("--label", help="the label column: kept out of the SERVING environment (requests have no label)")
    cal = schema_sub.add_parser(
        "calibrate", help="set the data gate's limits from the month-to-month history of the spans"
    )
    cal.add_argument("--config", default=options.DEFAULT_CONFIG)
    cal.add_argument("--data-root", dest="data_root")
    cal.add_argument("--spans", help="FIRST..LAST (default: all)")
    cal.add_argument("--out", help="gate policy to write (default: the config's gate_policy)")
    cal.add_argument("--margin", type=float, default=None, help="limit = margin x largest observed (default 1.5)")
    cal.add_argument("--workdir", help="skip spans quarantined in this workdir's ML Metadata")

    ls = sub.add_parser("spans", help="list the spans of the data folder, with quarantine decisions")
    ls.add_argument("--config", default=options.DEFAULT_CONFIG)
    ls.add_argument("--data-root", dest="data_root")
    ls.add_argument("--workdir", default="work", help="where ML Metadata records quarantines")

    qua = sub.add_parser("quarantine", help="take a span out of training windows (recorded in ML Metadata), or --release it")
    qua.add_argument("--pipeline", help="pipeline name: uses pipelines/<name>/config.yaml")
    qua.add_argument("--config", help="pipeline config (instead of --pipeline)")
    qua.add_argument("--workdir", default="work")
    qua.add_argument("--span", required=True, help="YYYYMM")
    qua.add_argument("--reason", required=True, help="why: what a reviewer reads later")
    qua.add_argument("--by", help="who decides (default: the login name)")
    qua.add_argument("--release", action="store_true", help="undo an earlier quarantine")


def _chosen_spans(root: str, wanted: str | None) -> list[int]:
    """The spans under `root` within `FIRST..LAST` (all when None).

    Raises:
      spans.SpanError: a malformed range, or no span within it.
    """
    from core import spans

    available = spans.list_spans(root)
    if not wanted:
        return available
    lo, _, hi = wanted.partition("..")
    lo, hi = spans.parse_span(lo), spans.parse_span(hi or lo)
    chosen = [s for s in available if lo <= s <= hi]
    if not chosen:
        raise spans.SpanError(f"no spans within {wanted} under {root}")
    return chosen


def cmd_schema(args: argparse.Namespace) -> int:
    return cmd_schema_calibrate(args) if args.schema_command == "calibrate" else cmd_schema_infer(args)


def cmd_schema_infer(args: argparse.Namespace) -> int:
    from runner import schema_tools

    config = options.load_config(args.config, data_root=args.data_root)
    root = config.data_root
    chosen = _chosen_spans(root, args.spans)
    sys.stderr.write(f"inferring a schema from {len(chosen)} span(s) {chosen[0]}..{chosen[-1]}\n")
    try:
        # The spans as the config's ExampleGen reads them (CSV, Parquet or TFRecords).
        path = schema_tools.infer_schema(root, chosen, args.out, force=args.force, label=args.label,
                                         example_format=config.example_format)
    except FileExistsError as e:
        raise BadInput(str(e)) from e
    sys.stdout.write(f"wrote {path}: curate it (domains, presence limits) before checking it in\n")
    return exit_codes.OK


def cmd_schema_calibrate(args: argparse.Namespace) -> int:
    from pipelines import config as config_lib
    from runner import schema_tools

    config = options.load_config(args.config, data_root=args.data_root)
    out = args.out or config.gate_policy
    if not out:
        raise config_lib.ConfigError(f"{args.config} names no gate_policy file; pass --out schemas/<pipeline>/gate.yaml")
    chosen = _chosen_spans(config.data_root, args.spans)
    try:
        written = schema_tools.calibrate_gate(config, chosen, out, margin=args.margin, workdir=args.workdir,
                                              progress=options.say())
    except ValueError as e:  # a margin or policy the calibration cannot use
        raise BadInput(str(e)) from e
    sys.stdout.write(
        f"wrote {written['policy']} ({written['features']} features watched, {written['opt_out']} opted out,"
        f" {written['pairs']} month pairs) and {written['table']}: review the change, then commit both\n"
    )
    return exit_codes.OK


def cmd_spans(args: argparse.Namespace) -> int:
    from core import spans
    from governance import quarantine

    config = options.load_config(args.config, workdir=args.workdir, data_root=args.data_root)
    held = quarantine.quarantined_spans(config.metadata_store, config.pipeline_name)
    for s in spans.list_spans(config.data_root):
        note = ""
        if s in held:
            d = held[s]
            note = f"\tQUARANTINED by {d['decided_by']} at {d['decided_at']}: {d['reason']}"
        sys.stdout.write(f"{s}\t{spans.span_dir(config.data_root, s)}{note}\n")
    return exit_codes.OK


def cmd_quarantine(args: argparse.Namespace) -> int:
    from core import spans
    from governance import quarantine

    if not (args.config or args.pipeline):
        raise BadInput("give --pipeline NAME or --config FILE")
    config = options.load_config(args.config or options.pipeline_config_path(args.pipeline), workdir=args.workdir)
    span = spans.parse_span(args.span)
    action = quarantine.RELEASE if args.release else quarantine.QUARANTINE
    try:
        decision = quarantine.record(config.metadata_store, config.pipeline_name, span, action, args.reason, args.by)
    except ValueError as e:
        raise BadInput(str(e)) from e
    effect = ("left out of every training window and drift baseline from now on" if action == quarantine.QUARANTINE
              else "back in training windows from the next run on")
    sys.stdout.write(
        f"span {span} of {config.pipeline_name}: {action} by {decision['decided_by']} at {decision['decided_at']}"
        f" (MLMD execution {decision['id']}): {effect}\n"
    )
    return exit_codes.OK


COMMANDS = {"schema": cmd_schema, "spans": cmd_spans, "quarantine": cmd_quarantine}
