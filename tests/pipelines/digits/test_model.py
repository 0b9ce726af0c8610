"""The digits network: shapes, dtypes, the ResNet-50 variant, hparams errors."""

import numpy as np
import pytest
import tensorflow as tf

from pipelines.digits import model


def test_small_resnet_on_a_3_image_batch():
    net = model._build_model(model.HParams())
    out = net(np.zeros((3, 8, 8, 1), np.float32))
    assert out.shape == (3, 10) and out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy().sum(axis=1), 1.0, rtol=1e-5)  # probabilities
    assert any(isinstance(l, tf.keras.layers.Add) for l in net.layers)  # residual blocks


def test_resnet50_at_224_by_config():
    hp = model.HParams.from_custom_config({"hparams": {"architecture": "resnet50", "image_size": 224}})
    net = model._build_model(hp)
    resize = next(l for l in net.layers if isinstance(l, tf.keras.layers.Resizing))
    assert resize.output_shape == (None, 224, 224, 1)
    backbone = next(l for l in net.layers if l.name == "resnet50")
    assert 23_000_000 < backbone.count_params() < 24_000_000  # ResNet-50 without its top
    assert net.output_shape == (None, 10)


@pytest.mark.parametrize(
    "given, message",
    [({"architecture": "vgg"}, "architecture"), ({"depth": 3}, r"hparams: unknown key\(s\) depth .*the digits model's HParams")],
)
def test_bad_hparams_are_named(given, message):
    with pytest.raises(ValueError, match=message):
        model.HParams.from_custom_config({"hparams": given})
