"""TF Serving's REST API (`api_rest.md`) over http.server: status, metadata, predict,
classify, regress, plus Prometheus metrics. Errors are `{"error": "..."}` with TF Serving's
HTTP status codes; a bad request never affects the server or other requests."""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2, prediction_log_pb2

from serving.errors import InvalidArgument, ResourceExhausted, ServingError
from serving.server import api, tensors
from serving.server.manager import ModelManager
from serving.server.metrics import Metrics
from serving.server.routing import HEADER, request_key

logger = logging.getLogger(__name__)

# TF Serving's routing, from its source (tensorflow/serving):
# - model_servers/http_server.cc: a path matching kHTTPRestApiHandlerPathRegex goes to the
#   REST handler, whatever the method; any other path gets the HTTP server's own 404 page
#   (libevent's evhttp_send_error). OPTIONS is a CORS preflight: 200 with an http(s)://
#   Origin header, else 400 "Origin header is missing in CORS preflight" (no body).
# - model_servers/http_rest_api_util.{h,cc}: POST paths must match kPredictionApiGegex [sic],
#   GET paths kModelStatusApiRegex (case-insensitive, whole path); the model name and label
#   are URL-decoded.
# - model_servers/http_rest_api_handler.cc ProcessRequest: anything else is
#   InvalidArgument "Malformed request: <METHOD> <path>"; a status or metadata request
#   without a model name is "Missing model name in request.".
_DISPATCH = re.compile(r"(?i)/v1/.*")
_PREDICTION = re.compile(
    r"(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)")
_MODEL_STATUS = re.compile(
    r"(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?")
_VERBS = ("classify", "regress", "predict")
# libevent's page for a path no handler takes (evhttp_send_error with no reason).
_NOT_FOUND_PAGE = (b"<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n<H1>Not Found</H1>\n"
                   b"</BODY></HTML>\n")
DEFAULT_MAX_BODY_BYTES = 16 << 20


def _parse(method: str, path: str) -> tuple[str, int | None, str | None, str | None, bool]:
    """(model, version, label, verb, metadata) of a /v1/ path, as TF Serving's ParseModelInfo
    and ProcessRequest read it.

    Raises:
      InvalidArgument: "Malformed request: ..." for a method or path the API does not have.
    """
    malformed = InvalidArgument(f"Malformed request: {method} {path}")
    if method == "POST":
        m = _PREDICTION.fullmatch(path)
        # The pattern ignores case; the verb is compared as written (so `:PREDICT` is malformed).
        if not m or m.group(4) not in _VERBS:
            raise malformed
        verb, metadata = m.group(4), False
    elif method == "GET":
        m = _MODEL_STATUS.fullmatch(path)
        if not m:
            raise malformed
        verb, metadata = None, m.group(4) == "metadata"
    else:
        raise malformed
    name = urllib.parse.unquote(m.group(1) or "")
    label = urllib.parse.unquote(m.group(3)) if m.group(3) else None
    return name, int(m.group(2)) if m.group(2) else None, label, verb, metadata


def _metadata_json(response) -> dict:
    """GetModelMetadataResponse as TF Serving's REST API prints it: the SignatureDefMap
    unpacked from its Any, so no "@type" key (model_servers/http_rest_api_util.cc ToJsonString)."""
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signature_map)
    return {"model_spec": _proto_json(response.model_spec), "metadata": {"signature_def": _proto_json(signature_map)}}


def _proto_json(message) -> dict:
    # Fields left at their default printed too, as TF Serving does (protobuf 6's name for the
    # option protobuf 4 called including_default_value_fields; the same output for proto3).
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


