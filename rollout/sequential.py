"""The canary decision's test: a confidence sequence for the difference of one metric between
two versions, valid however often it is looked at.

Method: the normal-mixture sequential probability ratio test (mSPRT) of Johari, Koomen,
Pekelis and Walsh, "Peeking at A/B Tests: Why it matters, and what to do about it", KDD
2017 (section 4), in its asymptotic form for any estimator with a consistent variance
estimate (Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas, "Time-uniform central limit
theory and asymptotic confidence sequences", 2021). For an estimate `d` of the difference
with variance `v` and a N(0, tau^2) mixture over the true difference, the mixture
likelihood ratio against "the difference is theta" is

    L(theta) = sqrt(v / (v + tau^2)) * exp((d - theta)^2 tau^2 / (2 v (v + tau^2)))

and {theta : L(theta) < 1/alpha} is a (1 - alpha) confidence sequence: with probability at
least 1 - alpha it holds the true difference at every look at once. Its half-width is
sqrt(v (v + tau^2) / tau^2 * (2 log(1/alpha) + log((v + tau^2) / v))).

The difference is oriented so that positive means the canary is better. Decisions:
  promote   the whole interval lies above -max_regression (the canary is shown to be no
            worse than stable by more than the allowed regression: non-inferiority);
  roll back the whole interval lies below 0 (the canary is shown to be worse);
  continue  otherwise.
What this guarantees is the confidence sequence's coverage, for the interval as such: a
roll-back of a canary no worse than stable, or a promotion of one worse than max_regression,
needs the interval to miss the true difference at some look, so each happens with
probability at most about alpha (the asymptotic sequence is valid as the labels grow; the
known-answer tests, tests/rollout/test_sequential.py, and benchmarks/rollout/run.py measure
the rates). It holds only for the decisions the test itself makes: a canary still undecided
when its budget runs out is `inconclusive` (held for a person) unless the policy chooses
otherwise (`run_out`), and that choice has the error rates docs/rollout.md gives.
TF-free and numpy-free (pure arithmetic), so the Airflow side can read it too.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

PROMOTE, ROLLBACK, CONTINUE, INCONCLUSIVE = "promote", "rollback", "continue", "inconclusive"
# What an undecided canary gets at its budget (rollout.on_run_out).
RUN_OUT_RULES = (INCONCLUSIVE, "estimate", ROLLBACK, PROMOTE)


@dataclasses.dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    variance: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def half_width(variance: float, alpha: float, tau: float) -> float:
    """The confidence sequence's half-width at this look (infinite without information)."""
    if not variance > 0 or not math.isfinite(variance):
        return math.inf
    t2 = tau * tau
    return math.sqrt(variance * (variance + t2) / t2 * (2 * math.log(1 / alpha) + math.log((variance + t2) / variance)))


def interval(estimate: float, variance: float, alpha: float, tau: float) -> Interval:
    """The (1 - alpha) always-valid interval for the difference at this look."""
    h = half_width(variance, alpha, tau)
    return Interval(estimate, estimate - h, estimate + h, variance)


def mixture_ratio(estimate: float, variance: float, tau: float, theta: float = 0.0) -> float:
    """The mixture likelihood ratio against "the difference is theta" (rejects at >= 1/alpha)."""
    if not variance > 0:
        return math.inf if estimate != theta else 1.0
    t2 = tau * tau
    exponent = (estimate - theta) ** 2 * t2 / (2 * variance * (variance + t2))
    return math.sqrt(variance / (variance + t2)) * math.exp(min(exponent, 700.0))


def decide(ci: Interval, max_regression: float) -> str:
    """promote, rollback or continue (module docstring)."""
    if ci.high < 0:
        return ROLLBACK
    if ci.low > -max_regression:
        return PROMOTE
    return CONTINUE


def run_out(ci: Interval | None, max_regression: float, rule: str) -> str:
    """The outcome for a canary that reached its budget undecided.

    `inconclusive` (the default): it stays as it is and a person decides, as Argo Rollouts'
    Inconclusive pauses; the test's error guarantees then hold for everything the controller
    decides. The others are a policy's explicit choice, with the error rates docs/rollout.md
    gives: `rollback` / `promote` always that; `estimate` promotes when the point estimate is
    above the middle of the indifference zone, -max_regression / 2, else rolls back. Without
    an estimate (fewer than min_labelled labels: no test ran) it is always inconclusive."""
    if rule not in RUN_OUT_RULES:
        raise ValueError(f"unknown run-out rule {rule!r}; known: {', '.join(RUN_OUT_RULES)}")
    if ci is None or not math.isfinite(ci.estimate) or rule == INCONCLUSIVE:
        return INCONCLUSIVE
    if rule in (PROMOTE, ROLLBACK):
        return rule
    return PROMOTE if ci.estimate > -max_regression / 2 else ROLLBACK


def evidence(ci: Interval, alpha: float, tau: float, max_regression: float) -> dict:
    """The test's statistics at this look, for the record: the mixture likelihood ratios
    against "no difference" (a roll-back needs it at 1/alpha with the estimate below 0) and
    against "worse by max_regression" (a promotion needs it at 1/alpha with the estimate
    above -max_regression), the threshold, and the interval."""
    return {"method": "mSPRT confidence sequence (Johari et al., KDD 2017; Waudby-Smith et al., 2021)",
            "estimate": ci.estimate, "variance": ci.variance, "low": ci.low, "high": ci.high,
            "alpha": alpha, "tau": tau, "max_regression": max_regression, "threshold": 1 / alpha,
            "ratio_vs_no_difference": mixture_ratio(ci.estimate, ci.variance, tau, 0.0),
            "ratio_vs_max_regression": mixture_ratio(ci.estimate, ci.variance, tau, -max_regression)}


def fixed_horizon_n(per_example_variance: float, difference: float, alpha: float, power: float) -> float:
    """Examples per version a one-sided fixed-horizon z-test needs to detect `difference` with
    `power` at level `alpha` (the reference the sequential test is benchmarked against):
    n = (z_{1-alpha} + z_power)^2 * per_example_variance / difference^2, where
    per_example_variance is n times the variance of the estimated difference."""
    z = NormalDist().inv_cdf
    return (z(1 - alpha) + z(power)) ** 2 * per_example_variance / difference ** 2
