"""A simpler model is not better: the candidate against the linear model fitted beside it.

The Trainer exports a linear model with the candidate's head on the same transformed
features (trainer_toolkit/simple_baseline.py). The Evaluator scores it as a third model
(`SIMPLE`) in the same Beam pass over the same eval examples as the candidate and the last
blessed model, with a TFMA config of its own (`eval_config`: the overall slice and the key
metric, without thresholds), so that it does not pay for every slice of the main config.
`judge` compares the candidate's key metric with the simple model's:

- TFMA's intervals are per model (its paired differences are only against the baseline),
  so the difference's standard error is sqrt(se_candidate^2 + se_simple^2): exact for
  independent estimates and wider than the paired one when both models get the same
  examples right (the usual case), so the rule errs towards the candidate;
- `require: not_worse` (default) refuses when the candidate is significantly worse than
  the simple model by more than `min_lift` (the upper bound of candidate - simple lies
  below -min_lift); `require: better` refuses unless the lower bound exceeds +min_lift.
  For an error metric (regression) the difference is simple - candidate, and min_lift
  is relative to the simple model's error.

TensorFlow-free apart from TFMA's protos (eval_config) and its reader (read).
"""

from __future__ import annotations

import math
import re

from core import tasks

SIMPLE = "simple"
# Its TFMA output, a folder of the Evaluator's evaluation artifact.
OUTPUT_DIR = "simple_baseline"


def _metric_name(class_name: str) -> str:
    """TFMA's default name of a metric class: `AUC` -> auc, `BinaryAccuracy` -> binary_accuracy."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def eval_config(main_config, key_metric: str | None, candidate_name: str = "candidate"):
    """The simple model's own EvalConfig, run beside the main one in the same Beam pipeline
    over the same examples (executor.py): a copy of the candidate's model spec,
    on the overall slice only, scored on the example count and `key_metric` (what `judge`
    compares; every metric of the main config when None), without thresholds, with the main
    config's interval options. The main config (candidate and baseline) is left as it is,
    so the simple model pays for one slice, not for every slice of the main pass.
    Returns a new EvalConfig (after TFMA's defaults)."""
    import tensorflow_model_analysis as tfma

    candidate = next(s for s in main_config.model_specs if not s.is_baseline)
    config = tfma.EvalConfig()
    config.options.CopyFrom(main_config.options)
    spec = config.model_specs.add()
    spec.CopyFrom(candidate)
    spec.name = ""  # a lone model, as TFMA names one; `read` names its entries SIMPLE
    spec.is_baseline = False
    config.slicing_specs.add()  # the overall slice
    metrics = config.metrics_specs.add()
    seen = set()
    for main in main_config.metrics_specs:
        for metric in main.metrics:
            name = _metric_name(metric.class_name)
            if name in seen or (key_metric and name not in (key_metric, "example_count")):
                continue
            seen.add(name)
            copy = metrics.metrics.add()
            copy.CopyFrom(metric)
            copy.ClearField("per_slice_thresholds")
            copy.ClearField("cross_slice_thresholds")
            copy.ClearField("threshold")
    return config


def read(evaluation_uri: str) -> list[dict]:
    """The simple model's overall entries (`significance.read_tfma`) from its own output
    folder under the evaluation, named SIMPLE whatever TFMA named a lone model."""
    import os

    from components.evaluator import significance

    folder = os.path.join(evaluation_uri, OUTPUT_DIR)
    if not os.path.isdir(folder):
        return []
    return [{**e, "model": SIMPLE} for e in significance.read_tfma(folder)[0]]


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
