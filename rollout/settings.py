"""The pipeline config's `rollout:` block: how a blessed candidate reaches all traffic.

    rollout:
      mode: canary              # direct: the pushed version serves everything at once
      canary_share: 0.1         # of requests that name neither a version nor a label
      metric: auc               # default: the task's key metric (core/tasks.py)
      significance_level: 0.05  # alpha of the always-valid test (rollout/sequential.py)
      max_regression: null      # promoted if shown no worse than this; default 0.01 (AUC,
                                # accuracy), 0.05 = 5% for error metrics (a relative change)
      effect_size: null         # the difference the test is tuned to find (the mixture's
                                # scale); default 0.02, or 0.1 (10%) for error metrics
      min_labelled: 200         # mature labels per version before any decision (the normal
                                # approximation)
      max_labelled: 20000       # mature canary labels after which the run-out rule applies
      max_hours: 72             # wall time after which the run-out rule applies
      on_run_out: inconclusive  # what a canary still undecided at its budget gets: inconclusive
                                # (it holds, an alert goes out, a person decides), or a policy's
                                # explicit choice with the error rates docs/rollout.md gives:
                                # estimate (promote when the point estimate is above
                                # -max_regression / 2, else roll back), rollback or promote
      maturity_quantile: 0.95   # a request is compared once requests of its age are labelled
                                # at least this often, in both arms (rollout/maturity.py)
      srm_alpha: 0.001          # the sample-ratio-mismatch check's level (rollout/srm.py)
      live_floor: null          # alert when stable's live metric is below this (error metrics: above)
      approval: none            # required: a person applies, vetoes or forces each promotion
                                # or roll-back the test proposes (Airflow's HITL prompt)

A newer blessed candidate that arrives while a canary is under test replaces it: the old
canary keeps its folder, loses its label, is marked superseded, and the test starts again
on the newer one (its labels only). TF-free.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.settings import Settings, SettingsError

DIRECT, CANARY = "direct", "canary"


@dataclasses.dataclass(frozen=True)
class RolloutSettings(Settings):
    # direct: the pushed version serves everything at once; canary: beside stable until delayed labels
    # decide.
    mode: Literal["direct", "canary"] = DIRECT
    # The canary's share of requests that name neither a version nor a label.
    canary_share: float = 0.1
    # The deciding live metric; default: the task's key metric (core/tasks.py).
    metric: str | None = None
    # Alpha of the always-valid sequential test (rollout/sequential.py).
    significance_level: float = 0.05
    # Promoted when shown no worse than this; default 0.01 (AUC, accuracy), 0.05 = 5% for error metrics
    # (a relative change).
    max_regression: float | None = None
    # The difference the test is tuned to find (the mixture's scale); default 0.02, or 0.1 (10%) for
    # error metrics.
    effect_size: float | None = None
    # Mature labelled requests per version before any decision (the normal approximation).
    min_labelled: int = 200
    # Mature canary labels after which the run-out rule applies.
    max_labelled: int = 20000
    # Wall time after which the run-out rule applies.
    max_hours: float = 72.0
    # What a canary still undecided at its budget gets: inconclusive (it holds, an alert goes out, a
    # person decides), or explicitly estimate (promote when the point estimate is above
    # -max_regression / 2, else roll back), rollback or promote (their error rates: docs/rollout.md).
    on_run_out: Literal["inconclusive", "estimate", "rollback", "promote"] = "inconclusive"
    # A request is compared once requests of its age are labelled at least this often, in both arms
    # (rollout/maturity.py); keep it below the share of requests that ever get a label.
    maturity_quantile: float = 0.95
    # Level of the sample-ratio-mismatch check (rollout/srm.py): a mismatch blocks the decision.
    srm_alpha: float = 0.001
    # Alert when stable's live metric falls below this (error metrics: rises above).
    live_floor: float | None = None
    # required: a person applies, vetoes or forces each promotion or roll-back the test proposes
    # (Airflow's HITL prompt).
    approval: Literal["none", "required"] = "none"

    def check(self) -> None:
        if not 0 < self.canary_share < 1:
            raise SettingsError(f"canary_share: {self.canary_share} is not within (0, 1)")
        if not 0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: {self.significance_level} is not within (0, 0.5)")
        if self.max_regression is not None and not self.max_regression >= 0:
            raise SettingsError(f"max_regression: {self.max_regression} is negative")
        if self.effect_size is not None and not self.effect_size > 0:
            raise SettingsError(f"effect_size: {self.effect_size} must be positive")
        if self.min_labelled < 10:
            raise SettingsError(f"min_labelled: {self.min_labelled} is below 10")
        if self.max_labelled < self.min_labelled:
            raise SettingsError(f"max_labelled: {self.max_labelled} is below min_labelled ({self.min_labelled})")
        if not self.max_hours > 0:
            raise SettingsError(f"max_hours: {self.max_hours} must be positive")
        if not 0 < self.maturity_quantile <= 1:
            raise SettingsError(f"maturity_quantile: {self.maturity_quantile} is not within (0, 1]")
        if not 0 < self.srm_alpha < 0.5:
            raise SettingsError(f"srm_alpha: {self.srm_alpha} is not within (0, 0.5)")

    def metric_for(self, task: str) -> str:
        """The deciding metric: the configured one, else the task's key metric.

        Raises:
          SettingsError: a metric the task does not have.
        """
        from core import tasks

        known = tasks.KEY_METRICS[task]
        if self.metric is None:
            return known[0]
        if self.metric not in known:
            raise SettingsError(f"rollout.metric: {self.metric!r} is not a key metric of a {task} pipeline "
                                f"(known: {', '.join(known)})")
        return self.metric

    def margin(self, metric: str) -> float:
        """max_regression for this metric (its default by the metric's kind)."""
        from core import tasks

        if self.max_regression is not None:
            return self.max_regression
        return 0.05 if metric in tasks.LOWER_IS_BETTER else 0.01

    def tau(self, metric: str) -> float:
        """effect_size for this metric (its default by the metric's kind)."""
        from core import tasks

        if self.effect_size is not None:
            return self.effect_size
        return 0.1 if metric in tasks.LOWER_IS_BETTER else 0.02
