"""Quality across groups: the candidate's rates per slice of sensitive or important features.

ML Test Score, model section ("the model is tested for considerations of inclusion").
The config names features (`fairness.slices`: taxi's `payment_type` and pickup area, a
generated pipeline's own). The Evaluator counts each feature's groups in the eval examples
and slices its one TFMA pass by those large enough to judge (`split_groups`), computing per
slice and with the confidence intervals of every other metric, what Fairness Indicators
computes: for a binary task the false positive and false negative rates and the predicted
positive rate at the decision threshold (TFMA's own FPR, FNR and PredictedPositiveRate
metrics, which are Fairness Indicators' rates; the fairness-indicators package adds a
notebook widget and some forty packages), beside the key metric; for multiclass the
accuracy; for regression the mean absolute error.

The gap of a slice is its distance from the overall value, in the direction that harms it:

- a rate (fpr, fnr, predicted_positive_rate): |slice - overall|, a disparity either way;
- a higher-is-better metric (auc, accuracy): overall - slice;
- an error (mean absolute/squared error): slice / overall - 1, relative.

A slice with fewer than `min_slice_examples` eval examples, or one where the rate is
undefined (no positives for fnr, no negatives for fpr), is reported as too small or
undefined, never silently passed. A gap beyond `max_gap[metric]` refuses the candidate when
its one-sided (1 - significance_level) lower bound lies beyond the limit (the slice and
overall standard errors combined as if independent: the slice is part of the whole, so the
true interval is narrower and the rule errs towards the candidate); a gap beyond the limit
whose interval still reaches below it is reported as such, not refused. The last blessed
model's gap on the same slice is shown beside it. TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from core import tasks
from core.settings import Settings, SettingsError

RATES = ("fpr", "fnr", "predicted_positive_rate")
# The metrics a slice gap can be judged on, per task, and the limit when the config gives none.
GAP_METRICS = {
    tasks.BINARY: ("fpr", "fnr", "predicted_positive_rate", "auc", "binary_accuracy"),
    tasks.MULTICLASS: ("sparse_categorical_accuracy",),
    tasks.REGRESSION: ("mean_absolute_error", "mean_squared_error"),
}
DEFAULT_MAX_GAP = {
    tasks.BINARY: {"fpr": 0.2, "fnr": 0.2},
    tasks.MULTICLASS: {"sparse_categorical_accuracy": 0.15},
    tasks.REGRESSION: {"mean_absolute_error": 0.5},
}
_LOWER_IS_BETTER = ("mean_absolute_error", "mean_squared_error")


@dataclasses.dataclass(frozen=True)
class FairnessSettings(Settings):
    """The `fairness:` block of a pipeline config."""

    # The features whose values are the groups (each its own TFMA slicing spec).
    slices: tuple[str, ...] = ()
    # metric -> the largest gap tolerated (absolute for rates and AUC/accuracy, relative
    # for errors); empty: DEFAULT_MAX_GAP of the task. A metric of GAP_METRICS[task].
    max_gap: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # The decision threshold of a binary model's rates.
    threshold: float = 0.5
    # Fewer eval examples in a slice: reported as too small to judge.
    min_slice_examples: int = 30
    # A gap refuses when its lower one-sided (1 - level) bound is beyond max_gap.
    significance_level: float = 0.05
    enabled: bool = True

    def check(self) -> None:
        if len(set(self.slices)) != len(self.slices):
            raise SettingsError(f"slices: a feature is named twice in {list(self.slices)}")
        for metric, limit in self.max_gap.items():
            if not limit >= 0:
                raise SettingsError(f"max_gap.{metric}: must be >= 0, got {limit}")
        if not 0.0 < self.threshold < 1.0:
            raise SettingsError(f"threshold: must be within (0, 1), got {self.threshold}")
        if self.min_slice_examples < 1:
            raise SettingsError(f"min_slice_examples: must be at least 1, got {self.min_slice_examples}")
        if not 0.0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: must be within (0, 0.5), got {self.significance_level}")

    def gates(self, task: str) -> dict[str, float]:
        """metric -> max gap for `task`.

        Raises:
          SettingsError: for a metric the task does not compute.
        """
        gates = dict(self.max_gap) or dict(DEFAULT_MAX_GAP[task])
        for metric in gates:
            if metric not in GAP_METRICS[task]:
                raise SettingsError(f"max_gap.{metric}: not a metric of a {task} task; one of"
                                    f" {list(GAP_METRICS[task])}")
        return gates

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.slices)


def _entry(entries: list[dict], name: str, model: str) -> dict | None:
    return next((e for e in entries if e["name"] == name and e["model"] == model and not e["is_diff"]), None)


def _finite(entry: dict | None) -> bool:
    return entry is not None and entry["value"] is not None and math.isfinite(entry["value"])


def gap(metric: str, slice_value: float, overall: float) -> float:
    """The slice's gap (positive: the slice is worse off; rates: either way)."""
    if metric in RATES:
        return abs(slice_value - overall)
    if metric in _LOWER_IS_BETTER:
        return slice_value / overall - 1.0 if overall else math.inf
    return overall - slice_value


def _gap_se(metric: str, s: dict, o: dict) -> float | None:
    ses = [e.get("std_error") for e in (s, o)]
    if any(se is None or math.isnan(se) for se in ses):
        return None
    se = math.sqrt(ses[0] ** 2 + ses[1] ** 2)
    if metric in _LOWER_IS_BETTER:  # of slice/overall, by the delta method
        return se / abs(o["value"]) if o["value"] else None
    return se


def _count(entries: list[dict], model: str = "candidate") -> int:
    e = _entry(entries, "example_count", model)
    return int(e["value"]) if e else 0


