"""TF Serving's gRPC API: PredictionService (Predict, Classify, Regress, GetModelMetadata)
and ModelService.GetModelStatus.

Two halves in two kinds of process. Front-end processes (`grpc_front.py`, started and
watched by `GrpcServer` here) own the port and speak gRPC. This, the model process, gets
each call's request bytes from them (`frames.py`), answers it with the
`tensorflow-serving-api` protos and sends back the response bytes, or a status code and its
details. gRPC's own per-call cost then runs on an interpreter of its own (grpc_front.py says
why), and a front end that dies is replaced while the model keeps serving.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

from google.protobuf.message import DecodeError
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
    regression_pb2,
)

from core import project
from serving.errors import InvalidArgument, ServingError, Unavailable
from serving.server import api, batching, frames, request_log, routing, tensors
from serving.server.manager import ModelManager
from serving.server.metrics import Metrics

logger = logging.getLogger(__name__)

# The folder holding the `serving` and `core` packages, for the front ends' sys.path.


def _spec(request):
    """(name, version, label) of a request's ModelSpec.

    Raises:
      InvalidArgument: "Missing ModelSpec" (predict_impl.cc, classification_service.cc,
        regression_service.cc, get_model_metadata_impl.cc, get_model_status_impl.cc).
    """
    if not request.HasField("model_spec"):
        raise InvalidArgument("Missing ModelSpec")
    model_spec = request.model_spec
    version = model_spec.version.value if model_spec.HasField("version") else None
    label = model_spec.version_label or None
    return model_spec.name, version, label


class _Key:
    """A call's request key, worked out only if a split or a request log asks for it: the
    client's x-request-id, else the SHA-256 of the serialized request (serving/server/routing.py)."""

    __slots__ = ("_given", "_body", "_value")

    def __init__(self, given: str | None, body):
        self._given, self._body, self._value = given, body, None

    def __call__(self) -> str:
        if self._value is None:
            self._value = routing.request_key(self._given, bytes(self._body))
            self._body = None
        return self._value


