"""The digits image pipeline end to end through `retrain run`: the same factory, gate and
push as taxi, on the embedded 8x8 digits (encoded PNGs in tf.Examples)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import yaml
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from core import spans
from serving.repository import signing
from tests.conftest import DIGITS_DATA, run_retrain

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SPANS = (201604, 201605, 201606)


@pytest.fixture(scope="module")
def env(digits_run):
    return digits_run


def retrain(env, *args):
    return run_retrain("run", "--json", "--config", env["config"], "--workdir", env["work"], *args)


def _examples(span: int):
    path = os.path.join(spans.span_dir(DIGITS_DATA, span), "data.tfrecord.gz")
    records = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")]
    labels = [tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0] for r in records]
    return records, np.array(labels)


@pytest.fixture(scope="module")
def first_run(env):
    return env["first"]


def test_trains_through_the_toolkit_is_blessed_and_pushed(first_run):
    rc, summary, err = first_run
    assert rc == 0, err[-3000:]
    assert summary["outcome"] == "pushed" and summary["window_spans"] == list(SPANS)
    accuracy = summary["evaluation"]["candidate"]["sparse_categorical_accuracy"]
    assert accuracy >= 0.85, summary["evaluation"]  # chance is 0.1
    assert summary["training"]["strategy"] == "default"
    assert summary["training"]["precision_policy"] in ("float32", "mixed_bfloat16")
    assert summary["training"]["train_steps"] == 200 and summary["training"]["examples_per_sec"] > 0


def test_model_artifact_records_strategy_and_precision_in_mlmd(env, first_run):
    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = os.path.join(env["work"], "metadata", "digits.sqlite")
    store = metadata_store.MetadataStore(cfg)
    with open(first_run[1]["report_json"]) as f:  # other tests add candidates to this store
        model_id = json.load(f)["model"]["artifact_id"]
    [model] = store.get_artifacts_by_id([model_id])
    props = {k: getattr(v, v.WhichOneof("value")) for k, v in model.custom_properties.items()}
    assert props["training_strategy"] == first_run[1]["training"]["strategy"]
    assert props["training_precision_policy"] == first_run[1]["training"]["precision_policy"]
    assert props["training_replicas"] == 1 and props["training_global_batch_size"] == 32


def test_pushed_model_classifies_raw_encoded_images(env, first_run):
    pushed = first_run[1]["pushed"]["path"]
    assert os.path.exists(os.path.join(pushed, "assets.extra", "training_provenance.json"))
    serve = tf.saved_model.load(pushed).signatures["serving_default"]
    records, labels = _examples(SPANS[0])
    probabilities = serve(examples=tf.constant(records[:200]))["probabilities"].numpy()
    assert probabilities.shape == (200, 10)
    assert (probabilities.argmax(axis=1) == labels[:200]).mean() > 0.85


def test_tflite_variants_are_measured_beside_the_saved_model_and_published(env, first_run):
    summary = first_run[1]
    lite = summary["tflite"]
    assert set(lite["variants"]) == {"float", "dynamic_range", "int8"}
    sizes = {v: x["size_bytes"] for v, x in lite["variants"].items()}
    assert max(sizes["int8"], sizes["dynamic_range"]) < 0.5 * sizes["float"] < lite["saved_model"]["size_bytes"]
    assert lite["variants"]["float"]["accuracy"] == lite["saved_model"]["accuracy"] >= 0.85
    published = lite["path"]
    assert published == os.path.join(env["work"], "serving", "digits-tflite", str(summary["pushed"]["version"]))
    assert sorted(lite["published"]) == sorted(v for v, x in lite["variants"].items() if x["passed"])
    for variant in lite["published"]:
        assert os.path.getsize(os.path.join(published, f"{variant}.tflite")) == sizes[variant]
    with open(os.path.join(published, "preprocessing.json")) as f:
        stats = json.load(f)
    assert 0.0 < stats["mean"] < 1.0 and stats["std"] > 0  # the z-score of decoded pixels in [0, 1]
    key = signing.public_key_path(os.path.join(env["work"], signing.DEMO_KEY))
    assert signing.verify_version(published, [key])["files"] == len(lite["published"]) + 2
    with open(summary["report"]) as f:
        assert "<h2>TFLite exports" in f.read()


def test_an_impossible_tflite_bound_stops_only_the_tflite_push(env, first_run):
    with open(env["config"]) as f:
        cfg = yaml.safe_load(f)
    cfg["tflite"]["max_accuracy_drop"] = -1.0  # a variant would have to beat the SavedModel by 100 points
    strict = os.path.join(env["root"], "strict-tflite.yaml")
    with open(strict, "w") as f:
        yaml.safe_dump(cfg, f)
    version = str(first_run[1]["pushed"]["version"])
    rc, summary, err = run_retrain("run", "--json", "--config", strict, "--workdir", env["work"], "--span", "201606")
    assert rc == 0 and summary["outcome"] == "pushed", err[-3000:]
    assert summary["pushed"]["version"] == version and summary["pushed"]["already_serving"]  # the SavedModel push stands
    assert summary["tflite"]["published"] == [] and not any(x["passed"] for x in summary["tflite"]["variants"].values())
    assert not os.path.exists(os.path.join(env["work"], "serving", "digits-tflite", version))
    assert os.path.exists(os.path.join(env["work"], "serving", "digits", version, "saved_model.pb"))


def test_a_span_of_shifted_classes_is_stopped_by_the_gate(env, first_run):
    records, labels = _examples(201606)
    folder = spans.span_dir(env["data"], 201607)
    os.makedirs(folder)
    with tf.io.TFRecordWriter(os.path.join(folder, "data.tfrecord.gz"), options="GZIP") as w:
        for record, label in zip(records, labels):
            if label in (1, 7):  # a month in which only ones and sevens arrive
                w.write(record)
    before = sorted(os.listdir(os.path.join(env["work"], "serving", "digits")))
    assert any(v.isdigit() for v in before)
    rc, summary, err = retrain(env, "--span", "201607")
    assert rc == 3, err[-3000:]
    assert summary["outcome"] == "stopped_by_data_gate"
    # The class mix drifted (the raw column, and the label as label_fn computes it, against the
    # spans before); with a fifth of the usual rows the volume check stops it too.
    assert set(summary["data_gate"]["blocking_features"]) == {"label", "label_xf", "<rows>"}
    assert any(a["feature"] == "label_xf" and a["reasons"][0]["type"] == "LABEL_CLASSES"
               for a in summary["data_gate"]["anomalies"])
    assert any(d["feature"] == "label" and d["drifted"] for d in summary["data_gate"]["drift"])
    assert sorted(os.listdir(os.path.join(env["work"], "serving", "digits"))) == before
