"""The new span alone: the candidate's and the baseline's quality on the newest span of the window.

The Evaluator tags each eval example with the span it came from (`SPAN_FEATURE`, appended
to the serialized tf.Example, so TFMA slices by it in the same pass) and reports both
models' key metric on the new span with intervals. The baseline was trained before the new
span existed, so its quality there is an out-of-sample reading of the data: when it
*collapses* on the new span, well beyond how much it varies across the window's other
spans, the new data is not what the model learned from, and the candidate trained on it is
refused, with a reason that says so.

The rule (`judge`), for the task's key metric (a drop for AUC or accuracy, a relative rise
for an error): the baseline's drop on each span s of the window vs its whole-window value,
d_s, in units of its standard error (TFMA's interval on the slice), z_s = d_s / se_s. The
new span is refused when its drop's lower bound at the calibrated z, d_new - z_allowed *
se_new, still exceeds `min_drop`, where z_allowed = max(z(1 - significance_level),
margin x the largest z_s of the other spans): the window's own spans calibrate how far a
good month moves. A slice with fewer than `min_examples` examples, or without an interval,
is too small to judge and reported so.
"""

from __future__ import annotations

import dataclasses
import math

from core import layout, tasks
from core.settings import Settings, SettingsError
from csv_engine.csv_encoding import _varint

# The feature the Evaluator adds to each eval example: the span it came from.
SPAN_FEATURE = layout.SPAN_SLICE_FEATURE
# min_drop per key metric when the config leaves it out: an absolute drop for AUC and
# accuracy, a relative rise for an error.
DEFAULT_MIN_DROP = {"auc": 0.05, "binary_accuracy": 0.05, "sparse_categorical_accuracy": 0.05,
                    "mean_squared_error": 0.25, "mean_absolute_error": 0.15, "mean_absolute_percentage_error": 0.25}


@dataclasses.dataclass(frozen=True)
class NewSpanSettings(Settings):
    """The `new_span:` block of a pipeline config."""

    # Score both models on the newest span alone (a TFMA slice by span) and refuse on a collapse there.
    enabled: bool = True
    # A slice of fewer eval examples is too small to judge.
    min_examples: int = 10
    # One-sided level of the drop's bound.
    significance_level: float = 0.01
    # How far beyond the window's other spans (their largest z) the new span may go.
    margin: float = 1.5
    # The smallest drop that refuses (absolute for AUC/accuracy, relative for errors);
    # None: DEFAULT_MIN_DROP of the key metric.
    min_drop: float | None = None

    def check(self) -> None:
        if self.min_examples < 2:
            raise SettingsError(f"min_examples: must be at least 2, got {self.min_examples}")
        if not 0.0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: must be within (0, 0.5), got {self.significance_level}")
        if self.margin < 1.0:
            raise SettingsError(f"margin: must be >= 1, got {self.margin}")
        if self.min_drop is not None and self.min_drop < 0:
            raise SettingsError(f"min_drop: must be >= 0, got {self.min_drop}")


def tag_bytes(span: int) -> bytes:
    """A serialized tf.Example holding only SPAN_FEATURE = span: appended to an example's
    bytes, protobuf's merge of concatenated messages adds the feature to it."""
    key = SPAN_FEATURE.encode()
    value = _varint(span)  # negative spans as protobuf writes int64s
    feature = b"\x1a" + _varint(len(value) + 2) + b"\x0a" + _varint(len(value)) + value  # int64_list { value }
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
    features = b"\x0a" + _varint(len(entry)) + entry
    return b"\x0a" + _varint(len(features)) + features


def _model_metric(entries: list[dict], name: str, model: str) -> dict | None:
    return next((e for e in entries if e["name"] == name and e["model"] == model and not e["is_diff"]), None)


def _count(entries: list[dict]) -> int:
    found = _model_metric(entries, "example_count", "candidate")
    return int(found["value"]) if found else 0


def _usable(entry: dict | None) -> bool:
    return bool(entry) and entry.get("std_error") is not None and entry["std_error"] > 0 and \
        not math.isnan(entry["value"]) and not math.isnan(entry["std_error"])


