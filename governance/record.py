"""The record of one pipeline run: the single reader of what a run did.

One function, `read`, turns a run's ML Metadata executions and artifacts (plus the run
folder's node results, when the runner left them) into typed sections: data, schema,
gate, transform, training, evaluation, serving check, approval, push. `classify` derives
the one `Outcome` from those sections. The CLI summary, the governance report, `retrain
models` and the exit code all read a `RunRecord`, so they cannot disagree.

Values come from MLMD and from the files nodes wrote into their artifacts (statistics,
the gate report, TFMA's metrics and validation, the significance verdict, the serving
check), never from variables a runner passed around.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import json
import os
from typing import Any

from core import cost as cost_lib
from core import files, layout
from core import nodes as N
from core import outcome as outcomes
from core import spans as span_lib
from core.metadata_queries import NodeRun, props, run_nodes
from core.outcome import Outcome
from core.results import CACHED, COMPLETE, FAILED, SKIPPED, NodeResult
from serving.repository import signing

# MLMD execution states as the runner's node statuses (a node that never ran has none).
_STATUS_OF_STATE = {"COMPLETE": COMPLETE, "CACHED": CACHED, "FAILED": FAILED, "CANCELED": SKIPPED,
                    "RUNNING": "running", "NEW": "running"}


@dataclasses.dataclass
class NodeState:
    """One node of the run, merged from MLMD (state, execution) and the runner's result."""

    node_id: str
    status: str  # complete, cached, skipped, failed (or running while MLMD says so)
    execution_id: int | None = None
    state: str | None = None  # MLMD's execution state
    started: str | None = None
    seconds: float | None = None
    error: str | None = None
    gate_stopped: bool = False
    approval_pending: bool = False
    # What it cost (core/cost.py), from its execution in MLMD or the runner's result.
    cost: dict | None = None


@dataclasses.dataclass
class RunRecord:
    """Everything a run recorded, by section; None where the run did not get that far."""

    pipeline: str
    run_id: str
    nodes: dict[str, NodeState]
    data: dict[str, Any]
    schema: dict | None = None
    data_gate: dict | None = None
    serving_skew: dict | None = None
    quarantine: list[dict] = dataclasses.field(default_factory=list)
    transform: dict | None = None
    trainer: dict | None = None
    model: dict | None = None
    code: dict | None = None
    training: dict | None = None
    baseline_model: dict | None = None
    evaluation: dict | None = None
    blessed: bool | None = None
    serving_check: dict | None = None
    approval: dict | None = None
    push: dict = dataclasses.field(default_factory=lambda: {"pushed": False})
    tflite: dict | None = None
    # After the push: the version's rollout (its role now, the live metrics the rollout
    # controller measured, every decision about it); None for a version never under test.
    live: dict | None = None
    backfilled_spans: list[int] = dataclasses.field(default_factory=list)
    # Each Beam node's runner profile and why (run.json; pipelines/beam.py).
    beam: dict = dataclasses.field(default_factory=dict)
    # The feature policy in force for the run (policy_summary), None where the config has none.
    feature_policy: dict | None = None
    # What producing this candidate cost (core/cost.total over its nodes), None before any was measured.
    cost: dict | None = None
    outcome: Outcome = Outcome(outcomes.NOT_PUSHED)

    @property
    def span(self) -> int | None:
        return self.data.get("span")

    @property
    def failed_node(self) -> NodeState | None:
        return next((n for n in self.nodes.values() if n.status == FAILED), None)

    @property
    def error(self) -> str | None:
        failed = self.failed_node
        return failed.error if failed else None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["nodes"] = {k: {f: v for f, v in n.items() if v is not None and v is not False}
                        for k, n in out["nodes"].items()}
        out["outcome"] = self.outcome.name
        out["outcome_reason"] = self.outcome.reason
        out["error"] = self.error
        return out


def _time(ms: int) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds") if ms else None


def read_stats_file(path: str):
    """The first dataset of a FeatureStats.pb, or None if there is no such file."""
    from tensorflow_metadata.proto.v0 import statistics_pb2  # protos only, no TensorFlow

    if not os.path.exists(path):
        return None
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with open(path, "rb") as f:
        stats.ParseFromString(f.read())
    return stats.datasets[0]


