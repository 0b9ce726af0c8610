"""Known-answer tests of the canary decision on AUC: its error rates when the canary is as
good as stable or worse than allowed, its power at the drops the benchmark reports, the
run-out rule, prediction-dependent label delay and the sample-ratio check; and the
interval's arithmetic."""

import dataclasses
import math

import pytest
from scipy import stats

from rollout import decision_sim, sequential
from rollout.settings import RolloutSettings


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


def test_the_fixed_horizon_reference_needs_the_textbook_sample_size():
    # two proportions at 0.8, a 0.1 drop, alpha 0.05 one-sided, power 0.8: about 197 per arm
    per_example_variance = 0.8 * 0.2 * 2
    assert sequential.fixed_horizon_n(per_example_variance, 0.1, 0.05, 0.8) == pytest.approx(197.8, rel=0.01)


def test_the_run_out_rule_holds_an_undecided_canary_unless_the_policy_chooses_otherwise():
    ci = sequential.Interval(-0.005, -0.03, 0.02, 1e-4)
    assert sequential.run_out(ci, 0.02, "inconclusive") == sequential.INCONCLUSIVE
    assert sequential.run_out(ci, 0.02, "estimate") == sequential.PROMOTE  # -0.005 > -0.01
    assert sequential.run_out(sequential.Interval(-0.02, -0.05, 0.01, 1e-4), 0.01, "estimate") == sequential.ROLLBACK
    assert sequential.run_out(ci, 0.01, "rollback") == sequential.ROLLBACK
    for rule in sequential.RUN_OUT_RULES:  # no test ran (too few labels): never a roll-back or a promotion
        assert sequential.run_out(None, 0.01, rule) == sequential.INCONCLUSIVE
    with pytest.raises(ValueError, match="unknown run-out rule"):
        sequential.run_out(ci, 0.01, "wait")


# Known answers on AUC, the default metric, from whole simulated rollouts decided by the
# controller's rule (rollout/decision_sim.py): taxi's settings (a 9:1 split, alpha 0.05,
# max_regression 0.02, max_hours 72, a look every 30 min), prediction-dependent label delay.
TAXI = RolloutSettings(mode="canary", canary_share=0.1, max_regression=0.02)
DELAYS = {"delay_median_h": 3.0, "flagged_delay_median_h": 0.25, "delay_sigma": 1.0, "flag_threshold": 0.7}


def _outcomes(world, runs, settings=TAXI, seed0=0, **kwargs) -> list:
    return [decision_sim.run(world, settings, seed, peek=False, **kwargs) for seed in range(seed0, seed0 + runs)]


