"""`retrain rollout status | decide | promote | rollback | simulate`: canary rollouts in the CLI.

The controller lives in `rollout/`; this module only parses and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from core import airflow_settings, exit_codes
from core.errors import BadInput
from retrain import options


def add_parsers(sub) -> None:
    ro = sub.add_parser("rollout", help="the canary under test: status, decide, promote, rollback, simulate")
    actions = ro.add_subparsers(dest="rollout_command", required=True)
    for name, text in (("status", "what serves, the canary under test and its live metrics so far"),
                       ("decide", "join the feedback, run the test, and promote, roll back or continue"),
                       ("promote", "make the canary stable now (a person's decision, recorded)"),
                       ("rollback", "take the canary's label away now (a person's decision, recorded)"),
                       ("simulate", "send a span's examples to a local server as keyed requests, write their labels")):
        p = actions.add_parser(name, help=text)
        p.add_argument("--config", default=options.DEFAULT_CONFIG)
        p.add_argument("--workdir", default="work")
        if name in ("status", "decide", "promote", "rollback"):
            p.add_argument("--json", action="store_true")
        if name in ("promote", "rollback"):
            p.add_argument("--reason", required=True, help="recorded in MLMD and the model's history")
        if name == "decide":
            p.add_argument("--dry-run", action="store_true", help="measure and print; change nothing")
            p.add_argument("--review", choices=REVIEW_CHOICES,
                           help="a person's answer to the proposed decision (Airflow's HITL prompt): apply it, veto "
                                "it (recorded, nothing changes), or force the other outcome")
            p.add_argument("--reviewer", help="who answered (--review)")
        if name == "simulate":
            p.add_argument("--url", default="http://127.0.0.1:8501", help="a server on this machine")
            p.add_argument("--span", required=True, help="whose examples are sent and whose labels are written")
            p.add_argument("--requests", type=int, default=2000)
            p.add_argument("--key-prefix", help="default: sim-<span>-<time>")
            p.add_argument("--delay-hours", type=float, default=1.0, help="when the labels are said to be known")


REVIEW_CHOICES = airflow_settings.ROLLOUT_REVIEW_OPTIONS


def _context(args):
    config = options.load_config(args.config, workdir=args.workdir)
    return config, config.rollout_settings


def _print(decision, as_json: bool) -> None:
    if as_json:  # one line: the Airflow task hands the last JSON line to XCom
        sys.stdout.write(json.dumps(decision.to_dict(), sort_keys=True) + "\n")
        return
    live = decision.live
    lines = [f"{decision.model}: {decision.action}{' (applied)' if decision.applied else ''} -- {decision.reason}"]
    for role in ("stable", "canary"):
        values = live[role]
        metric = values.get(decision.metric) or {}
        delay = values.get("label_delay_s") or {}
        lines.append(f"  {role:<6} version {values['version']}: {values['labelled']} labelled, {decision.metric} "
                     f"{_num(metric.get('value'))} [{_num(metric.get('low'))}, {_num(metric.get('high'))}]"
                     + (f", label delay p50 {delay['p50'] / 3600:.1f} h" if delay else ""))
    skipped = {k: v for k, v in decision.counts.items() if k not in ("labels", "logged_examples") and v}
    if skipped:
        lines.append("  not joined: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    lines += _evidence_lines(decision)
    lines += [f"  {e}" for e in decision.rejected[:5]]
    lines += [f"  ALERT {a}" for a in decision.alerts]
    sys.stdout.write("\n".join(lines) + "\n")


def _evidence_lines(decision) -> list[str]:
    """Maturity, the sample-ratio check and the requests tallied apart, one line each."""
    lines = []
    mature = decision.maturity or {}
    if mature:
        horizon, share = mature.get("horizon_s"), f"{100 * mature['quantile']:g}%"
        if horizon is None:
            lines.append(f"  compared: nothing yet (no age of split-routed requests is {share} labelled in both arms)")
        else:
            lines.append(f"  compared: labels of split-routed requests older than {horizon / 3600:.1f} h (the age by "
                         f"which {share} are labelled in each arm)")
    ratio = decision.srm or {}
    if ratio.get("judged"):
        lines.append(f"  split: canary {ratio['canary_requests']} of {ratio['canary_requests'] + ratio['stable_requests']}"
                     f" requests ({100 * ratio['realised_share']:.2f}%, share {100 * ratio['canary_share']:g}%), "
                     f"sample-ratio p = {ratio['p_value']:.2g}" + (" MISMATCH" if ratio["mismatch"] else ""))
    apart = {route: arms for route, arms in (decision.routing or {}).items()
             if route not in ("split", "compared") and arms}
    if apart:
        parts = []
        for route, arms in sorted(apart.items()):
            parts.append(route + " " + ", ".join(f"{arm} {n['requests']}" for arm, n in arms.items()))
        lines.append("  not compared (requests): " + "; ".join(parts))
    return lines


def _num(value) -> str:
    return "?" if value is None or value != value else f"{value:.4f}"


def cmd_rollout(args: argparse.Namespace) -> int:
    from core import metadata
    from rollout import controller, feedback

    config, settings = _context(args)
    command = args.rollout_command
    if command == "simulate":
        return _simulate(args, config)
    if command == "status":
        state = controller.status(config.workdir, config.model_name)
        where = config.metadata_store
        state["decisions"] = (controller.decisions(metadata.open_store(where, readonly=True), config.model_name)[-5:]
                              if where.exists() else [])
        try:
            decision = controller.measure(config.workdir, config.model_name, config.task, settings)
        except feedback.FeedbackError as e:
            raise BadInput(str(e)) from e
        if args.json:
            sys.stdout.write(json.dumps({**state, "decision": decision.to_dict() if decision else None},
                                        indent=2, sort_keys=True, default=str) + "\n")
            return exit_codes.OK
        labels = ", ".join(f"{k} {v}" for k, v in sorted(state["labels"].items())) or "no labels (latest version)"
        sys.stdout.write(f"{config.model_name}: {labels}\n")
        if decision is None:
            sys.stdout.write("no canary under test\n")
        else:
            _print(decision, False)
        for past in state["decisions"]:
            sys.stdout.write(f"  decided {past['decided_at']} by {past['decided_by']}: {past['action']} canary "
                             f"{past['canary_version']} (stable {past['stable_version']}): {past['reason']}\n")
        return exit_codes.OK
    if command == "decide" and not args.dry_run:
        apply_retention(config)
    try:
        decision = controller.measure(config.workdir, config.model_name, config.task, settings)
    except feedback.FeedbackError as e:
        raise BadInput(str(e)) from e
    if decision is None:
        if command != "decide":
            raise BadInput(f"{config.model_name}: no canary is under test")
        nothing = {"model": config.model_name, "action": "none", "reason": "no canary is under test"}
        sys.stdout.write((json.dumps(nothing) if args.json else f"{config.model_name}: no canary is under test") + "\n")
        return exit_codes.OK
    proposals_need_a_person = (command == "decide" and settings.approval == "required" and not args.review
                               and decision.action in ("promote", "rollback"))
    if command == "decide" and (args.dry_run or proposals_need_a_person):
        _print(decision, args.json)  # a proposal: the Airflow prompt (or a person) decides
        return exit_codes.OK
    by = controller.user() if command in ("promote", "rollback") else "controller"
    if command == "decide" and args.review:
        by = args.reviewer or controller.user()
        proposed = decision.action
        if args.review == "Veto":
            decision.action = "continue"
            decision.reason = f"vetoed by {by} (proposed: {proposed}): {decision.reason}"
        elif args.review.startswith("Force"):
            decision.action = "promote" if args.review == "Force promote" else "rollback"
            decision.reason = f"{decision.action} forced by {by} (proposed: {proposed}): {decision.reason}"
        elif proposed == "inconclusive":
            decision.reason = f"kept holding by {by} (inconclusive): {decision.reason}"
        else:
            decision.reason = f"{proposed} approved by {by}: {decision.reason}"
    if command in ("promote", "rollback"):
        decision.action = command
        decision.reason = f"{command} by {by}: {args.reason.strip()} (evidence then: {decision.reason})"
        if not args.reason.strip():
            raise BadInput("a reason is required: it is what a reviewer reads later")
    store = metadata.open_store(config.metadata_store)
    controller.apply(config.workdir, decision, store, by=by)
    from runner import rollout_reports

    rollout_reports.refresh(config, (decision.canary, decision.stable), log=lambda m: sys.stderr.write(m + "\n"))
    _print(decision, args.json)
    return exit_codes.OK


def apply_retention(config) -> list[str]:
    """The pipeline's retention period on its feedback files and request logs (core/retention.py)."""
    from core import retention

    days = config.retention_settings.max_age_days
    deleted = retention.apply(config.workdir, config.model_name, days)
    if deleted:
        sys.stderr.write(f"retention: deleted {len(deleted)} file(s) older than {days:g} days; each is listed in"
                         " deletions.jsonl beside it\n")
    return deleted


def _simulate(args, config) -> int:
    import time

    from rollout import simulate
    from runner import rollout_traffic

    examples, labels = rollout_traffic.span_examples_and_labels(config, args.span, args.requests)
    prefix = args.key_prefix or f"sim-{args.span}-{int(time.time())}"
    sys.stderr.write(f"sending {len(examples)} requests of span {args.span} to {args.url} ...\n")
    sent = simulate.replay(args.url, config.model_name, examples, prefix, max_seconds=600)
    from core import layout

    path = simulate.write_feedback(layout.feedback_dir(config.workdir, config.model_name), prefix, sent.keys,
                                   labels[: len(sent.keys)], delay_seconds=args.delay_hours * 3600)
    sys.stdout.write(f"{sent.sent} answered, {sent.failed} failed in {sent.seconds:.1f} s; labels in {path}\n")
    for error in sent.errors:
        sys.stdout.write(f"  {error}\n")
    return exit_codes.OK if not sent.failed else exit_codes.FAILED


COMMANDS = {"rollout": cmd_rollout}
