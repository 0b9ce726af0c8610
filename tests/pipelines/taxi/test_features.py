"""Feature invariants: names are unique, every raw feature is in the curated schema."""

from pipelines.taxi import features
from runner import preflight
from tests.conftest import TAXI_SCHEMA


def test_feature_keys_are_unique_and_exclude_the_label():
    keys = features.ALL_FEATURE_KEYS
    assert len(keys) == len(set(keys))
    assert features.LABEL_KEY not in keys
    xf = features.transformed_names(keys) + [features.LABEL_XF]
    assert len(xf) == len(set(xf))
    assert all(name.endswith("_xf") for name in xf)


def test_every_used_feature_is_in_the_curated_schema():
    schema_features = {f.name for f in preflight.load_schema(TAXI_SCHEMA).feature}
    assert set(features.ALL_FEATURE_KEYS) | {features.LABEL_KEY} <= schema_features
    assert set(features.SLICE_FEATURE_KEYS) <= schema_features
