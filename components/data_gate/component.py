"""DataGate: stops a run before Transform/Trainer when the new span is not fit to train on.

It blocks on
- the schema anomalies ExampleValidator found in the new span;
- completeness: a feature's share of missing or empty values above the schema's limit
  (1 - presence.min_fraction), or risen beyond the policy's limit over the baseline's;
- volume: a row count outside the policy's bounds relative to the baseline span;
- drift of every feature of the schema (unless the policy opts it out, with a reason):
  numeric features by Jensen-Shannon divergence on TFDV's quantile histograms and by
  quantile shift, categorical ones by L-infinity distance, each against the calibrated
  limit k / sqrt(n_eff) (`policy.py`; a `drift_comparator` in the schema wins);
- row-level checks over every row of the span (`rows.py`, both splits):
  - domains: values outside a feature's value set or range learned from history, beyond
    the share good months had (`domains.py`);
  - span consistency: event times outside the span's month, and derived fields (hour,
    weekday, month) that disagree with the event time (`consistency.py`);
  - label health: the label as the pipeline's `label_fn` computes it: missing, constant,
    class shares or distribution against the reference spans before it (`label.py`).
The baseline is the last earlier span that passed the gate. `report.json` holds every
measurement, its limit and where the limit came from, whether the gate passes or not; a
failing gate then raises, which fails the node so nothing downstream runs and no report
artifact is published. Published reports therefore mean "passed", and carry the span's
statistics for the next span's checks.
"""

import json
import logging
import os

import tensorflow_data_validation as tfdv
from tensorflow_data_validation.utils import anomalies_util
from tensorflow_metadata.proto.v0 import anomalies_pb2

# The modules behind tfx.v1.dsl.components and tfx.v1.types, imported directly: `tfx.v1`
# also imports its Google Cloud extensions (7.6 s on this machine), which every node task
# that loads this executor would pay.
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.artifact import Artifact
from tfx.utils import io_utils

from components.data_gate import consistency as consistency_lib
from components.data_gate import domains as domains_lib
from components.data_gate import label as label_lib
from components.data_gate import measures
from components.data_gate import policy as gate_policy
from components.data_gate import rows as rows_lib
from core import files, layout

logger = logging.getLogger(__name__)

REPORT_FILE = layout.GATE_REPORT
BASELINE_STATS_FILE = "FeatureStats.pb"
STOPPED_DIR = os.path.basename(layout.GATE_STOPPED_DIR)  # beside the node's output folders


class DataGateReport(Artifact):
    """The gate's decision and the evidence behind it."""

    TYPE_NAME = "DataGateReport"


def is_gate_stop(exc: BaseException | None) -> bool:
    """True when a node failed because the gate refused the data (not a crash in the gate)."""
    return isinstance(exc, DataGateError)


class DataGateError(RuntimeError):
    """The new span failed the data gate; the message names the features."""

    def __init__(self, message: str, report_path: str, blocking_features: list[str]):
        super().__init__(message)
        self.report_path = report_path
        self.blocking_features = blocking_features


def _split_uri(artifact, split: str) -> str:
    return artifact_utils.get_split_uri([artifact], split)


def anomaly_entries(anomalies: anomalies_pb2.Anomalies, split: str, kind: str) -> list[dict]:
    entries = []
    for feature, info in sorted(anomalies.anomaly_info.items()):
        reasons = [
            {"type": anomalies_pb2.AnomalyInfo.Type.Name(r.type), "description": r.description}
            for r in info.reason
        ]
        entries.append({"feature": feature, "split": split, "kind": kind, "reasons": reasons})
    if anomalies.HasField("dataset_anomaly_info"):
        entries.append(
            {
                "feature": "<dataset>",
                "split": split,
                "kind": kind,
                "reasons": [
                    {"type": anomalies_pb2.AnomalyInfo.Type.Name(r.type), "description": r.description}
                    for r in anomalies.dataset_anomaly_info.reason
                ],
            }
        )
    return entries


