"""The run summary: the terminal's and `--json`'s view of a run's record.

Every value comes from `governance.record.RunRecord` (MLMD and the artifacts nodes wrote),
the same record the governance report and `retrain models` show, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any

from core import tasks
from governance import record as record_lib
from governance.record import RunRecord
from pipelines import beam as beam_lib

_SUMMARY_METRICS = ("example_count", *tasks.ALL_KEY_METRICS)
# Every summary has these keys (None when the run did not get that far).
_SUMMARY_KEYS = (
    "pipeline", "run_id", "span", "backfilled_spans", "nodes", "beam", "rows", "window_spans",
    "data_gate", "serving_skew", "training", "evaluation", "blessed", "serving_check", "pushed", "outcome", "error",
)
_GATE_KEYS = ("passed", "blocking_features", "anomalies", "drift", "completeness", "volume", "opt_out",
              "baseline_span", "report", "domain_opt_out", "no_domain")

_SKEW_KEYS = ("checked", "passed", "action", "skewed_features", "anomalies", "reason", "served_version", "training_span",
              "not_compared",
              "logged_requests", "examples", "report")


def _evaluation(ev: dict | None) -> dict | None:
    if not ev:
        return None
    models: dict[str, dict[str, float]] = {}
    for name, roles in ev["overall"].items():
        if name not in _SUMMARY_METRICS:
            continue
        for role, value in roles.items():
            if role.endswith("_interval"):
                continue
            model, diff = (role[: -len("_diff")], " (diff)") if role.endswith("_diff") else (role, "")
            models.setdefault(model, {})[name + diff] = round(value, 4)
    return {
        "candidate": models.get("candidate", {}),
        "baseline": models.get("baseline"),
        "validation_ok": ev["validation_ok"],
        "failures": [{k: f[k] for k in ("slice", "metric", "message", "value")} for f in ev["failures"]],
        "significance": ev.get("significance"),
        "path": ev.get("path"),
    }


def build_summary(record: RunRecord) -> dict:
    """The summary of one run: a view of its record."""
    gate = record.data_gate
    check = record.serving_check
    push = record.push
    window = record.data.get("window")
    summary: dict[str, Any] = {
        "pipeline": record.pipeline,
        "run_id": record.run_id,
        "span": record.span,
        "backfilled_spans": record.backfilled_spans,
        "nodes": {k: {"status": n.status, "seconds": n.seconds} for k, n in record.nodes.items()},
        "beam": {k: {"profile": v["profile"], "reason": v["reason"],
                     **({"analyzer_cache": v["analyzer_cache"]} if "analyzer_cache" in v else {})}
                 for k, v in record.beam.items()},
        "rows": record.data.get("rows"),
        # Columns the source added, left out of the examples (gate policy columns.new: report).
        "new_columns": record.data.get("new_columns") or None,
        "window_spans": sorted(w["span"] for w in window) if window else None,
        "data_gate": {**{k: gate.get(k) for k in _GATE_KEYS}, "row_checks": record_lib.row_check_list(gate)}
        if gate else None,
        "serving_skew": {k: record.serving_skew.get(k) for k in _SKEW_KEYS} if record.serving_skew else None,
        "training": {k: v for k, v in record.training.items() if k not in ("loss_curve", "final_metrics")} or None
        if record.training else None,
        "evaluation": _evaluation(record.evaluation),
        "blessed": record.blessed,
        "serving_check": {"passed": check["passed"], "reasons": check["reasons"], "latency_ms": check.get("latency_ms"),
                          "performance": check.get("performance"), "report": check["report"]} if check else None,
        "pushed": {"version": push.get("version"), "path": push.get("path"),
                   "already_serving": bool(push.get("already_serving")),
                   "signature": (push.get("signature") or {}).get("digest")} if push.get("pushed") else None,
        "outcome": record.outcome.name,
        "reason": record.outcome.reason,
        # Why the served model is stale (components/evaluator/staleness.py); None when it is not.
        "stale": ((((record.evaluation or {}).get("significance") or {}).get("staleness") or {}).get("alerts")
                  or None),
        # The packages that changed since the baseline's runtime, for a blessed candidate
        # (about to be pushed: operators are told); None when nothing changed.
        "runtime_changed": (((record.evaluation or {}).get("significance") or {}).get("runtime") or {}).get("lines")
        or None if record.blessed else None,
        "error": record.error,
        # What the run cost (core/cost.py): totals over its nodes, and how energy was had.
        "cost": ({k: v for k, v in record.cost.items() if k != "nodes"} if record.cost else None),
        # The feature policy in force (core/feature_policy.py): forbidden, sensitive, logged.
        "feature_policy": ({k: record.feature_policy.get(k) for k in ("path", "sha256", "forbidden", "sensitive",
                                                                       "logged_hashed", "not_logged", "not_ingested")}
                           if record.feature_policy else None),
    }
    if record.approval:
        summary["approval"] = {k: record.approval.get(k) for k in ("decision", "reviewer", "comment", "decided_at")}
    if record.tflite:
        summary["tflite"] = {"published": record.tflite.get("published"), "path": record.tflite.get("published_path"),
                             "variants": {v: {k: x[k] for k in ("size_bytes", "accuracy", "accuracy_drop", "passed")}
                                          for v, x in record.tflite["variants"].items()},
                             "saved_model": record.tflite["saved_model"]}
    return summary


def format_summary(summary: dict) -> str:
    """Human-readable summary for the terminal."""
    summary = {**dict.fromkeys(_SUMMARY_KEYS), **summary}
    lines = [f"Run {summary['run_id']} of pipeline {summary['pipeline']}: {summary['outcome'].upper()}"]
    lines.append(f"  span             {summary['span']}")
    if summary.get("seconds") is not None:
        lines.append(f"  wall time        {summary['seconds']} s")
    if summary["backfilled_spans"]:
        lines.append(f"  backfilled       {', '.join(map(str, summary['backfilled_spans']))}")
    spent = summary.get("cost")
    if spent:
        lines.append(f"  cost             {spent['cpu_seconds']:.1f} CPU-s"
                     + (f", {spent['accelerator_seconds']:.1f} GPU-s" if spent.get("accelerator_seconds") else "")
                     + (f", peak {spent['peak_rss_mb']:.0f} MB" if spent.get("peak_rss_mb") else "")
                     + f", {spent['energy_j'] / 1000:.2f} kJ ({spent['energy_method']})")
    policy = summary.get("feature_policy")
    if policy:
        lines.append(f"  feature policy   {len(policy['forbidden'])} forbidden in the model"
                     + (f" ({', '.join(policy['forbidden'])})" if policy["forbidden"] else "")
                     + f", {len(policy['sensitive'])} sensitive, {len(policy['not_logged'])} never logged,"
                       f" {len(policy['logged_hashed'])} hashed in request logs"
                     + (f", {len(policy['not_ingested'])} never stored ({', '.join(policy['not_ingested'])})"
                        if policy.get("not_ingested") else ""))
    if summary.get("new_columns"):
        lines.append(f"  new columns      {', '.join(summary['new_columns'])}: not in the schema, left out of the"
                     " examples (gate policy columns.new: report)")
    if summary["rows"]:
        lines.append(
            "  rows             " + ", ".join(f"{k} {v}" for k, v in summary["rows"].items())
        )
    beam = {k: v for k, v in (summary.get("beam") or {}).items()
            if k in summary["nodes"] and not v["reason"].startswith(beam_lib.UNUSED)}
    if beam and any(v["profile"] != "direct" for v in beam.values()):
        lines.append("  beam             " + "; ".join(f"{k} {v['profile']}" for k, v in beam.items()))
    if summary["window_spans"]:
        w = summary["window_spans"]
        lines.append(f"  trained on       {len(w)} span(s): {w[0]}..{w[-1]}")
    gate = summary["data_gate"]
    if gate:
        status = "passed" if gate["passed"] else "STOPPED: " + ", ".join(gate["blocking_features"])
        lines.append(f"  data gate        {status}")
        for a in gate["anomalies"]:
            reasons = "; ".join(r["description"] or r["type"] for r in a["reasons"])
            lines.append(f"    - {a['feature']} [{a['kind']}, {a['split']}] {reasons}")
        base = gate["baseline_span"]
        if base:
            drift = gate["drift"]
            closest = max(drift, key=lambda d: d["value"] / d["threshold"] if d["threshold"] else 0, default=None)
            lines.append(
                f"  checks           vs span {base}: {len(drift)} drift measures on"
                f" {len({d['feature'] for d in drift})} features, {len(gate.get('completeness') or [])} completeness checks"
                + (f"; closest to its limit: {closest['feature']} {closest['measure']} {closest['value']:.3g}"
                   f" (limit {closest['threshold']:.3g})" if closest else "")
            )
            if gate.get("volume"):
                lines.append(f"  volume           {gate['volume']['description']}")
        else:
            lines.append("  checks           no baseline span yet: schema and completeness only")
        rows = gate.get("row_checks")
        if rows:
            kinds = {}
            for c in rows:
                kinds.setdefault(c["check"].split("_")[0], []).append(c)
            closest = min(rows, key=lambda c: c.get("p_value", 1.0) if c.get("p_value") is not None else 1.0)
            parts = [f"{len(kinds.get('domain', []))} domains"]
            if "event" in kinds:
                parts.append(f"event time + {len(kinds.get('derived', []))} derived fields")
            if "label" in kinds:
                parts.append(f"label {kinds['label'][0]['feature']} ({len(kinds['label'])} checks)")
            lines.append(f"  row checks       {', '.join(parts)} over every row"
                         + (f"; closest to its limit: {closest['feature']} {closest['check']} p = {closest['p_value']:.2g}"
                            if closest.get("p_value") is not None and closest["p_value"] < 1 else ""))
        if gate.get("opt_out"):
            lines.append(f"  not watched      {', '.join(sorted(gate['opt_out']))} (opted out, reasons in the report)")
        if gate.get("domain_opt_out"):
            lines.append(f"  no domain        {', '.join(sorted(gate['domain_opt_out']))} (opted out, reasons in the report)")
        lines.append(f"  gate report      {gate['report']}")
    skew = summary.get("serving_skew")
    if skew:
        if not skew["checked"]:
            lines.append(f"  serving skew     not checked: {skew['reason']}")
        else:
            verdict = ("none beyond the limits" if not skew["skewed_features"] else
                       ("STOPPED: " if not skew["passed"] else "WARNING: ") + ", ".join(skew["skewed_features"]))
            lines.append(f"  serving skew     version {skew['served_version']}'s {skew['examples']} logged examples"
                         f" vs training span {skew['training_span']}: {verdict}")
        lines.append(f"  skew report      {skew['report']}")
    training = summary.get("training")
    if training:
        lines.append(
            f"  trained with     {training.get('strategy')} strategy, {training.get('replicas')} replica(s)"
            f" on {training.get('devices')}, {training.get('precision_policy')}"
            + (" (loss scaling)" if training.get("loss_scaling") else "")
        )
        lines.append(
            f"  training speed   {training.get('examples_per_sec')} examples/s,"
            f" {training.get('train_steps')} steps in {training.get('train_wall_s')} s"
            + (f", resumed at step {training['resumed_from_step']}" if training.get("resumed_from_step") else "")
        )
        budget = training.get("budget") or {}
        if budget.get("asked"):
            asked = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in budget["asked"].items())
            seen = f"{training.get('train_examples') or budget.get('examples'):,} examples"
            if budget.get("epochs") is not None:
                seen += f" = {budget['epochs']} epochs of {budget['available_examples']:,}"
            grown = (f"; batch {budget['per_replica_batch_size']} per replica (the model's {budget['model_batch_size']}, "
                     "grown for the data)" if budget.get("per_replica_batch_size") != budget.get("model_batch_size") else "")
            lines.append(f"  training budget  {asked}: {seen}{grown}")
    ev = summary["evaluation"]
    if ev:
        cand, base = ev["candidate"], ev["baseline"]
        for metric in (*tasks.ALL_KEY_METRICS, "example_count"):
            if metric in cand:
                b = f"   baseline {base[metric]}" if base and metric in base else ""
                lines.append(f"  {metric:<17}candidate {cand[metric]}{b}" if len(metric) < 17 else f"  {metric}  candidate {cand[metric]}{b}")
        verdict = ev.get("significance")
        for c in (verdict or {}).get("comparisons", []):
            bounds = c.get("interval")
            lines.append(
                f"    {c['metric']} change {c['difference']:+.4f}"
                + (f", {c['confidence']:.0%} bounds [{bounds[0]:+.4f}, {bounds[1]:+.4f}]" if bounds else "")
                + (f", tolerated -{abs(c['tolerance']):g}" if c.get("tolerance") is not None else "")
                + f": {c['verdict']}"
            )
        if verdict:
            lines.append(
                f"  verdict          {'blessed' if verdict['blessed'] else 'NOT blessed: ' + '; '.join(verdict['reasons'])}"
                f" ({verdict.get('example_count') and int(verdict['example_count'])} eval examples)"
            )
            if record_lib.sample_note(verdict):
                lines.append(f"  evaluated on     {record_lib.sample_note(verdict)}")
            if record_lib.new_span_note(verdict):
                lines.append(f"  new span         {record_lib.new_span_note(verdict)}")
            if record_lib.staleness_note(verdict):
                lines.append(f"  served model age {record_lib.staleness_note(verdict)}")
            if record_lib.runtime_note(verdict):
                lines.append(f"  runtime          {record_lib.runtime_note(verdict)}")
            if record_lib.simple_baseline_note(verdict):
                lines.append(f"  simple baseline  {record_lib.simple_baseline_note(verdict)}")
            if record_lib.fairness_note(verdict):
                lines.append(f"  across groups    {record_lib.fairness_note(verdict)}")
        else:
            for f in ev["failures"]:
                lines.append(f"    threshold failed: {f['metric']} on {f['slice']}: {f['message']}")
    if summary["blessed"] is not None:
        lines.append(f"  blessed          {'yes' if summary['blessed'] else 'no'}")
    check = summary.get("serving_check")
    if check:
        latency = check.get("latency_ms") or {}
        lines.append(
            "  serving check    "
            + ("passed" if check["passed"] else "FAILED: " + "; ".join(check["reasons"]))
            + (f" (p50 {latency['p50']} ms, p99 {latency['p99']} ms)" if latency else "")
        )
        perf = check.get("performance")
        if perf:
            figures = perf.get("figures") or {}
            lines.append("  vs the baseline  " + (", ".join(
                f"{name} {f['candidate']} vs {f['baseline']} ({100 * f['change']:+.0f}%)" for name, f in figures.items())
                or "not compared: " + "; ".join(f"{k}: {v}" for k, v in (perf.get("not_compared") or {}).items())))
            for warning in perf.get("warnings") or []:
                lines.append(f"    warning: {warning}")
    approval = summary.get("approval")
    if approval:
        lines.append(f"  approval         {approval['decision']} by {approval['reviewer']} ({approval['decided_at']}): {approval['comment'] or ''}")
    if summary["pushed"]:
        p = summary["pushed"]
        what = "already serving as version" if p["already_serving"] else "version"
        lines.append(f"  pushed           {what} {p['version']} -> {p['path']}")
        if p.get("signature"):
            lines.append(f"  signed           {p['signature']} (retrain verify checks it)")
    lite = summary.get("tflite")
    if lite:
        sizes = ", ".join(f"{v} {x['size_bytes'] // 1024} KiB acc {x['accuracy']}{'' if x['passed'] else ' (over the bound)'}"
                          for v, x in lite["variants"].items())
        lines.append(f"  tflite           {sizes}; published: {', '.join(lite['published']) or 'none'}")
    elif summary["outcome"] != "pushed":
        lines.append("  pushed           nothing (serving directory unchanged)")
    if summary["error"]:
        lines.append(f"  error            {summary['error']}")
    if summary.get("report"):
        lines.append(f"  governance       {summary['report']}")
    return "\n".join(lines)