class GrpcApi:
    """TF Serving's gRPC methods on serialized messages: each handler parses its request and
    returns a Future of the serialized response. Predict's is finished by the batcher's
    thread; the other methods run on a small thread pool (they call the model synchronously)."""

    def __init__(self, manager: ModelManager, workers: int = 8):
        self._manager = manager
        self._executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc")
        table = {
            "Predict": ("predict", predict_pb2.PredictRequest, self._predict),
            "Classify": ("classify", classification_pb2.ClassificationRequest, self._classify),
            "Regress": ("regress", regression_pb2.RegressionRequest, self._regress),
            "GetModelMetadata": ("metadata", get_model_metadata_pb2.GetModelMetadataRequest, self._metadata),
            "GetModelStatus": ("status", get_model_status_pb2.GetModelStatusRequest, self._status),
        }
        # By frames.METHODS index; None: a TF Serving method this server does not implement.
        self.methods = [table.get(path.rsplit("/", 1)[1]) for path in frames.METHODS]

    def close(self) -> None:
        self._executor.shutdown(wait=False)

    def _log(self, servable, signature: str, request, response, make_log, key: _Key) -> None:
        request_logger = self._manager.request_logger(servable.name)
        if request_logger is not None and request_logger.sampled():
            # Built by the log's writer thread: neither message changes once answered.
            request_logger.log(lambda: make_log(request, response), request.model_spec, signature, servable.version,
                               key(), servable.feature_policy)

    def _servable(self, request, key: _Key):
        name, version, label = _spec(request)
        routed = version is None and label is None and self._manager.split(name) is not None
        return self._manager.get(name, version, label, key() if routed else None)

    def _predict(self, request, key: _Key) -> futures.Future:
        servable = self._servable(request, key)
        inputs = {k: tensors.from_proto(k, v) for k, v in request.inputs.items()}
        signature, outputs = api.predict_future(servable, request.model_spec.signature_name or None, inputs,
                                                tuple(request.output_filter), self._executor)

        def respond(values) -> bytes:
            response = predict_pb2.PredictResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            for name, value in values.items():
                tensors.fill_proto_field(response.outputs[name], value)
            self._log(servable, signature, request, response, request_log.predict_log, key)
            return response.SerializeToString()

        return batching.derived(outputs, respond)  # cancelling it drops a request still queued

    def _classify(self, request, key: _Key) -> futures.Future:
        def fill(result, rows) -> None:
            for pairs in rows:
                row = result.classifications.add()
                for label, score in pairs:
                    row.classes.add(label=label, score=score)

        return self._on_examples(request, key, api.classify, classification_pb2.ClassificationResponse, fill,
                                 request_log.classify_log)

    def _regress(self, request, key: _Key) -> futures.Future:
        def fill(result, values) -> None:
            for v in values:
                result.regressions.add(value=v)

        return self._on_examples(request, key, api.regress, regression_pb2.RegressionResponse, fill,
                                 request_log.regress_log)

    def _on_examples(self, request, key: _Key, infer, response_type, fill, log_kind) -> futures.Future:
        """Classify and Regress: the request's examples through `infer`, answered as
        `response_type` with the request's model spec, its result filled by `fill`."""

        def run() -> bytes:
            servable = self._servable(request, key)
            signature, results = infer(servable, request.model_spec.signature_name or None,
                                       request_log.input_examples(request.input))
            response = response_type()
            # MakeModelSpec with the request's signature name, as sent (classifier.cc RunClassify).
            response.model_spec.name = servable.name
            response.model_spec.signature_name = request.model_spec.signature_name
            response.model_spec.version.value = servable.version
            fill(response.result, results)
            self._log(servable, signature, request, response, log_kind, key)
            return response.SerializeToString()

        return self._executor.submit(run)

    def _metadata(self, request, key: _Key) -> futures.Future:
        def run() -> bytes:
            spec = _spec(request)
            # get_model_metadata_impl.cc ValidateGetModelMetadataRequest (REST sets the field itself).
            if not request.metadata_field:
                raise InvalidArgument("GetModelMetadataRequest must specify at least one metadata_field")
            for field in request.metadata_field:
                if field != "signature_def":
                    raise InvalidArgument(f"Metadata field {field} is not supported")
            return api.model_metadata(self._manager.get(*spec)).SerializeToString()

        return self._executor.submit(run)

    def _status(self, request, key: _Key) -> futures.Future:
        return self._executor.submit(lambda: api.model_status(self._manager, *_spec(request)).SerializeToString())