def _schema_comparators(schema) -> dict[tuple[str, str], float]:
    """Hand-set drift thresholds in the curated schema, by (feature, measure): they win
    over the calibrated limit of the same measure."""
    out = {}
    for f in schema.feature:
        c = f.drift_comparator
        if c.HasField("jensen_shannon_divergence"):
            out[(f.name, "jsd")] = c.jensen_shannon_divergence.threshold
        if c.HasField("infinity_norm"):
            out[(f.name, "linf")] = c.infinity_norm.threshold
    return out


def _absolute_missing_limits(schema) -> dict[str, float]:
    """The schema's completeness limit per feature: 1 - presence.min_fraction."""
    return {
        f.name: 1.0 - f.presence.min_fraction
        for f in schema.feature
        if f.HasField("presence") and f.presence.HasField("min_fraction")
    }


def _blocking(feature: str, kind: str, measure: str, description: str) -> dict:
    return {"feature": feature, "split": "drift" if kind == "drift" else kind, "kind": kind,
            "reasons": [{"type": measure, "description": description}]}


def drift_checks(measured: dict, policy: gate_policy.GatePolicy, overrides: dict, baseline: str) -> list[dict]:
    """Every distance of every watched feature against its limit (`baseline` names what the
    data is compared with in the messages: "span 201302", "training data (span 201302)")."""
    checks = []
    for feature, entry in sorted(measured.items()):
        if feature in policy.opt_out:
            continue
        for measure in gate_policy.MEASURES:
            if measure not in entry:
                continue
            k, source = policy.k(feature, measure)
            limit = gate_policy.threshold(measure, k, entry["n_eff"])
            if (feature, measure) in overrides:
                limit, source = overrides[(feature, measure)], "schema"
            value = entry[measure]
            power = gate_policy.NOISE_POWER[measure]
            checks.append({
                "feature": feature, "measure": measure, "value": round(value, 6),
                "threshold": round(limit, 6), "k": k, "n_eff": round(entry["n_eff"], 1),
                "limit_source": source, "drifted": value > limit,
                "description": (
                    f"{feature}: {gate_policy.MEASURE_NAMES[measure]} {value:.4g} vs {baseline}"
                    f" {'exceeds' if value > limit else 'within'} the limit {limit:.4g}"
                    + (f" (k {k:g} / n_eff {entry['n_eff']:.0f}^{power:g}, {source})" if source != "schema" else " (schema)")
                ),
            })
    return checks


def completeness_checks(measured: dict, policy: gate_policy.GatePolicy, absolute: dict, baseline: str | None) -> list[dict]:
    """Missing-or-empty share per feature: vs the schema's limit and vs the baseline (if any)."""
    checks = []
    for feature, entry in sorted(measured.items()):
        share = entry["missing_share"]
        if feature in absolute:
            limit = absolute[feature]
            checks.append({
                "feature": feature, "measure": "missing_share", "value": round(share, 6),
                "threshold": round(limit, 6), "limit_source": "schema", "failed": share > limit + 1e-9,
                "description": f"{feature}: {share:.1%} of examples missing or empty"
                               f" {'exceeds' if share > limit + 1e-9 else 'within'} the schema's limit {limit:.1%}"
                               " (1 - presence.min_fraction)",
            })
        if baseline is not None:
            base = entry["baseline_missing_share"]
            k, source = policy.k(feature, "missing")
            allowed = gate_policy.threshold("missing", k, entry["rows_n_eff"])
            rise = share - base
            checks.append({
                "feature": feature, "measure": "missing_increase", "value": round(rise, 6),
                "threshold": round(allowed, 6), "k": k, "n_eff": round(entry["rows_n_eff"], 1),
                "limit_source": source, "failed": rise > allowed,
                "description": f"{feature}: missing or empty share {share:.1%} vs {base:.1%} in {baseline}"
                               f" (+{max(rise, 0):.1%}) {'exceeds' if rise > allowed else 'within'}"
                               f" the limit +{allowed:.1%} (k {k:g} / n_eff {entry['rows_n_eff']:.0f}^0.5, {source})",
            })
    return checks


