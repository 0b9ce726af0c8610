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
