"""Known answers of the Evaluator's model tests: the candidate against the simple baseline
(simple_baseline.judge) and the served model's staleness (staleness.judge)."""

import math

import pytest
import tensorflow_model_analysis as tfma

from components.evaluator import eval_config, simple_baseline, staleness
from core.settings import SettingsError
from trainer_toolkit.settings import SimpleBaselineSettings


def _m(name, model, value, se=None, dof=19, diff=False):
    return {"name": name, "model": model, "is_diff": diff, "value": value, "std_error": se, "dof": dof}


def test_a_candidate_significantly_worse_than_the_simple_model_is_refused():
    metrics = [_m("auc", "candidate", 0.70, 0.02), _m("auc", "simple", 0.80, 0.02)]
    check = simple_baseline.judge(metrics, "auc", 0.05, SimpleBaselineSettings())
    se = math.sqrt(0.02 ** 2 + 0.02 ** 2)
    from scipy import stats
    t = stats.t.ppf(0.95, 19)
    assert check["judged"] and check["refused"]
    assert check["difference"] == pytest.approx(-0.10)
    assert check["interval"] == pytest.approx([-0.10 - t * se, -0.10 + t * se])
    assert check["refusal"].startswith("a simpler model is better: candidate auc 0.7 vs the simple model's 0.8")


def test_within_noise_passes_and_the_stricter_rule_asks_for_a_significant_lead():
    metrics = [_m("auc", "candidate", 0.80, 0.05), _m("auc", "simple", 0.82, 0.05)]
    assert not simple_baseline.judge(metrics, "auc", 0.05, SimpleBaselineSettings())["refused"]
    better = SimpleBaselineSettings(require="better", min_lift=0.01)
    lead = [_m("auc", "candidate", 0.90, 0.01), _m("auc", "simple", 0.80, 0.01)]
    assert not simple_baseline.judge(lead, "auc", 0.05, better)["refused"]
    assert simple_baseline.judge(metrics, "auc", 0.05, better)["refused"]


def test_an_error_metric_compares_the_other_way_and_min_lift_is_relative():
    # MSE: lower is better; the candidate's 100 vs the simple model's 130 is a lead of 30.
    metrics = [_m("mean_squared_error", "candidate", 100.0, 2.0), _m("mean_squared_error", "simple", 130.0, 2.0)]
    check = simple_baseline.judge(metrics, "mean_squared_error", 0.05, SimpleBaselineSettings())
    assert check["difference"] == pytest.approx(30.0) and not check["refused"]
    # A 30% lead asked for (39 of the simple model's 130): 30 is not enough.
    strict = SimpleBaselineSettings(require="better", min_lift=0.3)
    assert simple_baseline.judge(metrics, "mean_squared_error", 0.05, strict)["refused"]


def test_without_an_interval_or_a_simple_model_nothing_is_judged():
    assert not simple_baseline.judge([_m("auc", "candidate", 0.7, None)], "auc", 0.05,
                                     SimpleBaselineSettings())["judged"]
    no_ci = [_m("auc", "candidate", 0.7, None), _m("auc", "simple", 0.9, None)]
    check = simple_baseline.judge(no_ci, "auc", 0.05, SimpleBaselineSettings())
    assert not check["judged"] and not check["refused"] and "no interval" in check["reason"]


