"""The new-span check: the baseline's quality on the newest span vs the window, with known answers."""

import numpy as np
import pytest
import tensorflow as tf

from components.evaluator import new_span
from core.settings import SettingsError

SETTINGS = new_span.NewSpanSettings()


def _entries(value, se, count, model_values=None):
    out = [{"name": "example_count", "model": "candidate", "is_diff": False, "value": count, "std_error": None,
            "dof": None}]
    for model, v in (model_values or {"candidate": value, "baseline": value}).items():
        out.append({"name": "auc", "model": model, "is_diff": False, "value": v, "std_error": se, "dof": 19})
    return out


def _window(new_value, others=(0.9, 0.88, 0.91, 0.89, 0.9), se=0.03, count=100, new_count=100):
    by_span = {201601 + i: _entries(v, se, count) for i, v in enumerate(others)}
    by_span[201606] = _entries(new_value, se, new_count, {"candidate": 0.9, "baseline": new_value})
    overall = _entries(0.9, se / 2.5, count * 6)
    return by_span, overall


def test_a_collapse_of_the_baseline_on_the_new_span_is_refused_as_bad_data():
    check = new_span.judge(*_window(0.55), 201606, "auc", SETTINGS)
    assert check["judged"] and check["collapsed"]
    assert check["drop"] == pytest.approx(0.35) and check["z"] == pytest.approx(0.35 / 0.03)
    assert check["refusal"].startswith("the data, not the model:")
    assert check["calibrated_on"] == 5 and check["z_allowed"] >= 2.32
    assert check["candidate"]["value"] == 0.9 and check["baseline"]["interval"][0] < 0.55 < check["baseline"]["interval"][1]


def test_a_month_within_the_windows_own_variation_is_not_refused():
    check = new_span.judge(*_window(0.87), 201606, "auc", SETTINGS)
    assert check["judged"] and not check["collapsed"] and "refusal" not in check


def test_a_drop_that_is_significant_but_smaller_than_min_drop_is_not_refused():
    check = new_span.judge(*_window(0.86, se=0.005), 201606, "auc", SETTINGS)
    assert check["z"] > 5 and not check["collapsed"]  # 0.04 < min_drop 0.05


def test_spans_too_small_to_judge_say_so():
    check = new_span.judge(*_window(0.3, new_count=7), 201606, "auc", SETTINGS)
    assert not check["judged"] and not check["collapsed"]
    assert check["reason"] == "too small to judge: 7 eval examples of span 201606 (min_examples 10)"
    no_interval = _window(0.3)
    no_interval[0][201606][2]["std_error"] = None
    check = new_span.judge(*no_interval, 201606, "auc", SETTINGS)
    assert not check["judged"] and "no interval" in check["reason"]


def test_the_windows_own_spans_calibrate_the_allowance():
    """A window whose months vary a lot in units of their noise allows the new span as much."""
    steady = new_span.judge(*_window(0.75, se=0.04), 201606, "auc", SETTINGS)
    restless = new_span.judge(*_window(0.75, others=(0.9, 0.7, 0.95, 0.72, 0.9), se=0.04), 201606, "auc", SETTINGS)
    assert steady["collapsed"] and not restless["collapsed"]
    assert restless["z_allowed"] > steady["z_allowed"]


def test_false_refusals_under_no_difference_stay_below_the_level():
    """Months drawn from one distribution: the new span is refused at most about as often as
    significance_level, and in practice less (min_drop and the calibration add room)."""
    rng = np.random.default_rng(7)
    refused = 0
    for _ in range(2000):
        values = 0.88 + rng.normal(0, 0.04, 6)
        by_span = {201601 + i: _entries(v, 0.04, 60) for i, v in enumerate(values)}
        refused += new_span.judge(by_span, _entries(0.88, 0.016, 360), 201606, "auc", SETTINGS)["collapsed"]
    assert refused / 2000 <= SETTINGS.significance_level


def test_an_error_metrics_rise_is_judged_relative_to_the_window():
    def entries(v, se, n):
        return [{"name": "example_count", "model": "candidate", "is_diff": False, "value": n, "std_error": None,
                 "dof": None},
                {"name": "mean_squared_error", "model": "baseline", "is_diff": False, "value": v, "std_error": se,
                 "dof": 19}]
    by_span = {201601 + i: entries(100.0 + i, 8.0, 80) for i in range(5)}
    by_span[201606] = entries(300.0, 20.0, 80)
    check = new_span.judge(by_span, entries(110.0, 4.0, 480), 201606, "mean_squared_error", SETTINGS)
    assert check["collapsed"] and check["drop_kind"] == "relative rise"
    assert check["drop"] == pytest.approx((300 - 110) / 110)


def test_the_span_tag_adds_one_feature_to_any_example():
    example = tf.train.Example(features=tf.train.Features(feature={
        "fare": tf.train.Feature(float_list=tf.train.FloatList(value=[7.5]))}))
    merged = tf.train.Example.FromString(example.SerializeToString() + new_span.tag_bytes(201612))
    assert merged.features.feature[new_span.SPAN_FEATURE].int64_list.value == [201612]
    assert merged.features.feature["fare"].float_list.value == [7.5]


@pytest.mark.parametrize("block, message", [
    ({"min_examples": 1}, "new_span.min_examples: must be at least 2"),
    ({"significance_level": 0.7}, "new_span.significance_level"),
    ({"margin": 0.5}, "new_span.margin: must be >= 1"),
    ({"min_drop": "big"}, "new_span.min_drop: expected float"),
    ({"alpha": 0.1}, "new_span: unknown key(s) alpha"),
])
def test_bad_settings_name_the_key(block, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        new_span.NewSpanSettings.from_dict(block, "new_span")