def _volume_check(rows: int, base_rows: int, policy: gate_policy.GatePolicy, base_span) -> dict:
    ratio = rows / max(base_rows, 1)
    ok = policy.min_ratio <= ratio <= policy.max_ratio
    return {
        "feature": "<rows>", "measure": "row_ratio", "rows": rows, "baseline_rows": base_rows,
        "value": round(ratio, 4), "min_ratio": policy.min_ratio, "max_ratio": policy.max_ratio, "failed": not ok,
        "description": f"{rows} rows vs {base_rows} in span {base_span}: ratio {ratio:.3g}"
                       f" {'within' if ok else 'outside'} [{policy.min_ratio:g}, {policy.max_ratio:g}]",
    }


# How each row-level check is named in a blocking entry.
_ROW_MEASURES = {"domain": "OUT_OF_DOMAIN", "event_time": "EVENT_TIME_OUTSIDE_SPAN", "derived": "DERIVED_MISMATCH",
                 "label_missing": "LABEL_MISSING", "label_constant": "LABEL_CONSTANT", "label_classes": "LABEL_CLASSES",
                 "label_ks": "LABEL_KS", "label_scale": "LABEL_SCALE", "label_uncomputable": "LABEL_UNCOMPUTABLE"}
_ROW_KINDS = {"domain": "domain", "event_time": "consistency", "derived": "consistency"}


def row_checks(row_facts: dict, policy: gate_policy.GatePolicy, span: int | None) -> dict:
    """The row-level checks of a span from what `scan_rows` counted (pure).

    Returns:
      {"domains": [...], "consistency": [...], "label": {"checks", "facts", "reference", ...}}.
    """
    alpha = policy.share_alpha
    accepted = row_facts.get("accepted_values") or {}
    domains = {name: domains_lib.Domain.from_entry(name, policy.domains[name]).with_accepted(accepted.get(name))
               for name in row_facts.get("domains") or {}}
    out: dict = {
        "domains": [domains_lib.judge(domains[name], counted, alpha)
                    for name, counted in sorted((row_facts.get("domains") or {}).items())],
        "consistency": [],
        # Features whose values are of another type than the schema's (ExampleValidator reports them).
        "mistyped": dict(row_facts.get("mistyped") or {}),
        # The value sets' values accepted since calibration, with this span's (the next span's, if it passes).
        "accepted_values": _accepted(accepted, row_facts.get("domains") or {}),
    }
    if row_facts.get("consistency"):
        out["consistency"] = consistency_lib.judge(row_facts["consistency"], policy.consistency, alpha)
    label = row_facts.get("label")
    if label is not None and label.get("facts") is not None:
        reference = label.get("reference") or []
        checks = label_lib.judge(label["facts"], reference, policy.label, alpha, label["name"], span)
        spans_kept = int((policy.label or {}).get("reference_spans") or label.get("reference_spans") or 6)
        out["label"] = {**label, "checks": checks,
                        "next_reference": label_lib.next_reference(label["facts"], reference, span, spans_kept)}
    elif label is not None:
        out["label"] = label
    return out


def _accepted(before: dict, counted: dict) -> dict:
    """Values outside each calibrated set, from the passed spans before and this one; a set
    that has taken more than MAX_ACCEPTED is open (its entry says so, and it stops growing)."""
    out = {}
    for name in sorted(set(before) | {n for n, c in counted.items() if c.get("new_values")}):
        values = sorted({*before.get(name, []), *counted.get(name, {}).get("new_values", [])}, key=str)
        out[name] = values[:domains_lib.MAX_ACCEPTED]
    return out