def test_the_simple_model_is_a_third_model_without_thresholds():
    config = eval_config.eval_config(task="binary", label_key="y", slice_features=["f"], interval_method="jackknife",
                                     slice_by_span=True, thresholds={k: 0.5 for k in eval_config.THRESHOLD_KEYS})
    config = tfma.utils.update_eval_config_with_defaults(config, has_baseline=True, rubber_stamp=True)
    out = simple_baseline.add_to_config(config)
    assert [(s.name, s.is_baseline) for s in out.model_specs] == [("candidate", False), ("baseline", True),
                                                                  ("simple", False)]
    assert list(out.metrics_specs[0].model_names) == ["candidate", "baseline"]
    simple = out.metrics_specs[-1]
    assert list(simple.model_names) == ["simple"]
    assert {m.class_name for m in simple.metrics} == {"ExampleCount", "AUC", "BinaryAccuracy"}
    assert not any(m.per_slice_thresholds for m in simple.metrics)
    # A first run (no baseline): TFMA names the lone candidate ""; it gets a name beside "simple".
    alone = tfma.utils.update_eval_config_with_defaults(
        eval_config.eval_config(task="binary", label_key="y", slice_features=[], interval_method="jackknife",
                                slice_by_span=False, thresholds={k: 0.5 for k in eval_config.THRESHOLD_KEYS}),
        has_baseline=False, rubber_stamp=True)
    out = simple_baseline.add_to_config(alone)
    assert [s.name for s in out.model_specs] == ["candidate", "simple"]
    assert list(out.metrics_specs[0].model_names) == ["candidate"]
    tfma.utils.verify_eval_config(out)


def _slice(value, se, n, metric="auc"):
    return [_m(metric, "baseline", value, se), _m("example_count", "candidate", n)]


def test_staleness_known_answers():
    by_span = {201610: _slice(0.90, 0.02, 100), 201611: _slice(0.86, 0.02, 300), 201612: _slice(0.60, 0.03, 200)}
    check = staleness.judge(by_span, 201612, "auc", 201611, 7, staleness.StalenessSettings())
    assert check["age_spans"] == 1
    assert check["reference"]["value"] == pytest.approx((0.90 * 100 + 0.86 * 300) / 400)  # 0.87
    assert check["drop"] == pytest.approx(0.27)
    assert check["drop_bound"] == pytest.approx(0.27 - 1.6448536 * 0.03, abs=1e-6)
    assert check["loss_per_span"] == pytest.approx(0.27)
    [alert] = check["alerts"]
    assert "lost 0.27 auc on span 201612" in alert and "max_drop 0.05" in alert


def test_staleness_a_small_noisy_drop_and_an_old_model():
    # 0.07 lost, but the new span's standard error (0.05) makes it noise at 95%.
    noisy = {201611: _slice(0.87, 0.02, 300), 201612: _slice(0.80, 0.05, 20)}
    check = staleness.judge(noisy, 201612, "auc", 201611, 7, staleness.StalenessSettings())
    assert check["drop"] == pytest.approx(0.07) and check["alerts"] == []
    # Trained through January, judged on December of the same year: 11 spans old.
    old = {201612: _slice(0.80, 0.01, 100), 201601: _slice(0.81, 0.01, 100)}
    check = staleness.judge(old, 201612, "auc", 201601, 3, staleness.StalenessSettings(max_age_spans=6))
    assert check["age_spans"] == 11
    assert any("11 spans old" in a and "max_age_spans 6" in a for a in check["alerts"])
    # An error metric: a relative rise.
    mse = {201611: _slice(100.0, 1.0, 100, "mean_squared_error"), 201612: _slice(150.0, 2.0, 100, "mean_squared_error")}
    check = staleness.judge(mse, 201612, "mean_squared_error", 201611, 3, staleness.StalenessSettings())
    assert check["drop"] == pytest.approx(0.5) and check["alerts"]


def test_staleness_without_a_baseline_or_its_training_spans_says_why():
    assert "no served model" in staleness.judge({}, 201612, "auc", None, None, staleness.StalenessSettings())["reason"]
    check = staleness.judge({}, 201612, "auc", None, 4, staleness.StalenessSettings())
    assert "age is unknown" in check["reason"] and "age_spans" not in check
    assert staleness.age(201701, 201612) == 1 and staleness.age(201612, 201612) == 0
    with pytest.raises(SettingsError, match="staleness.max_age_spans"):
        staleness.StalenessSettings.from_dict({"max_age_spans": 0}, "staleness")
