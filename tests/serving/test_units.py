"""The serving building blocks in-process (no server, no sockets): the request batcher,
JSON <-> tensor conversion, and the model manager over toy SavedModels."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent import futures

import numpy as np
import pytest
import tensorflow as tf

from serving.errors import InvalidArgument, NotFound
from serving.repository import model_config
from serving.repository.base_path import discover
from serving.server import frames, tensors
from serving.server import manager as manager_lib
from serving.server.batching import Batcher, BatchOptions, derived
from serving.server.manager import ModelManager
from tests.conftest import REPO
from tests.serving import toy_model

# --- Batcher ---------------------------------------------------------------------


def test_concurrent_requests_are_merged_and_each_gets_its_own_rows():
    calls, started = [], threading.Event()
    release = threading.Event()

    def fn(inputs):
        calls.append(len(inputs["x"]))
        if len(calls) == 1:  # hold the first call so the others queue up behind it
            started.set()
            release.wait(10)
        return {"y": inputs["x"] * 2}

    batcher = Batcher(fn, BatchOptions(max_batch_size=64, max_wait_ms=200, num_batch_threads=1))
    results = {}

    def client(i, n):
        results[i] = batcher({"x": np.full((n,), float(i))})

    first = threading.Thread(target=client, args=(0, 1))
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=client, args=(i, i)) for i in range(1, 6)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 10
    while batcher._in_flight < 6:  # every request is queued
        assert time.monotonic() < deadline, "requests did not queue behind the held batch"
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *others]:
        t.join(10)
    batcher.close()
    assert calls[0] == 1 and sum(calls[1:]) == 1 + 2 + 3 + 4 + 5 and len(calls) < 6  # merged
    for i in range(6):
        n = max(i, 1) if i else 1
        np.testing.assert_array_equal(results[i]["y"], np.full((n,), 2.0 * i))


def _held_model():
    """(fn, held, release, seen): y = x + 1; a batch starting with a negative x sets `held`
    and waits for `release`; `seen` collects every x the model was given."""
    seen, held, release = [], threading.Event(), threading.Event()

    def fn(inputs):
        seen.extend(inputs["x"].tolist())
        if inputs["x"][0] < 0:
            held.set()
            release.wait(10)
        return {"y": inputs["x"] + 1}

    return fn, held, release, seen


def test_batch_threads_run_batches_side_by_side():
    # TF Serving's num_batch_threads: while one batch runs (held here), another one runs
    # on the second thread instead of queuing behind it; with one thread it would wait.
    fn, held, release, _ = _held_model()
    batcher = Batcher(fn, BatchOptions(max_batch_size=64, max_wait_ms=1, num_batch_threads=2))
    slow = batcher.submit({"x": np.array([-1.0])})
    assert held.wait(10)
    assert batcher.submit({"x": np.array([1.0])}).result(timeout=5)["y"].tolist() == [2.0]
    assert not slow.done()
    release.set()
    assert slow.result(timeout=10)["y"].tolist() == [0.0]
    batcher.close()
    with pytest.raises(ValueError, match="num_batch_threads must be positive; was 0"):
        BatchOptions(num_batch_threads=0)


def test_a_failing_request_does_not_fail_its_batch_neighbours():
    def fn(inputs):
        if np.any(inputs["x"] < 0):
            raise ValueError("negative input")
        return {"y": inputs["x"] + 1}

    batcher = Batcher(fn, BatchOptions(max_batch_size=64, max_wait_ms=50))
    out, errors = {}, {}

    def client(i, value):
        try:
            out[i] = batcher({"x": np.array([value])})
        except ValueError as e:
            errors[i] = str(e)

    threads = [threading.Thread(target=client, args=(i, v)) for i, v in enumerate([1.0, -1.0, 2.0])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    batcher.close()
    assert errors == {1: "negative input"}
    assert out[0]["y"].tolist() == [2.0] and out[2]["y"].tolist() == [3.0]


def test_a_request_cancelled_while_queued_is_dropped_and_the_batcher_keeps_serving():
    # A gRPC client's deadline or disconnect cancels the request's Future while it waits
    # in the queue (asyncio.wrap_future passes the cancellation on). That used to raise
    # InvalidStateError in the batch thread, which died: every later request hung.
    fn, held, release, seen = _held_model()
    batcher = Batcher(fn, BatchOptions(max_batch_size=64, max_wait_ms=50, num_batch_threads=1))
    first = batcher.submit({"x": np.array([-1.0])})
    assert held.wait(10)
    gone = batcher.submit({"x": np.array([5.0])})
    kept = batcher.submit({"x": np.array([6.0])})
    assert gone.cancel()
    release.set()
    assert first.result(timeout=10)["y"].tolist() == [0.0]
    assert kept.result(timeout=10)["y"].tolist() == [7.0]
    # Everything cancelled: the batch is empty, and the thread still takes the next one.
    # Both events reset: with `release` still set the blocker did not block, and the batch
    # thread could take the three requests before they were cancelled (CI, under load).
    held.clear()
    release.clear()
    blocker = batcher.submit({"x": np.array([-2.0])})
    assert held.wait(10)
    lost = [batcher.submit({"x": np.array([8.0])}) for _ in range(3)]
    assert all(f.cancel() for f in lost)
    release.set()
    blocker.result(timeout=10)
    assert batcher.submit({"x": np.array([9.0])}).result(timeout=10)["y"].tolist() == [10.0]
    batcher.close()
    assert 5.0 not in seen and 8.0 not in seen
    assert batcher._in_flight == 0


def test_a_derived_answer_passes_cancellation_back_and_drops_a_late_answer():
    # An output-filtered request hands the server a Future derived from the batch's one.
    fn, held, release, seen = _held_model()
    batcher = Batcher(fn, BatchOptions(max_batch_size=64, max_wait_ms=50, num_batch_threads=1))
    first = batcher.submit({"x": np.array([-1.0])})
    assert held.wait(10)
    queued = batcher.submit({"x": np.array([5.0])})
    filtered = derived(queued, lambda out: {"z": out["y"]})
    assert filtered.cancel() and queued.cancelled()  # dropped from its batch
    kept = derived(batcher.submit({"x": np.array([6.0])}), lambda out: {"z": out["y"]})
    release.set()
    first.result(timeout=10)
    assert kept.result(timeout=10)["z"].tolist() == [7.0]
    # The source already running: cancelling the derived Future leaves it to finish, quietly.
    held.clear()
    release.clear()
    running = batcher.submit({"x": np.array([-2.0])})
    late = derived(running, lambda out: out)
    assert held.wait(10) and late.cancel()
    release.set()
    assert running.result(timeout=10)["y"].tolist() == [-1.0] and late.cancelled()
    batcher.close()
    assert 5.0 not in seen


def test_large_or_unbatchable_requests_run_directly():
    sizes = []
    batcher = Batcher(lambda inputs: {"y": inputs["x"]}, BatchOptions(max_batch_size=4), on_batch=sizes.append)
    batcher({"x": np.zeros((10,))})  # at least the batch size
    batcher({"x": np.array(3.0)})  # a scalar has no batch dimension
    Batcher(lambda inputs: inputs, BatchOptions(enabled=False), on_batch=sizes.append)({"x": np.zeros((2,))})
    batcher.close()
    assert sizes == [10, 1, 2]


def test_an_unbatchable_request_runs_on_the_executor_it_is_given():
    # gRPC's model process reads a front end's calls on one thread, which must not run the model.
    threads = []

    def fn(inputs):
        threads.append(threading.current_thread().name)
        return {"y": inputs["x"]}

    batcher = Batcher(fn, BatchOptions(max_batch_size=4))
    with futures.ThreadPoolExecutor(1, thread_name_prefix="pool") as pool:
        assert batcher.submit({"x": np.zeros((10,))}, pool).result(timeout=10)["y"].shape == (10,)
        assert batcher.submit({"x": np.array(3.0)}, pool).result(timeout=10)["y"] == 3.0
    batcher.close()
    assert threads and all(t.startswith("pool") for t in threads), threads


def test_a_derived_future_carries_its_function_s_error():
    source: futures.Future = futures.Future()
    out = derived(source, lambda outputs: outputs["missing"])
    source.set_running_or_notify_cancel()
    source.set_result({"y": 1})
    with pytest.raises(KeyError, match="missing"):
        out.result(timeout=1)  # not left pending, with the error lost in a callback


# --- the model process <-> gRPC front end wire --------------------------------------


def test_the_front_ends_method_table_is_tf_servings():
    """The methods TF Serving's own generated clients call, in their declared order. (Read
    from the `_grpc` stubs: tensorflow-serving-api 2.19's `prediction_service_pb2` and
    `model_service_pb2` are generated by an old protoc and do not import under protobuf 6.)"""
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    class Channel:  # records the method paths a stub binds
        def __init__(self):
            self.paths = []

        def unary_unary(self, path, *args, **kwargs):
            self.paths.append(path)

        unary_stream = stream_unary = stream_stream = unary_unary

    channel = Channel()
    prediction_service_pb2_grpc.PredictionServiceStub(channel)
    model_service_pb2_grpc.ModelServiceStub(channel)
    assert len(channel.paths) == 7 and list(frames.METHODS) == channel.paths


def test_frames_survive_any_chunking():
    stream = (frames.pack(frames.CALL, 1, b"\x02" + b"a" * 300) + frames.pack(frames.CANCEL, 7)
              + frames.pack(frames.ERROR, 2, frames.error_payload("NOT_FOUND", "Servable not found \u2013 x")))
    expected = [(frames.CALL, 1, b"\x02" + b"a" * 300), (frames.CANCEL, 7, b""),
                (frames.ERROR, 2, "NOT_FOUND\nServable not found \u2013 x".encode())]
    for size in (1, 2, 9, 10, 64, len(stream)):
        reader = frames.Reader()
        got = [f for i in range(0, len(stream), size) for f in reader.feed(stream[i:i + size])]
        assert got == expected, size
    assert frames.parse_error(expected[2][2]) == ("NOT_FOUND", "Servable not found \u2013 x")


def test_grpcs_error_for_an_answer_after_the_deadline_becomes_one_info_line():
    import logging

    from serving.server.grpc_front import _LateAnswer

    try:
        raise RuntimeError("Failed execute_batch")
    except RuntimeError:
        record = logging.LogRecord("grpc._cython.cygrpc", logging.ERROR, "server.pyx.pxi", 1,
                                   "ExecuteBatchError raised in core by servicer method [%s]",
                                   ("/tensorflow.serving.PredictionService/Predict",), sys.exc_info())
    assert _LateAnswer().filter(record)
    assert (record.levelno, record.exc_info) == (logging.INFO, None)
    assert "deadline passed" in record.getMessage()
    other = logging.LogRecord("grpc._cython.cygrpc", logging.ERROR, "x", 1, "Unexpected [%s]", ("KeyError",), None)
    assert _LateAnswer().filter(other) and other.levelno == logging.ERROR  # anything else stays as it was


# --- tensors ---------------------------------------------------------------------

SPECS = {"a": tf.TensorSpec([None, 2], tf.float32), "b": tf.TensorSpec([None], tf.int64)}


def test_row_and_columnar_formats_give_the_same_tensors():
    rows, is_rows = tensors.predict_inputs({"instances": [{"a": [1, 2], "b": 3}, {"a": [4.5, 5], "b": 6}]}, SPECS)
    cols, is_cols = tensors.predict_inputs({"inputs": {"a": [[1, 2], [4.5, 5]], "b": [3, 6], "extra": 1}}, SPECS)
    assert is_rows and not is_cols  # (TF Serving ignores a columnar name the signature lacks)
    for k in SPECS:
        np.testing.assert_array_equal(rows[k], cols[k])
    assert rows["a"].dtype == np.float32 and rows["b"].dtype == np.int64


def test_bytes_come_back_base64_and_shapes_must_agree():
    # TF returns strings as object arrays; outputs named *_bytes are binary (TF Serving's rule).
    out = tensors.to_row_format({"tag_bytes": np.array([b"\x00\xff"], dtype=object),
                                 "name": np.array([b"ok"], dtype=object), "n": np.array([1])})
    assert out == [{"tag_bytes": {"b64": "AP8="}, "name": "ok", "n": 1}]
    with pytest.raises(InvalidArgument, match="different 0-th dimensions"):
        tensors.to_row_format({"a": np.zeros((2,)), "b": np.zeros((3,))})


# util/json_tensor.cc FillPredictRequestFromJson and its helpers: TF Serving's texts.
@pytest.mark.parametrize(("doc", "message"), [
    ({"instances": []}, 'JSON Value: {"instances":[]} No values in \'instances\' array'),
    ({"instances": {"a": 1}}, 'JSON Value: {"instances":{"a":1}} Expecting \'instances\' to be an list/array'),
    ({"instances": [1], "inputs": [1]},
     "JSON Value: {\"instances\":[1],\"inputs\":[1]} Not formatted correctly expecting only one of 'inputs' "
     "or 'instances' keys to exist "),
    ({}, "Missing 'inputs' or 'instances' key"),
    ({"instances": [[1, 2]]}, "instances is a plain list, but expecting list of objects as multiple input tensors "
     "required as per tensorinfo_map"),
    ({"instances": [{"a": [1, 2]}]},
     'Failed to process element: 0 of \'instances\' list. JSON object: {"a":[1,2]} keys must be equal to: a,b'),
    ({"instances": [{"a": [1, 2], "b": 1}, [1]]}, "Expecting object but got list at item 1 of input list"),
    ({"inputs": [1]}, "inputs is a plain value/list, but expecting an object as multiple input tensors required "
     "as per tensorinfo_map"),
    ({"inputs": {"a": [[1, 2]]}}, "Missing named input: b in 'inputs' object."),
    ({"instances": [{"a": ["x", "y"], "b": 1}]}, "input 'a': expected float32 numbers, got strings"),
])
def test_bad_predict_inputs_get_tf_servings_text(doc, message):
    with pytest.raises(InvalidArgument) as info:
        tensors.predict_inputs(doc, SPECS)
    assert str(info.value) == message


def test_examples_from_json_build_tf_examples_with_context():
    [raw] = tensors.examples_from_json({"examples": [{"x": 2.5}], "context": {"city": "Chicago", "x": 1.0}})
    ex = tf.train.Example.FromString(raw)
    # A feature in both keeps the example's value (the ExampleListWithContext merge).
    assert ex.features.feature["x"].float_list.value == [2.5]
    assert ex.features.feature["city"].bytes_list.value == [b"Chicago"]


@pytest.mark.parametrize(("doc", "message"), [
    ({"context": {}}, 'JSON Value: {"context":{}} When method is classify, key \'examples\' is expected and was not found'),
    ({"examples": {}}, 'JSON Value: {"examples":{}} Expecting \'examples\' value to be an list/array'),
    ({"examples": []}, 'JSON Value: {"examples":[]} \'examples\' value is an empty array'),
    ({"examples": [1]}, "Example must be JSON object but got JSON Number"),
    ({"examples": [{}], "context": "c"}, "Example must be JSON object but got JSON String"),
])
def test_bad_examples_get_tf_servings_text(doc, message):
    with pytest.raises(InvalidArgument) as info:
        tensors.examples_from_json(doc)
    assert str(info.value) == message


@pytest.mark.parametrize(("body", "message"), [
    (b"", "JSON Parse error: The document is empty"),
    (b"{not json", "JSON Parse error: Missing a name for object member. at offset: 1"),
    (b"[1, 2]", "JSON Value: [1,2] Is not object"),
    (b'{"a": 1 "b": 2}', "JSON Parse error: Missing a comma or '}' after an object member. at offset: 8"),
    (b'{"a": [1 2]}', "JSON Parse error: Missing a comma or ']' after an array element. at offset: 9"),
    (b'{"a": }', "JSON Parse error: Invalid value. at offset: 6"),
])
def test_bad_json_gets_rapidjsons_text(body, message):
    with pytest.raises(InvalidArgument) as info:
        tensors.parse_request(body)
    assert str(info.value) == message


def test_json_parsing_is_tf_servings():
    # kParseStopWhenDoneFlag: what follows the document is ignored; NaN/Infinity are numbers.
    assert tensors.parse_request(b'{"x": 1} trailing') == {"x": 1}
    assert np.isnan(tensors.parse_request(b'{"x": NaN}')["x"])
    assert tensors.parse_request(b' {"x": -Infinity}') == {"x": float("-inf")}
    long_doc = {"examples": [], "pad": "y" * 400}
    with pytest.raises(InvalidArgument) as info:
        tensors.examples_from_json(long_doc)
    # Values in texts are cut after 256 bytes (kMaxJsonDebugStringBytes): the token that crosses
    # the limit is kept, nothing after it (not even the closing brace).
    assert str(info.value) == 'JSON Value: {"examples":[],"pad":"' + "y" * 400 + '" \'examples\' value is an empty array'
    assert len(tensors.json_debug({"k": list(range(200))})) < 300


def test_signature_name_must_be_a_string():
    with pytest.raises(InvalidArgument) as info:
        tensors.signature_name({"signature_name": 3})
    assert str(info.value) == ("JSON Value: {\"signature_name\":3} not formatted correctly. "
                               "'signature_name' key must be a string value.")
    assert tensors.signature_name({}) is None


def test_runtime_errors_keep_the_ops_message():
    wrapped = ("Graph execution error:\n\nDetected at node ParseExample/ParseExampleV2 defined at (most recent call "
               "last):\n<stack traces unavailable>\nName: <unknown>, Key: x, Index: 0.  Data types don't match. "
               "Data type: int64 but expected type: float\n\t [[{{node ParseExample/ParseExampleV2}}]] "
               "[Op:__inference_signature_wrapper_classify_257]")
    assert manager_lib.runtime_message(wrapped) == (
        "Name: <unknown>, Key: x, Index: 0.  Data types don't match. Data type: int64 but expected type: float"
        "\n\t [[{{node ParseExample/ParseExampleV2}}]]")


# TF Serving's AddValueToFeature (util/json_tensor.cc): JSON value -> tf.Example feature.
@pytest.mark.parametrize("value, kind, expected", [
    (True, "int64_list", [1]),                       # booleans are int64 1/0
    ([True, False, 3], "int64_list", [1, 0, 3]),
    ([1, 2], "int64_list", [1, 2]),
    (1.0, "float_list", [1.0]),                      # written with a fraction: a float
    ([2.5, 1e3], "float_list", [2.5, 1000.0]),
    ((1 << 63) - 1, "int64_list", [(1 << 63) - 1]),
    (-(1 << 63), "int64_list", [-(1 << 63)]),
    (1 << 64, "float_list", [float(1 << 64)]),       # beyond uint64 rapidjson reads a double
    (["a", {"b64": "Yg=="}], "bytes_list", [b"a", b"b"]),
    ([], None, []),                                  # an empty feature, as TF Serving leaves it
])
def test_json_values_become_features_as_tf_serving_builds_them(value, kind, expected):
    [raw] = tensors.examples_from_json({"examples": [{"f": value}]})
    feature = tf.train.Example.FromString(raw).features.feature["f"]
    assert feature.WhichOneof("kind") == kind
    if kind:
        assert list(getattr(feature, kind).value) == pytest.approx(expected)


@pytest.mark.parametrize("value, message", [
    ([1, 2.5], "Unexpected element type in feature: f expecting type: int64"),
    ([2.5, 1], "Unexpected element type in feature: f expecting type: float"),
    ([2.5, True], "Unexpected element type in feature: f expecting type: float"),
    (["a", 1], "Unexpected element type in feature: f expecting type: bytes"),
    (1 << 63, "Feature: f has uint64_t element. Only int64_t is supported."),
    (None, "Feature: f has element with unexpected JSON type: Null"),
    ([[1]], "Feature: f has element with unexpected JSON type: Array"),
    ({"x": 1}, "Feature: f has element with unexpected JSON type: Object"),
])
def test_json_values_tf_serving_refuses(value, message):
    with pytest.raises(InvalidArgument) as info:
        tensors.examples_from_json({"examples": [{"f": value}]})
    assert str(info.value) == message


# --- model manager ---------------------------------------------------------------


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    for v in (1, 2):
        toy_model.save(str(root / str(v)), v)
    return root


def _predict(manager, version=None) -> float:
    servable = manager.get("toy", version)
    return float(np.ravel(servable.run("serving_default", {"examples": np.array([toy_model.example(1.0)])})["y"])[0])


def test_manager_serves_the_latest_version_and_follows_the_folder(builds, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(builds / "1", base / "1")
    os.makedirs(base / "7.tmp")  # a staging folder is not a version
    manager = ModelManager(model_config.single_model("toy", str(base)), batch=BatchOptions(enabled=False))
    manager.poll_once()
    assert manager.served_versions("toy") == [1] and sorted(discover(str(base))) == [1]
    assert _predict(manager) == 1.0
    shutil.copytree(builds / "2", base / "2")
    manager.poll_once()
    assert manager.served_versions("toy") == [2] and _predict(manager) == 2.0
    with pytest.raises(NotFound):
        manager.get("toy", 1)  # the latest policy unloaded it
    with pytest.raises(NotFound):
        manager.get("other")


def test_a_broken_version_is_not_served_and_the_good_one_stays(builds, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(builds / "1", base / "1")
    manager = ModelManager(model_config.single_model("toy", str(base)), batch=BatchOptions(enabled=False))
    manager.poll_once()
    os.makedirs(base / "3" / "variables")
    (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
    (base / "3" / "variables" / "variables.index").write_bytes(b"")
    manager.poll_once()
    assert manager.served_versions("toy") == [1] and _predict(manager) == 1.0
    states = dict(manager.status("toy"))
    assert states[3].state == "END" and "DecodeError" in states[3].error_message
    assert states[3].error_code != "OK"


# --- TensorFlow's thread pools (TF Serving's --tensorflow_*_op_parallelism) -------------


def test_thread_pools_are_set_before_anything_runs_and_refused_after():
    from serving.server.model_server import ServerOptions, configure_tensorflow

    code = ("from serving.server.model_server import ServerOptions, configure_tensorflow; import tensorflow as tf; "
            "print(configure_tensorflow(ServerOptions(intra_op_threads=1, inter_op_threads=3)), "
            "tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads(), "
            "float(tf.reduce_sum(tf.ones([4]))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(1,", "3)", "1", "3", "4.0"]
    tf.reduce_sum(tf.ones([2]))  # this process has run TensorFlow: the pools are fixed
    with pytest.raises(InvalidArgument, match="cannot set TensorFlow's thread pools to 5/6 now"):
        configure_tensorflow(ServerOptions(intra_op_threads=5, inter_op_threads=6))