def evaluate_gate(
    statistics,
    schema,
    anomalies_by_split: dict[str, anomalies_pb2.Anomalies],
    baseline_statistics,
    policy: gate_policy.GatePolicy | None = None,
    baseline_span: int | None = None,
    row_facts: dict | None = None,
    span: int | None = None,
) -> dict:
    """Pure decision: returns the report dict (no I/O).

    Args:
      statistics: DatasetFeatureStatisticsList of the new span (one split).
      schema: the curated Schema proto.
      anomalies_by_split: ExampleValidator's anomalies per split of the new span.
      baseline_statistics: statistics of the baseline span (same split), or None.
      policy: the calibrated limits (gate.yaml); None applies the strict defaults.
      baseline_span: the baseline's span number, for the messages.
      row_facts: what `scan_rows` counted over the span's rows (None: no row-level checks).
      span: the new span's number (the label's reference is kept by span).
    """
    policy = policy or gate_policy.GatePolicy()
    features = sorted(f.name for f in schema.feature)
    blocking = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        blocking += anomaly_entries(anomalies, split, "schema")
    has_base = baseline_statistics is not None
    measured = measures.measure_pair(statistics, baseline_statistics if has_base else statistics, features)
    if not has_base:
        for entry in measured.values():
            for m in gate_policy.MEASURES:
                entry.pop(m, None)
    base_label = f"span {baseline_span}"
    drift = drift_checks(measured, policy, _schema_comparators(schema), base_label) if has_base else []
    completeness = completeness_checks(
        measured, policy, _absolute_missing_limits(schema), base_label if has_base else None
    )
    volume = None
    if has_base:
        volume = _volume_check(measures.num_examples(statistics), measures.num_examples(baseline_statistics),
                               policy, baseline_span)
        if volume["failed"]:
            blocking.append(_blocking("<rows>", "volume", "ROW_COUNT", volume["description"]))
    for c in completeness:
        if c["failed"]:
            blocking.append(_blocking(c["feature"], "completeness", c["measure"].upper(), c["description"]))
    for d in drift:
        if d["drifted"]:
            blocking.append(_blocking(d["feature"], "drift", d["measure"].upper(), d["description"]))
    rows = row_checks(row_facts, policy, span) if row_facts is not None else None
    if rows is not None:
        label_checks = (rows.get("label") or {}).get("checks") or []
        for c in [*rows["domains"], *rows["consistency"], *label_checks]:
            if c["failed"]:
                blocking.append(_blocking(c["feature"], _ROW_KINDS.get(c["check"], "label"), _ROW_MEASURES[c["check"]],
                                          c["description"]))
    return {
        "passed": not blocking,
        "blocking_features": sorted({e["feature"] for e in blocking}),
        "anomalies": blocking,
        "drift": drift,
        "completeness": completeness,
        "volume": volume,
        "drift_checked": has_base,
        "opt_out": dict(policy.opt_out),
        "policy": "calibrated" if policy.calibration else "defaults",
        "calibration": dict(policy.calibration),
        "rows": measures.num_examples(statistics),
        **({"row_checks": rows, "domain_opt_out": dict(policy.domain_opt_out), "no_domain": dict(policy.no_domain)}
           if rows is not None else {}),
    }


def scan_rows(example_files: list[str], schema, policy: gate_policy.GatePolicy,
              consistency: consistency_lib.SpanConsistency | None, label: dict | None, span: int,
              baseline_report: dict | None) -> dict:
    """Reads every row of the span once and counts what the row-level checks judge.

    Args:
      example_files: the span's gzipped TFRecord files of tf.Examples (every split).
      label: {"fn", "name", "kind"} of the pipeline's label, or None.
      baseline_report: the baseline's report.json (its label reference), or None.
    """
    accepted = ((baseline_report or {}).get("row_checks") or {}).get("accepted_values") or {}
    domains = {name: domains_lib.Domain.from_entry(name, entry).with_accepted(accepted.get(name))
               for name, entry in policy.domains.items() if name not in policy.domain_opt_out}
    label_spec = None
    label_note = None
    if label:
        try:
            label_lib.load_fn(label["fn"])
            label_spec = (label["fn"], label["kind"])
        except label_lib.LabelError as e:
            if label.get("explicit"):
                raise
            label_note = f"the label is not checked: {e} (define label_fn and call it from preprocessing_fn)"
    scan = rows_lib.SpanScan(schema, domains=domains, consistency=(consistency, span) if consistency else None,
                             label=label_spec).scan(example_files)
    facts: dict = {"rows": scan.rows, "mistyped": dict(scan.mistyped), "accepted_values": accepted,
                   "domains": {name: t.to_dict() for name, t in scan.domains.items() if name not in scan.mistyped}}
    if scan.consistency is not None:
        facts["consistency"] = scan.consistency.to_dict()
    if label:
        reference = ((baseline_report or {}).get("row_checks") or {}).get("label", {}).get("next_reference") or []
        facts["label"] = {"name": label["name"], "fn": label["fn"], "kind": label["kind"], "note": label_note,
                          "facts": scan.label.facts() if scan.label else None, "reference": reference}
    return facts