def _upper(k: int, n: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper-Pearson upper bound of a binomial rate."""
    return 1.0 if k >= n else float(stats.beta.ppf(confidence, k + 1, n - k))


def _consistent(k: int, n: int, p: float, level: float = 0.01) -> bool:
    """Whether k of n is consistent with the rate p (exact two-sided binomial test at `level`)."""
    return stats.binomtest(k, n, p).pvalue >= level


def test_a_canary_as_good_as_stable_is_rolled_back_less_often_than_alpha():
    runs = _outcomes(decision_sim.World(auc_drop=0.0, requests_per_hour=2000, **DELAYS), 200)
    rollbacks = sum(o.action == sequential.ROLLBACK for o in runs)
    # Shown, not merely not refuted: the rate's 95% upper bound is below alpha.
    assert _upper(rollbacks, len(runs)) <= TAXI.significance_level, rollbacks
    assert sum(o.action == sequential.PROMOTE for o in runs) / len(runs) > 0.8  # and it does decide


def test_a_canary_worse_than_the_allowed_regression_is_promoted_less_often_than_alpha():
    runs = _outcomes(decision_sim.World(auc_drop=0.03, requests_per_hour=2000, **DELAYS), 100, seed0=1000)
    promoted = sum(o.action == sequential.PROMOTE for o in runs)
    assert _upper(promoted, len(runs)) <= TAXI.significance_level, promoted


@pytest.mark.parametrize("traffic, drop, documented", [
    # (logged requests/h, AUC drop, the roll-back rate docs/rollout.md reports)
    (2000, 0.02, 0.880),
    (200, 0.05, 0.435),
    (200, 0.10, 0.995),
])
def test_the_power_is_what_the_benchmark_reports(traffic, drop, documented):
    runs = _outcomes(decision_sim.World(auc_drop=drop, requests_per_hour=traffic, **DELAYS), 60, seed0=2000)
    rollbacks = sum(o.action == sequential.ROLLBACK for o in runs)
    assert _consistent(rollbacks, len(runs), documented), (rollbacks, documented)
    if drop > TAXI.margin("auc"):  # worse than allowed: never promoted here (at the margin itself: at most alpha)
        assert not any(o.action == sequential.PROMOTE for o in runs)


def test_a_canary_that_runs_out_is_held_for_a_person_and_too_few_labels_never_roll_it_back():
    # 20 logged requests an hour: about 140 canary requests in 72 h, under min_labelled.
    runs = _outcomes(decision_sim.World(auc_drop=0.0, requests_per_hour=20, **DELAYS), 20)
    assert all(o.action == sequential.INCONCLUSIVE and o.ran_out for o in runs)
    assert all(o.under(rule, 0.02) == sequential.INCONCLUSIVE for o in runs for rule in sequential.RUN_OUT_RULES)
    # About 1,000 canary labels at the budget and no difference: held, where the point
    # estimate once rolled back about a third (the `estimate` rule, a policy's explicit choice).
    runs = _outcomes(decision_sim.World(auc_drop=0.0, requests_per_hour=200, **DELAYS), 60, seed0=3000)
    assert not any(o.action == sequential.ROLLBACK for o in runs)
    held = [o for o in runs if o.action == sequential.INCONCLUSIVE]
    assert len(held) > 40 and all(o.ran_out for o in held)
    by_estimate = sum(o.under("estimate", 0.02) == sequential.ROLLBACK for o in runs)
    assert 0.15 < by_estimate / len(runs) < 0.6


# Prediction-dependent delay: labels of flagged predictions come within minutes, the others'
# after hours. One look 12 h in on an even split; compared as they arrived, a canary as good
# as stable that flags more was rolled back, and one 0.03 worse that flags less promoted.
EVEN = dataclasses.replace(TAXI, canary_share=0.5, max_hours=12.0)
AS_GOOD_FLAGS_MORE = decision_sim.World(auc_drop=0.0, requests_per_hour=6000, delay_median_h=6.0,
                                        flagged_delay_median_h=0.25, flag_threshold=0.85, canary_shift=1.5,
                                        look_every_h=12.0)
WORSE_FLAGS_LESS = dataclasses.replace(AS_GOOD_FLAGS_MORE, auc_drop=0.03, flag_threshold=0.5, canary_shift=-1.5)


def test_labels_that_come_sooner_for_some_predictions_no_longer_decide_at_one_look():
    for world, wrong in ((AS_GOOD_FLAGS_MORE, sequential.ROLLBACK), (WORSE_FLAGS_LESS, sequential.PROMOTE)):
        naive = _outcomes(world, 20, EVEN, mature=False)
        assert sum(o.action == wrong for o in naive) >= 18  # the bias this rule removes is real
        mature = _outcomes(world, 20, EVEN)
        assert not any(o.action == wrong for o in mature)
        assert all(o.action == sequential.INCONCLUSIVE and o.canary_labels == 0 for o in mature)  # none mature yet


def test_over_a_whole_rollout_the_mature_comparison_decides_right():
    rollout = dataclasses.replace(TAXI, canary_share=0.5)
    for world, wrong in ((AS_GOOD_FLAGS_MORE, sequential.ROLLBACK), (WORSE_FLAGS_LESS, sequential.PROMOTE)):
        world = dataclasses.replace(world, requests_per_hour=2000, look_every_h=2.0)
        runs = _outcomes(world, 12, rollout, seed0=4000)
        assert not any(o.action == wrong for o in runs), [o.action for o in runs]
        assert sum(o.action != sequential.INCONCLUSIVE for o in runs) >= 9  # and it decides


def test_a_sample_ratio_mismatch_blocks_the_decision():
    runs = _outcomes(decision_sim.World(auc_drop=0.0, requests_per_hour=2000, canary_log_loss=0.1, **DELAYS), 10)
    assert all(o.action == sequential.INCONCLUSIVE and o.blocked_by == "srm" for o in runs)
