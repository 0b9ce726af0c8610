"""Request logging in TF Serving's format: sampled PredictionLogs under concurrent load,
files rotated and bounded, and the examples a skew check reads back from them."""

import os
import threading
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

from serving.errors import InvalidArgument
from serving.repository import model_config
from serving.server import request_log
from serving.server.manager import ModelManager
from tests.serving.toy_model import example, rest_body

REQUESTS_PER_CLIENT = 60
CLIENTS = 8
RATE = 0.5


def _rest_predict(url: str, x: float) -> int:
    req = urllib.request.Request(url + "/v1/models/toy:predict", data=rest_body(x), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def test_sampled_requests_are_logged_rotated_and_bounded_under_load(serve_in_process, toy_base, tmp_path):
    prefix = str(tmp_path / "logs" / "toy")
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(toy_base),
                          "--request-log-sampling-rate", str(RATE), "--request-log-prefix", prefix,
                          "--request-log-max-file-bytes", "6000", "--request-log-max-files", "3")
    channel = grpc.insecure_channel(server.grpc_target)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    failures: list[str] = []

    def client(i: int) -> None:
        for n in range(REQUESTS_PER_CLIENT):
            x = float(i * 100 + n)
            try:
                if (i + n) % 3 == 0:
                    req = classification_pb2.ClassificationRequest()
                    req.model_spec.name, req.model_spec.signature_name = "toy", "classification"
                    req.input.example_list.examples.add().ParseFromString(example(x))
                    stub.Classify(req, timeout=30)
                elif (i + n) % 3 == 1:
                    req = predict_pb2.PredictRequest()
                    req.model_spec.name = "toy"
                    req.inputs["examples"].CopyFrom(tf.make_tensor_proto([example(x)]))
                    stub.Predict(req, timeout=30)
                else:
                    assert _rest_predict(server.url, x) == 200
            except Exception as e:  # noqa: BLE001  collected: every request must succeed
                failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    channel.close()
    assert failures == []
    total = CLIENTS * REQUESTS_PER_CLIENT
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    written = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                  if line.startswith("retrain_serving_request_logs_total{") and 'outcome="written"' in line)
    dropped = [line for line in metrics.splitlines() if 'outcome="dropped"' in line]
    # Binomial(480, 0.5): sd 11; 5 sd either side. Nothing dropped at this rate.
    assert abs(written - total * RATE) < 5 * (total * RATE * (1 - RATE)) ** 0.5, written
    assert dropped == []
    server.stop()

    files = request_log.log_files(prefix)
    assert len(files) == 3  # rotated at ~6 kB, the oldest removed beyond max_files
    assert not [f for f in os.listdir(tmp_path / "logs") if f.endswith(request_log.PART)]  # closed on stop
    logs = list(request_log.read(prefix))
    assert 0 < len(logs) < written
    kinds = {log.WhichOneof("log_type") for log in logs}
    assert kinds == {"predict_log", "classify_log"}
    for log in logs:
        meta = log.log_metadata
        assert meta.model_spec.name == "toy" and meta.model_spec.version.value == 2
        assert meta.sampling_config.sampling_rate == RATE and list(meta.saved_model_tags) == ["serve"]
        if log.HasField("predict_log"):  # TF Serving's request and response, typed fields
            y = log.predict_log.response.outputs["y"]
            x = tf.train.Example.FromString(log.predict_log.request.inputs["examples"].string_val[0])
            assert y.float_val[0] == pytest.approx(2 * x.features.feature["x"].float_list.value[0])


def test_logged_examples_from_each_kind_of_request():
    predict = prediction_log_pb2.PredictionLog()
    predict.predict_log.request.inputs["examples"].CopyFrom(tf.make_tensor_proto([example(1.0), example(2.0)]))
    assert request_log.logged_examples(predict) == [example(1.0), example(2.0)]
    named = prediction_log_pb2.PredictionLog()
    named.predict_log.request.inputs["a"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)))
    named.predict_log.request.inputs["b"].CopyFrom(tf.make_tensor_proto(np.array([7, 8], np.int64)))
    rows = [tf.train.Example.FromString(e) for e in request_log.logged_examples(named)]
    assert [list(r.features.feature["a"].float_list.value) for r in rows] == [[1.0, 2.0], [3.0, 4.0]]
    assert [list(r.features.feature["b"].int64_list.value) for r in rows] == [[7], [8]]
    classify = prediction_log_pb2.PredictionLog()
    ctx = classify.classify_log.request.input.example_list_with_context
    ctx.context.features.feature["city"].bytes_list.value.append(b"Chicago")
    ctx.examples.add().ParseFromString(example(3.0))
    [merged] = [tf.train.Example.FromString(e) for e in request_log.logged_examples(classify)]
    assert merged.features.feature["city"].bytes_list.value == [b"Chicago"]
    assert merged.features.feature["x"].float_list.value == [3.0]


@pytest.mark.parametrize("rate, kind, prefix, message", [
    (1.5, "tfrecord", "/tmp/x", "sampling_rate 1.5 is not within"),
    (0.5, "kafka", "/tmp/x", "log collector type 'kafka' is not supported"),
    (0.5, "tfrecord", "", "needs a filename_prefix"),
])
def test_a_logging_config_the_server_cannot_write_is_refused(toy_base, rate, kind, prefix, message):
    config = model_config.single_model("toy", str(toy_base))
    logging_config = config.model_config_list.config[0].logging_config
    logging_config.sampling_config.sampling_rate = rate
    logging_config.log_collector_config.type = kind
    logging_config.log_collector_config.filename_prefix = prefix
    with pytest.raises(InvalidArgument, match=message):
        ModelManager(config)


def test_the_log_writer_frames_records_byte_for_byte_as_tensorflows_tfrecord_writer(tmp_path):
    records = [b"", b"x", bytes(range(256)) * 40, prediction_log_pb2.PredictionLog().SerializeToString()]
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for r in records:
            writer.write(r)
    assert b"".join(request_log.tfrecord(r) for r in records) == (tmp_path / "tf.tfrecord").read_bytes()


def test_a_log_built_by_the_writer_thread_carries_the_request_metadata(tmp_path):
    config = model_config.single_model("toy", str(tmp_path / "toy"))
    model_config.set_request_log(config, "toy", 1.0, str(tmp_path / "logs" / "log"))
    logger = request_log.RequestLogger("toy", config.model_config_list.config[0].logging_config)
    built = []

    def build():
        built.append(threading.current_thread().name)
        return request_log.predict_log(predict_pb2.PredictRequest(), predict_pb2.PredictResponse())

    logger.log(build, None, "serving_default", 3, key="req-1")
    logger.close()
    [log] = list(request_log.read(str(tmp_path / "logs" / "log")))
    assert built == ["request-log-toy"]  # built in the writer's thread, not the caller's
    meta = log.log_metadata
    assert (meta.model_spec.name, meta.model_spec.signature_name, meta.model_spec.version.value) == \
        ("toy", "serving_default", 3)
    assert meta.request_origin == "req-1" and meta.timestamp_secs > 0
