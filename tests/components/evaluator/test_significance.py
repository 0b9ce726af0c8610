"""The Evaluator's verdict: a drop refuses only when significant; floors and too-small splits."""

import pytest

from components.evaluator import significance


def _metrics(count=120, cand=0.80, base=0.83, se=0.02, dof=19):
    return [
        {"name": "example_count", "model": "candidate", "is_diff": False, "value": count, "std_error": None, "dof": None},
        {"name": "auc", "model": "candidate", "is_diff": False, "value": cand, "std_error": se, "dof": dof},
        {"name": "auc", "model": "baseline", "is_diff": False, "value": base, "std_error": se, "dof": dof},
        {"name": "auc", "model": "candidate", "is_diff": True, "value": cand - base, "std_error": se, "dof": dof},
    ]


CHANGE_FAILURE = {"name": "auc", "is_diff": True, "value": -0.03, "slice": "overall",
                  "threshold": {"absolute": -0.02, "direction": "higher"}}


def test_a_drop_within_noise_is_not_a_refusal():
    # -0.03 vs a tolerance of -0.02, but the one-sided 95% upper bound is about +0.005.
    verdict = significance.judge(_metrics(), [CHANGE_FAILURE], level=0.05, min_examples=50)
    assert verdict["blessed"] and verdict["reasons"] == []
    [row] = verdict["comparisons"]
    assert row["verdict"].startswith("beyond tolerance, but not significantly")
    lo, hi = row["interval"]
    assert lo < -0.03 < hi and hi == pytest.approx(-0.03 + 1.729 * 0.02, abs=1e-3)  # t(0.95, 19)


def test_a_significant_drop_is_refused_with_the_bound_in_the_reason():
    verdict = significance.judge(_metrics(cand=0.70, base=0.83, se=0.01), [{**CHANGE_FAILURE, "value": -0.13}],
                                 level=0.05, min_examples=50)
    assert not verdict["blessed"]
    assert "auc fell 0.13" in verdict["reasons"][0] and "95% bound" in verdict["reasons"][0]
    assert verdict["comparisons"][0]["verdict"] == "significantly worse than tolerated"


def test_a_stricter_level_needs_more_evidence():
    metrics, failure = _metrics(cand=0.78, base=0.83, se=0.015), [{**CHANGE_FAILURE, "value": -0.05}]
    assert not significance.judge(metrics, failure, level=0.10, min_examples=50)["blessed"]
    assert significance.judge(metrics, failure, level=0.001, min_examples=50)["blessed"]


def test_floors_refuse_on_the_point_estimate_and_small_splits_are_not_judged():
    floor = {"name": "auc", "is_diff": False, "value": 0.6, "slice": "overall", "threshold": {"lower_bound": 0.7}}
    verdict = significance.judge(_metrics(), [floor], level=0.05, min_examples=50)
    assert not verdict["blessed"] and "below the floor 0.7" in verdict["reasons"][0]
    small = significance.judge(_metrics(count=20), [], level=0.05, min_examples=50)
    assert not small["blessed"]
    assert small["reasons"] == ["eval split too small to judge: 20 examples, fewer than min_eval_examples 50"]


def test_lower_is_better_metrics_use_the_other_bound():
    metrics = [
        {"name": "example_count", "model": "candidate", "is_diff": False, "value": 200, "std_error": None, "dof": None},
        {"name": "mean_squared_error", "model": "candidate", "is_diff": True, "value": 0.5, "std_error": 0.1, "dof": 19},
    ]
    failure = {"name": "mean_squared_error", "is_diff": True, "value": 0.5, "slice": "overall",
               "threshold": {"absolute": 0.1, "direction": "lower"}}
    assert not significance.judge(metrics, [failure], level=0.05, min_examples=50)["blessed"]
    assert significance.judge([*metrics[:1], {**metrics[1], "std_error": 0.5}], [failure], 0.05, 50)["blessed"]


def _mse(cand, base, se):
    return [
        {"name": "example_count", "model": "candidate", "is_diff": False, "value": 200, "std_error": None, "dof": None},
        {"name": "mean_squared_error", "model": "candidate", "is_diff": False, "value": cand, "std_error": se, "dof": 19},
        {"name": "mean_squared_error", "model": "baseline", "is_diff": False, "value": base, "std_error": se, "dof": 19},
        {"name": "mean_squared_error", "model": "candidate", "is_diff": True, "value": cand - base, "std_error": se,
         "dof": 19},
    ]


def test_a_relative_rise_is_judged_as_a_share_of_the_baseline():
    # MSE 2900 -> 3400 (+17%) with 10% tolerated: the tolerance is 290, in the MSE's units.
    rise = {"name": "mean_squared_error", "is_diff": True, "value": 500.0, "slice": "overall",
            "threshold": {"relative": 0.1, "direction": "lower"}}
    refused = significance.judge(_mse(3400.0, 2900.0, se=50.0), [rise], level=0.05, min_examples=50)
    assert not refused["blessed"]
    assert refused["comparisons"][0]["tolerance"] == pytest.approx(290.0)
    assert "mean_squared_error rose 500 vs the baseline (tolerated 290 = 10% of the baseline)" in refused["reasons"][0]
    # The same rise with a wide interval (lower bound below +290): within noise, blessed.
    assert significance.judge(_mse(3400.0, 2900.0, se=400.0), [rise], level=0.05, min_examples=50)["blessed"]


def test_a_ceiling_names_itself():
    ceiling = {"name": "mean_absolute_error", "is_diff": False, "value": 70.0, "slice": "overall",
               "threshold": {"upper_bound": 64.5}}
    verdict = significance.judge(_mse(3000.0, 3000.0, 10.0), [ceiling], level=0.05, min_examples=50)
    assert verdict["reasons"] == ["mean_absolute_error 70 on overall is above the ceiling 64.5"]
