"""TF Serving's gRPC API: PredictionService (Predict, Classify, Regress, GetModelMetadata)
and ModelService.GetModelStatus, with the `tensorflow-serving-api` protos and stubs."""

from __future__ import annotations

import time
from concurrent import futures

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import api, tensors
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


def _examples(input_proto) -> list[bytes]:
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in input_proto.example_list.examples]
    if kind == "example_list_with_context":
        ctx = input_proto.example_list_with_context.context
        out = []
        for e in input_proto.example_list_with_context.examples:
            merged = tf.train.Example()
            merged.CopyFrom(ctx)
            merged.MergeFrom(e)
            out.append(merged.SerializeToString())
        return out
    return []


class _Servicer(prediction_service_pb2_grpc.PredictionServiceServicer, model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, manager: ModelManager, metrics: Metrics):
        self._manager, self._metrics = manager, metrics

    def _call(self, api_name: str, model: str, context, fn):
        start = time.perf_counter()
        code = "OK"
        try:
            return fn()
        except ServingError as e:
            code = e.code
            context.abort(_GRPC_CODES.get(e.code, grpc.StatusCode.INTERNAL), str(e))
        except Exception as e:  # noqa: BLE001  reported to the client; the server keeps serving
            code = "INTERNAL"
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        finally:
            self._metrics.requests.labels(model, f"grpc_{api_name}", code).inc()
            self._metrics.latency.labels(model, f"grpc_{api_name}").observe(time.perf_counter() - start)

    def Predict(self, request, context):
        def run():
            servable = self._manager.get(*_spec(request))
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            signature, outputs = api.predict(servable, request.model_spec.signature_name or None, inputs,
                                             tuple(request.output_filter))
            response = predict_pb2.PredictResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            for key, value in outputs.items():
                response.outputs[key].CopyFrom(tensors.as_proto_field(value))
            return response

        return self._call("predict", request.model_spec.name, context, run)

    def Classify(self, request, context):
        def run():
            servable = self._manager.get(*_spec(request))
            _, results = api.classify(servable, request.model_spec.signature_name or None, _examples(request.input))
            response = classification_pb2.ClassificationResponse()
            # MakeModelSpec with the request's signature name, as sent (classifier.cc RunClassify).
            response.model_spec.name = servable.name
            response.model_spec.signature_name = request.model_spec.signature_name
            response.model_spec.version.value = servable.version
            for pairs in results:
                row = response.result.classifications.add()
                for label, score in pairs:
                    row.classes.add(label=label, score=score)
            return response

        return self._call("classify", request.model_spec.name, context, run)

    def Regress(self, request, context):
        def run():
            servable = self._manager.get(*_spec(request))
            _, values = api.regress(servable, request.model_spec.signature_name or None, _examples(request.input))
            response = regression_pb2.RegressionResponse()
            # MakeModelSpec with the request's signature name, as sent (classifier.cc RunClassify).
            response.model_spec.name = servable.name
            response.model_spec.signature_name = request.model_spec.signature_name
            response.model_spec.version.value = servable.version
            for v in values:
                response.result.regressions.add(value=v)
            return response

        return self._call("regress", request.model_spec.name, context, run)

    def GetModelMetadata(self, request, context):
        def run():
            spec = _spec(request)
            # get_model_metadata_impl.cc ValidateGetModelMetadataRequest (REST sets the field itself).
            if not request.metadata_field:
                raise InvalidArgument("GetModelMetadataRequest must specify at least one metadata_field")
            for field in request.metadata_field:
                if field != "signature_def":
                    raise InvalidArgument(f"Metadata field {field} is not supported")
            return api.model_metadata(self._manager.get(*spec))

        return self._call("metadata", request.model_spec.name, context, run)

    def GetModelStatus(self, request, context):
        return self._call(
            "status", request.model_spec.name, context,
            lambda: api.model_status(self._manager, *_spec(request)),
        )


def make_server(manager: ModelManager, metrics: Metrics, address: str, max_message_bytes: int, workers: int = 32):
    """A started-later gRPC server bound to `address` ("host:port"); returns (server, port)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        options=[("grpc.max_receive_message_length", max_message_bytes),
                 ("grpc.max_send_message_length", max_message_bytes)],
    )
    servicer = _Servicer(manager, metrics)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port(address)
    return server, port
