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
  continue  otherwise. Under no difference a roll-back happens with probability at most
            alpha; a canary worse by more than max_regression is promoted with probability at
            most alpha. Between -max_regression and 0 either may happen (the indifference zone).
TF-free and numpy-free (pure arithmetic), so the Airflow side can read it too.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

PROMOTE, ROLLBACK, CONTINUE = "promote", "rollback", "continue"


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
    """The decision for a canary that ran out of budget undecided. `estimate` (a truncated
    test's rule): promote when the point estimate is above the middle of the indifference
    zone, -max_regression / 2, else roll back (also without any estimate); `rollback` /
    `promote`: always that."""
    if rule in (PROMOTE, ROLLBACK):
        return rule
    if ci is None or not math.isfinite(ci.estimate):
        return ROLLBACK
    return PROMOTE if ci.estimate > -max_regression / 2 else ROLLBACK


def fixed_horizon_n(per_example_variance: float, difference: float, alpha: float, power: float) -> float:
    """Examples per version a one-sided fixed-horizon z-test needs to detect `difference` with
    `power` at level `alpha` (the reference the sequential test is benchmarked against):
    n = (z_{1-alpha} + z_power)^2 * per_example_variance / difference^2, where
    per_example_variance is n times the variance of the estimated difference."""
    z = NormalDist().inv_cdf
    return (z(1 - alpha) + z(power)) ** 2 * per_example_variance / difference ** 2
