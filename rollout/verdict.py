"""The decision rule around the test, in one pure function: the controller (rollout/controller.py)
and the simulation the benchmark and the known-answer tests run (rollout/decision_sim.py)
decide through it, so what is measured is what runs.

In order:
  1. a sample-ratio mismatch (rollout/srm.py) blocks the decision: `inconclusive`, with an
     alert; the comparison is not used while the arms differ in more than the split;
  2. fewer than `min_labelled` mature labels in either arm: `continue` (no test runs), and at
     the budget `inconclusive`: too few labels never roll a canary back (or promote it);
  3. the always-valid test (rollout/sequential.py): `promote`, `rollback` or `continue`;
  4. still `continue` at the budget (`max_labelled` mature canary labels or `max_hours`):
     the run-out rule (`on_run_out`, default `inconclusive`: it holds, an alert goes out,
     a person decides).
TF-free.
"""

from __future__ import annotations

import dataclasses

from core import tasks
from rollout import live_metrics, sequential, srm
from rollout.settings import RolloutSettings

INCONCLUSIVE_ALERT = "rollout_inconclusive"
SRM_ALERT = "rollout_srm"


@dataclasses.dataclass
class Verdict:
    action: str
    reason: str
    ran_out: bool
    difference: dict | None  # estimate, low, high (None without a test)
    test: dict | None  # the test's statistics, threshold and labels per arm (sequential.evidence)
    alerts: list[str]
    blocked_by: str | None = None  # "srm" when the sample-ratio check blocked the decision


def judge(canary: live_metrics.Tally, stable: live_metrics.Tally, metric: str, settings: RolloutSettings,
          hours: float, ratio: srm.Check | None = None, young: dict | None = None) -> Verdict:
    """The decision the evidence supports (the module docstring).

    Args:
      canary, stable: each arm's tally of compared (split-routed, mature) labels.
      hours: since the canary started.
      ratio: the sample-ratio check of the split-routed requests (None: not checked).
      young: labelled requests per arm ("stable", "canary") not yet mature, for the reason.
    """
    alpha, tau, margin = settings.significance_level, settings.tau(metric), settings.margin(metric)
    labels = {"stable": stable.count, "canary": canary.count}
    budget = None
    if canary.count >= settings.max_labelled:
        budget = f"{canary.count} mature canary labels (max_labelled {settings.max_labelled})"
    elif hours >= settings.max_hours:
        budget = f"{hours:.1f} h (max_hours {settings.max_hours:g})"
    ci = test = difference = None
    if min(canary.count, stable.count) >= settings.min_labelled:
        estimate, variance = live_metrics.difference(canary, stable, metric)
        ci = sequential.interval(estimate, variance, alpha, tau)
        difference = {"estimate": ci.estimate, "low": ci.low, "high": ci.high}
        test = {**sequential.evidence(ci, alpha, tau, margin), "metric": metric, "labels": labels,
                "min_labelled": settings.min_labelled}
    if ratio is not None and ratio.mismatch:
        reason = ratio.reason()
        return Verdict(sequential.INCONCLUSIVE, reason, budget is not None, difference, test,
                       [f"{SRM_ALERT}: {reason}"], blocked_by="srm")
    ran_out = False
    if ci is None:
        action = sequential.CONTINUE
        waiting = ""
        if young and any(young.values()):
            waiting = (f" ({young.get('canary', 0)} canary and {young.get('stable', 0)} stable labels are of requests "
                       "too young to compare yet)")
        reason = (f"waiting for labels: canary {canary.count}, stable {stable.count} mature labels of the "
                  f"{settings.min_labelled} each needs before the test decides{waiting}")
        if budget is not None:
            ran_out, action = True, sequential.INCONCLUSIVE
            reason = f"ran out after {budget} with too few labels for the test to run: {reason}"
    else:
        action = sequential.decide(ci, margin)
        what = "relative change" if metric in tasks.LOWER_IS_BETTER else "difference"
        shown = (f"{metric} {what} canary vs stable {ci.estimate:+.4f}, always-valid "
                 f"{100 * (1 - alpha):.0f}% interval [{ci.low:+.4f}, {ci.high:+.4f}] "
                 f"on {canary.count} canary and {stable.count} stable mature labels")
        reason = {
            sequential.PROMOTE: f"{shown}: no worse than the allowed regression {margin}",
            sequential.ROLLBACK: f"{shown}: the canary is worse",
            sequential.CONTINUE: f"{shown}: not decided yet",
        }[action]
        if action == sequential.CONTINUE and budget is not None:
            ran_out = True
            action = sequential.run_out(ci, margin, settings.on_run_out)
            reason = (f"ran out after {budget} without a decision; the run-out rule ({settings.on_run_out}) says "
                      f"{action}: {reason}")
    alerts = []
    if action == sequential.INCONCLUSIVE:
        alerts.append(f"{INCONCLUSIVE_ALERT}: the canary holds until a person promotes or rolls it back "
                      f"(retrain rollout promote|rollback --reason): {reason}")
    return Verdict(action, reason, ran_out, difference, test, alerts)
