"""The run summary: what a run ingested, found, scored and pushed, read back from its artifacts.

Values come from MLMD and the artifacts the nodes wrote (statistics, the gate report,
TFMA's metrics and validation, the blessing and push artifacts), never from variables
the runner passed around, so the summary states what the pipeline recorded.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ml_metadata.proto import metadata_store_pb2
from tensorflow_metadata.proto.v0 import statistics_pb2

from retrain.node_runner import NodeResult, read_only_store

_SUMMARY_METRICS = ("example_count", "auc", "binary_accuracy", "sparse_categorical_accuracy")
# Every summary has these keys (None when the run did not get that far).
_SUMMARY_KEYS = (
    "pipeline", "run_id", "span", "backfilled_spans", "nodes", "rows", "window_spans",
    "data_gate", "training", "evaluation", "blessed", "serving_check", "pushed", "outcome", "error",
)
# The Model artifact's custom properties the trainer toolkit's executor sets.
_TRAINING_PREFIX = "training_"


def _custom(artifact: metadata_store_pb2.Artifact, key: str) -> Any:
    if key not in artifact.custom_properties:
        return None
    value = artifact.custom_properties[key]
    return getattr(value, value.WhichOneof("value"))


def split_row_counts(statistics_uri: str) -> dict[str, int]:
    """Rows per split from StatisticsGen's FeatureStats.pb files."""
    counts = {}
    for entry in sorted(os.listdir(statistics_uri)):
        path = os.path.join(statistics_uri, entry, "FeatureStats.pb")
        if entry.startswith("Split-") and os.path.exists(path):
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            with open(path, "rb") as f:
                stats.ParseFromString(f.read())
            counts[entry[len("Split-") :]] = int(stats.datasets[0].num_examples)
    return counts


def evaluation_metrics(evaluation_uri: str) -> dict:
    """Overall-slice metrics of candidate and baseline, and the threshold failures."""
    import tensorflow_model_analysis as tfma  # heavy; already loaded in a runner process

    models: dict[str, dict[str, float]] = {}
    for record in tfma.load_metrics(evaluation_uri):
        if record.slice_key.single_slice_keys:
            continue
        for kv in record.metric_keys_and_values:
            if kv.key.name not in _SUMMARY_METRICS or not kv.value.HasField("double_value"):
                continue
            model = kv.key.model_name or "candidate"
            name = kv.key.name + (" (diff)" if kv.key.is_diff else "")
            models.setdefault(model, {})[name] = round(kv.value.double_value.value, 4)
    validation = tfma.load_validation_result(evaluation_uri)
    failures = [
        {
            "slice": str(v.slice_key) or "overall",
            "metric": f.metric_key.name,
            "message": f.message or str(f.metric_threshold).replace("\n", " "),
            "value": round(f.metric_value.double_value.value, 4),
        }
        for v in validation.metric_validations_per_slice
        for f in v.failures
    ]
    from governance.report import read_significance

    return {
        "candidate": models.get("candidate", {}),
        "baseline": models.get("baseline"),
        "validation_ok": validation.validation_ok,
        "failures": failures,
        "significance": read_significance(evaluation_uri),
    }


