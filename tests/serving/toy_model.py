"""A small SavedModel with every kind of signature the serving API handles.

Version k answers y = k * x, so a client can tell which version answered.

  python -m tests.serving.toy_model OUT_BASE_PATH [VERSION ...]   (to serve it with real TF Serving)
"""

import base64
import json
import os
import sys

# isort: off
from core import keras_env  # noqa: F401  (before TensorFlow)

import tensorflow as tf

from trainer_toolkit import export
# isort: on

FEATURES = {"x": tf.io.FixedLenFeature([1], tf.float32)}


def example(x: float) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x]))})).SerializeToString()


def rest_body(x: float) -> bytes:
    """A REST :predict body of one example, row format with b64."""
    return json.dumps({"instances": [{"b64": base64.b64encode(example(x)).decode()}]}).encode()


def predict_request(x: float, output_filter: tuple[str, ...] = ()):
    """A gRPC PredictRequest of one example for model `toy`."""
    from tensorflow_serving.apis import predict_pb2

    req = predict_pb2.PredictRequest()
    req.model_spec.name = "toy"
    req.inputs["examples"].CopyFrom(tf.make_tensor_proto([example(x)]))
    req.output_filter.extend(output_filter)
    return req


def save(path: str, version: int = 1) -> str:
    k = tf.constant(float(version))
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
        x = tf.io.parse_example(examples, FEATURES)["x"]
        return {"y": k * x}

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="a"), tf.TensorSpec([None], tf.int64, name="b")])
    def multi(a, b):
        total = tf.reduce_sum(a, axis=1) * k + tf.cast(b, tf.float32)
        return {"total": total, "tag_bytes": tf.fill(tf.shape(b), b"\x00\xffbin"), "name": tf.fill(tf.shape(b), "ok")}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(inputs):
        p = tf.sigmoid(serve(inputs)["y"])
        return {"classes": tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(p)[0], 1]), "scores": tf.concat([1 - p, p], 1)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(inputs):
        return {"outputs": tf.reshape(serve(inputs)["y"], [-1])}

    module.serve = serve
    tf.saved_model.save(module, path, signatures={
        "serving_default": serve, "multi": multi, "classification": classify, "regression": regress})
    export.set_signature_methods(path, {"classification": export.CLASSIFY, "regression": export.REGRESS})
    return path


if __name__ == "__main__":
    base = sys.argv[1]
    for v in [int(a) for a in sys.argv[2:]] or [1]:
        save(os.path.join(base, str(v)), v)
        print(f"wrote {base}/{v}")
