"""A simpler model is not better: the candidate against the linear model fitted beside it.

The Trainer exports a linear model with the candidate's head on the same transformed
features (trainer_toolkit/simple_baseline.py). The Evaluator scores it as a third model
(`SIMPLE`) in the same TFMA pass as the candidate and the last blessed model, on the same
examples and slices, on its key metric, without thresholds of its own. `judge` compares the candidate's key
metric with the simple model's:

- TFMA's intervals are per model (its paired differences are only against the baseline),
  so the difference's standard error is sqrt(se_candidate^2 + se_simple^2): exact for
  independent estimates and wider than the paired one when both models get the same
  examples right (the usual case), so the rule errs towards the candidate;
- `require: not_worse` (default) refuses when the candidate is significantly worse than
  the simple model by more than `min_lift` (the upper bound of candidate - simple lies
  below -min_lift); `require: better` refuses unless the lower bound exceeds +min_lift.
  For an error metric (regression) the difference is simple - candidate, and min_lift
  is relative to the simple model's error.

TensorFlow-free apart from TFMA's protos (add_to_config).
"""

from __future__ import annotations

import math
import re

from core import tasks

SIMPLE = "simple"


def _metric_name(class_name: str) -> str:
    """TFMA's default name of a metric class: `AUC` -> auc, `BinaryAccuracy` -> binary_accuracy."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def add_to_config(eval_config, candidate_name: str = "candidate", key_metric: str | None = None):
    """`eval_config` (after TFMA's defaults) with the simple model as one more model: a copy
    of the candidate's spec named SIMPLE, scored without thresholds on the example count and
    `key_metric` (the one `judge` compares; every metric when None), since each metric of a
    model is computed on every slice, with its interval; the thresholds stay on the
    candidate (and baseline). Returns a new EvalConfig."""
    import tensorflow_model_analysis as tfma

    config = tfma.EvalConfig()
    config.CopyFrom(eval_config)
    candidate = next(s for s in config.model_specs if not s.is_baseline)
    if not candidate.name:
        candidate.name = candidate_name
    names = [s.name for s in config.model_specs]
    simple = config.model_specs.add()
    simple.CopyFrom(candidate)
    simple.name = SIMPLE
    unthresholded = tfma.MetricsSpec(model_names=[SIMPLE])
    for spec in config.metrics_specs:
        # TFMA names a lone model "" (and its metrics specs after it): the name given above.
        own = [n or candidate.name for n in spec.model_names] or names
        del spec.model_names[:]
        spec.model_names.extend(own)
        for metric in spec.metrics:
            if key_metric and _metric_name(metric.class_name) not in (key_metric, "example_count"):
                continue
            copy = unthresholded.metrics.add()
            copy.CopyFrom(metric)
            copy.ClearField("per_slice_thresholds")
            copy.ClearField("cross_slice_thresholds")
            copy.ClearField("threshold")
    config.metrics_specs.append(unthresholded)
    return config


def _entry(metrics: list[dict], name: str, model: str) -> dict | None:
    return next((m for m in metrics if m["name"] == name and m["model"] == model and not m["is_diff"]), None)


def judge(metrics: list[dict], key_metric: str, level: float, settings) -> dict:
    """The comparison of the candidate with the simple model on the overall slice.

    Args:
      metrics: the overall slice's entries (`significance.read_tfma`): name, model, is_diff,
        value, std_error, dof.
      key_metric: the task's key metric (core.tasks.KEY_METRICS).
      level: the one-sided level of the bound.
      settings: trainer_toolkit.settings.SimpleBaselineSettings.

    Returns:
      {"judged", "refused", "metric", "candidate", "simple", "difference", "interval",
       "rule", "reason"}; "refusal" (the reason a refused candidate gets) when refused.
    """
    from scipy import stats

    cand, simple = _entry(metrics, key_metric, "candidate"), _entry(metrics, key_metric, SIMPLE)
    lower_better = key_metric in tasks.LOWER_IS_BETTER
    rule = ("significantly worse than the simple model" if settings.require == "not_worse"
            else "not significantly better than the simple model") + (
        f" by {settings.min_lift:g}{' (relative)' if lower_better else ''}" if settings.min_lift else "")
    out = {"judged": False, "refused": False, "metric": key_metric, "require": settings.require,
           "min_lift": settings.min_lift, "confidence": 1.0 - level, "rule": f"refused when {rule}",
           "candidate": cand["value"] if cand else None, "simple": simple["value"] if simple else None}
    if cand is None or simple is None:
        out["reason"] = f"no {key_metric} of {'the simple model' if cand else 'the candidate'}: not judged"
        return out
    # Positive: the candidate is better (higher, or a lower error).
    diff = simple["value"] - cand["value"] if lower_better else cand["value"] - simple["value"]
    lift = settings.min_lift * abs(simple["value"]) if lower_better else settings.min_lift
    out["difference"] = diff
    ses = [e.get("std_error") for e in (cand, simple)]
    if any(se is None or math.isnan(se) for se in ses):
        out["reason"] = f"no interval for {key_metric} (too few examples or one class only): not judged"
        return out
    se = math.sqrt(ses[0] ** 2 + ses[1] ** 2)
    dof = min(d for d in (cand.get("dof"), simple.get("dof")) if d) if cand.get("dof") or simple.get("dof") else None
    z = float(stats.t.ppf(1.0 - level, dof)) if dof else float(stats.norm.ppf(1.0 - level))
    low, high = diff - z * se, diff + z * se
    out.update(judged=True, std_error=se, interval=[low, high])
    refused = high < -lift if settings.require == "not_worse" else low <= lift
    out["refused"] = refused
    better = "lower" if lower_better else "higher"
    out["reason"] = (
        f"candidate {key_metric} {cand['value']:.4g} vs the simple model's {simple['value']:.4g}: the candidate's"
        f" lead is {diff:+.4g} ({better} is better), {100 * (1 - level):.0f}% bounds [{low:+.4g}, {high:+.4g}]"
        f" ({out['rule']})")
    if refused:
        out["refusal"] = f"a simpler model is better: {out['reason']}"
    return out
