"""Staleness: how much the served model has lost on data newer than what it learned from.

ML Test Score, monitoring section ("models are not too stale"). The baseline the Evaluator
scores is the last blessed model, the one serving (while a canary waits for its labels,
the canary). The Trainer records on each Model the newest span it trained on
(`TRAINED_THROUGH`), so in the same TFMA pass (the per-span slices new_span.py reads) each
span of the window gives the baseline's quality at an *age*: the months from the end of its
training window to that span. The spans it trained on (their eval split, which it never
saw) give its quality at age 0, the reference; the new span gives its quality today:

- `drop`: reference - today for AUC or accuracy, (today - reference) / reference for an
  error (a relative rise);
- `loss_per_span`: the least-squares slope of the drop against age through the origin,
  over the window's spans newer than its training (each weighted by its eval examples);
- `alerts`: the drop beyond `max_drop` (its lower bound at `significance_level`, from
  TFMA's interval on the new span's slice), or an age beyond `max_age_spans`. They do not refuse
  the candidate (a fresh candidate is the cure); they are sent as a `stale` alert.

Every run's figures go in its verdict, so the governance report draws the history of
quality against age over the runs of the pipeline. TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import math

from core import tasks
from core.settings import Settings, SettingsError

# The Model artifact's custom property: the newest span of the examples it was trained on.
TRAINED_THROUGH = "trained_through_span"
# max_drop per key metric when the config leaves it out (as new_span.DEFAULT_MIN_DROP).
DEFAULT_MAX_DROP = {"auc": 0.05, "binary_accuracy": 0.05, "sparse_categorical_accuracy": 0.05,
                    "mean_squared_error": 0.25, "mean_absolute_error": 0.15, "mean_absolute_percentage_error": 0.25}


@dataclasses.dataclass(frozen=True)
class StalenessSettings(Settings):
    """The `staleness:` block of a pipeline config."""

    enabled: bool = True
    # The served model's drop on the new span (absolute for AUC/accuracy, relative for
    # errors) that raises the alert; None: DEFAULT_MAX_DROP of the key metric.
    max_drop: float | None = None
    # Months since the end of its training window beyond which the served model is stale.
    max_age_spans: int = 6
    # A span with fewer eval examples gives no reading.
    min_examples: int = 10
    # The alert needs the drop's lower one-sided (1 - level) bound past max_drop (the
    # interval TFMA computes on the new span's slice): a few examples' noise raises none.
    significance_level: float = 0.05

    def check(self) -> None:
        if self.max_drop is not None and self.max_drop < 0:
            raise SettingsError(f"max_drop: must be >= 0, got {self.max_drop}")
        if self.max_age_spans < 1:
            raise SettingsError(f"max_age_spans: must be at least 1, got {self.max_age_spans}")
        if self.min_examples < 1:
            raise SettingsError(f"min_examples: must be at least 1, got {self.min_examples}")
        if not 0.0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: must be within (0, 0.5), got {self.significance_level}")


def age(span: int, trained_through: int) -> int:
    """Months from the newest span a model trained on to `span` (0: one it trained on)."""
    year, month = divmod(span, 100)
    base_year, base_month = divmod(trained_through, 100)
    return (year - base_year) * 12 + (month - base_month)


def _baseline(entries: list[dict], metric: str) -> tuple[float | None, float | None, int]:
    """The baseline's value of `metric` on a slice, its standard error (None without an
    interval) and the slice's example count."""
    entry = next((e for e in entries if e["name"] == metric and e["model"] == "baseline" and not e["is_diff"]), None)
    count = next((int(e["value"]) for e in entries if e["name"] == "example_count" and not e["is_diff"]
                  and e["model"] in ("candidate", "baseline")), 0)
    if entry is None:
        return None, None, count
    se = entry.get("std_error")
    return entry["value"], (None if se is None or math.isnan(se) else se), count