class _Connection:
    """One front end's calls: read on this connection's thread, answered from whichever
    thread finishes them (the batcher's, the pool's). Each call is answered or cancelled
    exactly once: whoever takes it out of `_calls` first."""

    def __init__(self, sock: socket.socket, grpc_api: GrpcApi, metrics: Metrics):
        self._sock, self._api, self._metrics = sock, grpc_api, metrics
        self._send_lock = threading.Lock()
        self._calls: dict[int, tuple] = {}  # call id -> (API name, model, start, Future)

    def stop(self, grace: float) -> None:
        self._send(frames.pack(frames.STOP, 0, repr(grace).encode()))

    def _send(self, frame: bytes) -> None:
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError:
                pass  # the front end went away, and its calls with it

    def close(self) -> None:
        self._sock.close()

    def serve(self, reader: frames.Reader, first: list) -> None:
        """Answers calls until the front end closes the connection."""
        received = first
        while True:
            for kind, call_id, payload in received:
                if kind == frames.CALL:
                    self._call(call_id, payload)
                elif kind == frames.KEYED:
                    self._call(call_id, payload, keyed=True)
                elif kind == frames.CANCEL:
                    self._cancel(call_id)
            try:
                data = self._sock.recv(1 << 18)
            except OSError:
                data = b""
            if not data:
                break
            received = reader.feed(data)
        for call_id in list(self._calls):  # the front end died: its clients saw their calls fail
            self._cancel(call_id)

    def _call(self, call_id: int, payload: bytes, keyed: bool = False) -> None:
        start = time.perf_counter()
        given = None
        if keyed and len(payload) >= 1 + frames.KEY_LENGTH.size:
            (length,) = frames.KEY_LENGTH.unpack_from(payload, 1)
            given = payload[3:3 + length].decode("utf-8", "replace")
            payload = payload[:1] + payload[3 + length:]
        method = self._api.methods[payload[0]] if payload and payload[0] < len(self._api.methods) else None
        if method is None:  # what grpc's generated servicer base answers
            self._send(frames.pack(frames.ERROR, call_id, frames.error_payload("UNIMPLEMENTED", "Method not implemented!")))
            return
        name, request_type, handler = method
        body = memoryview(payload)[1:]
        try:
            request = request_type.FromString(body)
        except DecodeError:  # grpc's own text for a request its deserializer refuses
            self._send(frames.pack(frames.ERROR, call_id, frames.error_payload("INTERNAL", "Exception deserializing request!")))
            return
        call = (name, request.model_spec.name, start)
        try:
            future = handler(request, _Key(given, body))
        except Exception as e:  # noqa: BLE001  reported to the client; the server keeps serving
            self._answer(call_id, call, None, e)
            return
        self._calls[call_id] = (*call, future)
        future.add_done_callback(lambda done: self._done(call_id, done))

    def _done(self, call_id: int, future: futures.Future) -> None:
        call = self._calls.pop(call_id, None)
        if call is None or future.cancelled():
            return  # cancelled: counted when the front end said so
        error = future.exception()
        self._answer(call_id, call, None if error else future.result(), error)

    def _answer(self, call_id: int, call: tuple, response: bytes | None, error: BaseException | None) -> None:
        name, model, start = call[:3]
        if error is None:
            code, frame = "OK", frames.pack(frames.REPLY, call_id, response)
        else:
            code = error.code if isinstance(error, ServingError) else "INTERNAL"
            details = str(error) if isinstance(error, ServingError) else f"{type(error).__name__}: {error}"
            frame = frames.pack(frames.ERROR, call_id, frames.error_payload(code, details))
        self._send(frame)
        self._metrics.request_done(model, f"grpc_{name}", code, time.perf_counter() - start)

    def _cancel(self, call_id: int) -> None:
        call = self._calls.pop(call_id, None)
        if call is not None:
            name, model, start, future = call
            future.cancel()  # still queued: dropped from its batch
            self._metrics.request_done(model, f"grpc_{name}", "CANCELLED", time.perf_counter() - start)


