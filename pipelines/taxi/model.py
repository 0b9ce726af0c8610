"""Taxi model: a wide-and-deep Keras classifier. TFX Trainer calls `run_fn`.

The exported SavedModel's `serving_default` signature takes serialized raw
`tf.Example`s and applies the Transform graph itself, so serving sees exactly the
preprocessing that training saw (no training/serving skew).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from core import tasks
from pipelines.taxi import features
from pipelines.taxi.hparams import SEARCH_SPACE, HParams
from trainer_toolkit import heads, training, tuning

if TYPE_CHECKING:  # TFX libraries load where TFX calls run_fn; the network needs TF only.
    import tensorflow_transform as tft
    from tfx.components.trainer.fn_args_utils import FnArgs  # = tfx.v1.components.FnArgs


# Big tipper or not: class names "0" and "1" in TF Serving's :classify answers.
HEAD = heads.Head(tasks.BINARY, classes=("0", "1"))


def _build_model(vocab_sizes: dict[str, int], hparams: HParams) -> tf.keras.Model:
    """Builds the compiled model from plain sizes (testable without a Transform output)."""
    dense_in = {
        name: tf.keras.layers.Input(name=name, shape=(1,), dtype=tf.float32)
        for name in features.transformed_names(features.DENSE_FLOAT_FEATURE_KEYS)
    }
    int_in = {
        name: tf.keras.layers.Input(name=name, shape=(1,), dtype=tf.int64)
        for name in features.transformed_names(
            features.VOCAB_FEATURE_KEYS
            + features.BUCKET_FEATURE_KEYS
            + list(features.CATEGORICAL_FEATURE_MAX_VALUES)
        )
    }
    widths = {
        **{
            features.transformed_name(k): vocab_sizes[k] + features.OOV_SIZE
            for k in features.VOCAB_FEATURE_KEYS
        },
        **{
            features.transformed_name(k): features.FEATURE_BUCKET_COUNT
            for k in features.BUCKET_FEATURE_KEYS
        },
        **{
            features.transformed_name(k): n
            for k, n in features.CATEGORICAL_FEATURE_MAX_VALUES.items()
        },
    }
    deep = tf.keras.layers.concatenate(list(dense_in.values()))
    for units in hparams.hidden_units:
        deep = tf.keras.layers.Dense(units, activation="relu")(deep)
    wide = tf.keras.layers.concatenate(
        [
            tf.keras.layers.CategoryEncoding(num_tokens=widths[name], output_mode="one_hot")(
                inp
            )
            for name, inp in int_in.items()
        ]
    )
    output = HEAD.output(tf.keras.layers.concatenate([deep, wide]))
    model = tf.keras.Model({**dense_in, **int_in}, output)
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=hparams.learning_rate), **HEAD.compile_args())
    return model


def build_model(tft_output: tft.TFTransformOutput, hparams: HParams) -> tf.keras.Model:
    """Adapts `_build_model` to a Transform output (vocabulary sizes)."""
    vocab_sizes = {
        k: tft_output.vocabulary_size_by_name(k) for k in features.VOCAB_FEATURE_KEYS
    }
    return _build_model(vocab_sizes, hparams)


def transform_fn(tft_output: tft.TFTransformOutput):
    """Parsed raw batch -> (transformed features, label), through the Transform graph."""
    transform_layer = tft_output.transform_features_layer()

    def apply(raw):
        transformed = transform_layer(raw)
        label = transformed.pop(features.LABEL_XF)
        return transformed, label

    return apply


def _serving_signatures(model: tf.keras.Model, tft_output: tft.TFTransformOutput) -> dict:
    """`serving_default` (raw examples -> big-tipper probability), `transform_features` (for
    TFMA), and TF Serving's `classification` and `regression` (the probability)."""
    return heads.example_signatures(model, tft_output, features.LABEL_KEY, HEAD)


def run_fn(fn_args: FnArgs) -> None:
    """Trains on the window of spans (raw examples through the Transform graph) through the
    trainer toolkit, and exports the serving SavedModel with its training provenance."""
    # The Tuner's best values where a tuning stage ran (trainer_toolkit/tuning.py).
    hparams, tuned = tuning.apply(HParams.from_custom_config(fn_args.custom_config), fn_args.hyperparameters)
    training.train_from_fn_args(
        fn_args,
        hparams,
        build_model=lambda tft_output: build_model(tft_output, hparams),
        transform=transform_fn,
        signatures=_serving_signatures,
        head=HEAD,
        tuned=tuned,
    )


# TFX Tuner's entry point (the `tuning:` stage): a seeded KerasTuner search of SEARCH_SPACE.
tuner_fn = tuning.make_tuner_fn(HParams, SEARCH_SPACE, build_model, transform_fn, HEAD)