def build_summary(
    metadata_path: str,
    pipeline_name: str,
    run_id: str,
    span: int,
    results: list[NodeResult],
    backfilled: list[int] | None = None,
) -> dict:
    """Assembles the summary of one run from its node results and what they recorded."""
    by_node = {r.node_id: r for r in results}
    failed = next((r for r in results if r.status == "failed"), None)
    summary: dict[str, Any] = {
        **dict.fromkeys(_SUMMARY_KEYS),
        "pipeline": pipeline_name,
        "run_id": run_id,
        "span": span,
        "backfilled_spans": backfilled or [],
        "nodes": {r.node_id: {"status": r.status, "seconds": round(r.seconds, 1)} for r in results},
        "rows": None,
        "window_spans": None,
        "data_gate": None,
        "training": None,
        "evaluation": None,
        "blessed": None,
        "serving_check": None,
        "pushed": None,
        "outcome": None,
        "error": failed.error if failed else None,
    }
    store = read_only_store(metadata_path)

    stats = by_node.get("StatisticsGen")
    if stats and stats.outputs.get("statistics"):
        summary["rows"] = split_row_counts(stats.outputs["statistics"][0]["uri"])

    gate = by_node.get("DataGate")
    report_path = None
    if gate and gate.outputs.get("report"):
        report_path = os.path.join(gate.outputs["report"][0]["uri"], "report.json")
    elif gate and gate.gate_report:
        report_path = gate.gate_report
    if report_path and os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        summary["data_gate"] = {
            "passed": report["passed"],
            "blocking_features": report["blocking_features"],
            "anomalies": report["anomalies"],
            "drift": report["drift"],
            "completeness": report.get("completeness", []),
            "volume": report.get("volume"),
            "opt_out": report.get("opt_out", {}),
            "baseline_span": report["baseline_span"],
            "report": report_path,
        }

    transform = by_node.get("Transform")
    if transform and transform.inputs.get("examples"):
        ids = [a["id"] for a in transform.inputs["examples"]]
        summary["window_spans"] = sorted(
            _custom(a, "span") for a in store.get_artifacts_by_id(ids)
        )

    trainer = by_node.get("Trainer")
    if trainer and trainer.outputs.get("model"):
        [model] = store.get_artifacts_by_id([trainer.outputs["model"][0]["id"]])
        summary["training"] = {
            key[len(_TRAINING_PREFIX):]: _custom(model, key)
            for key in sorted(model.custom_properties)
            if key.startswith(_TRAINING_PREFIX)
        } or None

    evaluator = by_node.get("Evaluator")
    if evaluator and evaluator.outputs.get("evaluation"):
        summary["evaluation"] = evaluation_metrics(evaluator.outputs["evaluation"][0]["uri"])
        summary["evaluation"]["path"] = evaluator.outputs["evaluation"][0]["uri"]
    if evaluator and evaluator.outputs.get("blessing"):
        [blessing] = store.get_artifacts_by_id([evaluator.outputs["blessing"][0]["id"]])
        summary["blessed"] = bool(_custom(blessing, "blessed"))

    gate_node = by_node.get("ApprovalGate")
    if gate_node and gate_node.outputs.get("approval"):
        [decision] = store.get_artifacts_by_id([gate_node.outputs["approval"][0]["id"]])
        summary["approval"] = {k: _custom(decision, k) for k in ("decision", "reviewer", "comment", "decided_at")}

    check = by_node.get("ServingCheck")
    if check and check.outputs.get("blessing"):
        path = os.path.join(check.outputs["blessing"][0]["uri"], "serving_check.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
            summary["serving_check"] = {
                "passed": report["passed"], "reasons": report["reasons"],
                "latency_ms": report.get("latency_ms"), "report": path,
            }

    pusher = next((r for r in results if r.node_id.endswith("Pusher")), None)
    if pusher and pusher.outputs.get("pushed_model"):
        [pushed] = store.get_artifacts_by_id([pusher.outputs["pushed_model"][0]["id"]])
        if _custom(pushed, "pushed"):
            summary["pushed"] = {
                "version": _custom(pushed, "pushed_version"),
                "path": _custom(pushed, "pushed_destination"),
                "already_serving": bool(_custom(pushed, "already_pushed")),
            }

    if failed is not None:
        summary["outcome"] = (
            "stopped_by_data_gate" if failed.gate_stopped
            else "awaiting_approval" if getattr(failed, "approval_pending", False)
            else f"failed_at_{failed.node_id}"
        )
    elif summary["pushed"]:
        summary["outcome"] = "pushed"
    elif summary["blessed"] is False:
        summary["outcome"] = "not_blessed"
    elif summary["serving_check"] and not summary["serving_check"]["passed"]:
        summary["outcome"] = "failed_serving_check"
    elif (summary.get("approval") or {}).get("decision") == "reject":
        summary["outcome"] = "rejected"
    else:
        summary["outcome"] = "not_pushed"
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
    if summary["rows"]:
        lines.append(
            "  rows             " + ", ".join(f"{k} {v}" for k, v in summary["rows"].items())
        )
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
        if gate.get("opt_out"):
            lines.append(f"  not watched      {', '.join(sorted(gate['opt_out']))} (opted out, reasons in the report)")
        lines.append(f"  gate report      {gate['report']}")
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
    ev = summary["evaluation"]
    if ev:
        cand, base = ev["candidate"], ev["baseline"]
        for metric in ("auc", "binary_accuracy", "sparse_categorical_accuracy", "example_count"):
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
    approval = summary.get("approval")
    if approval:
        lines.append(f"  approval         {approval['decision']} by {approval['reviewer']} ({approval['decided_at']}): {approval['comment'] or ''}")
    if summary["pushed"]:
        p = summary["pushed"]
        what = "already serving as version" if p["already_serving"] else "version"
        lines.append(f"  pushed           {what} {p['version']} -> {p['path']}")
    elif summary["outcome"] != "pushed":
        lines.append("  pushed           nothing (serving directory unchanged)")
    if summary["error"]:
        lines.append(f"  error            {summary['error']}")
    if summary.get("report"):
        lines.append(f"  governance       {summary['report']}")
    return "\n".join(lines)
