"""TF Serving API conformance: every REST endpoint and format, gRPC, and TF Serving-shaped
errors, checked against the SavedModel's own in-process outputs.

Runs against `retrain serve` by default; set SERVING_BASE_URL (and SERVING_GRPC_TARGET) to
point it at another server (e.g. tensorflow/serving) serving the toy model as `toy`.
"""

import base64
import json
import os
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from tests.serving.toy_model import example

MODEL = "toy"
XS = [0.5, -1.0, 3.0]


@pytest.fixture(scope="module")
def server(toy_base):
    if os.environ.get("SERVING_BASE_URL"):
        yield os.environ["SERVING_BASE_URL"], os.environ.get("SERVING_GRPC_TARGET")
        return
    from tests.serving.conftest import InProcessServer

    s = InProcessServer(["--model-name", MODEL, "--model-base-path", str(toy_base), "--max-body-bytes", "100000"])
    yield s.url, s.grpc_target
    s.stop()


@pytest.fixture(scope="module")
def reference(toy_base):
    """What the SavedModel (latest version: 2) answers in process."""
    loaded = tf.saved_model.load(str(toy_base / "2"))
    sig = loaded.signatures
    return {
        "y": sig["serving_default"](examples=tf.constant([example(x) for x in XS]))["y"].numpy(),
        "multi": {k: v.numpy() for k, v in sig["multi"](a=tf.constant([[1.0, 2.0], [3.0, 4.0]]), b=tf.constant([10, 20], tf.int64)).items()},
        "classify": {k: v.numpy() for k, v in sig["classification"](inputs=tf.constant([example(x) for x in XS])).items()},
        "regress": sig["regression"](inputs=tf.constant([example(x) for x in XS]))["outputs"].numpy(),
    }


