"""The taxi model on a 3-row batch: output shape and dtype, hparams parsing."""

import numpy as np
import pytest
import tensorflow as tf

from pipelines.taxi import features, model


def _batch(n: int = 3) -> dict:
    rng = np.random.default_rng(0)
    batch = {
        k: rng.normal(size=(n, 1)).astype("float32")
        for k in features.transformed_names(features.DENSE_FLOAT_FEATURE_KEYS)
    }
    for k in features.transformed_names(
        features.VOCAB_FEATURE_KEYS
        + features.BUCKET_FEATURE_KEYS
        + list(features.CATEGORICAL_FEATURE_MAX_VALUES)
    ):
        batch[k] = rng.integers(0, 5, size=(n, 1)).astype("int64")
    return batch


def test_model_outputs_one_probability_per_row_in_float32():
    m = model._build_model({"payment_type": 8, "company": 50}, model.HParams(hidden_units=(4,)))
    out = m(_batch(3))
    assert out.shape == (3, 1)
    assert out.dtype == tf.float32
    assert np.all((out.numpy() >= 0) & (out.numpy() <= 1))


def test_output_stays_float32_under_mixed_precision():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        m = model._build_model({"payment_type": 8, "company": 50}, model.HParams(hidden_units=(4,)))
        assert m(_batch(3)).dtype == tf.float32
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_tf_keras_is_keras_2():
    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__


def test_hparams_from_custom_config():
    hp = model.HParams.from_custom_config({"hparams": {"hidden_units": [8, 4], "batch_size": 16}})
    assert hp.hidden_units == (8, 4) and hp.batch_size == 16
    assert model.HParams.from_custom_config(None) == model.HParams()
    with pytest.raises(ValueError, match=r"hparams: unknown key\(s\) dropout .*the taxi model's HParams"):
        model.HParams.from_custom_config({"hparams": {"dropout": 0.5}})
