"""A simpler model is not better: the candidate against the linear model fitted beside it.

The Trainer exports a linear model with the candidate's head on the same transformed
features (trainer_toolkit/simple_baseline.py). The Evaluator scores both models on the
same eval examples TFMA judged (the seeded sample, `score`), paired example by example:

- each model's key metric on those examples, computed here (`metric`: AUC from ranks,
  accuracies, MSE/MAE/MAPE as TFMA and Keras define them), labels from the candidate's own
  `transform_features` (what TFMA's labels extractor reads) or the raw examples;
- the interval of the difference (candidate - simple) from a delete-a-group jackknife over
  `JACKKNIFE_GROUPS` seeded groups, as TFMA's own jackknife: both models are scored with
  the same group left out each time, so what both get right or wrong cancels, and the
  interval is that of the paired difference (far narrower than two independent ones);
- `judge`: `require: not_worse` (default) refuses when the candidate is significantly
  worse than the simple model by more than `min_lift` (the upper bound of the lead lies
  below -min_lift); `require: better` refuses unless the lower bound exceeds +min_lift.
  For an error metric (regression) the lead is simple - candidate, and min_lift is
  relative to the simple model's error.

Scoring outside TFMA's Beam job costs two SavedModel loads and one prediction pass over
the sample; a third model inside the job (or a second TFMA config beside it) cost most of
what the model tests added to a steady run (benchmarks/model_tests/run.py).

TensorFlow-free apart from `score` (and the helpers it passes loaded models to).
"""

from __future__ import annotations

import math
import time

from core import tasks

SIMPLE = "simple"
# Groups of TFMA's jackknife (metrics_plots_and_validations_evaluator's default), seeded.
JACKKNIFE_GROUPS = 20
JACKKNIFE_SEED = 20240101
# Keras' and TFMA's guard against a zero label in the percentage error.
_EPSILON = 1e-7
_BATCH = 1024


def metric(name: str, y, p) -> float:
    """One key metric (core.tasks.KEY_METRICS) of predictions `p` against labels `y`
    (numpy): binary probabilities (n or n x 1), class probabilities (n x k) or values (n).
    NaN where the metric is undefined on these examples (AUC with one class only)."""
    import numpy as np
    from scipy import stats

    y = np.asarray(y, dtype=np.float64).reshape(-1)
    p = np.asarray(p, dtype=np.float64)
    if name == "sparse_categorical_accuracy":
        return float((p.reshape(len(y), -1).argmax(axis=1) == y).mean()) if len(y) else math.nan
    p = p.reshape(-1)
    if not len(y):
        return math.nan
    if name == "auc":
        pos = y > 0.5
        n_pos, n_neg = int(pos.sum()), int((~pos).sum())
        if not n_pos or not n_neg:
            return math.nan
        ranks = stats.rankdata(p)  # ties share their average rank (Mann-Whitney)
        return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
    if name == "binary_accuracy":
        return float(((p > 0.5) == (y > 0.5)).mean())
    if name == "mean_squared_error":
        return float(((y - p) ** 2).mean())
    if name == "mean_absolute_error":
        return float(np.abs(y - p).mean())
    if name == "mean_absolute_percentage_error":
        return float(100.0 * (np.abs(y - p) / np.maximum(np.abs(y), _EPSILON)).mean())
    raise ValueError(f"no simple-baseline metric {name!r} (one of {tasks.ALL_KEY_METRICS})")


def paired(name: str, y, candidate, simple, groups: int = JACKKNIFE_GROUPS, seed: int = JACKKNIFE_SEED) -> list[dict]:
    """Both models' `name` on the same examples, and their paired difference, with
    delete-a-group jackknife standard errors (`groups` seeded groups, dof groups - 1).

    Returns entries as `significance.read_tfma` gives them (name, model, is_diff, value,
    std_error, dof): the candidate's, the simple model's (model SIMPLE) and the difference
    candidate - simple (model SIMPLE, is_diff); std_error None where a replicate is undefined.
    """
    import numpy as np

    y = np.asarray(y)
    n = len(y)
    values = {"candidate": metric(name, y, candidate), SIMPLE: metric(name, y, simple)}
    k = min(groups, n)
    group = np.random.default_rng(seed).permutation(n) % k if k else np.zeros(0, int)
    replicates = {"candidate": [], SIMPLE: []}
    for g in range(k if k > 1 else 0):
        keep = group != g
        replicates["candidate"].append(metric(name, y[keep], np.asarray(candidate)[keep]))
        replicates[SIMPLE].append(metric(name, y[keep], np.asarray(simple)[keep]))
    replicates["diff"] = [c - s for c, s in zip(replicates["candidate"], replicates[SIMPLE])]

    def std_error(reps):
        reps = np.asarray(reps, dtype=np.float64)
        if len(reps) < 2 or not np.isfinite(reps).all():
            return None
        return float(math.sqrt((len(reps) - 1) / len(reps) * ((reps - reps.mean()) ** 2).sum()))

    dof = k - 1 if k > 1 else None
    return [
        {"name": name, "model": "candidate", "is_diff": False, "value": values["candidate"],
         "std_error": std_error(replicates["candidate"]), "dof": dof},
        {"name": name, "model": SIMPLE, "is_diff": False, "value": values[SIMPLE],
         "std_error": std_error(replicates[SIMPLE]), "dof": dof},
        {"name": name, "model": SIMPLE, "is_diff": True, "value": values["candidate"] - values[SIMPLE],
         "std_error": std_error(replicates["diff"]), "dof": dof},
    ]


