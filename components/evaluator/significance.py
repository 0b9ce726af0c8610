"""The candidate's verdict: TFMA's floors, and drops vs the baseline judged with their intervals.

TFMA computes every metric and the candidate-minus-baseline difference with a confidence
interval (jackknife or Poisson bootstrap over the same eval examples, scored by both
models). TFMA's own validation compares point estimates; on ~100 eval rows a good model
falls 0.02 AUC below the baseline by chance alone. Here a change threshold refuses the
candidate only when the drop beyond the tolerance is significant: the one-sided
(1 - level) confidence bound of the difference lies beyond the threshold. Value
thresholds (floors) stay as TFMA judged them, and a window with fewer eval examples
than the minimum is not judged at all (not blessed, reported as such).
"""

from __future__ import annotations

import math
from typing import Any

from core import layout

VERDICT_FILE = layout.SIGNIFICANCE_FILE
CANDIDATE, BASELINE = "candidate", "baseline"


def interval(value: float, std_error: float | None, dof: int | None, level: float) -> tuple[float, float] | None:
    """The two one-sided (1 - level) bounds: value -/+ t(1 - level, dof) x std_error."""
    if std_error is None or dof is None or dof < 1 or math.isnan(std_error):
        return None
    from scipy import stats

    half = float(stats.t.ppf(1.0 - level, dof)) * std_error
    return value - half, value + half


def judge(
    metrics: list[dict[str, Any]],
    failures: list[dict[str, Any]],
    level: float,
    min_examples: int,
) -> dict[str, Any]:
    """The verdict, from the overall slice's metrics and TFMA's validation failures.

    Args:
      metrics: one dict per overall-slice metric: name, model ("candidate"/"baseline"),
        is_diff, value, std_error, dof (the last two None without intervals).
      failures: TFMA's failures: name, is_diff, value, threshold dict (lower_bound or
        absolute, direction "higher"/"lower"), slice.
      level: the significance level (e.g. 0.05).
      min_examples: the fewest eval examples a verdict is given on.

    Returns:
      {"blessed", "reasons", "comparisons": [...], "floors": [...], "example_count"}.
    """
    by_key = {(m["name"], m["model"], m["is_diff"]): m for m in metrics}
    count = next((m["value"] for m in metrics if m["name"] == "example_count" and m["model"] == CANDIDATE
                  and not m["is_diff"]), None)
    reasons = []
    if count is None or count < min_examples:
        reasons.append(
            f"eval split too small to judge: {0 if count is None else int(count)} examples,"
            f" fewer than min_eval_examples {min_examples}"
        )
    comparisons = []
    floors = []
    for f in failures:
        if not f["is_diff"]:
            floors.append(f)
            bound = f["threshold"]
            reasons.append(
                f"{f['name']} {f['value']:.4g} on {f['slice']} is below the floor {bound['lower_bound']}"
                if "lower_bound" in bound and f["value"] < bound["lower_bound"]
                else f"{f['name']} {f['value']:.4g} on {f['slice']} is above the ceiling {bound['upper_bound']}"
                if "upper_bound" in bound and f["value"] > bound["upper_bound"]
                else f"{f['name']} {f['value']:.4g} on {f['slice']} is outside its bounds {bound}")
    change_failures = {f["name"]: f for f in failures if f["is_diff"]}
    for (name, model, is_diff), m in sorted(by_key.items()):
        if not is_diff or name == "example_count" or model != CANDIDATE:
            continue  # the simple baseline's differences vs the baseline are not judged here
        base = by_key.get((name, BASELINE, False))
        cand = by_key.get((name, CANDIDATE, False))
        bounds = interval(m["value"], m.get("std_error"), m.get("dof"), level)
        row = {
            "metric": name, "candidate": cand["value"] if cand else None,
            "baseline": base["value"] if base else None, "difference": m["value"],
            "interval": list(bounds) if bounds else None, "confidence": 1.0 - level, "verdict": "within tolerance",
        }
        failure = change_failures.get(name)
        if failure is not None:
            higher = failure["threshold"].get("direction", "higher") == "higher"
            tolerance = _absolute_tolerance(failure["threshold"], base["value"] if base else None)
            row["tolerance"] = tolerance
            if bounds is None:
                significant = True  # no interval: TFMA's point verdict stands
                row["verdict"] = "worse than tolerated (no interval computed)"
            else:
                # The bound on the favourable side still lies beyond the tolerance.
                significant = bounds[1] < tolerance if higher else bounds[0] > tolerance
                row["verdict"] = (
                    "significantly worse than tolerated" if significant
                    else "beyond tolerance, but not significantly (within noise)"
                )
            if significant:
                reasons.append(
                    f"{name} {'fell' if higher else 'rose'} {abs(m['value']):.4g} vs the baseline"
                    f" (tolerated {abs(tolerance):.4g}{_relative_note(failure['threshold'])}),"
                    + (f" {100 * (1 - level):.0f}% bound {bounds[1] if higher else bounds[0]:+.4g}" if bounds else "")
                )
        comparisons.append(row)
    return {
        "blessed": not reasons,
        "reasons": reasons,
        "comparisons": comparisons,
        "floors": floors,
        "example_count": count,
        "significance_level": level,
        "min_eval_examples": min_examples,
    }


