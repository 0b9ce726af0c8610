"""Diabetes feature engineering. TFX Transform calls `preprocessing_fn`."""

import tensorflow as tf
import tensorflow_transform as tft

from pipelines.diabetes import features


def _dense(x):
    """One value per example as a rank-1 tensor: a sparse column (blank cells allowed) is
    densified with '' or 0, a dense [batch, 1] one is flattened."""
    if isinstance(x, tf.sparse.SparseTensor):
        default_value = "" if x.dtype == tf.string else 0
        x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value)
    return tf.reshape(x, [-1])


def _label(label):
    """The regression target as float32."""
    return tf.cast(label, tf.float32)


def label_fn(inputs):
    """The label of each example: `preprocessing_fn` calls it, and the data gate calls it on
    each new span's raw examples to check the label's health (plain TensorFlow, no tft)."""
    return _label(_dense(inputs[features.LABEL_KEY]))


def preprocessing_fn(inputs):
    """Maps raw features to model inputs; the same graph runs at training and serving.

    Args:
      inputs: raw feature tensors keyed by raw feature name.

    Returns:
      Transformed tensors keyed by `features.transformed_name(raw name)`.
    """
    outputs = {}
    for key in features.NUMERIC_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.scale_to_z_score(tf.cast(_dense(inputs[key]), tf.float32))
    for key in features.BUCKET_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.bucketize(
            tf.cast(_dense(inputs[key]), tf.float32), features.BUCKET_COUNT
        )
    for key, num_values in features.CATEGORICAL_FEATURE_MAX_VALUES.items():
        # Clipped, so an unexpected code can never index past the one-hot width at serving.
        outputs[features.transformed_name(key)] = tf.clip_by_value(
            tf.cast(_dense(inputs[key]), tf.int64), 0, num_values - 1
        )
    for key in features.VOCAB_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.compute_and_apply_vocabulary(
            _dense(inputs[key]),
            top_k=features.VOCAB_SIZE,
            num_oov_buckets=features.OOV_SIZE,
            vocab_filename=features.transformed_name(key),
        )
    outputs[features.LABEL_XF] = label_fn(inputs)
    return outputs