@component
def DataGate(
    examples: InputArtifact[standard_artifacts.Examples],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    report: OutputArtifact[DataGateReport],
    # The report of the last earlier span that passed the gate; None on the first span.
    baseline: InputArtifact[DataGateReport] = None,
    drift_split: Parameter[str] = "train",
    # The calibrated limits (gate.yaml) as JSON: an execution property, so a changed
    # policy re-runs the gate instead of reusing a cached verdict.
    policy: Parameter[str] = "",
    # The pipeline's span consistency (the config's `span_consistency:`) as JSON.
    span_consistency: Parameter[str] = "",
    # The label as the pipeline computes it: {"fn", "name", "kind", "explicit"} as JSON.
    label: Parameter[str] = "",
) -> None:
    """Passes the new span on, or fails the run naming the features that stopped it."""
    schema_proto = tfdv.load_schema_text(io_utils.get_only_uri_in_dir(schema.uri))
    current = tfdv.load_stats_binary(os.path.join(_split_uri(statistics, drift_split), "FeatureStats.pb"))
    baseline_stats = None
    if baseline is not None:
        baseline_stats = tfdv.load_stats_binary(os.path.join(baseline.uri, BASELINE_STATS_FILE))
    by_split = {}
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        path = os.path.join(_split_uri(anomalies, split), "SchemaDiff.pb")
        by_split[split] = anomalies_util.load_anomalies_binary(path) if os.path.exists(path) else anomalies_pb2.Anomalies()
    span = examples.get_int_custom_property("span")
    baseline_span = baseline.get_int_custom_property("span") if baseline else None
    limits = gate_policy.from_dict(json.loads(policy)) if policy else gate_policy.GatePolicy()
    baseline_report = None
    if baseline is not None and os.path.exists(os.path.join(baseline.uri, REPORT_FILE)):
        with open(os.path.join(baseline.uri, REPORT_FILE), encoding="utf-8") as f:
            baseline_report = json.load(f)
    consistency = None
    if span_consistency:
        consistency = consistency_lib.SpanConsistency.from_dict(json.loads(span_consistency), "span_consistency")
    span_files = rows_lib.split_files(examples.uri, artifact_utils.decode_split_names(examples.split_names))
    row_facts = scan_rows(span_files, schema_proto, limits, consistency, json.loads(label) if label else None, span,
                          baseline_report)
    result = evaluate_gate(current, schema_proto, by_split, baseline_stats, limits, baseline_span, row_facts, span)
    result["span"] = span
    result["baseline_span"] = baseline_span
    result["drift_split"] = drift_split
    if result["passed"]:
        folder = report.uri
    else:
        # TFX removes a failed execution's output folders, so a stopped span's report goes
        # beside them: <pipeline_root>/DataGate/stopped/span-<span>-<execution>/.
        folder = os.path.join(
            os.path.dirname(os.path.dirname(report.uri)),
            STOPPED_DIR,
            f"span-{span}-{os.path.basename(report.uri)}",
        )
    os.makedirs(folder, exist_ok=True)
    path = files.write_text(os.path.join(folder, REPORT_FILE), json.dumps(result, indent=2, sort_keys=True))
    # Kept with the report: the next span's drift baseline, if this span passes.
    with open(os.path.join(folder, BASELINE_STATS_FILE), "wb") as f:
        f.write(current.SerializeToString())
    report.set_int_custom_property("passed", int(result["passed"]))
    report.set_string_custom_property("blocking_features", ",".join(result["blocking_features"]))
    report.set_int_custom_property("span", span)
    logger.info("Data gate report: %s", path)
    if not result["passed"]:
        details = "; ".join(
            r["description"] if e["kind"] != "schema"
            else f"{e['feature']} (schema, {e['split']}: {r['description'] or r['type']})"
            for e in result["anomalies"]
            for r in e["reasons"]
        )
        raise DataGateError(
            f"span {span} stopped by the data gate: {details}. Report: {path}",
            report_path=path,
            blocking_features=result["blocking_features"],
        )
