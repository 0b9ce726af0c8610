"""The serving skew check on logged traffic: requests written by the server's request logger
(TF Serving PredictionLogs), read back, and compared with the training month's TFDV
statistics using the shipped taxi gate policy.

Traffic drawn from the training distribution (the next real month) passes; the same month
sent with a unit change in one feature, or with a feature left out of the requests, is
flagged and the feature named.
"""

import csv
import json
import os

import pytest
import tensorflow_data_validation as tfdv

from components.data_gate import measures
from components.resolvers import served_statistics
from components.serving_skew import executor as serving_skew
from core import spans
from pipelines import config as config_lib
from runner import preflight
from tests.conftest import TAXI_CONFIG, TAXI_DATA
from tests.serving import traffic

# A large month to train on, and the next one as the served model's traffic.
TRAINED_ON, TRAFFIC = 201504, 201505
VERSION = 7


@pytest.fixture(scope="module")
def config():
    return config_lib.load(TAXI_CONFIG)


@pytest.fixture(scope="module")
def training_stats():
    pattern = os.path.join(spans.span_dir(TAXI_DATA, TRAINED_ON), "*.csv")
    return tfdv.generate_statistics_from_csv(pattern, stats_options=measures.stats_options())


def _rows():
    with open(os.path.join(spans.span_dir(TAXI_DATA, TRAFFIC), "data.csv"), newline="") as f:
        return list(csv.DictReader(f))


