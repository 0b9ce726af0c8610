"""Known-answer tests of the canary decision: its error rate when the versions do not
differ, its power when the canary is worse, and the interval's arithmetic."""

import math

import numpy as np
import pytest

from core import tasks
from rollout import live_metrics, sequential


def test_the_half_width_shrinks_with_information_and_matches_the_closed_form():
    v, alpha, tau = 1e-4, 0.05, 0.02
    expected = math.sqrt(v * (v + tau ** 2) / tau ** 2 * (2 * math.log(20) + math.log((v + tau ** 2) / v)))
    assert sequential.half_width(v, alpha, tau) == pytest.approx(expected)
    assert sequential.half_width(v / 4, alpha, tau) < sequential.half_width(v, alpha, tau)
    assert sequential.half_width(0.0, alpha, tau) == math.inf


def test_the_interval_is_where_the_mixture_ratio_stays_below_one_over_alpha():
    ci = sequential.interval(0.01, 2e-5, 0.05, 0.02)
    assert sequential.mixture_ratio(0.01, 2e-5, 0.02, ci.low) == pytest.approx(20, rel=1e-6)
    assert sequential.mixture_ratio(0.01, 2e-5, 0.02, ci.high) == pytest.approx(20, rel=1e-6)
    assert sequential.mixture_ratio(0.01, 2e-5, 0.02, 0.01) < 20


@pytest.mark.parametrize("low, high, expected", [
    (-0.05, -0.001, sequential.ROLLBACK),
    (-0.009, 0.02, sequential.PROMOTE),
    (-0.03, 0.02, sequential.CONTINUE),
])
def test_the_decision_rule(low, high, expected):
    ci = sequential.Interval((low + high) / 2, low, high, 1e-4)
    assert sequential.decide(ci, max_regression=0.01) == expected


def _simulate(p_stable, p_canary, seed, alpha=0.05, max_regression=0.01, batch=200, looks=60, tau=0.02):
    """One canary test on accuracy (a Bernoulli per example), looked at after every batch."""
    rng = np.random.default_rng(seed)
    stable, canary = live_metrics.Tally(tasks.BINARY), live_metrics.Tally(tasks.BINARY)
    for look in range(looks):
        for tally, p in ((stable, p_stable), (canary, p_canary)):
            correct = rng.random(batch) < p
            labels = rng.random(batch) < 0.5
            scores = np.where(correct == labels, 0.9, 0.1)  # score > 0.5 is right exactly when correct
            tally.add(scores, labels)
        d, v = live_metrics.difference(canary, stable, "binary_accuracy")
        action = sequential.decide(sequential.interval(d, v, alpha, tau), max_regression)
        if action != sequential.CONTINUE:
            return action, (look + 1) * batch
    return sequential.CONTINUE, looks * batch


def test_under_no_difference_a_rollback_is_rarer_than_alpha_however_often_it_is_looked_at():
    runs = [_simulate(0.8, 0.8, seed, max_regression=0.02, looks=100) for seed in range(300)]
    rollbacks = sum(action == sequential.ROLLBACK for action, _ in runs)
    # alpha = 0.05 bounds the rate at every look at once (60 looks here); 300 runs: the rate's
    # standard error is 1.3 points, so 0.05 + 2.5 SE is a bound a correct test meets.
    assert rollbacks / len(runs) <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / len(runs))
    # and the test does decide: with a 2-point margin most are promoted within 20,000 labels
    assert sum(action == sequential.PROMOTE for action, _ in runs) / len(runs) > 0.5


def test_a_canary_worse_by_ten_points_is_rolled_back_nearly_always_and_early():
    runs = [_simulate(0.8, 0.7, seed) for seed in range(200)]
    rolled = [n for action, n in runs if action == sequential.ROLLBACK]
    assert len(rolled) / len(runs) >= 0.95
    assert not any(action == sequential.PROMOTE for action, _ in runs)  # worse than the margin: never promoted
    assert np.median(rolled) <= 2000


def test_the_fixed_horizon_reference_needs_the_textbook_sample_size():
    # two proportions at 0.8, a 0.1 drop, alpha 0.05 one-sided, power 0.8: about 197 per arm
    per_example_variance = 0.8 * 0.2 * 2
    assert sequential.fixed_horizon_n(per_example_variance, 0.1, 0.05, 0.8) == pytest.approx(197.8, rel=0.01)


def test_the_run_out_rule():
    ci = sequential.Interval(-0.005, -0.03, 0.02, 1e-4)
    assert sequential.run_out(ci, 0.02, "estimate") == sequential.PROMOTE  # -0.005 > -0.01
    assert sequential.run_out(sequential.Interval(-0.02, -0.05, 0.01, 1e-4), 0.01, "estimate") == sequential.ROLLBACK
    assert sequential.run_out(None, 0.01, "estimate") == sequential.ROLLBACK  # never enough labels
    assert sequential.run_out(ci, 0.01, "rollback") == sequential.ROLLBACK
