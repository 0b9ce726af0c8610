"""A seeded simulation of one canary rollout in memory, decided by the controller's own rule:
what benchmarks/rollout/run.py measures and the known-answer tests
(tests/rollout/test_sequential.py) check.

The world, a binary task judged on AUC (the default metric):
  - logged requests arrive as a Poisson process (`requests_per_hour`), all split-routed;
    a request's key sends it to the canary with probability `canary_share` (the key's
    hash is uniform); `canary_log_loss` loses that share of the canary's request logs (a
    broken split, the sample-ratio check's case);
  - labels are Bernoulli(`positives`); scores are binormal (negatives N(0, 1), positives
    N(d, 1), d = sqrt(2) z(AUC)) through a sigmoid, the canary's shifted by `canary_shift`
    (the same AUC, another calibration: it flags another share of requests);
  - a label arrives after a log-normal delay with median `delay_median_h` (log-sd
    `delay_sigma`); a flagged example's (score above `flag_threshold`) after
    `flagged_delay_median_h` when set: prediction-dependent delay.
The controller looks every `look_every_h` hours (taxi's `rollout_check`, 30 min) until
`max_hours` and decides through rollout/verdict.py, seeing what a decision would see then:
the requests logged so far, the labels arrived so far, the sample-ratio check on the request
counts, and the maturity horizon (rollout/maturity.py) estimated from requests grouped by the
minute they were logged. With `mature=False` every arrived label is compared as it comes
(the rule before maturity), for the bias it had.

Tallies are kept incrementally as AUC histograms (live_metrics.Tally.from_buckets), so a
run of 144 looks over 150,000 requests takes tens of milliseconds. TF-free.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np

from rollout import live_metrics, maturity, sequential, srm, verdict
from rollout.settings import RolloutSettings

METRIC = "auc"


@dataclasses.dataclass(frozen=True)
class World:
    auc_drop: float = 0.0
    base_auc: float = 0.80
    positives: float = 0.3
    requests_per_hour: float = 200.0
    delay_median_h: float = 1.0
    delay_sigma: float = 1.0
    flagged_delay_median_h: float | None = None
    flag_threshold: float = 0.5
    canary_shift: float = 0.0
    canary_log_loss: float = 0.0
    look_every_h: float = 0.5


@dataclasses.dataclass
class Outcome:
    action: str  # promote, rollback or inconclusive (a run that never decided ends inconclusive)
    ran_out: bool
    hours: float
    canary_labels: int
    stable_labels: int
    blocked_by: str | None
    run_out_interval: sequential.Interval | None  # the interval at the budget, when the test had not decided
    per_example_variance: float | None  # canary labels x the variance of the difference, at the end
    peeked: bool  # a one-sided z-test at alpha, looked at every look until max_hours, rolled back
    srm_blocks: int  # looks the sample-ratio check blocked

    def under(self, rule: str, max_regression: float) -> str:
        """The outcome had the run-out rule been `rule`."""
        if not self.ran_out or self.blocked_by:
            return self.action
        return sequential.run_out(self.run_out_interval, max_regression, rule)


def _separation(auc: float) -> float:
    return math.sqrt(2) * NormalDist().inv_cdf(auc)


def run(world: World, settings: RolloutSettings, seed: int, mature: bool = True, peek: bool = True) -> Outcome:
    """One seeded rollout (the module docstring). With `peek`, the looks go on after the
    decision until the peeking z-test rolls back or max_hours, for its error rate."""
    rng = np.random.default_rng(seed)
    seconds = settings.max_hours * 3600
    n = int(rng.poisson(world.requests_per_hour * settings.max_hours))
    logged = np.sort(rng.random(n) * seconds)
    canary = rng.random(n) < settings.canary_share
    if world.canary_log_loss:
        kept = ~(canary & (rng.random(n) < world.canary_log_loss))
        logged, canary, n = logged[kept], canary[kept], int(kept.sum())
    positive = rng.random(n) < world.positives
    separation = np.where(canary, _separation(world.base_auc - world.auc_drop), _separation(world.base_auc))
    raw = rng.normal(size=n) + separation * positive + np.where(canary, world.canary_shift, 0.0)
    score = 1 / (1 + np.exp(-raw))
    median = np.full(n, world.delay_median_h)
    if world.flagged_delay_median_h is not None:
        median[score > world.flag_threshold] = world.flagged_delay_median_h
    arrival = logged + np.exp(np.log(median * 3600) + world.delay_sigma * rng.normal(size=n))
    arm = canary.astype(np.int64)
    label = positive.astype(np.int64)
    bucket = live_metrics.score_buckets(score)
    minute = (logged // 60).astype(np.int64)
    minutes = int(math.ceil(seconds / 60)) + 1
    totals = np.zeros((2, minutes), np.int64)
    np.add.at(totals, (arm, minute), 1)
    arrived = np.zeros((2, minutes), np.int64)
    by_arrival = np.argsort(arrival, kind="stable")
    arrival_sorted = arrival[by_arrival]
    canary_so_far = np.concatenate([[0], np.cumsum(arm)])
    # The age bucket of a minute logged j minutes before a look (a look falls on a whole minute).
    age_of = maturity.buckets(np.arange(minutes + 1) * 60.0 - 30.0)
    hist = np.zeros((2, 2, live_metrics.BUCKETS), np.int64)  # arm, label, score bucket
    alpha = settings.significance_level
    z_alpha = NormalDist().inv_cdf(1 - alpha)
    decided: Outcome | None = None
    peeked = False
    srm_blocks = 0
    t_prev, cut_prev, a_done = 0.0, -math.inf, 0
    steps = int(round(settings.max_hours / world.look_every_h))
    tally_c = tally_s = None
    for step in range(1, steps + 1):
        t = min(step * world.look_every_h, settings.max_hours) * 3600
        a_next = int(np.searchsorted(arrival_sorted, t, side="right"))
        newly = by_arrival[a_done:a_next]
        a_done = a_next
        np.add.at(arrived, (arm[newly], minute[newly]), 1)
        seen = int(np.searchsorted(logged, t, side="right"))
        if mature:
            whole = int(t // 60)  # minutes fully seen by now
            ages = age_of[whole - np.arange(whole)]
            horizon = max(maturity.horizon(np.bincount(ages, totals[a, :whole], len(maturity.EDGES)),
                                           np.bincount(ages, arrived[a, :whole], len(maturity.EDGES)),
                                           settings.maturity_quantile) for a in (0, 1))
        else:
            horizon = 0.0
        cut = t - horizon
        changes = [(newly[logged[newly] <= cut], 1)]
        if cut > cut_prev:
            span = np.arange(np.searchsorted(logged, cut_prev, side="right"), np.searchsorted(logged, cut, side="right"))
            changes.append((span[arrival[span] <= t_prev], 1))
        elif cut < cut_prev:
            span = np.arange(np.searchsorted(logged, cut, side="right"), np.searchsorted(logged, cut_prev, side="right"))
            changes.append((span[arrival[span] <= t_prev], -1))
        for rows, sign in changes:
            if rows.size:
                np.add.at(hist, (arm[rows], label[rows], bucket[rows]), sign)
        t_prev, cut_prev = t, cut
        tally_s = live_metrics.Tally.from_buckets(hist[0, 1], hist[0, 0])
        tally_c = live_metrics.Tally.from_buckets(hist[1, 1], hist[1, 0])
        result = None
        if decided is None:
            on_canary = int(canary_so_far[seen])
            ratio = srm.check(seen - on_canary, on_canary, settings.canary_share, settings.srm_alpha)
            result = verdict.judge(tally_c, tally_s, METRIC, settings, t / 3600, ratio)
        if not peeked and min(tally_c.count, tally_s.count) >= settings.min_labelled:
            if result is not None and result.test is not None:
                d, v = result.test["estimate"], result.test["variance"]
            else:
                d, v = live_metrics.difference(tally_c, tally_s, METRIC)
            peeked = v > 0 and d / math.sqrt(v) < -z_alpha
        if result is not None:
            if result.blocked_by:
                srm_blocks += 1
            if result.action != sequential.CONTINUE and not (result.blocked_by and not result.ran_out):
                interval = None
                if result.ran_out and result.test is not None and not result.blocked_by:
                    interval = sequential.Interval(result.test["estimate"], result.test["low"], result.test["high"],
                                                   result.test["variance"])
                decided = Outcome(result.action, result.ran_out, t / 3600, tally_c.count, tally_s.count,
                                  result.blocked_by, interval, None, False, 0)
        if decided is not None and (peeked or decided.ran_out or not peek):
            break
    if decided is None:  # cannot happen at max_hours (the budget), kept for a world with no looks
        decided = Outcome(sequential.INCONCLUSIVE, True, t_prev / 3600, 0, 0, None, None, None, False, 0)
    decided.peeked, decided.srm_blocks = peeked, srm_blocks
    if tally_c is not None and min(tally_c.count, tally_s.count) >= 2:
        _, v = live_metrics.difference(tally_c, tally_s, METRIC)
        decided.per_example_variance = v * tally_c.count if math.isfinite(v) else None
    return decided