def _call(signature, serialized: list[bytes]) -> dict:
    """A signature that takes one string tensor (serialized tf.Examples), in batches;
    its outputs as numpy arrays, concatenated."""
    import numpy as np
    import tensorflow as tf

    [arg] = signature.structured_input_signature[1].keys()
    parts: dict[str, list] = {}
    for i in range(0, len(serialized), _BATCH):
        for key, value in signature(**{arg: tf.constant(serialized[i:i + _BATCH])}).items():
            parts.setdefault(key, []).append(value.numpy())
    return {k: np.concatenate(v) for k, v in parts.items()}


def predict(loaded, serialized: list[bytes]):
    """A loaded SavedModel's `serving_default` output (its only one, or `outputs`) on the examples."""
    if "serving_default" not in loaded.signatures:
        raise ValueError("the model has no serving_default signature")
    out = _call(loaded.signatures["serving_default"], serialized)
    if len(out) != 1 and "outputs" not in out:
        raise ValueError(f"serving_default has several outputs {sorted(out)} and none named 'outputs'")
    return out["outputs"] if "outputs" in out else next(iter(out.values()))


def labels(loaded, serialized: list[bytes], label_key: str):
    """The labels TFMA compares with: `label_key` from the (loaded) candidate's
    `transform_features` (a transformed label), else the raw examples' feature; None where
    neither has it."""
    import numpy as np
    import tensorflow as tf

    if "transform_features" in loaded.signatures:
        transform = loaded.signatures["transform_features"]
        [arg] = transform.structured_input_signature[1].keys()
        parts = []
        for i in range(0, len(serialized), _BATCH):  # the label only: other outputs' shapes may vary by batch
            out = transform(**{arg: tf.constant(serialized[i:i + _BATCH])})
            if label_key not in out:
                parts = None
                break
            parts.append(np.asarray(out[label_key]).reshape(len(serialized[i:i + _BATCH]), -1)[:, 0])
        if parts:
            return np.concatenate(parts)
    values = []
    for record in serialized:
        feature = tf.train.Example.FromString(record).features.feature.get(label_key)
        kind = feature.WhichOneof("kind") if feature is not None else None
        if kind not in ("float_list", "int64_list") or not getattr(feature, kind).value:
            return None
        values.append(getattr(feature, kind).value[0])
    return np.asarray(values)


def score(candidate_dir: str, simple_dir: str, files: list[str], label_key: str, key_metric: str) -> dict:
    """The candidate and the simple model on the examples in `files` (gzipped TFRecords of
    serialized tf.Examples: the Evaluator's sample), paired (`paired`).

    Returns {"entries": [...], "examples", "seconds"}, or {"entries": [], "reason"} where
    there is nothing to compare (no examples, no labels)."""
    import tensorflow as tf

    begin = time.perf_counter()
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")] if files else []
    if not serialized:
        return {"entries": [], "examples": 0, "reason": "no eval examples to score the simple model on"}
    candidate = tf.saved_model.load(candidate_dir)
    y = labels(candidate, serialized, label_key)
    if y is None:
        return {"entries": [], "examples": len(serialized),
                "reason": f"no label {label_key!r} in the candidate's transform_features nor in the raw examples"}
    entries = paired(key_metric, y, predict(candidate, serialized), predict(tf.saved_model.load(simple_dir), serialized))
    return {"entries": entries, "examples": len(serialized), "seconds": round(time.perf_counter() - begin, 2)}


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
       "margin", "rule", "reason"}; "refusal" (the reason a refused candidate gets) when refused.
    """
    from scipy import stats

    cand, simple = _entry(metrics, key_metric, "candidate"), _entry(metrics, key_metric, SIMPLE)
    pair = next((m for m in metrics if m["name"] == key_metric and m["model"] == SIMPLE and m["is_diff"]), None)
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
    if pair is not None:
        # Paired on the same examples: the difference's own interval.
        ses, dof = [pair.get("std_error")], pair.get("dof")
    else:
        ses = [e.get("std_error") for e in (cand, simple)]
        dof = min(d for d in (cand.get("dof"), simple.get("dof")) if d) if cand.get("dof") or simple.get("dof") else None
    if any(se is None or math.isnan(se) for se in ses):
        out["reason"] = f"no interval for {key_metric} (too few examples or one class only): not judged"
        return out
    # Unpaired (independent estimates): the sum of both variances, wider than the paired one.
    se = math.sqrt(sum(e ** 2 for e in ses))
    z = float(stats.t.ppf(1.0 - level, dof)) if dof else float(stats.norm.ppf(1.0 - level))
    low, high = diff - z * se, diff + z * se
    out.update(judged=True, std_error=se, interval=[low, high], paired=pair is not None)
    refused = high < -lift if settings.require == "not_worse" else low <= lift
    # How far the verdict lay from flipping, in min_lift's units (relative for an error
    # metric); negative when refused. A reviewer (and benchmarks/suite/margins.py) reads
    # how close a pass came.
    margin = high + lift if settings.require == "not_worse" else low - lift
    out["margin"] = margin / abs(simple["value"]) if lower_better and simple["value"] else margin
    out["refused"] = refused
    better = "lower" if lower_better else "higher"
    out["reason"] = (
        f"candidate {key_metric} {cand['value']:.4g} vs the simple model's {simple['value']:.4g}: the candidate's"
        f" lead is {diff:+.4g} ({better} is better), {100 * (1 - level):.0f}% bounds [{low:+.4g}, {high:+.4g}]"
        f"{' paired on the same examples' if pair is not None else ''} ({out['rule']})")
    if refused:
        out["refusal"] = f"a simpler model is better: {out['reason']}"
    return out