def _interval(entry: dict | None, z: float, bounded: bool) -> list[float] | None:
    """value -/+ z x standard error; within [0, 1] for a share-like metric (AUC, accuracy)."""
    if not _usable(entry):
        return None
    low, high = entry["value"] - z * entry["std_error"], entry["value"] + z * entry["std_error"]
    return [max(low, 0.0), min(high, 1.0)] if bounded else [low, high]


def judge(by_span: dict, overall: list[dict], new_span: int, metric: str, settings: NewSpanSettings) -> dict:
    """The new span's verdict.

    Args:
      by_span: span -> that slice's metric entries (`significance.read_slices`).
      overall: the overall slice's metric entries.
      new_span: the run's span (the newest of the window).
      metric: the task's key metric (`core.tasks.KEY_METRICS`).
    """
    from scipy import stats

    lower_better = metric in tasks.LOWER_IS_BETTER
    min_drop = settings.min_drop if settings.min_drop is not None else DEFAULT_MIN_DROP.get(metric, 0.05)
    z_crit = float(stats.norm.ppf(1.0 - settings.significance_level))
    base_all = _model_metric(overall, metric, "baseline")
    out = {"span": new_span, "metric": metric, "examples": 0, "judged": False, "collapsed": False,
           "min_drop": min_drop, "drop_kind": "relative rise" if lower_better else "drop",
           "significance_level": settings.significance_level, "spans": []}
    entries = by_span.get(new_span) or []
    out["examples"] = _count(entries)
    cand, base = _model_metric(entries, metric, "candidate"), _model_metric(entries, metric, "baseline")
    bounded = not lower_better
    out["candidate"] = {"value": cand["value"], "interval": _interval(cand, z_crit, bounded)} if cand else None
    out["baseline"] = {"value": base["value"], "interval": _interval(base, z_crit, bounded)} if base else None
    out["baseline_window"] = ({"value": base_all["value"], "interval": _interval(base_all, z_crit, bounded)}
                              if base_all else None)
    if base_all is None:
        out["reason"] = "no baseline model: nothing to compare the new span with"
        return out

    def drop(entry: dict) -> tuple[float, float]:
        """(drop vs the window, its standard error): relative for an error metric."""
        if lower_better:
            scale = abs(base_all["value"]) or 1.0
            return (entry["value"] - base_all["value"]) / scale, entry["std_error"] / scale
        return base_all["value"] - entry["value"], entry["std_error"]

    others = []
    for span, slice_entries in sorted(by_span.items()):
        b = _model_metric(slice_entries, metric, "baseline")
        row = {"span": span, "examples": _count(slice_entries), "baseline": b["value"] if b else None}
        if _usable(b) and row["examples"] >= settings.min_examples:
            d, se = drop(b)
            row.update({"drop": d, "z": d / se})
            if span != new_span:
                others.append(row["z"])
        out["spans"].append(row)
    z_allowed = max([z_crit] + [settings.margin * z for z in others])
    out["z_allowed"] = z_allowed
    out["calibrated_on"] = len(others)
    if out["examples"] < settings.min_examples or not _usable(base):
        out["reason"] = (f"too small to judge: {out['examples']} eval examples of span {new_span}"
                         f" (min_examples {settings.min_examples})" if out["examples"] < settings.min_examples
                         else f"no interval for the baseline's {metric} on span {new_span} (too few examples or"
                              " one class only): not judged")
        return out
    d, se = drop(base)
    bound = d - z_allowed * se
    out.update({"judged": True, "drop": d, "std_error": se, "z": d / se, "bound": bound, "collapsed": bound > min_drop})
    what = "rose by" if lower_better else "fell by"
    unit = " (relative)" if lower_better else ""
    out["reason"] = (
        f"the baseline model's {metric} on the new span {new_span} is {base['value']:.4g} against"
        f" {base_all['value']:.4g} on the window: it {what} {d:.3g}{unit}, z {d / se:.2f}"
        f" {'beyond' if out['collapsed'] else 'within'} what the window's other spans allow (z {z_allowed:.2f}"
        f" from {len(others)} span(s), at least {z_crit:.2f}); lower bound {bound:.3g} vs min_drop {min_drop:g}")
    if out["collapsed"]:
        out["refusal"] = (
            f"the data, not the model: {out['reason']}. The model that served until now collapses on span"
            f" {new_span}, so the span's data is not what it learned from; check the span (or quarantine it)"
            " before training on it")
    return out
