"""Taxi feature engineering. TFX Transform calls `preprocessing_fn`."""

import tensorflow as tf
import tensorflow_transform as tft

from pipelines.taxi import features


def _fill_in_missing(x):
    """Densifies a rank-2 SparseTensor of at most one value per row, filling '' or 0."""
    if not isinstance(x, tf.sparse.SparseTensor):
        return x
    default_value = "" if x.dtype == tf.string else 0
    dense = tf.sparse.to_dense(
        tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value
    )
    return tf.squeeze(dense, axis=1)


def label_fn(inputs):
    """The label: 1 when the tip is more than BIG_TIP_FRACTION of the fare, else 0.

    `preprocessing_fn` calls it for the label; the data gate calls it on each new span's raw
    examples to check the label's health (components/data_gate/label.py), so it is plain
    TensorFlow (no tft analyzers): it runs outside Transform too.
    """
    fare = tf.cast(_fill_in_missing(inputs[features.FARE_KEY]), tf.float32)
    tips = tf.cast(_fill_in_missing(inputs[features.LABEL_KEY]), tf.float32)
    return tf.where(
        tf.math.is_nan(fare),
        tf.zeros_like(fare, dtype=tf.int64),
        tf.cast(tips > fare * features.BIG_TIP_FRACTION, tf.int64),
    )


def preprocessing_fn(inputs):
    """Maps raw features to model inputs; the same graph runs at training and serving.

    Args:
      inputs: raw feature tensors keyed by raw feature name.

    Returns:
      Transformed tensors keyed by `features.transformed_name(raw name)`.
    """
    outputs = {}
    for key in features.DENSE_FLOAT_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.scale_to_z_score(
            tf.cast(_fill_in_missing(inputs[key]), tf.float32)
        )
    for key in features.VOCAB_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.compute_and_apply_vocabulary(
            _fill_in_missing(inputs[key]),
            top_k=features.VOCAB_SIZE,
            num_oov_buckets=features.OOV_SIZE,
            vocab_filename=key,
        )
    for key in features.BUCKET_FEATURE_KEYS:
        outputs[features.transformed_name(key)] = tft.bucketize(
            _fill_in_missing(inputs[key]), features.FEATURE_BUCKET_COUNT
        )
    for key, num_values in features.CATEGORICAL_FEATURE_MAX_VALUES.items():
        # Clip so an unexpected value can never index past the one-hot width at serving.
        outputs[features.transformed_name(key)] = tf.clip_by_value(
            _fill_in_missing(inputs[key]), 0, num_values - 1
        )

    outputs[features.LABEL_XF] = label_fn(inputs)
    return outputs
