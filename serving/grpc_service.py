"""TF Serving's gRPC API: PredictionService (Predict, Classify, Regress, GetModelMetadata)
and ModelService.GetModelStatus, with the `tensorflow-serving-api` protos and stubs."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures

import grpc
import uvloop
from tensorflow_serving.apis import (
    classification_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import api, request_log, tensors
from serving.errors import InvalidArgument, ServingError
from serving.manager import ModelManager
from serving.metrics import Metrics

_GRPC_CODES = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}


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


class _Servicer(prediction_service_pb2_grpc.PredictionServiceServicer, model_service_pb2_grpc.ModelServiceServicer):
    """asyncio handlers: Predict awaits the batcher's Future without holding a thread; the
    others run in a small thread pool (they call the model synchronously)."""

    def __init__(self, manager: ModelManager, metrics: Metrics, executor: futures.ThreadPoolExecutor):
        self._manager, self._metrics, self._executor = manager, metrics, executor

    async def _call(self, api_name: str, model: str, context, fn):
        start = time.perf_counter()
        code = "OK"
        try:
            return await fn()
        except asyncio.CancelledError:  # the client's deadline passed, or it went away
            code = "CANCELLED"
            raise
        except ServingError as e:
            code = e.code
            await context.abort(_GRPC_CODES.get(e.code, grpc.StatusCode.INTERNAL), str(e))
        except Exception as e:  # noqa: BLE001  reported to the client; the server keeps serving
            if isinstance(e, grpc.aio.AbortError):
                raise
            code = "INTERNAL"
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        finally:
            self._metrics.request_done(model, f"grpc_{api_name}", code, time.perf_counter() - start)

    async def _in_thread(self, fn):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _log(self, servable, signature: str, request, response, make_log) -> None:
        request_logger = self._manager.request_logger(servable.name)
        if request_logger is not None and request_logger.sampled():
            request_logger.log(make_log(request, response), request.model_spec, signature, servable.version)

    async def Predict(self, request, context):
        async def run():
            servable = self._manager.get(*_spec(request))
            inputs = {k: tensors.from_proto(k, v) for k, v in request.inputs.items()}
            signature, future = api.predict_future(servable, request.model_spec.signature_name or None, inputs,
                                                   tuple(request.output_filter))
            outputs = await asyncio.wrap_future(future)
            response = predict_pb2.PredictResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            for key, value in outputs.items():
                tensors.fill_proto_field(response.outputs[key], value)
            self._log(servable, signature, request, response, request_log.predict_log)
            return response

        return await self._call("predict", request.model_spec.name, context, run)

    async def Classify(self, request, context):
        def run():
            servable = self._manager.get(*_spec(request))
            signature, results = api.classify(servable, request.model_spec.signature_name or None, request_log.input_examples(request.input))
            response = classification_pb2.ClassificationResponse()
            # MakeModelSpec with the request's signature name, as sent (classifier.cc RunClassify).
            response.model_spec.name = servable.name
            response.model_spec.signature_name = request.model_spec.signature_name
            response.model_spec.version.value = servable.version
            for pairs in results:
                row = response.result.classifications.add()
                for label, score in pairs:
                    row.classes.add(label=label, score=score)
            self._log(servable, signature, request, response, request_log.classify_log)
            return response

        return await self._call("classify", request.model_spec.name, context, lambda: self._in_thread(run))

    async def Regress(self, request, context):
        def run():
            servable = self._manager.get(*_spec(request))
            signature, values = api.regress(servable, request.model_spec.signature_name or None, request_log.input_examples(request.input))
            response = regression_pb2.RegressionResponse()
            response.model_spec.name = servable.name
            response.model_spec.signature_name = request.model_spec.signature_name
            response.model_spec.version.value = servable.version
            for v in values:
                response.result.regressions.add(value=v)
            self._log(servable, signature, request, response, request_log.regress_log)
            return response

        return await self._call("regress", request.model_spec.name, context, lambda: self._in_thread(run))

    async def GetModelMetadata(self, request, context):
        def run():
            spec = _spec(request)
            # get_model_metadata_impl.cc ValidateGetModelMetadataRequest (REST sets the field itself).
            if not request.metadata_field:
                raise InvalidArgument("GetModelMetadataRequest must specify at least one metadata_field")
            for field in request.metadata_field:
                if field != "signature_def":
                    raise InvalidArgument(f"Metadata field {field} is not supported")
            return api.model_metadata(self._manager.get(*spec))

        return await self._call("metadata", request.model_spec.name, context, lambda: self._in_thread(run))

    async def GetModelStatus(self, request, context):
        return await self._call(
            "status", request.model_spec.name, context,
            lambda: self._in_thread(lambda: api.model_status(self._manager, *_spec(request))),
        )


class GrpcServer:
    """grpc.aio's server on its own (uvloop) event loop thread, driven from synchronous code."""

    def __init__(self, manager: ModelManager, metrics: Metrics, address: str, max_message_bytes: int, workers: int):
        self._executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc")
        # uvloop: grpc.aio's per-call callbacks and the batcher's thread-safe wake-ups run
        # in C (the standard loop writes to its self-pipe in Python for each answer).
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-loop", daemon=True)
        self._thread.start()
        options = [("grpc.max_receive_message_length", max_message_bytes),
                   ("grpc.max_send_message_length", max_message_bytes)]
        self.port = self._run(self._create(_Servicer(manager, metrics, self._executor), address, options))

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _create(self, servicer, address: str, options) -> int:
        self._server = grpc.aio.server(options=options)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, self._server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(servicer, self._server)
        return self._server.add_insecure_port(address)

    def start(self) -> None:
        self._run(self._server.start())

    def stop(self, grace: float) -> None:
        self._run(self._server.stop(grace))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._executor.shutdown(wait=False)


def make_server(manager: ModelManager, metrics: Metrics, address: str, max_message_bytes: int, workers: int = 8):
    """A started-later gRPC server bound to `address` ("host:port"); returns (server, port)."""
    server = GrpcServer(manager, metrics, address, max_message_bytes, workers)
    return server, server.port
