"""Task heads: each task's output layer, loss and metrics, and the serving signatures TF
Serving's clients expect of it.

A pipeline's model code builds its body (the features it reads, the layers in between) and
ends it with `head.output(x)`; `example_signatures` then exports, beside `serving_default`
and `transform_features` (for TFMA), what TF Serving's `:classify` / `:regress` need:
- binary classification: `classification` (classes, scores) and `regression` (the positive
  class's probability), as TensorFlow Estimator's binary heads export them;
- multiclass classification: `classification` (class names, probabilities);
- regression: `regression` (one value per example).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from core import tasks
from trainer_toolkit import export


@dataclasses.dataclass(frozen=True)
class Head:
    """What the model ends with and is served as, for one task.

    Attributes:
      task: one of core.tasks.TASKS.
      classes: class names in label-index order (classification); binary: (negative, positive).
      label_mean, label_std: regression: the label's scale. The network's last layer predicts
        (label - mean) / std and the head rescales it, so training starts near the right
        range whatever the label's units.
      output_key: the name of serving_default's output.
    """

    task: str
    classes: tuple[str, ...] = ()
    label_mean: float = 0.0
    label_std: float = 1.0
    output_key: str = "outputs"

    def __post_init__(self):
        if self.task not in tasks.TASKS:
            raise ValueError(f"task {self.task!r} is not one of {tasks.TASKS}")
        if self.task == tasks.BINARY and len(self.classes) != 2:
            raise ValueError(f"a binary head needs 2 class names, got {self.classes}")
        if self.task == tasks.MULTICLASS and len(self.classes) < 2:
            raise ValueError(f"a multiclass head needs at least 2 class names, got {self.classes}")
        if self.task == tasks.REGRESSION and not self.label_std > 0:
            raise ValueError(f"label_std must be > 0, got {self.label_std}")

    def output(self, x: tf.Tensor) -> tf.Tensor:
        """The output layer on top of `x`, in float32 even under a mixed-precision policy."""
        if self.task == tasks.BINARY:
            return tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32", name="probability")(x)
        if self.task == tasks.MULTICLASS:
            logits = tf.keras.layers.Dense(len(self.classes), name="logits")(x)
            return tf.keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
        standardized = tf.keras.layers.Dense(1, dtype="float32", name="standardized")(x)
        return tf.keras.layers.Rescaling(self.label_std, offset=self.label_mean, dtype="float32",
                                         name="prediction")(standardized)

    def served(self, output: tf.Tensor) -> tf.Tensor:
        """What serving_default returns for the output: a regression's one number per example
        as a vector (labels are vectors: TFMA would broadcast [n, 1] against [n] into an n x n
        comparison), class scores as they are."""
        return tf.reshape(output, [-1]) if self.task == tasks.REGRESSION else output

    def compile_args(self) -> dict[str, Any]:
        """`loss` and `metrics` for `model.compile` (Keras' names; TFMA computes its own)."""
        if self.task == tasks.BINARY:
            return {"loss": "binary_crossentropy",
                    "metrics": [tf.keras.metrics.BinaryAccuracy(), tf.keras.metrics.AUC(name="auc")]}
        if self.task == tasks.MULTICLASS:
            return {"loss": "sparse_categorical_crossentropy", "metrics": [tf.keras.metrics.SparseCategoricalAccuracy()]}
        # Huber: the squared error near the fit, the absolute error for outliers, in label units.
        return {"loss": tf.keras.losses.Huber(delta=self.label_std),
                "metrics": [tf.keras.metrics.MeanSquaredError(name="mse"), tf.keras.metrics.MeanAbsoluteError(name="mae")]}

    @property
    def signature_methods(self) -> dict[str, str]:
        """TF Serving's method names of the signatures `method_signatures` adds."""
        return {
            tasks.BINARY: {"classification": export.CLASSIFY, "regression": export.REGRESS},
            tasks.MULTICLASS: {"classification": export.CLASSIFY},
            tasks.REGRESSION: {"regression": export.REGRESS},
        }[self.task]

    def method_signatures(self, predict: Callable[[tf.Tensor], tf.Tensor]) -> dict[str, Any]:
        """`:classify` / `:regress` signatures on serialized tf.Examples under "inputs".

        Args:
          predict: serialized examples -> the head's output (as serving_default returns it).
        """
        spec = [tf.TensorSpec([None], tf.string, name="inputs")]
        out: dict[str, Any] = {}
        if self.task in (tasks.BINARY, tasks.MULTICLASS):
            names = tf.constant([list(self.classes)])

            @tf.function(input_signature=spec)
            def classify(serialized):
                p = predict(serialized)
                scores = tf.concat([1.0 - p, p], axis=1) if self.task == tasks.BINARY else p
                return {"classes": tf.tile(names, [tf.shape(scores)[0], 1]), "scores": scores}

            out["classification"] = classify
        if self.task in (tasks.BINARY, tasks.REGRESSION):

            @tf.function(input_signature=spec)
            def regress(serialized):
                return {"outputs": tf.reshape(predict(serialized), [-1])}

            out["regression"] = regress
        return out


def example_signatures(
    model: tf.keras.Model,
    tft_output,
    label_key: str,
    head: Head,
    model_inputs: Callable[[dict], Any] = lambda transformed: transformed,
) -> dict[str, Any]:
    """The serving signatures of a model trained on Transform's output.

    `serving_default` takes serialized raw tf.Examples (no label) and applies the Transform
    graph itself, so serving sees exactly the preprocessing training saw;
    `transform_features` is what TFMA's preprocessing calls; plus the head's method signatures.

    Args:
      model: the trained Keras model.
      tft_output: the Transform output (tft.TFTransformOutput).
      label_key: the raw label's feature name (left out of what requests must carry).
      head: the model's head.
      model_inputs: transformed features -> the model's input (default: all of them).
    """
    model.tft_layer = tft_output.transform_features_layer()
    raw_spec = tft_output.raw_feature_spec()
    serving_spec = {k: v for k, v in raw_spec.items() if k != label_key}

    def predict(serialized):
        return model(model_inputs(model.tft_layer(tf.io.parse_example(serialized, serving_spec))))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_tf_examples(serialized):
        return {head.output_key: head.served(predict(serialized))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_features(serialized):
        return model.tft_layer(tf.io.parse_example(serialized, raw_spec))

    return {"serving_default": serve_tf_examples, "transform_features": transform_features,
            **head.method_signatures(predict)}