def judge(by_span: dict, new_span: int, metric: str, trained_through: int | None, model_id: int | None,
          settings: StalenessSettings) -> dict:
    """The served model's staleness in this run.

    Args:
      by_span: span -> that slice's metric entries (`significance.read_slices` by span).
      new_span: the run's span.
      metric: the task's key metric.
      trained_through: the baseline's TRAINED_THROUGH (None: not recorded, age unknown).
      model_id: the baseline's MLMD artifact id.
    """
    lower_better = metric in tasks.LOWER_IS_BETTER
    max_drop = settings.max_drop if settings.max_drop is not None else DEFAULT_MAX_DROP.get(metric, 0.05)
    out = {"model_artifact_id": model_id, "trained_through_span": trained_through, "metric": metric,
           "span": new_span, "max_drop": max_drop, "max_age_spans": settings.max_age_spans,
           "drop_kind": "relative rise" if lower_better else "drop", "points": [], "alerts": []}
    if model_id is None:
        out["reason"] = "no served model yet (no baseline): nothing to age"
        return out
    if trained_through is None:
        out["reason"] = (f"the baseline model (artifact {model_id}) does not record the spans it trained on"
                         f" ({TRAINED_THROUGH}): its age is unknown")
        return out
    out["age_spans"] = age(new_span, trained_through)
    readings = []
    for span, entries in sorted(by_span.items()):
        value, se, count = _baseline(entries, metric)
        if value is None or count < settings.min_examples:
            continue
        readings.append({"span": span, "age_spans": age(span, trained_through), "value": value, "std_error": se,
                         "examples": count})
    known = [r for r in readings if r["age_spans"] <= 0]
    if not known:
        out["reason"] = (f"no span of the window that the baseline trained on has {settings.min_examples} eval"
                         " examples: no reference quality")
    else:
        n = sum(r["examples"] for r in known)
        reference = sum(r["value"] * r["examples"] for r in known) / n
        out["reference"] = {"value": reference, "spans": [r["span"] for r in known], "examples": n}
        from scipy import stats

        z = float(stats.norm.ppf(1.0 - settings.significance_level))
        scale = (abs(reference) or 1.0) if lower_better else 1.0
        for r in readings:
            r["drop"] = (r["value"] - reference) / scale if lower_better else reference - r["value"]
            # The drop's lower bound: only the reading's own error (the reference pools spans).
            r["drop_bound"] = r["drop"] - z * r["std_error"] / scale if r["std_error"] is not None else None
        out["points"] = readings
        newer = [r for r in readings if r["age_spans"] > 0]
        if newer:
            weight = sum(r["examples"] * r["age_spans"] ** 2 for r in newer)
            out["loss_per_span"] = sum(r["examples"] * r["age_spans"] * r["drop"] for r in newer) / weight
        today = next((r for r in readings if r["span"] == new_span), None)
        if today is not None and today["age_spans"] > 0:
            out["today"] = today
            out["drop"] = today["drop"]
            out["drop_bound"] = today["drop_bound"]
            bound = today["drop_bound"]
            if bound is not None and bound > max_drop:
                out["alerts"].append(
                    f"the served model (artifact {model_id}, trained through span {trained_through}) has lost"
                    f" {today['drop']:.3g}{' (relative)' if lower_better else ''} {metric} on span {new_span}"
                    f" ({today['value']:.4g} against {reference:.4g} on the spans it trained on; lower"
                    f" {100 * (1 - settings.significance_level):.0f}% bound {bound:.3g}), more than max_drop {max_drop:g}")
    if out["age_spans"] > settings.max_age_spans:
        out["alerts"].append(
            f"the served model (artifact {model_id}) is {out['age_spans']} spans old (trained through span"
            f" {trained_through}), older than max_age_spans {settings.max_age_spans}")
    if "reason" not in out:
        lost = (f", lost {out['drop']:.3g} on the new span (lower bound "
                f"{'n/a' if out['drop_bound'] is None else format(out['drop_bound'], '.3g')})" if "drop" in out else "")
        rate = f", {out['loss_per_span']:.3g} per span" if "loss_per_span" in out else ""
        out["reason"] = (f"the served model is {out['age_spans']} span(s) old{lost}{rate}"
                         + (f": {'; '.join(out['alerts'])}" if out["alerts"] else ""))
    return out

