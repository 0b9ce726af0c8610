"""The serving API, transport-neutral: status, metadata, predict, classify, regress.

REST (`rest.py`) and gRPC (`grpc_service.py`) both call these, so both answer the same
way; the protos are TF Serving's own (`tensorflow-serving-api`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
)

from serving.errors import FailedPrecondition, InvalidArgument
from serving.server.manager import DEFAULT_SIGNATURE, ModelManager, Servable


def model_status(manager: ModelManager, name: str, version=None, label=None) -> get_model_status_pb2.GetModelStatusResponse:
    response = get_model_status_pb2.GetModelStatusResponse()
    for v, status in manager.status(name, version, label):
        entry = response.model_version_status.add()
        entry.version = v
        entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(status.state)
        entry.status.error_code = _error_code(status.error_code)
        entry.status.error_message = status.error_message
    return response


def _error_code(name: str) -> int:
    return error_codes_pb2.Code.Value(name)


def model_metadata(servable: Servable) -> get_model_metadata_pb2.GetModelMetadataResponse:
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = servable.name
    response.model_spec.version.value = servable.version
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    for key, sig in servable.signature_defs.items():
        signature_map.signature_def[key].CopyFrom(sig)
    response.metadata["signature_def"].Pack(signature_map)
    return response


def predict(servable: Servable, signature: str | None, inputs: dict[str, np.ndarray], output_filter=()):
    """Runs a predict signature, checked as TF Serving's RunPredict checks a PredictRequest
    (servables/tensorflow/predict_util.cc; REST has resolved the signature before).

    Raises:
      FailedPrecondition: no such signature.
      InvalidArgument: inputs the signature does not take (TF Serving's texts), a shape it rejects.
    """
    name, future = predict_future(servable, signature, inputs, output_filter)
    return name, future.result()


def predict_future(servable: Servable, signature: str | None, inputs: dict[str, np.ndarray], output_filter=(),
                   executor=None):
    """`predict` with the outputs as a Future: (signature name, Future of the outputs); a
    request the batcher cannot batch runs on `executor` (without one, in this thread).

    Raises:
      FailedPrecondition, InvalidArgument: as `predict`, before anything runs.
    """
    name = signature or DEFAULT_SIGNATURE
    if name not in servable.signature_defs or name.startswith("__"):
        raise FailedPrecondition(f"Serving signature key \"{name}\" not found.")
    specs = servable.input_specs(name)
    if len(inputs) != len(specs):
        extra, missing = sorted(set(inputs) - set(specs)), sorted(set(specs) - set(inputs))
        raise InvalidArgument(
            f"input size does not match signature: {len(inputs)}!={len(specs)} len({{{','.join(sorted(inputs))}}}) "
            f"!= len({{{','.join(sorted(specs))}}}). Sent extra: {{{','.join(extra)}}}. "
            f"Missing but required: {{{','.join(missing)}}}."
        )
    for key in sorted(inputs):
        if key not in specs:
            raise InvalidArgument(f"input tensor alias not found in signature: {key}. "
                                  f"Inputs expected to be in the set {{{','.join(sorted(specs))}}}.")
    for key, array in inputs.items():
        if not servable.accepts_shape(name, key, array.shape):
            raise InvalidArgument(
                f"input '{key}': shape {list(array.shape)} does not match the signature's {specs[key].shape.as_list()}"
            )
    return name, servable.submit(name, inputs, output_filter, executor)


def _require_examples(examples: list[bytes]) -> None:
    """servables/tensorflow/util.cc InputToSerializedExampleTensor."""
    if not examples:
        raise InvalidArgument("Input is empty.")


def classify(servable: Servable, signature: str | None, examples: list[bytes]) -> tuple[str, list[list[tuple[str, float]]]]:
    """Per example, (class label, score) pairs, as ClassificationResult has them."""
    name, key = servable.examples_signature(signature, tf.saved_model.CLASSIFY_METHOD_NAME)
    _require_examples(examples)
    out = servable.run(name, {key: np.array(examples, dtype=object)})
    scores = out.get("scores")
    classes = out.get("classes")
    rows = len(examples)
    results = []
    for i in range(rows):
        labels = [c.decode("utf-8") for c in classes[i]] if classes is not None else [""] * len(scores[i])
        values = [float(s) for s in scores[i]] if scores is not None else [0.0] * len(labels)
        results.append(list(zip(labels, values)))
    return name, results


def regress(servable: Servable, signature: str | None, examples: list[bytes]) -> tuple[str, list[float]]:
    name, key = servable.examples_signature(signature, tf.saved_model.REGRESS_METHOD_NAME)
    _require_examples(examples)
    out = servable.run(name, {key: np.array(examples, dtype=object)})
    return name, [float(v) for v in np.asarray(out["outputs"]).reshape(len(examples), -1)[:, 0]]
