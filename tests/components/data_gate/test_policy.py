"""The gate policy file: what loads, what is refused (naming the field), how limits scale."""

import dataclasses
import math

import pytest

from components.data_gate import policy
from pipelines import config as config_lib
from tests.conftest import TAXI_CONFIG


def test_shipped_policies_load_and_watch_every_feature_but_the_opted_out():
    config = config_lib.load(TAXI_CONFIG)
    p = config_lib.load_gate_policy(config)
    schema_features = set(config_lib.schema_features(config.schema_path))
    assert set(p.opt_out) == {"trip_start_timestamp", "trip_start_month"}
    assert all(reason for reason in p.opt_out.values())
    # Every other feature has calibrated limits (a feature with no values in any month,
    # pickup_census_tract, has completeness limits only).
    assert set(p.features) == schema_features - set(p.opt_out)
    assert all(p.limits(f).source == "calibrated" for f in p.features)
    assert p.min_ratio < 1 < p.max_ratio and p.calibration["pairs"] >= 40


@pytest.mark.parametrize(
    "values, message",
    [
        ({"features": {"fare": {"k": {"wobble": 1}}}}, "unknown measure 'wobble'"),
        ({"features": {"fare": {"k": {"ks": "big"}}}}, "features.fare.k.ks: expected a number"),
        ({"features": {"fare": {"k": {"ks": -1}}}}, "must be >= 0"),
        ({"opt_out": {"fare": ""}}, "opt_out.fare: a feature opts out only with a reason"),
        ({"volume": {"min_ratio": 2.0, "max_ratio": 3.0}}, "need min_ratio < 1 < max_ratio"),
        ({"thresholds": {}}, "unknown field(s) thresholds"),
    ],
)
def test_bad_policy_names_the_field(values, message):
    with pytest.raises(policy.PolicyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        policy.from_dict(values, "gate.yaml")


def test_config_refuses_a_policy_naming_an_unknown_feature(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text("opt_out:\n  trip_mileage: typo\n")
    config = config_lib.load(TAXI_CONFIG)
    with pytest.raises(config_lib.ConfigError, match="feature\\(s\\) not in the schema: trip_mileage"):
        config_lib.replace(config, gate_policy=str(path))


def test_limits_scale_with_the_sample_and_stop_at_a_floor():
    # Differences of quantiles or shares shrink like 1/sqrt(n), a divergence like 1/n.
    assert policy.threshold("ks", 2.0, 100) == pytest.approx(0.2)
    assert policy.threshold("ks", 2.0, 400) == pytest.approx(0.1)
    assert policy.threshold("jsd", 5.0, 100) == pytest.approx(0.05)
    # With millions of rows, the floor holds: no real month is that similar to the last.
    assert policy.threshold("scale", 2.0, 1e7) == policy.MIN_LIMIT["scale"]
    assert policy.scaled("ks", 0.2, 100) == pytest.approx(2.0)
    assert math.isclose(policy.scaled("jsd", 0.05, 100), 5.0)


def test_unlisted_feature_gets_strict_defaults_labelled_as_such():
    p = policy.from_dict({"features": {"fare": {"k": {"ks": 3.0}}}})
    assert p.k("fare", "ks") == (3.0, "calibrated")
    assert p.k("fare", "scale") == (policy.DEFAULT_K["scale"], "default")
    assert p.k("new_feature", "jsd") == (policy.DEFAULT_K["jsd"], "default")
    assert dataclasses.asdict(p)["features"]["fare"]["k"] == {"ks": 3.0}
    # The JSON form the DataGate receives round-trips.
    assert policy.from_dict(p.to_json_dict()).to_json_dict() == p.to_json_dict()


def test_few_spans_never_calibrate_a_limit_below_the_noise_of_two_samples():
    from components.data_gate import calibration

    # Five quiet month pairs of a two-valued feature: margin x the largest scaled value
    # alone would be tighter than chance allows once in twenty months.
    history = [
        {"span": 202402 + i, "baseline_span": 202401 + i, "rows": 74, "baseline_rows": 74,
         "features": {"sex": {"kind": "numeric", "n_eff": 37.0, "rows_n_eff": 37.0, "missing_share": 0.0,
                              "baseline_missing_share": 0.0, "jsd": 0.005, "ks": 0.08},
                      "area": {"kind": "numeric", "n_eff": 37.0, "rows_n_eff": 37.0, "missing_share": 0.0,
                               "baseline_missing_share": 0.0, "jsd": 0.9, "ks": 0.5}}}
        for i in range(5)
    ]
    k = calibration.calibrate(history, ["sex", "area"])["features"]
    assert k["sex"]["k"]["ks"] == calibration.NULL_K["ks"] and k["sex"]["k"]["jsd"] == calibration.NULL_K["jsd"]
    # Above the floor, the margin on the observed value decides: 2.0 with these 5 pairs,
    # the default 1.5 from FEW_PAIRS pairs on.
    assert k["area"]["k"]["ks"] == pytest.approx(2.0 * 0.5 * math.sqrt(37.0), rel=1e-3)
    assert k["area"]["k"]["jsd"] == pytest.approx(2.0 * 0.9 * 37.0, rel=1e-3)
    many = [dict(history[0], span=202402 + i) for i in range(calibration.FEW_PAIRS)]
    assert calibration.calibrate(many, ["area"])["features"]["area"]["k"]["ks"] == pytest.approx(
        1.5 * 0.5 * math.sqrt(37.0), rel=1e-3)