def _check(tmp_path, config, training_stats, rows):
    prefix = str(tmp_path / "logs" / "taxi")
    traffic.log_traffic(prefix, config.schema_path, "tips", rows, VERSION)
    stats, requests = serving_skew.serving_statistics(prefix, VERSION)
    assert requests == -(-len(rows) // 4)
    schema = preflight.load_schema(config.schema_path)
    features = serving_skew.serving_features(schema)
    assert "tips" not in features and "fare" in features  # the label is not in the SERVING environment
    return serving_skew.evaluate_skew(stats, training_stats, schema, config_lib.load_gate_policy(config),
                                      f"training data (span {TRAINED_ON})")


def test_traffic_like_the_training_data_passes(tmp_path, config, training_stats):
    result = _check(tmp_path, config, training_stats, _rows())
    assert result["skewed_features"] == [], ([c["description"] for c in result["skew"] if c["drifted"]],
                                             result["anomalies"])
    assert result["examples"] == len(_rows())
    assert {c["feature"] for c in result["skew"]} >= {"trip_miles", "fare", "payment_type"}  # every kind measured


@pytest.mark.parametrize("change, feature", [
    (lambda r: {**r, "trip_miles": str(float(r["trip_miles"]) * 1609.34) if r["trip_miles"] else ""}, "trip_miles"),
    (lambda r: {**r, "payment_type": "Cash"}, "payment_type"),
    (lambda r: {**r, "fare": ""}, "fare"),  # a client that stopped sending the feature
])
def test_shifted_traffic_is_flagged_and_the_feature_named(tmp_path, config, training_stats, change, feature):
    result = _check(tmp_path, config, training_stats, [change(r) for r in _rows()])
    assert feature in result["skewed_features"]
    flagged = [c for c in result["skew"] + result["completeness"] if c["feature"] == feature
               and (c.get("drifted") or c.get("failed"))]
    assert all(f"vs training data (span {TRAINED_ON})" in c["description"]
               or f"in training data (span {TRAINED_ON})" in c["description"] for c in flagged)
    assert flagged or [a for a in result["anomalies"] if a["feature"] == feature]


def test_a_client_sending_another_type_or_an_unknown_category_is_flagged(tmp_path, config, training_stats):
    """Not in the listed cases: what the schema already says about served data (TFDV's schema
    validation in the SERVING environment), not only distribution distances."""
    rows = [{**r, "payment_type": "Bitcoin"} if i % 2 else r for i, r in enumerate(_rows())]
    prefix = str(tmp_path / "logs" / "taxi")
    # trip_seconds sent as strings (1 = BYTES), half the payments of a type the schema does not know.
    traffic.log_traffic(prefix, config.schema_path, "tips", rows, VERSION, types={"trip_seconds": 1})
    stats, _ = serving_skew.serving_statistics(prefix, VERSION)
    result = serving_skew.evaluate_skew(stats, training_stats, preflight.load_schema(config.schema_path),
                                        config_lib.load_gate_policy(config), "training data")
    assert {"payment_type", "trip_seconds"} <= {a["feature"] for a in result["anomalies"]}
    assert {"payment_type", "trip_seconds"} <= set(result["skewed_features"])


def test_logs_of_other_versions_are_not_counted(tmp_path, config):
    prefix = str(tmp_path / "logs" / "taxi")
    traffic.log_traffic(prefix, config.schema_path, "tips", _rows()[:8], VERSION)
    assert serving_skew.serving_statistics(prefix, VERSION + 1) == (None, 0)


def test_served_version_reads_the_newest_push_info(tmp_path):
    base = tmp_path / "serving" / "taxi"
    assert served_statistics.served_version(str(base)) is None
    for version, model_id in ((100, 4), (200, 9)):
        os.makedirs(base / str(version) / "assets.extra")
        (base / str(version) / "assets.extra" / "push_info.json").write_text(f'{{"model_artifact_id": {model_id}}}')
    os.makedirs(base / "300")  # not pushed by this pipeline: no push_info, its training data unknown
    assert served_statistics.served_version(str(base)) == (200, {"model_artifact_id": 9})


def test_the_served_version_is_the_stable_one_under_a_canary_and_the_pinned_one_after_a_rollback(tmp_path):
    from serving.repository import model_config, versions

    base = tmp_path / "taxi"
    for v, artifact in ((100, 7), (200, 9)):
        (base / str(v) / "assets.extra").mkdir(parents=True)
        (base / str(v) / "assets.extra" / "push_info.json").write_text(json.dumps({"model_artifact_id": artifact}))
    config = model_config.single_model("taxi", str(base), policy="specific", versions=(100, 200),
                                       labels={"stable": 100, "canary": 200})
    model_config.write(config, versions.config_path(str(tmp_path)))
    assert served_statistics.served_version(str(base)) == (100, {"model_artifact_id": 7})
    (base / "300").mkdir()  # a rolled-back canary is newer, but stable 100 still answers
    assert served_statistics.served_version(str(base)) == (100, {"model_artifact_id": 7})
    model_config.write(model_config.single_model("taxi", str(base), policy="specific", versions=(200,)),
                       versions.config_path(str(tmp_path)))
    assert served_statistics.served_version(str(base)) == (200, {"model_artifact_id": 9})


def test_features_the_request_logs_do_not_keep_are_not_compared(tmp_path, config, training_stats):
    # The feature policy drops `fare` from request logs (and `payment_type` is hashed): what
    # is missing or hashed in the logs is the policy's doing, not skew, and is not compared.
    rows = [{**r, "fare": "", "payment_type": "hmac-sha256:" + "0" * 64} for r in _rows()]
    prefix = str(tmp_path / "logs" / "taxi")
    traffic.log_traffic(prefix, config.schema_path, "tips", rows, VERSION)
    stats, _ = serving_skew.serving_statistics(prefix, VERSION)
    schema = preflight.load_schema(config.schema_path)
    policy = config_lib.load_gate_policy(config)
    flagged = serving_skew.evaluate_skew(stats, training_stats, schema, policy, "training data")
    assert {"fare", "payment_type"} <= set(flagged["skewed_features"])  # compared, they would be skew
    result = serving_skew.evaluate_skew(stats, training_stats, schema, policy, "training data",
                                        exclude={"fare", "payment_type"})
    assert result["skewed_features"] == []
    assert not {c["feature"] for c in result["skew"] + result["completeness"]} & {"fare", "payment_type"}


def test_what_the_policy_drops_hashes_or_never_stores_is_listed_as_not_compared(tmp_path, config, training_stats):
    """A feature never stored (ingest: drop) has no training data and is no feature of the
    imported schema: sent anyway (logs bypassing the policy), TFDV would call it a new column."""
    from core import feature_policy

    rules = feature_policy.parse({"features": {
        "fare": {"pii": "none", "use_in_model": "allowed", "log": "keep"},
        "payment_type": {"pii": "personal", "use_in_model": "allowed", "log": "hash"},
        "rider_email": {"pii": "personal", "use_in_model": "forbidden", "reason": "contact", "log": "drop",
                        "ingest": "drop"}}})
    why = serving_skew._not_compared(rules, ["fare", "payment_type", "trip_miles"])
    assert why == {"payment_type": "hashed in request logs by the feature policy",
                   "rider_email": "never stored by the pipeline (feature policy: ingest: drop): no training data"
                                  " to compare",
                   "trip_miles": "dropped from request logs by the feature policy"}  # a policy names what is kept
    assert serving_skew._not_compared(None, ["fare"]) == {}
    rows = [{**r, "rider_email": "a@b.org"} for r in _rows()]
    prefix = str(tmp_path / "logs" / "taxi")
    traffic.log_traffic(prefix, config.schema_path, "tips", rows, VERSION, types={"rider_email": 1})
    stats, _ = serving_skew.serving_statistics(prefix, VERSION)
    schema = preflight.load_schema(config.schema_path)
    policy = config_lib.load_gate_policy(config)
    flagged = serving_skew.evaluate_skew(stats, training_stats, schema, policy, "training data")
    assert any(a["feature"] == "rider_email" for a in flagged["anomalies"])  # a new column, for TFDV
    result = serving_skew.evaluate_skew(stats, training_stats, schema, policy, "training data", exclude=set(why))
    assert not any(a["feature"] == "rider_email" for a in result["anomalies"])
