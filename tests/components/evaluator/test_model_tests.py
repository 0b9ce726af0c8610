"""Known answers of the Evaluator's model tests: the candidate against the simple baseline
(simple_baseline.judge) and the served model's staleness (staleness.judge)."""

import math

import pytest

from components.evaluator import eval_config, fairness, simple_baseline, staleness
from core import tasks
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


def test_a_practically_equal_candidate_is_not_refused_unless_no_margin_is_asked_for():
    # Near-perfect models a pair of examples apart: significantly worse, by 0.0003 AUC.
    metrics = [_m("auc", "candidate", 0.9976, 0.0001), _m("auc", "simple", 0.9979, 0.0001)]
    check = simple_baseline.judge(metrics, "auc", 0.05, SimpleBaselineSettings())
    assert check["interval"][1] < 0 and not check["refused"]
    assert check["margin"] == pytest.approx(check["interval"][1] + 0.01)  # how close it came
    assert check["min_lift"] == 0.01 and check["rule"] == "refused when significantly worse than the simple model by 0.01"
    assert simple_baseline.judge(metrics, "auc", 0.05, SimpleBaselineSettings(min_lift=0.0))["refused"]


def test_an_error_metric_compares_the_other_way_and_min_lift_is_relative():
    # MSE: lower is better; the candidate's 100 vs the simple model's 130 is a lead of 30.
    metrics = [_m("mean_squared_error", "candidate", 100.0, 2.0), _m("mean_squared_error", "simple", 130.0, 2.0)]
    check = simple_baseline.judge(metrics, "mean_squared_error", 0.05, SimpleBaselineSettings())
    assert check["difference"] == pytest.approx(30.0) and not check["refused"]
    # A 30% lead asked for (39 of the simple model's 130): 30 is not enough.
    strict = SimpleBaselineSettings(require="better", min_lift=0.3)
    refused = simple_baseline.judge(metrics, "mean_squared_error", 0.05, strict)
    assert refused["refused"]
    # The margin in min_lift's units: the lower bound's share of 130 short of 30%.
    assert refused["margin"] == pytest.approx((refused["interval"][0] - 39.0) / 130.0) and refused["margin"] < 0


def test_without_an_interval_or_a_simple_model_nothing_is_judged():
    assert not simple_baseline.judge([_m("auc", "candidate", 0.7, None)], "auc", 0.05,
                                     SimpleBaselineSettings())["judged"]
    no_ci = [_m("auc", "candidate", 0.7, None), _m("auc", "simple", 0.9, None)]
    check = simple_baseline.judge(no_ci, "auc", 0.05, SimpleBaselineSettings())
    assert not check["judged"] and not check["refused"] and "no interval" in check["reason"]