def _absolute_tolerance(threshold: dict[str, Any], baseline: float | None) -> float:
    """The change threshold as a difference: TFMA's `relative` is a share of the baseline's
    value (0.1: the MSE may rise by 10% of the baseline's), with TFMA's sign."""
    if "absolute" in threshold:
        return threshold["absolute"]
    return threshold["relative"] * abs(baseline) if baseline is not None else 0.0


def _relative_note(threshold: dict[str, Any]) -> str:
    return f" = {threshold['relative']:.0%} of the baseline" if "relative" in threshold else ""


def _metric_entries(record) -> list[dict]:
    """One slice's metrics: name, model, is_diff, value, std_error and dof (None without intervals)."""
    metrics = []
    for kv in record.metric_keys_and_values:
        if not kv.value.HasField("double_value"):
            continue
        entry = {
            "name": kv.key.name, "model": kv.key.model_name or CANDIDATE, "is_diff": kv.key.is_diff,
            "value": kv.value.double_value.value, "std_error": None, "dof": None,
        }
        if kv.HasField("confidence_interval"):
            # The value is TFMA's unsampled point estimate; the interval's standard
            # error and degrees of freedom come from the jackknife or bootstrap samples.
            ci = kv.confidence_interval
            if ci.standard_error.HasField("double_value"):
                entry["std_error"] = ci.standard_error.double_value.value
                entry["dof"] = int(ci.degrees_of_freedom.value)
        metrics.append(entry)
    return metrics


def read_slices(evaluation_uri: str, column: str) -> dict:
    """The metrics of each slice of one feature (value -> `_metric_entries`)."""
    import tensorflow_model_analysis as tfma

    out = {}
    for record in tfma.load_metrics(evaluation_uri):
        keys = record.slice_key.single_slice_keys
        if len(keys) == 1 and keys[0].column == column:
            out[getattr(keys[0], keys[0].WhichOneof("kind"))] = _metric_entries(record)
    return out


def read_tfma(evaluation_uri: str) -> tuple[list[dict], list[dict]]:
    """The overall slice's metrics (with intervals) and the validation failures TFMA wrote."""
    import tensorflow_model_analysis as tfma

    metrics = []
    for record in tfma.load_metrics(evaluation_uri):
        if record.slice_key.single_slice_keys:
            continue
        metrics += _metric_entries(record)
    failures = []
    validation = tfma.load_validation_result(evaluation_uri)
    for v in validation.metric_validations_per_slice:
        for f in v.failures:
            threshold: dict[str, Any] = {}
            vt, ct = f.metric_threshold.value_threshold, f.metric_threshold.change_threshold
            if f.metric_threshold.HasField("value_threshold"):
                if vt.HasField("lower_bound"):
                    threshold["lower_bound"] = vt.lower_bound.value
                if vt.HasField("upper_bound"):
                    threshold["upper_bound"] = vt.upper_bound.value
            if f.metric_threshold.HasField("change_threshold"):
                if ct.HasField("relative"):
                    threshold["relative"] = ct.relative.value
                else:
                    threshold["absolute"] = ct.absolute.value
                threshold["direction"] = "lower" if ct.direction == tfma.MetricDirection.LOWER_IS_BETTER else "higher"
            failures.append({
                "name": f.metric_key.name, "is_diff": f.metric_key.is_diff, "value": f.metric_value.double_value.value,
                "threshold": threshold, "slice": str(v.slice_key) or "overall",
            })
    return metrics, failures
