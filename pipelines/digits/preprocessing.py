"""Digits image preprocessing. TFX Transform calls `preprocessing_fn`."""

import tensorflow as tf
import tensorflow_transform as tft

from pipelines.digits import features


def decode_images(encoded: tf.Tensor, size: int, channels: int = features.CHANNELS) -> tf.Tensor:
    """[batch] or [batch, 1] encoded PNG/JPEG bytes -> [batch, size, size, channels] float32 in [0, 1]."""
    encoded = tf.reshape(encoded, [-1])

    def decode(one):
        image = tf.io.decode_image(one, channels=channels, expand_animations=False)
        return tf.ensure_shape(image, [size, size, channels])

    images = tf.map_fn(
        decode, encoded, fn_output_signature=tf.TensorSpec([size, size, channels], tf.uint8)
    )
    return tf.cast(images, tf.float32) / 255.0


def label_fn(inputs):
    """The digit (0-9) of each example: `preprocessing_fn` calls it, and the data gate calls it on
    each new span's raw examples to check the label's health (plain TensorFlow, no tft)."""
    return tf.reshape(tf.cast(inputs[features.LABEL_KEY], tf.int64), [-1])


def preprocessing_fn(inputs):
    """Decodes the images and standardises pixels with the training window's mean and
    standard deviation (Transform analyzers), so serving normalises exactly as training did.

    Args:
      inputs: raw features: `image` (encoded bytes) and `label` (int).

    Returns:
      `image_xf` [batch, 8, 8, 1] float32 and `label_xf` [batch] int64.
    """
    pixels = decode_images(inputs[features.IMAGE_KEY], features.RAW_IMAGE_SIZE)
    return {
        features.IMAGE_XF: tft.scale_to_z_score(pixels),
        features.LABEL_XF: label_fn(inputs),
    }
