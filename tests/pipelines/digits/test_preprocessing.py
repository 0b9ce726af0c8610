"""Digits preprocessing through tf.Transform's Beam implementation, checked against numpy."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform.beam as tft_beam
from sklearn.datasets import load_digits
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from pipelines.digits import features, preprocessing
from runner import preflight
from tests.conftest import REPO

SCHEMA = f"{REPO}/schemas/digits/schema.pbtxt"


def _png(pixels: np.ndarray) -> bytes:
    return tf.io.encode_png(pixels.astype(np.uint8)[..., None]).numpy()


@pytest.fixture(scope="module")
def transformed(tmp_path_factory):
    digits = load_digits()
    images = np.round(digits.images[:40] * 255.0 / 16.0)
    rows = [{"image": [_png(img)], "label": [int(t)]} for img, t in zip(images, digits.target[:40])]
    spec = schema_utils.schema_as_feature_spec(preflight.load_schema(SCHEMA)).feature_spec
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft")), force_tf_compat_v1=False):
        (data, _), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            preprocessing.preprocessing_fn, output_record_batches=False
        )
    return images, digits.target[:40], data


def test_images_are_decoded_and_standardised_with_the_window_statistics(transformed):
    images, labels, data = transformed
    pixels = images / 255.0
    expected = (pixels - pixels.mean()) / pixels.std()
    got = np.stack([np.asarray(r[features.IMAGE_XF]).reshape(8, 8) for r in data])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert [int(r[features.LABEL_XF]) for r in data] == list(labels)


def test_decode_rejects_images_of_the_wrong_size():
    big = tf.constant([_png(np.zeros((16, 16)))])
    with pytest.raises(tf.errors.InvalidArgumentError):
        preprocessing.decode_images(big, 8)