def test_metric_known_answers():
    # AUC from ranks: 3 of the 4 positive-negative pairs ordered right; a tie counts half.
    assert simple_baseline.metric("auc", [0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert simple_baseline.metric("auc", [0, 1], [0.5, 0.5]) == pytest.approx(0.5)
    assert math.isnan(simple_baseline.metric("auc", [1, 1], [0.2, 0.9]))  # one class: undefined
    assert simple_baseline.metric("binary_accuracy", [0, 1, 1], [[0.2], [0.7], [0.4]]) == pytest.approx(2 / 3)
    assert simple_baseline.metric("sparse_categorical_accuracy", [2, 0], [[0.1, 0.2, 0.7], [0.3, 0.6, 0.1]]) == 0.5
    assert simple_baseline.metric("mean_squared_error", [1.0, 3.0], [2.0, 1.0]) == pytest.approx(2.5)
    assert simple_baseline.metric("mean_absolute_error", [1.0, 3.0], [2.0, 1.0]) == pytest.approx(1.5)
    assert simple_baseline.metric("mean_absolute_percentage_error", [1.0, 4.0], [2.0, 3.0]) == pytest.approx(62.5)
    with pytest.raises(ValueError, match="no simple-baseline metric 'f1'"):
        simple_baseline.metric("f1", [1], [1])


def test_the_paired_jackknife_of_a_mean_metric_is_the_spread_of_its_group_means():
    # For a mean over equal groups, the delete-a-group jackknife's standard error is
    # sd(group means) / sqrt(groups): here of the per-example differences of squared errors.
    import numpy as np

    rng = np.random.default_rng(3)
    y = rng.normal(size=40)
    cand, simple = y + rng.normal(scale=0.5, size=40), y + rng.normal(scale=0.8, size=40)
    entries = {(e["model"], e["is_diff"]): e for e in simple_baseline.paired("mean_squared_error", y, cand, simple)}
    group = np.random.default_rng(simple_baseline.JACKKNIFE_SEED).permutation(40) % 20
    per_example = (y - cand) ** 2 - (y - simple) ** 2
    means = np.array([per_example[group == g].mean() for g in range(20)])
    diff = entries[("simple", True)]
    assert diff["value"] == pytest.approx(per_example.mean())
    assert diff["std_error"] == pytest.approx(means.std(ddof=1) / math.sqrt(20))
    assert diff["dof"] == 19
    assert entries[("candidate", False)]["value"] == pytest.approx(((y - cand) ** 2).mean())


def test_paired_examples_give_a_narrower_interval_and_a_significant_lead():
    # The candidate is the simple model's scores with positives raised a little: unpaired,
    # the two AUCs' intervals overlap; paired, the lead is significant.
    import numpy as np

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    simple = np.clip(y * 0.3 + rng.normal(0.35, 0.25, 400), 0, 1)
    cand = simple + 0.05 * y  # the same scores, positives a little higher: a strict improvement
    entries = simple_baseline.paired("auc", y, cand, simple)
    unpaired = [e for e in entries if not e["is_diff"]]
    settings = SimpleBaselineSettings(require="better")
    paired_check = simple_baseline.judge(entries, "auc", 0.05, settings)
    unpaired_check = simple_baseline.judge(unpaired, "auc", 0.05, settings)
    assert paired_check["paired"] and not unpaired_check["paired"]
    assert paired_check["difference"] == pytest.approx(unpaired_check["difference"])
    assert paired_check["difference"] > 0
    assert paired_check["std_error"] < unpaired_check["std_error"] / 3
    assert not paired_check["refused"] and unpaired_check["refused"]  # only the paired test sees the lead
    assert "paired on the same examples" in paired_check["reason"]


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


# Quality across groups (fairness.judge): gaps per slice, their bounds, small slices reported.

def _group(n, model_values, se=0.02):
    """One slice's entries: example_count n and {metric: (candidate, baseline)} with standard errors."""
    out = [_m("example_count", "candidate", n), _m("example_count", "baseline", n)]
    for name, (cand, base) in model_values.items():
        out += [_m(name, "candidate", cand, se), _m(name, "baseline", base, se)]
    return out


def _fairness(**kw):
    from components.evaluator import fairness

    return fairness.FairnessSettings(**{"slices": ("group",), "max_gap": {"fnr": 0.1}, **kw})


def test_a_slice_gap_beyond_its_threshold_refuses_naming_the_group():
    from scipy import stats

    from components.evaluator import fairness

    overall = _group(1000, {"fnr": (0.20, 0.21)}, se=0.01)
    slices = {"group": {"a": _group(400, {"fnr": (0.18, 0.20)}), "b": _group(300, {"fnr": (0.55, 0.30)}),
                        "c": _group(5, {"fnr": (0.9, 0.9)})}}
    check = fairness.judge(slices, overall, tasks.BINARY, _fairness())
    assert check["judged"] and check["refused"]
    rows = {r["slice"]: r for r in check["features"]["group"]["slices"]}
    assert rows["a"]["status"] == "ok" and rows["a"]["gap"] == pytest.approx(0.02)
    # |0.55 - 0.20| = 0.35; its lower bound 0.35 - z * sqrt(0.02^2 + 0.01^2) is beyond 0.1.
    assert rows["b"]["gap"] == pytest.approx(0.35)
    assert rows["b"]["lower_bound"] == pytest.approx(0.35 - stats.norm.ppf(0.95) * math.sqrt(0.02 ** 2 + 0.01 ** 2))
    assert rows["b"]["status"] == "over" and rows["b"]["baseline_gap"] == pytest.approx(0.09)
    assert "fnr on group=b is 0.55 vs 0.2 overall" in check["reason"]
    # The five-example slice is reported as too small, not judged and not passed.
    assert check["features"]["group"]["too_small"] == [{"slice": "c", "examples": 5}]
    assert any("too small to judge: c" in w for w in check["warnings"])


def test_a_gap_within_noise_warns_and_a_rate_undefined_on_a_slice_is_reported():
    from components.evaluator import fairness

    overall = _group(1000, {"fnr": (0.20, 0.20)}, se=0.01)
    slices = {"group": {"a": _group(60, {"fnr": (0.35, 0.2)}, se=0.08),
                        "b": [*_group(80, {}), _m("fnr", "candidate", float("nan"), 0.1)]}}
    check = fairness.judge(slices, overall, tasks.BINARY, _fairness())
    assert check["judged"] and not check["refused"]
    assert check["features"]["group"]["slices"][0]["status"] == "over_not_significant"
    assert check["features"]["group"]["undefined"] == [{"slice": "b", "metric": "fnr", "examples": 80}]
    assert any("within noise" in w for w in check["warnings"])


def test_directions_of_the_gap_and_the_config_rules():
    from components.evaluator import fairness

    assert fairness.gap("fpr", 0.1, 0.3) == pytest.approx(0.2)  # a rate: either way
    assert fairness.gap("auc", 0.9, 0.8) == pytest.approx(-0.1)  # a better slice has no gap
    assert fairness.gap("mean_absolute_error", 15.0, 10.0) == pytest.approx(0.5)  # relative
    assert fairness.FairnessSettings(slices=("x",)).gates(tasks.MULTICLASS) == {"sparse_categorical_accuracy": 0.15}
    with pytest.raises(SettingsError, match="max_gap.fnr: not a metric of a regression task"):
        fairness.FairnessSettings(slices=("x",), max_gap={"fnr": 0.1}).gates(tasks.REGRESSION)
    with pytest.raises(SettingsError, match="slices: a feature is named twice"):
        fairness.FairnessSettings.from_dict({"slices": ["x", "x"]}, "fairness")
    # Nothing large enough to judge: not judged, the reason says why.
    check = fairness.judge({"group": {"a": _group(3, {"fnr": (0.9, 0.9)})}}, _group(3, {"fnr": (0.5, 0.5)}),
                           tasks.BINARY, _fairness())
    assert not check["judged"] and not check["refused"] and "no slice large enough" in check["reason"]


def test_the_groups_are_sliced_and_a_binary_task_gets_fairness_indicators_rates():
    from components.evaluator import fairness

    config = eval_config.eval_config(task=tasks.BINARY, label_key="y", slice_features=["f"], interval_method="jackknife",
                                     slice_by_span=False, thresholds={k: 0.5 for k in eval_config.THRESHOLD_KEYS},
                                     fairness=fairness.FairnessSettings(slices=("f", "g"), threshold=0.3))
    assert [list(s.feature_keys) for s in config.slicing_specs] == [[], ["f"], ["g"]]
    rates = {m.class_name: m.config for m in config.metrics_specs[0].metrics if m.class_name in ("FPR", "FNR")}
    assert rates == {"FPR": '{"thresholds": [0.3]}', "FNR": '{"thresholds": [0.3]}'}


def test_groups_too_small_are_counted_not_sliced_and_reported_as_such():
    big, small = fairness.split_groups({"area": {"8": 40, "32": 31, "76": 2, "3": 29}}, 30)
    assert big == {"area": ["32", "8"]}
    assert small == {"area": [{"slice": "3", "examples": 29}, {"slice": "76", "examples": 2}]}
    settings = fairness.FairnessSettings(slices=("area",), max_gap={"fnr": 0.2})
    # TFMA sliced no group of the feature (all small): listed as too small, not a warning.
    check = fairness.judge({"area": {}}, [], tasks.BINARY, settings, {"area": [{"slice": "76", "examples": 2}]})
    assert check["features"]["area"]["too_small"] == [{"slice": "76", "examples": 2}]
    assert not check["warnings"] and not check["refused"]
