"""TF Serving's REST API (`api_rest.md`) over http.server: status, metadata, predict,
classify, regress, plus Prometheus metrics. Errors are `{"error": "..."}` with TF Serving's
HTTP status codes; a bad request never affects the server or other requests."""

from __future__ import annotations

import json
import logging
import re
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format

from serving import api, tensors
from serving.errors import InvalidArgument, NotFound, ResourceExhausted, ServingError
from serving.manager import ModelManager
from serving.metrics import Metrics

logger = logging.getLogger(__name__)

# /v1/models/<name>[/versions/<v>|/labels/<l>][/metadata | :predict|:classify|:regress]
_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>predict|classify|regress))?$"
)
DEFAULT_MAX_BODY_BYTES = 16 << 20


def _proto_json(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True, including_default_value_fields=True)


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

    def log_message(self, fmt, *args):  # one line per request at debug level, not stderr
        logger.debug("rest %s " + fmt, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type="application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value, allow_nan=True).encode("utf-8"))

    def do_GET(self):
        if self.path in ("/metrics", "/monitoring/prometheus/metrics"):
            return self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4")
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def _handle(self, method: str) -> None:
        start = time.perf_counter()
        match = _PATH.match(self.path.split("?", 1)[0])
        api_name = "unknown"
        model = match.group("name") if match else ""
        try:
            body = self._read_body() if method == "POST" else b""
            if not match:
                raise NotFound(f"Malformed request: {method} {self.path}")
            version = int(match.group("version")) if match.group("version") else None
            label = match.group("label")
            verb = match.group("verb")
            if method == "GET" and verb is None:
                api_name = "metadata" if match.group("metadata") else "status"
                result = self._get(model, version, label, bool(match.group("metadata")))
            elif method == "POST" and verb:
                api_name = verb
                result = self._post(model, version, label, verb, body)
            else:
                raise NotFound(f"Malformed request: {method} {self.path}")
            self._json(200, result)
            code = "OK"
        except ServingError as e:
            self._json(e.http_status, {"error": str(e)})
            code = e.code
        except Exception as e:
            logger.exception("internal error on %s %s", method, self.path)
            self._json(500, {"error": f"Internal: {type(e).__name__}: {e}"})
            code = "INTERNAL"
        self.server.metrics.requests.labels(model, api_name, code).inc()
        self.server.metrics.latency.labels(model, api_name).observe(time.perf_counter() - start)

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
            return _proto_json(api.model_metadata(manager.get(model, version, label)))
        return _proto_json(api.model_status(manager, model, version, label))

    def _post(self, model, version, label, verb: str, body: bytes) -> dict:
        try:
            request = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidArgument(f"JSON Parse error: {e}") from e
        if not isinstance(request, dict):
            raise InvalidArgument("the request body must be a JSON object")
        servable = self.server.manager.get(model, version, label)
        signature = request.get("signature_name")
        if verb == "predict":
            has_rows, has_cols = "instances" in request, "inputs" in request
            if has_rows == has_cols:
                raise InvalidArgument("Missing 'inputs' or 'instances' key" if not has_rows
                                      else "Not allowed to specify both 'inputs' and 'instances'")
            name, _ = servable.signature(signature)
            specs = servable.input_specs(name)
            if has_rows:
                inputs = tensors.from_row_format(request["instances"], specs)
                _, outputs = api.predict(servable, name, inputs)
                return {"predictions": tensors.to_row_format(outputs)}
            inputs = tensors.from_columnar_format(request["inputs"], specs)
            _, outputs = api.predict(servable, name, inputs)
            return {"outputs": tensors.to_columnar_format(outputs)}
        examples = tensors.examples_from_json(request.get("examples"), request.get("context"))
        if verb == "classify":
            _, results = api.classify(servable, signature, examples)
            return {"results": [[[label_, score] for label_, score in r] for r in results]}
        _, values = api.regress(servable, signature, examples)
        return {"results": values}
