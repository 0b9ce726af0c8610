"""Digits model: a ResNet-family image classifier. TFX Trainer calls `run_fn`.

Small by default (a few residual blocks on the 8x8 images, seconds on a CPU); ResNet-50 at
224x224 by config (`hparams: {architecture: resnet50, image_size: 224}`), the images
resized inside the model. The exported `serving_default` takes serialized raw
`tf.Example`s (encoded image bytes) and applies the Transform graph itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from core import tasks
from pipelines.digits import features
from pipelines.digits.hparams import SEARCH_SPACE, HParams
from trainer_toolkit import export, heads, training, tuning

if TYPE_CHECKING:  # TFX libraries load where TFX calls run_fn; the network needs TF only.
    import tensorflow_transform as tft
    from tfx.components.trainer.fn_args_utils import FnArgs  # = tfx.v1.components.FnArgs

# Keras' default 0.99 lets the inference statistics lag far behind a short training run
# (a few hundred steps): evaluation accuracy was 0.25 against 0.97 in training.
_BN_MOMENTUM = 0.9


def _residual_block(x, filters: int, stride: int):
    shortcut = x
    y = tf.keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
    y = tf.keras.layers.BatchNormalization(momentum=_BN_MOMENTUM)(y)
    y = tf.keras.layers.ReLU()(y)
    y = tf.keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = tf.keras.layers.BatchNormalization(momentum=_BN_MOMENTUM)(y)
    if stride != 1 or shortcut.shape[-1] != filters:
        shortcut = tf.keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(shortcut)
        shortcut = tf.keras.layers.BatchNormalization(momentum=_BN_MOMENTUM)(shortcut)
    return tf.keras.layers.ReLU()(tf.keras.layers.Add()([y, shortcut]))


# Ten classes, named "0".."9" in TF Serving's :classify answers; serving_default's output
# is "probabilities".
HEAD = heads.Head(tasks.MULTICLASS, classes=tuple(str(c) for c in range(features.NUM_CLASSES)),
                  output_key="probabilities")


def _build_model(hparams: HParams, input_size: int = features.RAW_IMAGE_SIZE) -> tf.keras.Model:
    """Builds the compiled classifier from plain settings (testable without Transform output).

    Args:
      hparams: architecture and training settings.
      input_size: side of the decoded images fed in (the benchmark feeds larger ones).
    """
    inputs = tf.keras.layers.Input(
        name=features.IMAGE_XF, shape=(input_size, input_size, features.CHANNELS), dtype=tf.float32
    )
    x = inputs
    if hparams.image_size != input_size:
        x = tf.keras.layers.Resizing(hparams.image_size, hparams.image_size)(x)
    if hparams.architecture == "resnet50":
        x = tf.keras.layers.Concatenate()([x, x, x])  # grayscale -> the 3 channels ResNet-50 expects
        backbone = tf.keras.applications.ResNet50(
            include_top=False, weights=None, input_shape=(hparams.image_size, hparams.image_size, 3), pooling="avg"
        )
        x = backbone(x)
    else:
        x = tf.keras.layers.Conv2D(hparams.widths[0], 3, padding="same", use_bias=False)(x)
        x = tf.keras.layers.BatchNormalization(momentum=_BN_MOMENTUM)(x)
        x = tf.keras.layers.ReLU()(x)
        for i, width in enumerate(hparams.widths):
            x = _residual_block(x, width, stride=1 if i == 0 else 2)
        x = tf.keras.layers.GlobalAveragePooling2D()(x)
    model = tf.keras.Model(inputs, HEAD.output(x))
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=hparams.learning_rate), **HEAD.compile_args())
    return model


def transform_fn(tft_output: tft.TFTransformOutput):
    """Parsed raw batch -> (image, label), through the Transform graph."""
    transform_layer = tft_output.transform_features_layer()

    def apply(raw):
        transformed = transform_layer(raw)
        return {features.IMAGE_XF: transformed[features.IMAGE_XF]}, transformed[features.LABEL_XF]

    return apply


def _serving_signatures(model: tf.keras.Model, tft_output: tft.TFTransformOutput) -> dict:
    """`serving_default` (raw examples -> class probabilities), `transform_features` (for TFMA),
    `classification` (TF Serving's :classify) and `pixels` (transformed pixels, for TFLite)."""
    signatures = heads.example_signatures(model, tft_output, features.LABEL_KEY, HEAD,
                                          model_inputs=lambda transformed: transformed[features.IMAGE_XF])

    # On-device (TFLite) input: the transformed pixels [batch, 8, 8, 1] (z-scored with the
    # training window's statistics, which the TFLite export writes beside the model). The
    # tf.Example parsing and image decoding above are not TFLite builtin ops. Traced from a
    # float32 twin: TFLite has no kernels for the bf16/fp16 ops of a mixed-precision model.
    on_device = export.float32_twin(model)

    @tf.function(input_signature=[tf.TensorSpec([None, features.RAW_IMAGE_SIZE, features.RAW_IMAGE_SIZE,
                                                 features.CHANNELS], tf.float32, name="pixels")])
    def pixels(image_xf):
        return {HEAD.output_key: on_device(image_xf)}

    return {**signatures, "pixels": pixels}


def run_fn(fn_args: FnArgs) -> None:
    """Trains on the window of spans through the trainer toolkit and exports the serving model."""
    # The Tuner's best values where a tuning stage ran (trainer_toolkit/tuning.py).
    hparams, tuned = tuning.apply(HParams.from_custom_config(fn_args.custom_config), fn_args.hyperparameters)
    training.train_from_fn_args(
        fn_args,
        hparams,
        build_model=lambda tft_output: _build_model(hparams),
        transform=transform_fn,
        signatures=_serving_signatures,
        head=HEAD,
        tuned=tuned,
    )


# TFX Tuner's entry point (the `tuning:` stage): a seeded KerasTuner search of SEARCH_SPACE.
tuner_fn = tuning.make_tuner_fn(HParams, SEARCH_SPACE, lambda tft_output, hparams: _build_model(hparams), transform_fn, HEAD)
