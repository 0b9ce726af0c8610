"""The feature policy in request logs (core/feature_policy.py): a dropped feature never
reaches disk, a hashed one is written as its keyed hash only, and without the hash key no
log is written at all. Each request kind: gRPC Predict (serialized examples and named
tensors), Classify with a context, REST :predict."""

import base64
import json
import os
import shutil
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
)

from core import feature_policy
from serving.server import request_log
from tests.serving import toy_model

PII = "jane.doe.4711@example.com"
ZIP = "60614-4711"
KEY = "a test key, 16 chars or more"
RULES = {"x": {"pii": "none", "use_in_model": "allowed", "log": "keep"},
         "email": {"pii": "personal", "use_in_model": "forbidden", "reason": "contact data", "log": "drop"},
         "zip": {"pii": "personal", "use_in_model": "allowed", "log": "hash"}}


def _policy() -> feature_policy.FeaturePolicy:
    return feature_policy.parse({"features": RULES}, "test")


def _example(x: float) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x])),
        "email": tf.train.Feature(bytes_list=tf.train.BytesList(value=[PII.encode()])),
        "zip": tf.train.Feature(bytes_list=tf.train.BytesList(value=[ZIP.encode()])),
    })).SerializeToString()


def _files_holding(root, needle: bytes) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                if needle in f.read():
                    found.append(os.path.join(folder, name))
    return found


def test_each_kind_of_log_keeps_drops_and_hashes_as_the_policy_says():
    key = KEY.encode()
    predict = prediction_log_pb2.PredictionLog()
    predict.predict_log.request.inputs["examples"].CopyFrom(tf.make_tensor_proto([_example(1.0)]))
    predict.predict_log.request.inputs["email"].CopyFrom(tf.make_tensor_proto(np.array([PII.encode()], object)))
    predict.predict_log.request.inputs["zip"].CopyFrom(tf.make_tensor_proto(np.array([[ZIP.encode()]], object)))
    predict.predict_log.request.inputs["unnamed"].CopyFrom(tf.make_tensor_proto(np.array([1.5], np.float32)))
    classify = prediction_log_pb2.PredictionLog()
    ctx = classify.classify_log.request.input.example_list_with_context
    ctx.context.ParseFromString(_example(2.0))
    ctx.examples.add().ParseFromString(_example(3.0))
    for log in (predict, classify):
        request_log.apply_policy(log, _policy(), key)
        data = log.SerializeToString()
        assert PII.encode() not in data and ZIP.encode() not in data
    inputs = predict.predict_log.request.inputs
    assert set(inputs) == {"examples", "zip"}  # email dropped; a tensor the policy does not name too
    assert tf.make_ndarray(inputs["zip"]).shape == (1, 1)
    hashed = tf.make_ndarray(inputs["zip"]).ravel()[0].decode()
    assert hashed == feature_policy.HASH_PREFIX + feature_policy.keyed_hash(ZIP, key).split(":", 1)[1]
    [row] = [tf.train.Example.FromString(e) for e in request_log.logged_examples(predict)]
    assert set(row.features.feature) == {"x", "zip"} and row.features.feature["x"].float_list.value == [1.0]
    assert row.features.feature["zip"].bytes_list.value == [hashed.encode()]  # equal values hash equal
    [merged] = [tf.train.Example.FromString(e) for e in request_log.logged_examples(classify)]
    assert set(merged.features.feature) == {"x", "zip"} and merged.features.feature["x"].float_list.value == [3.0]


@pytest.fixture
def policy_base(tmp_path):
    """The toy model, version 1, carrying the policy as a pushed model does."""
    base = tmp_path / "toy"
    toy_model.save(str(base / "1"), 1)
    path = base / "1" / feature_policy.MODEL_COPY
    os.makedirs(path.parent, exist_ok=True)
    path.write_text(json.dumps({"source": "test", "sha256": None, "features": RULES}))
    return base


def _serve(serve_in_process, base, prefix):
    """The toy model served with every request logged under `prefix`, and a gRPC stub."""
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(base),
                              "--request-log-sampling-rate", "1", "--request-log-prefix", str(prefix))
    return server, prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(server.grpc_target))


def _predict(stub, *xs: float) -> list[float]:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "toy"
    req.inputs["examples"].CopyFrom(tf.make_tensor_proto([_example(x) for x in xs]))
    return list(stub.Predict(req, timeout=30).outputs["y"].float_val)


def test_served_traffic_leaves_no_dropped_or_raw_hashed_value_on_disk(serve_in_process, policy_base, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv(feature_policy.HASH_KEY_ENV, KEY)
    prefix = tmp_path / "logs" / "toy"
    server, stub = _serve(serve_in_process, policy_base, prefix)
    assert _predict(stub, 1.0, 2.0) == [1.0, 2.0]
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name, classify.model_spec.signature_name = "toy", "classification"
    classify.input.example_list.examples.add().ParseFromString(_example(3.0))
    stub.Classify(classify, timeout=30)
    body = json.dumps({"instances": [{"b64": base64.b64encode(_example(4.0)).decode()}]}).encode()
    with urllib.request.urlopen(urllib.request.Request(server.url + "/v1/models/toy:predict", data=body,
                                                       method="POST"), timeout=30) as r:
        assert r.status == 200
    server.stop()  # the writer drains what is queued
    logs = list(request_log.read(str(prefix)))
    assert len(logs) == 3
    xs = sorted(tf.train.Example.FromString(e).features.feature["x"].float_list.value[0]
                for log in logs for e in request_log.logged_examples(log))
    assert xs == [1.0, 2.0, 3.0, 4.0]  # what the policy keeps is kept
    assert _files_holding(tmp_path, PII.encode()) == [] and _files_holding(tmp_path, ZIP.encode()) == []
    assert _files_holding(prefix.parent, feature_policy.keyed_hash(ZIP, KEY.encode()).encode())


def test_without_the_hash_key_nothing_is_logged(serve_in_process, policy_base, tmp_path, monkeypatch):
    monkeypatch.delenv(feature_policy.HASH_KEY_ENV, raising=False)
    prefix = tmp_path / "logs" / "toy"
    server, stub = _serve(serve_in_process, policy_base, prefix)
    assert _predict(stub, 1.0) == [1.0]  # the request is answered
    server.stop()
    assert list(request_log.read(str(prefix))) == []
    assert _files_holding(tmp_path, ZIP.encode()) == [] and _files_holding(tmp_path, PII.encode()) == []
    shutil.rmtree(prefix.parent, ignore_errors=True)
