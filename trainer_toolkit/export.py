"""Export helpers: TF Serving method names on SavedModel signatures.

TF2's `tf.saved_model.save` marks every signature `tensorflow/serving/predict`. TF
Serving's `:classify` / `:regress` APIs (REST and gRPC) accept only signatures whose
method name says so, so a model exporting classification or regression signatures gets
them renamed here, and the SavedModel's fingerprint is rewritten to match.
"""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.saved_model import fingerprinting_utils  # no public writer in TF 2.16

from core import files

# TensorFlow's own names for TF Serving's methods.
CLASSIFY = tf.saved_model.CLASSIFY_METHOD_NAME
REGRESS = tf.saved_model.REGRESS_METHOD_NAME


def set_signature_methods(saved_model_dir: str, methods: dict[str, str]) -> None:
    """Sets `method_name` of the named signatures.

    Raises:
      KeyError: a named signature does not exist.
    """
    if not methods:
        return
    path = os.path.join(saved_model_dir, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    signatures = proto.meta_graphs[0].signature_def
    for name, method in methods.items():
        if name not in signatures:
            raise KeyError(f"signature {name!r} not in {sorted(signatures)}")
        signatures[name].method_name = method
    files.write_bytes(path, proto.SerializeToString())
    fingerprinting_utils.write_fingerprint(saved_model_dir)


def float32_twin(model: tf.keras.Model) -> tf.keras.Model:
    """The model with float32 compute: itself when it already computes in float32, else a
    clone built under the float32 policy with the same weights.

    A model trained under mixed precision (mixed_bfloat16 on a bf16-capable CPU,
    mixed_float16 on a GPU) computes in 16 bits; a signature traced from it holds bf16/fp16
    ops, which TFLite cannot convert ("invalid TFLite type: tensor<...xbf16>"). Mixed
    policies keep the variables in float32, so the clone's weights are the trained ones.
    The twin is tracked by `model` (`model.float32_twin`), so saving `model` saves it.
    """
    if all(layer.compute_dtype in (None, "float32") for layer in model.layers):
        return model

    def float32_layer(layer):
        # A layer's config carries its policy (e.g. mixed_bfloat16); the twin's says float32.
        return layer.__class__.from_config({**layer.get_config(), "dtype": "float32"})

    # The functional graph alone: layers tracked on the model as attributes (the Transform
    # layer the serving signatures use) are not part of it and have no config to clone.
    graph = tf.keras.Model(model.inputs, model.outputs)
    twin = tf.keras.models.clone_model(graph, clone_function=float32_layer)
    twin.set_weights(model.get_weights())
    # Tracked by the model, so a SavedModel of it holds the twin's (float32) variables too:
    # a signature traced from the twin captures them.
    holder = tf.Module(name="float32_twin")
    holder.model = twin
    model.float32_twin = holder
    return twin
