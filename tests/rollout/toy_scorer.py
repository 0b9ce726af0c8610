"""Binary scorers for rollout tests: P(y=1 | x) = sigmoid(w * x), answering with their version.

Labels drawn as y ~ Bernoulli(sigmoid(2x)) make w = 2 the right model; w = -2 ranks every
pair the wrong way round (a degraded canary, like one trained on shuffled labels but worse).
"""

# isort: off
from core import keras_env  # noqa: F401  (before TensorFlow)

import numpy as np
import tensorflow as tf
# isort: on

FEATURES = {"x": tf.io.FixedLenFeature([1], tf.float32)}


def save(path: str, version: int, weight: float) -> str:
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
        x = tf.io.parse_example(examples, FEATURES)["x"]
        p = tf.sigmoid(weight * x)
        return {"outputs": p, "version": tf.fill(tf.shape(p), tf.constant(version, tf.int64))}

    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    return path


def examples(count: int, seed: int) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=count)
    y = (rng.random(count) < 1 / (1 + np.exp(-2 * x))).astype(int)
    out = [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))})).SerializeToString() for v in x]
    return out, y
