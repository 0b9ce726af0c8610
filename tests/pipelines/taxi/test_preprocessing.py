"""preprocessing_fn through tf.Transform's Beam implementation, checked against numpy."""

import csv
import os

import numpy as np
import pytest
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from pipelines.taxi import features, preprocessing
from runner import preflight
from tests.conftest import TAXI_SCHEMA, TESTDATA

# Transform's output schema, fixed: a change here changes what the model and serving see.
GOLDEN_TRANSFORMED = {
    **{features.transformed_name(k): "float" for k in features.DENSE_FLOAT_FEATURE_KEYS},
    **{
        features.transformed_name(k): "int"
        for k in features.VOCAB_FEATURE_KEYS
        + features.BUCKET_FEATURE_KEYS
        + list(features.CATEGORICAL_FEATURE_MAX_VALUES)
    },
    features.LABEL_XF: "int",
}


def _rows():
    schema = preflight.load_schema(TAXI_SCHEMA)
    types = {f.name: f.type for f in schema.feature}
    parse = {1: lambda v: v.encode(), 2: int, 3: float}  # BYTES, INT, FLOAT
    out = []
    with open(os.path.join(TESTDATA, "taxi_rows.csv"), newline="") as f:
        for row in csv.DictReader(f):
            out.append({k: ([parse[types[k]](v)] if v != "" else []) for k, v in row.items()})
    return schema, out


@pytest.fixture(scope="module")
def transformed(tmp_path_factory):
    schema, rows = _rows()
    spec = schema_utils.schema_as_feature_spec(schema).feature_spec
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft")), force_tf_compat_v1=False):
        (data, out_meta), _ = (rows, metadata) | tft_beam.AnalyzeAndTransformDataset(
            preprocessing.preprocessing_fn, output_record_batches=False
        )
    return rows, data, out_meta


def test_output_schema_matches_golden(transformed):
    _, _, out_meta = transformed
    spec = out_meta.schema
    got = {f.name: {1: "bytes", 2: "int", 3: "float"}[f.type] for f in spec.feature}
    assert got == GOLDEN_TRANSFORMED


def test_z_scores_match_numpy(transformed):
    rows, data, _ = transformed
    for key in features.DENSE_FLOAT_FEATURE_KEYS:
        raw = np.array([r[key][0] if r[key] else 0.0 for r in rows], dtype=np.float64)
        expected = (raw - raw.mean()) / raw.std()
        got = np.array([d[features.transformed_name(key)] for d in data])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_label_is_big_tipper(transformed):
    rows, data, _ = transformed
    for r, d in zip(rows, data):
        fare, tips = r["fare"][0], r["tips"][0]
        assert d[features.LABEL_XF] == int(tips > fare * features.BIG_TIP_FRACTION)
    assert 0 < sum(d[features.LABEL_XF] for d in data) < len(data)  # both classes present


def test_vocab_buckets_and_clipping_stay_in_range(transformed):
    rows, data, _ = transformed
    payment = [r["payment_type"][0] for r in rows]
    most_common = max(set(payment), key=payment.count)
    for r, d in zip(rows, data):
        if r["payment_type"][0] == most_common:
            assert d["payment_type_xf"] == 0  # vocabulary is ordered by frequency
        for key in features.BUCKET_FEATURE_KEYS:
            assert 0 <= d[features.transformed_name(key)] < features.FEATURE_BUCKET_COUNT
        for key, n in features.CATEGORICAL_FEATURE_MAX_VALUES.items():
            assert 0 <= d[features.transformed_name(key)] < n