def split_groups(counts: Mapping[str, Mapping[str, int]], min_examples: int) -> tuple[dict, dict]:
    """({feature: [values with at least min_examples eval examples]}, {feature: [{"slice",
    "examples"}] of the others}): TFMA slices the first (each metric per slice has an
    interval to compute), the others are reported as too small without being sliced."""
    big, small = {}, {}
    for feature, values in counts.items():
        big[feature] = sorted((v for v, n in values.items() if n >= min_examples), key=str)
        small[feature] = [{"slice": str(v), "examples": int(n)} for v, n in sorted(values.items(), key=lambda x: str(x[0]))
                          if n < min_examples]
    return big, small


def judge(by_feature: Mapping[str, Mapping], overall: list[dict], task: str, settings: FairnessSettings,
          small_groups: Mapping[str, list[dict]] | None = None) -> dict:
    """The candidate's gaps per slice and the verdict.

    Args:
      by_feature: feature -> slice value -> that slice's entries (`significance.read_slices`).
      overall: the overall slice's entries.
      small_groups: feature -> the groups counted too small before TFMA ran (`split_groups`),
        listed as too small beside those TFMA's slices show.

    Returns:
      {"judged", "refused", "gates", "features": {feature: {"slices": [row...], "too_small": [...],
       "undefined": [...], "max_gap": {metric: gap}}}, "reasons", "reason"}; a row: slice, metric,
      value, overall, gap, lower_bound, limit, examples, status ("ok", "over", "over_not_significant"),
      baseline_gap. "refusals" name each slice over its limit.
    """
    from scipy import stats

    gates = settings.gates(task)
    z = float(stats.norm.ppf(1.0 - settings.significance_level))
    out = {"judged": False, "refused": False, "gates": gates, "threshold": settings.threshold,
           "min_slice_examples": settings.min_slice_examples, "confidence": 1.0 - settings.significance_level,
           "features": {}, "refusals": [], "warnings": []}
    judged_any = False
    for feature in settings.slices:
        slices = by_feature.get(feature) or {}
        report = {"slices": [], "too_small": list((small_groups or {}).get(feature) or []), "undefined": [],
                  "max_gap": {}}
        out["features"][feature] = report
        if not slices and report["too_small"]:
            continue  # every group too small to judge: listed, not sliced
        if not slices:
            out["warnings"].append(f"{feature}: no slices in the eval examples (is it a raw feature?): not judged")
            continue
        for key in sorted(slices, key=str):
            entries = slices[key]
            value = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            n = _count(entries)
            label = f"{feature}={value}"
            if n < settings.min_slice_examples:
                report["too_small"].append({"slice": str(value), "examples": n})
                continue
            for metric, limit in gates.items():
                s, o = _entry(entries, metric, "candidate"), _entry(overall, metric, "candidate")
                if not (_finite(s) and _finite(o)):
                    report["undefined"].append({"slice": str(value), "metric": metric, "examples": n})
                    continue
                judged_any = True
                g = gap(metric, s["value"], o["value"])
                se = _gap_se(metric, s, o)
                low = g - z * se if se is not None else None
                # |x| of an estimate: its lower bound is the one of the distance from zero.
                status = "ok"
                if g > limit:
                    status = "over" if low is not None and low > limit else "over_not_significant"
                bs, bo = _entry(entries, metric, "baseline"), _entry(overall, metric, "baseline")
                row = {"slice": str(value), "metric": metric, "value": s["value"], "overall": o["value"], "gap": g,
                       "lower_bound": low, "limit": limit, "examples": n, "status": status,
                       "baseline_gap": gap(metric, bs["value"], bo["value"]) if _finite(bs) and _finite(bo) else None}
                report["slices"].append(row)
                report["max_gap"][metric] = max(report["max_gap"].get(metric, -math.inf), g)
                relative = " (relative)" if metric in _LOWER_IS_BETTER else ""
                text = (f"{metric} on {label} is {s['value']:.4g} vs {o['value']:.4g} overall: gap {g:.4g}{relative}"
                        f" beyond max_gap {limit:g}")
                if status == "over":
                    out["refusals"].append(f"{text} ({100 * (1 - settings.significance_level):.0f}% lower bound"
                                           f" {low:.4g}; {n} examples)")
                elif status == "over_not_significant":
                    out["warnings"].append(f"{text}, but within noise ({n} examples)")
        if report["too_small"]:
            out["warnings"].append(
                f"{feature}: {len(report['too_small'])} slice(s) with fewer than {settings.min_slice_examples} eval"
                f" examples, too small to judge: " + ", ".join(r["slice"] for r in report["too_small"][:10])
                + (" ..." if len(report["too_small"]) > 10 else ""))
    out["judged"] = judged_any
    out["refused"] = bool(out["refusals"])
    if out["refused"]:
        out["reason"] = "quality gap across groups: " + "; ".join(out["refusals"])
    elif judged_any:
        worst = max(((f, m, g) for f, r in out["features"].items() for m, g in r["max_gap"].items()),
                    key=lambda t: t[2] / (gates[t[1]] or 1e-12))
        out["reason"] = (f"every judged slice within its max_gap (widest: {worst[1]} on {worst[0]}, gap"
                         f" {worst[2]:.4g} of {gates[worst[1]]:g})")
    else:
        out["reason"] = "no slice large enough to judge: " + "; ".join(out["warnings"])
    return out


def metrics(task: str, settings: FairnessSettings) -> list[tuple[str, dict]]:
    """The TFMA metric classes (and their config) the gaps need beyond the task's own."""
    if task != tasks.BINARY or not settings.active:
        return []
    config = {"thresholds": [settings.threshold]}
    return [("FPR", config), ("FNR", config), ("PredictedPositiveRate", config)]
