"""The feature policy (core/feature_policy.py): one entry per schema feature, each a
decision with its reason; and the keyed hash request logs write for `log: hash`."""

import pytest

from core import feature_policy as fp
from tests.conftest import REPO

TAXI_POLICY = f"{REPO}/schemas/taxi/feature_policy.yaml"


def _rule(**changes):
    return {"pii": "none", "use_in_model": "allowed", "log": "keep", **changes}


def test_the_shipped_taxi_policy_covers_the_schema_and_forbids_the_census_tracts():
    from pipelines.config.validation import schema_features

    policy = fp.load(TAXI_POLICY)
    fp.check_features(policy, schema_features(f"{REPO}/schemas/taxi/schema.pbtxt"))
    assert set(policy.forbidden) == {"pickup_census_tract", "dropoff_census_tract"}
    assert policy.sensitive == ["dropoff_census_tract", "pickup_census_tract"]
    assert policy.log_action("pickup_census_tract") == "drop" and policy.log_action("fare") == "keep"
    assert policy.not_ingested == []  # stored: the data gate watches them
    assert policy.log_action("not_in_the_schema") == "drop"  # a policy names what may be kept
    assert fp.FeaturePolicy().log_action("anything") == "keep"  # no policy: as before


@pytest.mark.parametrize("rule, message", [
    (_rule(use_in_model="forbidden"), "features.f.reason: required where use_in_model is forbidden"),
    (_rule(pii="personal"), "features.f.log: a personal feature is not logged as it is: hash or drop it"),
    (_rule(pii="secret"), "features.f.pii: 'secret' is not one of"),
    (_rule(log="mask"), "features.f.log: 'mask' is not one of"),
    ({"pii": "none", "use_in_model": "allowed"}, "features.f: missing key\\(s\\) log"),
    (_rule(loggging="keep"), "features.f: unknown key\\(s\\) loggging"),
    (_rule(ingest="drop"), "features.f.ingest: drop is for a feature forbidden in the model"),
    (_rule(ingest="hash"), "features.f.ingest: 'hash' is not one of"),
])
def test_every_bad_entry_is_named(rule, message):
    with pytest.raises(fp.PolicyError, match=f"^p.yaml: {message}"):
        fp.parse({"features": {"f": rule}}, "p.yaml")


def test_one_entry_per_schema_feature_and_none_beyond_and_a_label_cannot_be_forbidden():
    policy = fp.parse({"features": {"a": _rule(), "b": _rule(use_in_model="forbidden", reason="r")}}, "p.yaml")
    with pytest.raises(fp.PolicyError, match="no entry for feature.s. c of the schema"):
        fp.check_features(policy, ["a", "b", "c"])
    with pytest.raises(fp.PolicyError, match="feature.s. b are not in the schema"):
        fp.check_features(policy, ["a"])
    with pytest.raises(fp.PolicyError, match="the label 'b' cannot be forbidden"):
        fp.check_features(policy, ["a", "b"], label="b")
    with pytest.raises(fp.PolicyError, match="expected a mapping with one key, features"):
        fp.parse({"feature": {}}, "p.yaml")


def test_the_keyed_hash_needs_a_secret_and_hides_the_value(monkeypatch):
    monkeypatch.delenv(fp.HASH_KEY_ENV, raising=False)
    with pytest.raises(fp.PolicyError, match="RETRAIN_LOG_HASH_KEY must hold a secret"):
        fp.hash_key()
    monkeypatch.setenv(fp.HASH_KEY_ENV, "k" * 16)
    key = fp.hash_key()
    digest = fp.keyed_hash("jane@example.com", key)
    assert digest.startswith(fp.HASH_PREFIX) and "jane" not in digest
    assert digest == fp.keyed_hash("jane@example.com", key)  # equal values hash equal: counts still work
    assert digest != fp.keyed_hash("jane@example.com", b"another key of 16+")
    assert fp.keyed_hash(b"\xff", key) != fp.keyed_hash(b"\xfe", key)
