"""Config parsing: the shipped config loads; every kind of bad value names its field."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from pipelines import config as config_lib
from tests.conftest import REPO, TAXI_CONFIG, TAXI_DATA, TAXI_SCHEMA


def _base() -> dict:
    return {
        "pipeline_name": "p",
        "model_name": "m",
        "data_root": TAXI_DATA,
        "schema_path": TAXI_SCHEMA,
        "preprocessing_fn": "a.b",
        "run_fn": "a.c",
        "label_key": "y",
    }


def test_taxi_config_loads_with_paths_resolved():
    c = config_lib.load(TAXI_CONFIG)
    assert c.pipeline_name == "taxi"
    assert c.data_root == TAXI_DATA and c.schema_path == TAXI_SCHEMA
    assert c.slice_features == ("trip_start_hour",)
    assert c.beam_settings.profile == "auto" and c.ingest_settings.engine == "auto"


def test_dotted_overrides_reach_nested_blocks_and_leave_the_rest():
    c = config_lib.load(TAXI_CONFIG, config_lib.parse_assignments(
        ["beam.profile=direct-multiprocess", "beam.workers=3", "hparams.batch_size=256", "ingestion.engine=beam"]))
    assert c.beam_settings.profile == "direct-multiprocess" and c.beam_settings.workers == 3
    assert c.hparams["batch_size"] == 256 and c.hparams["hidden_units"] == [64, 32, 16]
    assert c.ingest_settings.engine == "beam"
    with pytest.raises(config_lib.ConfigError, match="expected KEY=VALUE"):
        config_lib.parse_assignments(["beam.profile"])
    with pytest.raises(config_lib.ConfigError, match="train_epochs.x: train_epochs is not a mapping"):
        config_lib.load(TAXI_CONFIG, {"train_epochs.x": 1})


def test_overrides_win_and_none_is_ignored():
    c = config_lib.load(TAXI_CONFIG, {"train_steps": 7, "train_epochs": config_lib.CLEAR, "window_spans": None})
    assert c.train_steps == 7 and c.train_epochs is None and c.window_spans == 6
    assert c.training_budget == {"steps": 7, "max_examples": 10_000_000}
    assert config_lib.load(TAXI_CONFIG).training_budget == {"epochs": 30, "max_examples": 10_000_000}
    with pytest.raises(config_lib.ConfigError, match="train_epochs and train_steps: set one of"):
        config_lib.load(TAXI_CONFIG, {"train_steps": 7})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"train_steps": "many"}, "train_steps: expected int"),
        ({"train_steps": True}, "train_steps: expected int"),
        ({"window_spans": 0}, "window_spans: must be at least 1"),
        ({"min_auc": 1.5}, r"min_auc: must be within \[0, 1\]"),
        ({"beam_mode": "multi_processing"}, "beam_mode: replaced by beam.profile"),
        ({"beam": {"profile": "spark"}}, "beam.options: profile spark needs spark_master_url"),
        ({"beam": {"profile": "storm"}}, "beam.profile: 'storm' is not one of"),
        ({"beam": {"nodes": {"Trainer": {"profile": "direct"}}}}, "beam.nodes: Trainer run no Beam"),
        ({"ingestion": {"engine": "turbo"}}, "ingestion.engine: 'turbo' is not one of"),
        ({"slice_features": "hour"}, "slice_features: expected a list"),
        ({"run_fn": "nodots"}, "run_fn: expected a dotted path"),
        ({"colour": "red"}, "config: unknown key\\(s\\) colour"),
        ({"request_log_sampling": 1.5}, r"request_log_sampling: must be within \[0, 1\]"),
        ({"serving_skew": {"action": "panic"}}, "serving_skew.action: 'panic' is not one of block, warn, off"),
        ({"serving_skew": {"min_examples": 0}}, "serving_skew.min_examples: must be an integer >= 1"),
        ({"serving_skew": {"threshold": 1}}, r"serving_skew: unknown key\(s\) threshold \(known: action, min_examples\)"),
        ({"signing": {"keyfile": "k.pem"}}, r"signing: unknown key\(s\) keyfile \(known: enabled, key\)"),
        ({"signing": {"enabled": "yes"}}, "signing.enabled: expected true or false"),
        ({"signing": {"key": 3}}, "signing.key: expected str"),
    ],
)
def test_bad_values_name_the_field(change, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.from_dict({**_base(), **change})


def test_signing_is_on_by_default_and_a_relative_key_is_the_config_files(tmp_path):
    assert config_lib.from_dict(_base()).signing_enabled
    c = config_lib.from_dict({**_base(), "signing": {"key": "keys/prod.pem"}}, base_dir=str(tmp_path))
    assert c.signing_key == str(tmp_path / "keys" / "prod.pem")
    assert not config_lib.from_dict({**_base(), "signing": {"enabled": False}}).signing_enabled


def test_missing_fields_are_listed():
    values = _base()
    del values["label_key"], values["run_fn"]
    with pytest.raises(config_lib.ConfigError, match=r"config: missing key\(s\) run_fn, label_key"):
        config_lib.from_dict(values)


def test_bad_yaml_and_missing_file(tmp_path):
    (tmp_path / "c.yaml").write_text("pipeline_name: [unclosed\n")
    with pytest.raises(config_lib.ConfigError, match="not valid YAML"):
        config_lib.load(str(tmp_path / "c.yaml"))
    with pytest.raises(config_lib.ConfigError, match="cannot read config"):
        config_lib.load(str(tmp_path / "none.yaml"))


def test_config_is_frozen_and_replace_validates():
    c = config_lib.from_dict(_base())
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.train_steps = 3  # type: ignore[misc]
    with pytest.raises(config_lib.ConfigError):
        config_lib.replace(c, eval_steps=0)
    assert c.metadata_store.path.endswith("metadata/p.sqlite") and c.metadata_store.is_sqlite
    assert c.serving_model_dir.endswith("serving/m")


@pytest.mark.parametrize("block, message", [
    ({"enabled": True, "signature": "pixels", "input_key": "image_xf"}, "tflite.label_key: needed"),
    ({"enabled": True, "signature": "pixels", "input_key": "x", "label_key": "y", "variants": ["fp16"]},
     r"tflite.variants\[0\]: 'fp16' is not one of"),
    ({"enabled": True, "signature": "pixels", "input_key": "x", "label_key": "y", "max_accuracy_drop": 2},
     r"tflite.max_accuracy_drop: must be within \[-1, 1\]"),
    ({"enabled": False, "quantize": True}, r"tflite: unknown key\(s\) quantize"),
])
def test_tflite_settings_are_checked_at_load(block, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.from_dict({**_base(), "tflite": block})


def test_tflite_is_off_unless_enabled_and_on_for_digits():
    from tests.conftest import DIGITS_CONFIG

    assert config_lib.from_dict(_base()).tflite_settings is None
    lite = config_lib.load(DIGITS_CONFIG).tflite_settings
    assert lite.signature == "pixels" and lite.variants == ("float", "dynamic_range", "int8")


@pytest.mark.parametrize("change, message", [
    ({"span_consistency": {"event_time": {"feature": "pickup_time"}}},
     "span_consistency: feature(s) not in the schema: pickup_time"),
    ({"span_consistency": {"event_time": {"feature": "trip_start_timestamp"}, "derived": {"fare": "hour"},
                           "tolerance_hours": "one"}}, "span_consistency.tolerance_hours: expected float"),
    ({"span_consistency": {"event_time": {"feature": "trip_start_timestamp", "unit": "seconds"}}},
     "span_consistency.event_time.unit: 'seconds' is not one of"),
    ({"label_fn": "label_fn"}, "label_fn: expected a dotted path"),
    ({"new_span": {"min_examples": 0}}, "new_span.min_examples: must be at least 2"),
])
def test_row_check_blocks_are_validated_at_load(change, message):
    with pytest.raises(config_lib.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_lib.load(TAXI_CONFIG, change)


def test_the_taxi_config_declares_its_event_time_and_label():
    c = config_lib.load(TAXI_CONFIG)
    settings = c.consistency_settings
    assert settings.event_time.feature == "trip_start_timestamp" and settings.event_time.unit == "s"
    assert settings.derived == {"trip_start_hour": "hour", "trip_start_day": "weekday_sun1", "trip_start_month": "month"}
    assert c.label_function == "pipelines.taxi.preprocessing.label_fn" and c.label_kind == "classes"
    # Without label_fn, the function beside preprocessing_fn is the label's.
    other = config_lib.from_dict(_base())
    assert other.label_function == "a.label_fn" and not other.consistency_settings.enabled


@pytest.mark.parametrize("block, message", [
    ({"mode": "gradual"}, "rollout.mode: 'gradual' is not one of"),
    ({"canary_share": 1.0}, r"rollout.canary_share: 1.0 is not within \(0, 1\)"),
    ({"metric": "mean_squared_error"}, "rollout.metric: 'mean_squared_error' is not a key metric of a binary"),
    ({"max_labelled": 50}, "rollout.max_labelled: 50 is below min_labelled"),
    ({"on_run_out": "wait"}, "rollout.on_run_out: 'wait' is not one of"),
    ({"canary": True}, "rollout: unknown key"),
])
def test_the_rollout_block_is_checked_at_load(block, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.load(TAXI_CONFIG, {"rollout": block})


def test_taxi_rolls_out_through_a_canary_judged_on_auc():
    settings = config_lib.load(TAXI_CONFIG).rollout_settings
    assert settings.mode == "canary" and settings.metric_for("binary_classification") == "auc"
    assert settings.margin("auc") == 0.02 and config_lib.from_dict(_base()).rollout_settings.mode == "direct"


def test_a_config_loads_without_tensorflow():
    """Configs validate, and the Models view reads them, where TFX is not imported: a config
    that pulled in TensorFlow would cost every `retrain view` (each page of the Models view)
    seconds of imports."""
    code = ("import sys; from pipelines import config; config.load(sys.argv[1]); "
            "print(sorted(m for m in ('tensorflow', 'tfx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, TAXI_CONFIG], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("feature, config, message", [
    ("trip_start_hour", TAXI_CONFIG, "trip_start_hour is not ingested (ingest: drop) but slice_features reads it"),
    ("trip_start_day", TAXI_CONFIG, "trip_start_day is not ingested (ingest: drop) but span_consistency reads it"),
    ("image_raw", f"{REPO}/pipelines/digits/config.yaml", "is applied when CSV or Parquet is ingested; this pipeline reads"),
])
def test_a_feature_never_stored_cannot_be_read_from_the_examples(feature, config, message):
    from pipelines.config import validation

    loaded = config_lib.load(config)
    validation.check_not_ingested(loaded, [])  # nothing dropped: nothing to check
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        validation.check_not_ingested(loaded, [feature])


def test_the_gate_limits_of_features_never_stored_are_left_out():
    config = config_lib.load(TAXI_CONFIG)
    assert config.not_ingested == []  # taxi stores its census tracts: the gate watches them
    tracts = ["dropoff_census_tract", "pickup_census_tract"]
    full = config_lib.load_gate_policy(config)
    assert "pickup_census_tract" in full.domains and "dropoff_census_tract" in full.features
    less = full.without(tracts).to_json_dict()
    text = json.dumps(less)
    assert "census_tract" not in text and "17031081401" not in text  # limits and domain values both gone
    assert less["features"].keys() == full.to_json_dict()["features"].keys() - set(tracts)
    assert full.without([]) is full