def call(url, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def b64(x):
    return {"b64": base64.b64encode(example(x)).decode()}


# --- status and metadata -----------------------------------------------------------------

def test_status_lists_the_served_version(server):
    status, body = call(server[0], f"/v1/models/{MODEL}")
    assert status == 200
    assert body["model_version_status"][0] == {
        "version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}


def test_every_answer_carries_the_current_date(server):
    # HTTP/1.1 (RFC 9110 6.6.1) and libevent (evhttp_maybe_add_date_header) send Date; ours is formatted
    # once a second, so it must move with the clock.
    import email.utils

    for pause in (0, 1.1):
        time.sleep(pause)
        with urllib.request.urlopen(server[0] + f"/v1/models/{MODEL}", timeout=30) as r:
            sent = email.utils.parsedate_to_datetime(r.headers["Date"]).timestamp()
        assert abs(sent - time.time()) < 2, r.headers["Date"]


def test_status_of_one_version(server):
    status, body = call(server[0], f"/v1/models/{MODEL}/versions/2")
    assert status == 200 and [s["version"] for s in body["model_version_status"]] == ["2"]


def test_metadata_has_the_signature_defs(server):
    status, body = call(server[0], f"/v1/models/{MODEL}/metadata")
    assert status == 200
    assert body["model_spec"]["name"] == MODEL and body["model_spec"]["version"] == "2"
    # The SignatureDefMap unpacked, without the Any's "@type" (http_rest_api_util.cc ToJsonString).
    assert set(body) == {"model_spec", "metadata"} and set(body["metadata"]["signature_def"]) == {"signature_def"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    # Every SignatureDef, the init op included (get_model_metadata_impl.cc copies them all).
    assert set(sigs) == {"serving_default", "multi", "classification", "regression", "__saved_model_init_op"}
    assert sigs["classification"]["method_name"] == "tensorflow/serving/classify"
    assert sigs["multi"]["inputs"]["a"]["dtype"] == "DT_FLOAT"


# --- predict -------------------------------------------------------------------------------

def test_predict_row_format_with_b64(server, reference):
    status, body = call(server[0], f"/v1/models/{MODEL}:predict", {"instances": [b64(x) for x in XS]})
    assert status == 200
    np.testing.assert_allclose(body["predictions"], reference["y"], rtol=1e-6)


def test_predict_columnar_format(server, reference):
    status, body = call(server[0], f"/v1/models/{MODEL}:predict", {"inputs": [b64(x) for x in XS]})
    assert status == 200
    np.testing.assert_allclose(body["outputs"], reference["y"], rtol=1e-6)


def test_predict_named_inputs_both_formats_and_bytes_outputs(server, reference):
    rows = {"signature_name": "multi", "instances": [{"a": [1.0, 2.0], "b": 10}, {"a": [3.0, 4.0], "b": 20}]}
    status, body = call(server[0], f"/v1/models/{MODEL}:predict", rows)
    assert status == 200
    assert [p["total"] for p in body["predictions"]] == pytest.approx(reference["multi"]["total"].tolist())
    assert body["predictions"][0]["tag_bytes"] == {"b64": base64.b64encode(b"\x00\xffbin").decode()}
    assert body["predictions"][0]["name"] == "ok"
    cols = {"signature_name": "multi", "inputs": {"a": [[1.0, 2.0], [3.0, 4.0]], "b": [10, 20]}}
    status, body = call(server[0], f"/v1/models/{MODEL}:predict", cols)
    assert status == 200 and body["outputs"]["total"] == pytest.approx(reference["multi"]["total"].tolist())


def test_predict_a_specific_version(server):
    status, body = call(server[0], f"/v1/models/{MODEL}/versions/2:predict", {"instances": [b64(1.0)]})
    assert status == 200 and body["predictions"] == [[2.0]]


# --- classify / regress --------------------------------------------------------------------

def test_classify(server, reference):
    body = {"signature_name": "classification", "examples": [{"x": x} for x in XS]}
    status, out = call(server[0], f"/v1/models/{MODEL}:classify", body)
    assert status == 200
    assert [[c for c, _ in r] for r in out["results"]] == [["neg", "pos"]] * 3
    np.testing.assert_allclose([[s for _, s in r] for r in out["results"]], reference["classify"]["scores"], rtol=1e-5)


def test_regress_with_context(server, reference):
    body = {"signature_name": "regression", "context": {}, "examples": [{"x": x} for x in XS]}
    status, out = call(server[0], f"/v1/models/{MODEL}:regress", body)
    assert status == 200
    np.testing.assert_allclose(out["results"], reference["regress"], rtol=1e-6)


# --- errors: TF Serving-shaped, and the server keeps serving ---------------------------------

@pytest.mark.parametrize("path, body, raw, code, message", [
    (f"/v1/models/{MODEL}:predict", None, b"{not json", 400, "JSON Parse error"),
    (f"/v1/models/{MODEL}:predict", {"instances": [{"a": [1.0, 2.0, 3.0], "b": 1}], "signature_name": "multi"}, None, 400, "shape"),
    (f"/v1/models/{MODEL}:predict", {"instances": [{"a": ["x", "y"], "b": 1}], "signature_name": "multi"}, None, 400, "input 'a'"),
    (f"/v1/models/{MODEL}:predict", {"instances": [b64(1.0)], "inputs": [b64(1.0)]}, None, 400, "only one of"),
    (f"/v1/models/{MODEL}:predict", {"signature_name": "serving_default"}, None, 400, "'inputs' or 'instances'"),
    (f"/v1/models/{MODEL}:classify", {"examples": [{"x": 1.0}]}, None, 400, "classify"),
    (f"/v1/models/{MODEL}:predict", None, b'{"instances": [' + b'1.0,' * 30000 + b'1.0]}', 413, "exceeds"),
    ("/v1/models/nope:predict", {"instances": [1]}, None, 404, "nope"),
    (f"/v1/models/{MODEL}/versions/99:predict", {"instances": [b64(1.0)]}, None, 404, "99"),
    # util/json_tensor.cc AddValueToFeature: integers beyond int64 (was a 500), mixed kinds.
    (f"/v1/models/{MODEL}:regress", {"examples": [{"x": 1 << 63}]}, None, 400,
     "Feature: x has uint64_t element. Only int64_t is supported."),
    (f"/v1/models/{MODEL}:regress", {"examples": [{"x": [1, 2.5]}]}, None, 400,
     "Unexpected element type in feature: x expecting type: int64"),
    # server_core.cc GetModelVersionForLabel: InvalidArgument, so 400.
    (f"/v1/models/{MODEL}/labels/canary", None, None, 400, "Unrecognized servable version label: canary"),
])
def test_bad_requests_get_tf_serving_errors(server, path, body, raw, code, message):
    status, out = call(server[0], path, body, raw)
    assert status == code and set(out) == {"error"} and message in out["error"]
    assert call(server[0], f"/v1/models/{MODEL}")[0] == 200  # still serving


def int_example(x):
    return {"x": [int(x)]}


# Exact texts, each from the TF Serving source that produces it.
@pytest.mark.parametrize("path, body, message", [
    # http_rest_api_handler.cc GetInfoMap
    (f"/v1/models/{MODEL}:predict", {"instances": [b64(1.0)], "signature_name": "nope"},
     'Serving signature name: "nope" not found in signature def'),
    # classifier.cc GetClassificationSignatureDef / regressor.cc GetRegressionSignatureDef
    (f"/v1/models/{MODEL}:classify", {"signature_name": "nope", "examples": [{"x": 1.0}]},
     "No signature was found with the name: nope"),
    (f"/v1/models/{MODEL}:classify", {"examples": [{"x": 1.0}]},
     "Expected classification signature method_name to be tensorflow/serving/classify. Was: tensorflow/serving/predict"),
    (f"/v1/models/{MODEL}:regress", {"signature_name": "classification", "examples": [{"x": 1.0}]},
     "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/classify"),
    # util/json_tensor.cc FillClassifyRegressRequestFromJson, FillSignature, ParseJson
    (f"/v1/models/{MODEL}:regress", {"signature_name": "regression", "examples": []},
     'JSON Value: {"signature_name":"regression","examples":[]} \'examples\' value is an empty array'),
    (f"/v1/models/{MODEL}:regress", {"signature_name": ["regression"], "examples": [{"x": 1.0}]},
     'JSON Value: {"signature_name":["regression"],"examples":[{"x":1.0}]} not formatted correctly. '
     "'signature_name' key must be a string value."),
    (f"/v1/models/{MODEL}:predict", [1], "JSON Value: [1] Is not object"),
    # util/json_tensor.cc FillPredictRequestFromJson
    (f"/v1/models/{MODEL}:predict", {"instances": [b64(1.0)], "inputs": [b64(1.0)]},
     'JSON Value: {"instances":[{"b64":"' + b64(1.0)["b64"] + '"}],"inputs":[{"b64":"' + b64(1.0)["b64"]
     + "\"}]} Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist "),
    (f"/v1/models/{MODEL}:predict", {"signature_name": "multi", "inputs": {"a": [[1.0, 2.0]]}},
     "Missing named input: b in 'inputs' object."),
    # The op's own message (Session::Run's status), not eager TF's "Graph execution error:".
    (f"/v1/models/{MODEL}:regress", {"signature_name": "regression", "examples": [int_example(1)]},
     "Name: <unknown>, Key: x, Index: 0.  Data types don't match. Data type: int64 but expected type: float"),
])
def test_error_texts_are_tf_servings(server, path, body, message):
    status, out = call(server[0], path, body)
    assert status == 400
    # A model-side error carries the node after the message ("\n\t [[{{node ...}}]]").
    assert out["error"] == message or out["error"].startswith(message + "\n\t [[{{node ")


# --- URLs and methods, as TF Serving routes them ----------------------------------------------
# model_servers/http_server.cc (dispatch on (?i)/v1/.*, OPTIONS as CORS preflight, libevent's
# 404 for other paths), http_rest_api_util.cc (kPredictionApiGegex for POST,
# kModelStatusApiRegex for GET), http_rest_api_handler.cc ProcessRequest ("Malformed
# request: <METHOD> <path>", "Missing model name in request.").

def request(url, method, path, body=None, headers=None):
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


@pytest.mark.parametrize("method, path, message", [
    ("GET", f"/v1/models/{MODEL}:predict", f"Malformed request: GET /v1/models/{MODEL}:predict"),
    ("POST", f"/v1/models/{MODEL}", f"Malformed request: POST /v1/models/{MODEL}"),
    ("POST", f"/v1/models/{MODEL}:explain", f"Malformed request: POST /v1/models/{MODEL}:explain"),
    ("POST", f"/v1/models/{MODEL}:PREDICT", f"Malformed request: POST /v1/models/{MODEL}:PREDICT"),
    ("POST", f"/v1/models/{MODEL}/metadata", f"Malformed request: POST /v1/models/{MODEL}/metadata"),
    ("PUT", f"/v1/models/{MODEL}:predict", f"Malformed request: PUT /v1/models/{MODEL}:predict"),
    ("DELETE", f"/v1/models/{MODEL}", f"Malformed request: DELETE /v1/models/{MODEL}"),
    ("PATCH", f"/v1/models/{MODEL}", f"Malformed request: PATCH /v1/models/{MODEL}"),
    ("GET", f"/v1/models/{MODEL}/versions/x", f"Malformed request: GET /v1/models/{MODEL}/versions/x"),
    ("GET", "/v1/predict", "Malformed request: GET /v1/predict"),
    ("GET", "/v1/models", "Missing model name in request."),
    ("GET", "/v1/models/versions/2", "Missing model name in request."),
])
def test_malformed_urls_and_methods_are_400_with_tf_servings_text(server, method, path, message):
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    status, content_type, out = request(server[0], method, path + "?debug=1", body)
    assert status == 400 and content_type == "application/json"
    assert json.loads(out) == {"error": message}  # the path without its query string


def test_paths_are_matched_without_case_and_names_are_url_decoded(server):
    status, _, out = request(server[0], "GET", f"/V1/MODELS/{MODEL}/VERSIONS/2")
    assert status == 200 and json.loads(out)["model_version_status"][0]["version"] == "2"
    status, _, out = request(server[0], "GET", f"/v1/models/{MODEL}/METADATA")  # not `metadata`: a status request
    assert status == 200 and "model_version_status" in json.loads(out)
    status, _, out = request(server[0], "GET", "/v1/models/%74oy")  # %74 = t
    assert status == 200 and json.loads(out)["model_version_status"]


def test_other_paths_get_the_http_servers_404_page(server):
    for method in ("GET", "POST"):
        status, content_type, out = request(server[0], method, "/v2/models/toy", b"{}" if method == "POST" else None)
        assert status == 404 and content_type == "text/html" and b"<TITLE>404 Not Found</TITLE>" in out


def test_cors_preflight(server):
    status, _, out = request(server[0], "OPTIONS", f"/v1/models/{MODEL}:predict",
                             headers={"Origin": "https://app.example"})
    assert (status, out) == (200, b"")
    status, _, out = request(server[0], "OPTIONS", f"/v1/models/{MODEL}:predict")
    assert (status, out) == (400, b"")  # "Origin header is missing in CORS preflight", no body


# --- gRPC ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stubs(server):
    if not server[1]:
        pytest.skip("no SERVING_GRPC_TARGET for the external server")
    channel = grpc.insecure_channel(server[1])
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel), model_service_pb2_grpc.ModelServiceStub(channel)
    channel.close()


def test_grpc_predict(stubs, reference):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = MODEL
    req.inputs["examples"].CopyFrom(tf.make_tensor_proto([example(x) for x in XS]))
    resp = stubs[0].Predict(req, timeout=30)
    np.testing.assert_allclose(tf.make_ndarray(resp.outputs["y"]), reference["y"], rtol=1e-6)
    assert resp.model_spec.version.value == 2
    # The typed field, not tensor_content: predict_util.cc answers kAsProtoField by default,
    # and clients read `float_val` directly.
    y = resp.outputs["y"]
    assert not y.tensor_content and y.dtype == tf.float32.as_datatype_enum
    np.testing.assert_allclose(np.array(y.float_val).reshape(reference["y"].shape), reference["y"], rtol=1e-6)


def test_grpc_metadata_and_status(stubs):
    req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    req.model_spec.name = MODEL
    resp = stubs[0].GetModelMetadata(req, timeout=30)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    resp.metadata["signature_def"].Unpack(sigs)
    assert "serving_default" in sigs.signature_def
    sreq = get_model_status_pb2.GetModelStatusRequest()
    sreq.model_spec.name = MODEL
    status = stubs[1].GetModelStatus(sreq, timeout=30)
    assert [(s.version, s.state) for s in status.model_version_status][0] == (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE)


def test_grpc_classify_and_regress(stubs, reference):
    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name, creq.model_spec.signature_name = MODEL, "classification"
    for x in XS:
        creq.input.example_list.examples.add().ParseFromString(example(x))
    cresp = stubs[0].Classify(creq, timeout=30)
    np.testing.assert_allclose([[c.score for c in r.classes] for r in cresp.result.classifications],
                               reference["classify"]["scores"], rtol=1e-5)
    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name, rreq.model_spec.signature_name = MODEL, "regression"
    rreq.input.example_list.CopyFrom(creq.input.example_list)
    rresp = stubs[0].Regress(rreq, timeout=30)
    np.testing.assert_allclose([r.value for r in rresp.result.regressions], reference["regress"], rtol=1e-6)


def _rpc_error(method, request):
    with pytest.raises(grpc.RpcError) as e:
        method(request, timeout=30)
    return e.value.code(), e.value.details()


def _predict_request(signature="", **inputs):
    req = predict_pb2.PredictRequest()
    req.model_spec.name, req.model_spec.signature_name = MODEL, signature
    for key, value in inputs.items():
        req.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return req


def test_grpc_status_codes_and_texts_are_tf_servings(stubs):
    predict, classify, regress, metadata = (stubs[0].Predict, stubs[0].Classify, stubs[0].Regress,
                                            stubs[0].GetModelMetadata)
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    # predict_util.cc RunPredict: an unknown signature key is FAILED_PRECONDITION.
    assert _rpc_error(predict, _predict_request("nope", examples=[example(1.0)])) == (
        grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.')
    # predict_util.cc VerifyRequestInputsSize, tensorflow/cc/saved_model/util.cc GetInputValues
    assert _rpc_error(predict, _predict_request("multi", a=[[1.0, 2.0]])) == (
        invalid, "input size does not match signature: 1!=2 len({a}) != len({a,b}). Sent extra: {}. "
        "Missing but required: {b}.")
    assert _rpc_error(predict, _predict_request("multi", a=[[1.0, 2.0]], c=[1])) == (
        invalid, "input tensor alias not found in signature: c. Inputs expected to be in the set {a,b}.")
    # tensorflow/cc/saved_model/util.cc GetInputValues: values that do not make the shape.
    req = _predict_request(examples=[example(1.0), example(2.0)])
    req.inputs["examples"].tensor_shape.dim[0].size = 3
    assert _rpc_error(predict, req) == (invalid, "tensor parsing error: examples")
    req = _predict_request(examples=[example(1.0)])
    req.output_filter.append("z")
    assert _rpc_error(predict, req) == (
        invalid, "output tensor alias not found in signature: z Outputs expected to be in the set {y}.")
    req.output_filter[:] = ["y", "y"]
    assert _rpc_error(predict, req) == (invalid, "duplicate output tensor alias: y")
    # get_model_metadata_impl.cc
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = MODEL
    assert _rpc_error(metadata, req) == (invalid, "GetModelMetadataRequest must specify at least one metadata_field")
    req.metadata_field.append("graph")
    assert _rpc_error(metadata, req) == (invalid, "Metadata field graph is not supported")
    # util.cc InputToSerializedExampleTensor: empty input, after the signature is resolved.
    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name, creq.model_spec.signature_name = MODEL, "classification"
    assert _rpc_error(classify, creq) == (invalid, "Input is empty.")
    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name, rreq.model_spec.signature_name = MODEL, "nope"
    assert _rpc_error(regress, rreq) == (invalid, "No signature was found with the name: nope")
    # A request without a ModelSpec: "Missing ModelSpec" from every service.
    for method, empty in [(predict, predict_pb2.PredictRequest()), (classify, classification_pb2.ClassificationRequest()),
                          (regress, regression_pb2.RegressionRequest()),
                          (metadata, get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])),
                          (stubs[1].GetModelStatus, get_model_status_pb2.GetModelStatusRequest())]:
        assert _rpc_error(method, empty) == (invalid, "Missing ModelSpec")


def test_grpc_classify_echoes_the_requested_signature_name(stubs):
    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name, creq.model_spec.signature_name = MODEL, "classification"
    creq.input.example_list.examples.add().ParseFromString(example(1.0))
    assert stubs[0].Classify(creq, timeout=30).model_spec.signature_name == "classification"


def test_grpc_errors(stubs):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "nope"
    with pytest.raises(grpc.RpcError) as e:
        stubs[0].Predict(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    req.model_spec.name = MODEL
    req.inputs["examples"].CopyFrom(tf.make_tensor_proto([[1.0]]))
    with pytest.raises(grpc.RpcError) as e:
        stubs[0].Predict(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_metrics_count_requests(server):
    if os.environ.get("SERVING_BASE_URL"):
        pytest.skip("TF Serving exposes metrics only with a monitoring config")
    # A request of its own: the test must not depend on another having run first.
    status, _ = call(server[0], f"/v1/models/{MODEL}:predict", {"instances": [b64(1.0)]})
    assert status == 200
    with urllib.request.urlopen(server[0] + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert 'retrain_serving_requests_total{api="predict",code="OK",model="toy"}' in text
    assert 'retrain_serving_model_version_available{model="toy",version="2"} 1.0' in text