class GrpcServer:
    """The gRPC port: `processes` front ends (grpc_front.py) listen on it (sharing it with
    SO_REUSEPORT when more than one) and pass their calls to this process over a Unix socket
    in a private folder. A front end that dies is replaced on the same port."""

    def __init__(self, manager: ModelManager, metrics: Metrics, host: str, port: int, max_message_bytes: int,
                 processes: int = 1, workers: int = 8, start_seconds: float = 60.0):
        if processes < 1:
            raise InvalidArgument(f"gRPC front-end processes must be 1 or more; was {processes}")
        self._api, self._metrics = GrpcApi(manager, workers), metrics
        self._host, self._max_message_bytes, self._processes = host, max_message_bytes, processes
        self._start_seconds = start_seconds
        self.port = port  # the requested one until start() knows the real one
        self._folder = tempfile.mkdtemp(prefix="retrain-grpc-")  # mode 0700: only this user connects
        self._socket_path = os.path.join(self._folder, "model.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._socket_path)
        self._listener.listen(16)
        self._lock = threading.Lock()  # one launch at a time (each accepts the next connection)
        self._fronts: dict[subprocess.Popen, _Connection] = {}
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        """The front ends' process ids."""
        with self._lock:
            return sorted(p.pid for p in self._fronts)

    def start(self) -> None:
        """Starts the front ends; returns once all listen.

        Raises:
          Unavailable: a front end could not listen (the port is taken) or did not start.
        """
        try:
            self.port = self._launch(self.port)  # the first picks the port when asked for 0
            for _ in range(self._processes - 1):
                self._launch(self.port)
        except BaseException:
            self.stop(0)
            raise

    def _launch(self, port: int) -> int:
        """Starts one front end, waits until it listens, and serves its calls; returns its port."""
        command = [sys.executable, "-m", "serving.server.grpc_front", "--core", self._socket_path, "--host", self._host,
                   "--port", str(port), "--max-message-bytes", str(self._max_message_bytes)]
        if self._processes > 1:
            command.append("--reuse-port")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (project.ROOT, os.environ.get("PYTHONPATH")) if p))
        with self._lock:
            if self._stopping:
                raise Unavailable("the server is stopping")
            process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
            try:
                conn, port, reader, first = self._hello(process)
            except BaseException:
                _end(process, 0)
                raise
            connection = self._fronts[process] = _Connection(conn, self._api, self._metrics)
        threading.Thread(target=self._serve, args=(process, connection, reader, first), daemon=True,
                         name=f"grpc-front-{process.pid}").start()
        return port

    def _hello(self, process: subprocess.Popen):
        """The front end's connection once it listens: (socket, port, reader, frames after HELLO)."""
        deadline = time.monotonic() + self._start_seconds
        self._listener.settimeout(0.1)
        while True:
            if process.poll() is not None:
                raise Unavailable(f"the gRPC front end exited with code {process.returncode} before listening "
                                  "(its error is in the log above)")
            if time.monotonic() > deadline:
                raise Unavailable(f"the gRPC front end did not listen within {self._start_seconds:.0f} s")
            try:
                conn, _ = self._listener.accept()
                break
            except socket.timeout:
                continue
        conn.settimeout(max(deadline - time.monotonic(), 1.0))
        reader, received = frames.Reader(), []
        try:
            while not received:
                data = conn.recv(1 << 16)
                if not data:
                    raise Unavailable(f"the gRPC front end exited with code {process.wait()} before listening "
                                      "(its error is in the log above)")
                received = reader.feed(data)
        except BaseException:
            conn.close()
            raise
        kind, _, payload = received[0]
        if kind != frames.HELLO:
            conn.close()
            raise Unavailable(frames.parse_error(payload)[1] if kind == frames.ERROR else f"unexpected frame {kind}")
        conn.settimeout(None)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        return conn, int(payload.split()[0]), reader, received[1:]

    def _serve(self, process: subprocess.Popen, connection: _Connection, reader: frames.Reader, first: list) -> None:
        try:
            connection.serve(reader, first)
        except Exception:  # noqa: BLE001  a bug here: the front end is dropped and replaced, not left hanging
            logger.exception("gRPC front end %d: its connection failed", process.pid)
        connection.close()  # the front end sees it close, and exits
        if self._stopping:
            return
        code = _end(process, 2.0)
        with self._lock:
            del self._fronts[process]
        logger.error("gRPC front end %d exited (code %s); starting another on port %d", process.pid, code, self.port)
        delay = 0.5
        while not self._stopping:
            try:
                self._launch(self.port)
                return
            except Unavailable as e:
                if self._stopping:
                    return
                logger.error("gRPC front end did not start: %s; trying again in %.1f s", e, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def stop(self, grace: float) -> None:
        """Front ends first (their calls in flight get `grace` seconds, answered from here)."""
        self._stopping = True
        with self._lock:  # after a launch under way
            fronts = dict(self._fronts)
        for connection in fronts.values():
            connection.stop(grace)
        for process, connection in fronts.items():
            _end(process, grace + 5.0)
            connection.close()
        self._listener.close()
        shutil.rmtree(self._folder, ignore_errors=True)
        self._api.close()


def _end(process: subprocess.Popen, wait: float) -> int:
    """The process's exit code, killing it if it has not exited within `wait` seconds."""
    try:
        return process.wait(wait)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