class RestServer(ThreadingHTTPServer):
    daemon_threads = True
    # Listen backlog: 32 clients connecting at once overflowed the default of 5 (resets).
    request_queue_size = 256

    def __init__(self, address, manager: ModelManager, metrics: Metrics, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.manager, self.metrics, self.max_body_bytes = manager, metrics, max_body_bytes
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: RestServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; with Nagle's algorithm the body then waits
    # for the client's delayed ACK (~40 ms per keep-alive request, measured).
    disable_nagle_algorithm = True

    _date: tuple[int, str] = (0, "")  # (second, its Date header), shared by all requests

    def log_message(self, fmt, *args):  # one line per request at debug level, not stderr
        logger.debug("rest %s " + fmt, self.address_string(), *args)

    def log_request(self, code="-", size="-"):
        if logger.isEnabledFor(logging.DEBUG):  # formatting it cost 2.5% of REST's time (py-spy)
            super().log_request(code, size)

    def date_time_string(self, timestamp=None):
        """The Date header, formatted once a second (email.utils took 6% of REST's time)."""
        if timestamp is not None:
            return super().date_time_string(timestamp)
        now = int(time.time())
        second, text = _Handler._date
        if second != now:
            text = super().date_time_string(now)
            _Handler._date = (now, text)
        return text

    def _send(self, status: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value, allow_nan=True).encode("utf-8"))

    def do_GET(self):
        if self.path in ("/metrics", "/monitoring/prometheus/metrics"):
            return self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4")
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_OPTIONS(self):
        self._dispatch("OPTIONS")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if not _DISPATCH.fullmatch(path):
            self._read_body_or_none()
            return self._send(404, _NOT_FOUND_PAGE, "text/html")
        if method == "OPTIONS":
            self._read_body_or_none()
            ok = bool(re.match(r"https?://", self.headers.get("Origin") or ""))
            return self._send(200 if ok else 400, b"", None)
        self._handle(method, path)

    def _read_body_or_none(self) -> None:
        """Consumes a body no handler reads, so a kept-alive connection stays in sync (one
        over the size limit is left unread, and the connection closes after the reply)."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.server.max_body_bytes:
            self.close_connection = True
        else:
            self.rfile.read(length)

    def _handle(self, method: str, path: str) -> None:
        start = time.perf_counter()
        api_name = "unknown"
        model = ""
        try:
            body = self._read_body()
            model, version, label, verb, metadata = _parse(method, path)
            if verb is not None:
                api_name = verb
                result = self._post(model, version, label, verb, body)
            else:
                api_name = "metadata" if metadata else "status"
                if not model:
                    raise InvalidArgument("Missing model name in request.")
                result = self._get(model, version, label, metadata)
            status, code = 200, "OK"
        except ServingError as e:
            status, result, code = e.http_status, {"error": str(e)}, e.code
        except Exception as e:
            logger.exception("internal error on %s %s", method, self.path)
            status, result, code = 500, {"error": f"Internal: {type(e).__name__}: {e}"}, "INTERNAL"
        try:
            self._json(status, result)
        except (BrokenPipeError, ConnectionResetError):
            # The client went away before its answer (a timeout, a load generator stopping):
            # nothing to send an error to, and not the server's fault.
            self.close_connection = True
            code = "CANCELLED"
            logger.info("client of %s %s disconnected before the reply", method, self.path)
        self.server.metrics.request_done(model, api_name, code, time.perf_counter() - start)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.server.max_body_bytes:
            self.close_connection = True  # the unread body must not be parsed as a request
            raise ResourceExhausted(
                f"request body of {length} bytes exceeds the limit of {self.server.max_body_bytes} bytes"
            )
        return self.rfile.read(length)

    def _get(self, model, version, label, metadata: bool) -> dict:
        manager = self.server.manager
        if metadata:
            return _metadata_json(api.model_metadata(manager.get(model, version, label)))
        return _proto_json(api.model_status(manager, model, version, label))

    def _post(self, model, version, label, verb: str, body: bytes) -> dict:
        """A predict/classify/regress request, checked in TF Serving's order: the body's JSON
        and signature name, then the servable (predict: then the body's inputs), then the
        examples' signature (http_rest_api_handler.cc Process*Request)."""
        request = tensors.parse_request(body)
        signature = tensors.signature_name(request)
        key = self._request_key(model, body)
        if verb == "predict":
            servable = self.server.manager.get(model, version, label, key)
            name, _ = servable.signature(signature)
            inputs, rows = tensors.predict_inputs(request, servable.input_specs(name))
            _, outputs = api.predict(servable, name, inputs)
            self._log(servable, name, verb, inputs, outputs, key, version, label)
            return {"predictions": tensors.to_row_format(outputs)} if rows else {"outputs": tensors.to_columnar_format(outputs)}
        examples = tensors.examples_from_json(request)
        servable = self.server.manager.get(model, version, label, key)
        if verb == "classify":
            name, results = api.classify(servable, signature, examples)
            self._log(servable, name, verb, examples, results, key, version, label)
            return {"results": [[[label_, score] for label_, score in r] for r in results]}
        name, values = api.regress(servable, signature, examples)
        self._log(servable, name, verb, examples, values, key, version, label)
        return {"results": values}

    def _request_key(self, model: str, body: bytes) -> str | None:
        """The request's key (X-Request-Id, else the body's SHA-256), where a canary split or a
        request log needs one (computed only then)."""
        manager = self.server.manager
        if manager.split(model) is None and manager.request_logger(model) is None:
            return None
        return request_key(self.headers.get(HEADER), body)

    def _log(self, servable, signature: str, verb: str, request_values, response_values, key: str | None,
             version: int | None = None, label: str | None = None) -> None:
        """A sampled request in TF Serving's log format: the protos TF Serving's REST handler
        builds from the JSON and logs, built by the log's writer thread from the parsed
        values this request already holds. The request's model_spec keeps the version or
        label the URL named (how it was routed: serving/server/routing.py)."""
        request_logger = self.server.manager.request_logger(servable.name)
        if request_logger is None or not request_logger.sampled():
            return
        name = servable.name
        request_logger.log(lambda: _rest_log(name, signature, verb, request_values, response_values, version, label),
                           None, signature, servable.version, key, servable.feature_policy)


def _rest_log(model: str, signature: str, verb: str, request_values, response_values, version: int | None = None,
              label: str | None = None) -> prediction_log_pb2.PredictionLog:
    """The PredictionLog of a REST request: its values in the protos of the gRPC API, the
    request's model_spec naming the URL's version or label as TF Serving's REST handler does."""
    log = prediction_log_pb2.PredictionLog()
    if verb == "predict":
        request, response = log.predict_log.request, log.predict_log.response
        for spec in (request.model_spec, response.model_spec):
            spec.name, spec.signature_name = model, signature
        _named(request.model_spec, version, label)
        for name, value in request_values.items():
            tensors.fill_proto_field(request.inputs[name], value)
        for name, value in response_values.items():
            tensors.fill_proto_field(response.outputs[name], value)
        return log
    part = log.classify_log if verb == "classify" else log.regress_log
    request, response = part.request, part.response
    for spec in (request.model_spec, response.model_spec):
        spec.name, spec.signature_name = model, signature
    _named(request.model_spec, version, label)
    for example in request_values:
        request.input.example_list.examples.add().ParseFromString(example)
    if verb == "classify":
        for pairs in response_values:
            row = response.result.classifications.add()
            for label_, score in pairs:
                row.classes.add(label=label_, score=score)
    else:
        for value in response_values:
            response.result.regressions.add(value=value)
    return log


def _named(model_spec, version: int | None, label: str | None) -> None:
    if version is not None:
        model_spec.version.value = version
    elif label:
        model_spec.version_label = label
