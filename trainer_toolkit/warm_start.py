"""Warm start: initialise a new model from the weights of the last blessed SavedModel."""

from __future__ import annotations

import logging
import os

import tensorflow as tf

logger = logging.getLogger(__name__)

# How a Keras functional model's weights appear in the SavedModel's object graph.
_KEY = "layer_with_weights-{index}/{attr}/.ATTRIBUTES/VARIABLE_VALUE"


def _attr(weight: tf.Variable) -> str:
    return weight.name.split("/")[-1].split(":")[0]


def warm_start_from(model: tf.keras.Model, saved_model_dir: str) -> dict:
    """Copies every weight whose layer position, name and shape match the saved model.

    Layers whose shape changed (e.g. a one-hot width after the vocabulary grew) keep their
    fresh initialisation. Returns counts of copied and kept weights and the source path.

    Raises:
      FileNotFoundError: `saved_model_dir` has no variables checkpoint.
    """
    prefix = os.path.join(saved_model_dir, "variables", "variables")
    if not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"warm start: no SavedModel variables under {saved_model_dir}")
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    copied, kept = 0, []
    for index, layer in enumerate(l for l in model.layers if l.weights):
        for weight in layer.weights:
            key = _KEY.format(index=index, attr=_attr(weight))
            if key in shapes and tuple(shapes[key]) == tuple(weight.shape):
                weight.assign(reader.get_tensor(key))
                copied += 1
            else:
                kept.append(f"{layer.name}/{_attr(weight)}")
    logger.info("warm start from %s: %d weights copied, %d kept fresh %s", saved_model_dir, copied, len(kept), kept)
    return {"source": saved_model_dir, "weights_copied": copied, "weights_fresh": len(kept)}