def _read_stats(uri: str, split: str):
    return read_stats_file(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"))


def split_row_counts(statistics_uri: str) -> dict[str, int]:
    """Rows per split from StatisticsGen's FeatureStats.pb files."""
    rows = {}
    for entry in sorted(os.listdir(statistics_uri)):
        ds = _read_stats(statistics_uri, entry[len("Split-"):]) if entry.startswith("Split-") else None
        if ds is not None:
            rows[entry[len("Split-"):]] = int(ds.num_examples)
    return rows


def policy_summary(policy: dict | None) -> dict | None:
    """What the record keeps of the feature policy in force (core/feature_policy.py's
    to_dict): its source and digest, and per decision the features it names."""
    from core import feature_policy as policy_lib

    if not policy:
        return None
    parsed = policy_lib.parse({"features": policy.get("features") or {}}, policy.get("source") or "feature policy")
    return {**parsed.summary(), "sha256": policy.get("sha256")}


# What a report may print of a sensitive feature (feature_policy: pii other than none):
# counts, never values (top values, min, max, histogram bounds, quantiles).
_SAFE_KEYS = ("name", "kind", "missing", "unique", "zeros")


def redact(features: list[dict], policy: dict | None) -> list[dict]:
    """`feature_summary` entries with the sensitive features' values taken out (marked
    `redacted` with their pii class)."""
    sensitive = (policy or {}).get("sensitive") or {}
    return [f if f["name"] not in sensitive else {**{k: v for k, v in f.items() if k in _SAFE_KEYS},
                                                  "redacted": sensitive[f["name"]]}
            for f in features]


def _redact_errors(r: RunRecord) -> None:
    """A node's error that names a sensitive feature may quote its values (the data gate's
    message carries TFDV's descriptions): it is replaced by what names the feature only."""
    sensitive = (r.feature_policy or {}).get("sensitive") or {}
    for state in r.nodes.values():
        named = [f for f in sensitive if state.error and f in state.error]
        if named:
            state.error = (f"{state.error.split(':', 1)[0]}: withheld, it concerns sensitive feature(s)"
                           f" {', '.join(named)} (feature policy); the node's report and log have the details")


def redact_anomalies(report: dict, policy: dict | None) -> dict:
    """A gate or skew report with what quotes sensitive features' values withheld: the TFDV
    descriptions of their anomalies (unexpected values), and their row checks' descriptions,
    examples and value sets (a domain check lists the values seen in the history)."""
    sensitive = (policy or {}).get("sensitive") or {}
    if not sensitive:
        return report
    out = dict(report)
    if report.get("anomalies"):
        out["anomalies"] = [a if a.get("feature") not in sensitive else
                            {**a, "reasons": [{**x, "description": _withheld(a["feature"], sensitive)}
                                              for x in a.get("reasons") or []]}
                            for a in report["anomalies"]]
    rows = report.get("row_checks")
    if rows:
        def check(c: dict) -> dict:
            if c.get("feature") not in sensitive:
                return c
            counted = (f"{c['outside']} of {c['checked']} values outside the domain; " if "outside" in c else "")
            return {**c, "description": f"{c['feature']}: {counted}{_withheld(c['feature'], sensitive)}",
                    "examples": []}

        rows = {**rows, **{k: [check(c) for c in rows[k]] for k in ("domains", "consistency") if rows.get(k)}}
        if (rows.get("label") or {}).get("checks"):
            rows["label"] = {**rows["label"], "checks": [check(c) for c in rows["label"]["checks"]]}
        for k in ("accepted_values", "mistyped"):
            if rows.get(k):
                rows[k] = {f: (_withheld(f, sensitive) if f in sensitive else v) for f, v in rows[k].items()}
        out["row_checks"] = rows
    return out


def _withheld(feature: str, sensitive: dict) -> str:
    return f"values withheld: {feature} is {sensitive[feature]} (feature policy)"


def feature_summary(dataset) -> list[dict]:
    """Per feature: type, missing fraction, numeric moments and histogram, or top values."""
    out = []
    n = dataset.num_examples or 1
    for feature in dataset.features:
        name = feature.path.step[0] if feature.path.step else feature.name
        entry: dict[str, Any] = {"name": name}
        if feature.HasField("num_stats"):
            s = feature.num_stats
            entry.update(
                kind="numeric", missing=round(s.common_stats.num_missing / n, 4), mean=round(s.mean, 4),
                std=round(s.std_dev, 4), min=s.min, max=s.max, zeros=s.num_zeros,
                histogram=[
                    {"low": b.low_value, "high": b.high_value, "count": b.sample_count}
                    for h in s.histograms if h.type == h.STANDARD for b in h.buckets
                ],
            )
        elif feature.HasField("string_stats") and all(
                v.value.startswith("__BYTES_VALUE__") for v in feature.string_stats.top_values):
            # Binary values (encoded images): TFDV keeps no meaningful top values.
            entry.update(kind="bytes", missing=round(feature.string_stats.common_stats.num_missing / n, 4),
                         unique=feature.string_stats.unique)
        elif feature.HasField("string_stats"):
            s = feature.string_stats
            entry.update(
                kind="categorical", missing=round(s.common_stats.num_missing / n, 4), unique=s.unique,
                top=[{"value": v.value, "count": v.frequency} for v in s.top_values[:10]],
            )
        elif feature.HasField("bytes_stats"):
            s = feature.bytes_stats
            entry.update(kind="bytes", missing=round(s.common_stats.num_missing / n, 4),
                         avg_bytes=round(s.avg_num_bytes, 1), unique=s.unique)
        out.append(entry)
    return out


def _json_prop(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _read_json(path: str | None) -> dict | None:
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_significance(evaluation_uri: str) -> dict | None:
    """The Evaluator's verdict (`components/evaluator`): intervals, verdicts, reasons."""
    return _read_json(os.path.join(evaluation_uri, layout.SIGNIFICANCE_FILE))


def sample_note(verdict: dict | None) -> str | None:
    """How the eval examples were chosen when the Evaluator scored a sample, or None."""
    sample = (verdict or {}).get("sample")
    if not sample:
        return None
    return (f"a seeded sample of {sample['eval_examples_sampled']:,} of {sample['eval_examples_available']:,} eval "
            f"examples (max_eval_examples {sample['max_eval_examples']:,}, hash key {sample['seed']}); the intervals "
            "are computed on the sample")


def row_check_list(gate: dict | None) -> list[dict]:
    """Every row-level check of a gate report (domains, consistency, the label), without the
    label's reference facts: what summaries and reports list."""
    rows = (gate or {}).get("row_checks") or {}
    return [*(rows.get("domains") or []), *(rows.get("consistency") or []), *((rows.get("label") or {}).get("checks") or [])]


def new_span_note(verdict: dict | None) -> str | None:
    """One line on the new span alone (the Evaluator's slice of the newest span), or None."""
    check = (verdict or {}).get("new_span")
    if not check:
        return None
    def shown(entry):
        if not entry:
            return "n/a"
        bounds = entry.get("interval")
        return f"{entry['value']:.4g}" + (f" [{bounds[0]:.3g}, {bounds[1]:.3g}]" if bounds else "")
    head = (f"span {check['span']} ({check['examples']} eval examples): {check['metric']} candidate"
            f" {shown(check.get('candidate'))}, baseline {shown(check.get('baseline'))} vs {shown(check.get('baseline_window'))}"
            " on the window")
    if not check.get("judged"):
        return f"{head}; {check.get('reason')}"
    return f"{head}; {'COLLAPSED: refused as bad data' if check['collapsed'] else 'no collapse'} (z {check['z']:.2f}," \
           f" allowed {check['z_allowed']:.2f})"


def staleness_note(verdict: dict | None) -> str | None:
    """One line on how stale the served model is (the Evaluator's reading), or None."""
    check = (verdict or {}).get("staleness")
    if not check:
        return None
    return ("STALE: " if check.get("alerts") else "") + check["reason"]


def runtime_note(verdict: dict | None) -> str | None:
    """One line on the packages that changed since the baseline's runtime, or None."""
    check = (verdict or {}).get("runtime")
    if not check:
        return None
    return ("CHANGED: " if check.get("lines") else "") + check["reason"]


def simple_baseline_note(verdict: dict | None) -> str | None:
    """One line on the candidate against the simple (linear) model fitted beside it, or None."""
    check = (verdict or {}).get("simple_baseline")
    if not check:
        return None
    if check.get("opted_out"):
        return f"not compared, {check['reason']}"
    if not check.get("judged"):
        return check.get("reason")
    return f"{'REFUSED' if check['refused'] else 'passed'}: {check['reason']}"


def fairness_note(verdict: dict | None) -> str | None:
    """One line on the candidate's quality across groups (components/evaluator/fairness.py), or None."""
    check = (verdict or {}).get("fairness")
    if not check:
        return None
    small = sum(len(f.get("too_small") or []) for f in (check.get("features") or {}).values())
    tail = f" ({small} slice(s) too small to judge)" if small else ""
    if not check.get("judged"):
        return f"not judged: {check['reason']}"
    return f"{'REFUSED' if check['refused'] else 'passed'}: {check['reason']}{tail}"


def importance_note(training: dict | None) -> str | None:
    """One line on the inputs not shown to contribute (trainer_toolkit/importance.py), or None."""
    record = (training or {}).get("importance")
    if not record:
        return None
    if not record.get("computed"):
        return f"not computed: {record.get('reason')}"
    flagged = record.get("not_contributing") or []
    head = (f"{len(record['inputs'])} inputs on {record['examples']} eval examples;"
            f" {record['bytes_per_example']} bytes per raw example")
    return f"{head}; not shown to contribute: {', '.join(flagged)}" if flagged else f"{head}; every input contributes"


def importance_history(store, pipeline_root: str) -> dict:
    """Each model input's importance over the pipeline's trained models, oldest first: the
    trend the report draws beside this run's figures (read from each Model's provenance)."""
    runs = []
    for artifact in store.get_artifacts_by_type("Model"):
        if not artifact.uri.startswith(pipeline_root.rstrip("/") + "/"):
            continue
        full = _read_json(os.path.join(artifact.uri, "Format-Serving", "assets.extra", "training_provenance.json"))
        record = (full or {}).get("importance") or {}
        if not record.get("computed"):
            continue
        runs.append({"model_artifact_id": artifact.id,
                     "inputs": {r["input"]: {"importance": r["importance"], "contributes": r["contributes"]}
                                for r in record["inputs"]}})
    runs.sort(key=lambda r: r["model_artifact_id"])
    return {"runs": runs}


def staleness_history(store, pipeline_root: str) -> dict:
    """The served models' quality against their age over every run of the pipeline (each
    Evaluator's staleness reading: components/evaluator/staleness.py), oldest run first,
    and the quality lost per span fitted through them."""
    points = []
    for artifact in store.get_artifacts_by_type("ModelEvaluation"):
        if not artifact.uri.startswith(pipeline_root.rstrip("/") + "/"):
            continue
        check = (read_significance(artifact.uri) or {}).get("staleness") or {}
        if check.get("age_spans") is None:
            continue
        points.append({"span": check["span"], "model_artifact_id": check["model_artifact_id"],
                       "age_spans": check["age_spans"], "drop": check.get("drop"), "metric": check["metric"],
                       "value": (check.get("today") or {}).get("value"), "alerts": len(check.get("alerts") or []),
                       "evaluation_id": artifact.id})
    points.sort(key=lambda p: p["evaluation_id"])
    # Least squares through the origin: a model loses nothing at age 0.
    aged = [(p["age_spans"], p["drop"]) for p in points if p["drop"] is not None and p["age_spans"] > 0]
    slope = sum(a * d for a, d in aged) / sum(a * a for a, _ in aged) if aged else None
    return {"points": points, "loss_per_span": slope}


def evaluation(evaluation_uri: str, eval_config_json: str | None = None) -> dict:
    """TFMA's metrics per slice and model, its validation, the thresholds and the verdict."""
    import tensorflow_model_analysis as tfma  # heavy; only where an evaluation exists

    overall: dict[str, dict] = {}
    slices: dict[str, dict] = {}
    by_span: dict[str, dict] = {}
    for record in tfma.load_metrics(evaluation_uri):
        keys = record.slice_key.single_slice_keys
        slice_name = "overall" if not keys else ", ".join(
            f"{k.column}={getattr(k, k.WhichOneof('kind'))}" for k in keys)
        if len(keys) == 1 and keys[0].column == layout.SPAN_SLICE_FEATURE:
            slice_name = str(keys[0].int64_value)
        for kv in record.metric_keys_and_values:
            if not kv.value.HasField("double_value"):
                continue
            model = kv.key.model_name or "candidate"
            role = f"{model}_diff" if kv.key.is_diff else model
            spans_slice = len(keys) == 1 and keys[0].column == layout.SPAN_SLICE_FEATURE
            target = overall if not keys else (by_span if spans_slice else slices).setdefault(slice_name, {})
            target.setdefault(kv.key.name, {})[role] = round(kv.value.double_value.value, 5)
            ci = kv.confidence_interval
            if ci.HasField("lower_bound") and ci.lower_bound.HasField("double_value"):
                target[kv.key.name][f"{role}_interval"] = [round(ci.lower_bound.double_value.value, 5),
                                                           round(ci.upper_bound.double_value.value, 5)]
    validation = tfma.load_validation_result(evaluation_uri)
    failures = [
        {"slice": str(v.slice_key) or "overall", "metric": f.metric_key.name,
         "value": round(f.metric_value.double_value.value, 5),
         "message": f.message or str(f.metric_threshold).replace("\n", " ").strip(),
         "threshold": str(f.metric_threshold).replace("\n", " ").strip()}
        for v in validation.metric_validations_per_slice for f in v.failures
    ]
    thresholds = []
    for spec in (json.loads(eval_config_json) if eval_config_json else {}).get("metrics_specs", []):
        for metric in spec.get("metrics", []):
            for pst in metric.get("per_slice_thresholds", []):
                t = pst.get("threshold", {})
                failed = [f for f in failures if f["metric"].lower() == metric["class_name"].lower()
                          or f["metric"].replace("_", "") == metric["class_name"].lower()]
                thresholds.append({
                    "metric": metric["class_name"], "slice": "overall",
                    "value_threshold": t.get("value_threshold"), "change_threshold": t.get("change_threshold"),
                    "passed": not failed,
                })
    return {
        "overall": overall,
        "slices": dict(sorted(slices.items())),
        # Both models on each span of the window (the Evaluator's span tag), by span.
        "spans": dict(sorted(by_span.items())),
        "validation_ok": validation.validation_ok,
        "failures": failures,
        "thresholds": thresholds,
        "significance": read_significance(evaluation_uri),
        "path": evaluation_uri,
    }


def _report_path(node, filename: str, pipeline_root: str, stopped_dir: str) -> str | None:
    """A checking node's report: in its `report` artifact, or, when the check stopped the run
    (TFX removes a failed execution's outputs), under `<pipeline_root>/<stopped_dir>/span-*-<execution>/`."""
    report = node.output("report")
    path = os.path.join(report.uri, filename) if report else None
    if path and os.path.exists(path):
        return path
    found = glob.glob(os.path.join(pipeline_root, stopped_dir, f"span-*-{node.execution.id}", filename))
    return found[0] if found else None


def _quarantine(store, pipeline: str, span) -> list[dict]:
    """Quarantine decisions on this span and on the spans it was compared with or may
    train on: the last 24 months up to it."""
    from governance import quarantine

    if span is None:
        return []
    first = span_lib.shift_span(int(span), -24)
    return [d for d in quarantine.decisions(store, pipeline) if first <= int(d["span"]) <= int(span)]


def _node_states(mlmd_nodes: dict[str, NodeRun], results: list[NodeResult] | None) -> dict[str, NodeState]:
    """The runner's results in run order, completed with MLMD's executions (and vice versa)."""
    states: dict[str, NodeState] = {}
    for r in results or []:
        states[r.node_id] = NodeState(r.node_id, r.status, r.execution_id, seconds=round(r.seconds, 1),
                                      error=r.error, gate_stopped=r.gate_stopped, approval_pending=r.approval_pending,
                                      cost=r.cost)
    for node_id, n in mlmd_nodes.items():
        state = states.get(node_id)
        if state is None:
            error = (props(n.execution).get("__execution_result__") or None) if n.state == "FAILED" else None
            state = states[node_id] = NodeState(node_id, _STATUS_OF_STATE.get(n.state, n.state.lower()),
                                                n.execution.id, error=error)
        state.state = n.state
        state.started = _time(n.execution.create_time_since_epoch)
        state.execution_id = state.execution_id or n.execution.id
        recorded = {k[len("cost_"):]: v for k, v in props(n.execution).items() if k.startswith("cost_")}
        if recorded and not state.cost:
            state.cost = recorded
    return states


def classify(record: RunRecord) -> Outcome:
    """The run's one outcome, from its sections: the ladder every reader shares."""
    if record.push.get("pushed"):
        return Outcome(outcomes.PUSHED)
    gate = record.data_gate
    failed = record.failed_node
    skew_stop = failed is not None and failed.node_id == N.SERVING_SKEW
    if (gate and not gate.get("passed")) or (failed and failed.gate_stopped and not skew_stop):
        features = ", ".join((gate or {}).get("blocking_features") or [])
        return Outcome(outcomes.STOPPED_BY_DATA_GATE, f"stopped by the data gate: {features}")
    skew = record.serving_skew
    if skew and not skew.get("passed"):
        return Outcome(outcomes.STOPPED_BY_SERVING_SKEW,
                       "stopped by serving skew: " + ", ".join(skew.get("skewed_features") or []))
    if failed is not None:
        if failed.approval_pending or (failed.node_id == N.APPROVAL_GATE and record.approval is None):
            return Outcome(outcomes.AWAITING_APPROVAL, failed.error or "no reviewer decision recorded")
        return Outcome.failed_at(failed.node_id, f"node {failed.node_id} did not finish"
                                 + (f": {failed.error}" if failed.error else f" ({failed.state})"))
    if record.blessed is False:
        verdict = (record.evaluation or {}).get("significance") or {}
        fails = (record.evaluation or {}).get("failures") or []
        reason = "; ".join(verdict.get("reasons") or []) or "; ".join(
            f"{f['metric']} on {f['slice']} = {f['value']}" for f in fails)
        return Outcome(outcomes.NOT_BLESSED, "not blessed by the Evaluator" + (f": {reason}" if reason else ""))
    check = record.serving_check
    if check and not check.get("passed"):
        return Outcome(outcomes.FAILED_SERVING_CHECK, "failed the serving check: " + "; ".join(check.get("reasons") or []))
    if record.approval and record.approval.get("decision") != "approve":
        return Outcome(outcomes.REJECTED, f"rejected by {record.approval.get('reviewer')}: "
                       f"{record.approval.get('comment') or 'no comment'}")
    if N.TRAINER not in record.nodes:
        return Outcome(outcomes.NOT_PUSHED, "the run did not reach training")
    return Outcome(outcomes.NOT_PUSHED, "the pipeline did not push (see the node states)")


def read(store, pipeline: str, pipeline_root: str, run_id: str,
         results: list[NodeResult] | None = None, backfilled: list[int] | None = None,
         span: int | None = None, beam: dict | None = None, feature_policy: dict | None = None) -> RunRecord:
    """The record of a run, from MLMD, the artifacts and (if given) the runner's node results.

    Raises:
      LookupError: neither MLMD nor the results know this run.
    """
    mlmd_nodes = run_nodes(store, pipeline, run_id)
    if not mlmd_nodes and not results:
        raise LookupError(f"MLMD has no run {run_id!r} of pipeline {pipeline!r}")
    r = RunRecord(pipeline, run_id, _node_states(mlmd_nodes, results), data={"span": span, "rows": None},
                  backfilled_spans=list(backfilled or []), beam=dict(beam or {}),
                  feature_policy=policy_summary(feature_policy))
    nodes = mlmd_nodes  # MLMD's executions by node id; r.nodes merges in the runner's results

    gen = next((nodes[k] for k in N.EXAMPLE_GENS if k in nodes), None)
    examples = gen.output("examples") if gen else None
    if examples is not None:
        r.data.update(span=props(examples).get("span"), examples_uri=examples.uri,
                      # Columns the source added, left out under the gate policy's columns.new: report.
                      new_columns=json.loads(props(examples).get(span_lib.NEW_COLUMNS_PROPERTY) or "[]"))
    stats = nodes.get(N.STATISTICS_GEN)
    stats_artifact = stats.output("statistics") if stats else None
    if stats_artifact is not None:
        r.data["rows"] = split_row_counts(stats_artifact.uri)
        current = _read_stats(stats_artifact.uri, "train")
        r.data["features"] = redact(feature_summary(current), r.feature_policy) if current else []
        r.data["statistics_uri"] = stats_artifact.uri

    schema_node = nodes.get(N.SCHEMA_GEN)
    schema = schema_node.output("schema") if schema_node else None
    if schema is not None:
        path = os.path.join(schema.uri, "schema.pbtxt")
        r.schema = {"source": schema_node.exec_properties().get("schema_file"), "path": path,
                    "sha256": files.sha256_file(path) if os.path.exists(path) else None}

    gate = nodes.get(N.DATA_GATE)
    if gate is not None:
        path = _report_path(gate, layout.GATE_REPORT, pipeline_root, layout.GATE_STOPPED_DIR)
        if path is None and results:
            path = next((x.gate_report for x in results if x.node_id == N.DATA_GATE and x.gate_report), None)
        gate_report = _read_json(path)
        if gate_report is not None:
            r.data_gate = {**redact_anomalies(gate_report, r.feature_policy), "report": path}
            baseline = (gate.inputs.get("baseline") or [None])[0]
            if baseline is not None:
                base = read_stats_file(os.path.join(baseline.uri, "FeatureStats.pb"))
                r.data["baseline_span"] = props(baseline).get("span")
                r.data["baseline_features"] = redact(feature_summary(base), r.feature_policy) if base else []

    skew = nodes.get(N.SERVING_SKEW)
    if skew is not None:
        path = _report_path(skew, layout.SKEW_REPORT, pipeline_root, layout.SKEW_STOPPED_DIR)
        skew_report = _read_json(path)
        if skew_report is not None:
            r.serving_skew = {**redact_anomalies(skew_report, r.feature_policy), "report": path}

    r.quarantine = _quarantine(store, pipeline, r.span)

    transform = nodes.get(N.TRANSFORM)
    if transform is not None:
        window = sorted(transform.inputs.get("examples", []), key=lambda a: props(a).get("span", 0))
        r.data["window"] = [{"span": props(a).get("span"), "artifact_id": a.id, "uri": a.uri} for a in window]
        p = transform.exec_properties()
        r.transform = {k: _json_prop(p.get(k)) for k in ("preprocessing_fn", "force_tf_compat_v1", "disable_statistics",
                                                         "materialize", "custom_config") if k in p}
        graph = transform.output("transform_graph")
        r.transform["transform_graph"] = graph.uri if graph else None

    trainer = nodes.get(N.TRAINER)
    model = trainer.output("model") if trainer else None
    if trainer is not None:
        p = trainer.exec_properties()
        r.trainer = {k: _json_prop(p.get(k)) for k in ("run_fn", "train_args", "eval_args", "custom_config") if k in p}
    if model is not None:
        mp = props(model)
        r.model = {"artifact_id": model.id, "uri": model.uri, "created": _time(model.create_time_since_epoch),
                   "runtime": {k[len("runtime_"):]: mp[k] for k in sorted(mp) if k.startswith("runtime_")} or None}
        r.code = {k[len("code_"):]: mp[k] for k in mp if k.startswith("code_")}
        if "git_dirty" in r.code:
            r.code["git_dirty"] = bool(r.code["git_dirty"])
        r.training = {k[len("training_"):]: _json_prop(mp[k]) for k in sorted(mp) if k.startswith("training_")}
        full = _read_json(os.path.join(model.uri, "Format-Serving", "assets.extra", "training_provenance.json"))
        if full is not None:
            r.training["loss_curve"] = full.get("loss_curve", [])
            r.training["final_metrics"] = full.get("final_metrics", {})
            for key in ("numerics", "simple_baseline", "importance", "tuning", "hparams"):
                if full.get(key) is not None:
                    r.training[key] = full[key]

    # The model the Evaluator compared against (its input; the resolver node records no output events).
    resolver = nodes.get(N.MODEL_RESOLVER)
    evaluator = nodes.get(N.EVALUATOR)
    baseline_model = (evaluator.inputs.get("baseline_model") or [None])[0] if evaluator else None
    baseline_model = baseline_model or (resolver.output("model") if resolver else None)
    if baseline_model is not None:
        r.baseline_model = {"artifact_id": baseline_model.id, "uri": baseline_model.uri}
    if evaluator is not None and evaluator.output("evaluation") is not None:
        r.evaluation = evaluation(evaluator.output("evaluation").uri, evaluator.exec_properties().get("eval_config"))
        r.evaluation["staleness_history"] = staleness_history(store, pipeline_root)
    if r.training and r.training.get("importance"):
        r.training["importance_history"] = importance_history(store, pipeline_root)
    if evaluator is not None and evaluator.output("blessing") is not None:
        r.blessed = bool(props(evaluator.output("blessing")).get("blessed"))

    check = nodes.get(N.SERVING_CHECK)
    if check is not None and check.output("blessing") is not None:
        path = os.path.join(check.output("blessing").uri, layout.SERVING_CHECK_FILE)
        found = _read_json(path)
        r.serving_check = {**found, "report": path} if found is not None else None

    approval = nodes.get(N.APPROVAL_GATE)
    if approval is not None and approval.output("approval") is not None:
        r.approval = {k: v for k, v in props(approval.output("approval")).items()
                      if k in ("decision", "reviewer", "comment", "decided_at", "source")}

    pusher = nodes.get(N.PUSHER)
    pushed = pusher.output("pushed_model") if pusher else None
    pp = props(pushed) if pushed is not None else {}
    if pp.get("pushed"):
        r.push = {"pushed": True, "version": pp.get("pushed_version"), "path": pp.get("pushed_destination"),
                  "time": _time(pushed.create_time_since_epoch), "already_serving": bool(pp.get("already_pushed")),
                  "signature": _signature(pp.get("pushed_destination"))}
    lite = nodes.get(N.TFLITE_EXPORT)
    if lite is not None and lite.output("exports") is not None:
        r.tflite = _read_json(os.path.join(lite.output("exports").uri, "tflite_export.json"))
    r.cost = cost_lib.total({k: n.cost for k, n in r.nodes.items()})
    _redact_errors(r)
    r.outcome = classify(r)
    if not r.push.get("pushed"):
        r.push = {"pushed": False, "reason": r.outcome.reason}
    else:
        r.live = live_record(store, r.push.get("path"), r.evaluation)
    return r


_ROLLOUT_EVENTS = ("stable", "canary", "canary_superseded", "promote", "canary_rollback", "rollback", "release")
# (history event, the field naming the version, the version's role after it), first match wins.
_ROLES = (("canary", "version", "canary"), ("stable", "version", "stable"), ("promote", "to_version", "stable"),
          ("canary_rollback", "version", "rolled back"), ("canary_superseded", "version", "superseded"),
          ("promote", "from_version", "replaced"), ("rollback", "from_version", "replaced"),
          ("rollback", "to_version", "stable"))


def live_record(store, version_path: str | None, evaluation: dict | None) -> dict | None:
    """The pushed version's life after the push: its rollout events (serving/history.jsonl),
    the rollout controller's decisions about it (MLMD), and its offline key metrics beside
    the live ones of the latest decision. None when the version never took part in a rollout."""
    from core.metadata_queries import rollout_decisions
    from serving.repository import history

    if not version_path or not os.path.basename(version_path).isdigit():
        return None
    version, base = int(os.path.basename(version_path)), os.path.dirname(version_path)
    model = os.path.basename(base)
    events = [e for e in history.read(base) if e.get("event") in _ROLLOUT_EVENTS
              and version in (e.get("version"), e.get("to_version"), e.get("from_version"), e.get("stable_version"))]
    decisions = rollout_decisions(store, model, version)
    if not events and not decisions:
        return None
    role = None
    for e in events:  # the last event naming the version says what it is now
        role = next((r for kind, field, r in _ROLES if e["event"] == kind and e.get(field) == version), role)
    side_by_side = []
    latest = decisions[-1] if decisions else None
    overall = (evaluation or {}).get("overall") or {}
    if latest:
        mine = "canary" if latest.get("canary_version") == version else "stable"
        other = "stable" if mine == "canary" else "canary"
        for metric, live in (latest.get("live") or {}).get(mine, {}).items():
            if isinstance(live, dict) and "value" in live:
                side_by_side.append({"metric": metric, "offline": (overall.get(metric) or {}).get("candidate"),
                                     "live": live["value"],
                                     "live_low": live.get("low"), "live_high": live.get("high"),
                                     "other_live": ((latest["live"].get(other) or {}).get(metric) or {}).get("value")})
    return {"version": version, "model": model, "role": role, "events": events, "decisions": decisions,
            "offline_vs_live": side_by_side, "compared_with": (
                (latest.get("stable_version") if latest.get("canary_version") == version else latest.get("canary_version"))
                if latest else None)}


def _signature(version_dir: str | None) -> dict | None:
    """The pushed version's signature as it says (digest, signer, files); verified by
    `retrain verify` and by a server started with --require-signed."""
    path = os.path.join(version_dir, signing.SIGNATURE) if version_dir else None
    if not path or not os.path.isfile(path):
        return None
    try:
        return signing.describe(path)
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"unreadable signature {path}: {e}"}


def read_folder(folder: str, store=None) -> RunRecord:
    """The record of the run whose run folder this is (`core.run_folder`).

    Raises:
      LookupError: neither MLMD nor the folder knows the run.
    """
    from core import metadata, run_folder

    info = run_folder.read_info(folder)
    # Run folders before the metadata setting recorded a SQLite path.
    url = info.get("metadata") or f"sqlite:///{os.path.abspath(info['metadata_path']).lstrip('/')}"
    where = metadata.from_record(url)
    pipeline_root = info.get("pipeline_root") or layout.pipeline_root(
        os.path.dirname(os.path.dirname(where.path)), info["pipeline"])
    if store is None:
        store = metadata.open_store(where, readonly=True)
    return read(store, info["pipeline"], pipeline_root, info["run_id"],
                run_folder.read_results(folder), info.get("backfilled_spans"), info.get("span"), info.get("beam"),
                info.get("feature_policy"))
