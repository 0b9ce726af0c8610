"""`retrain schema infer`: a schema from the spans, the label kept out of SERVING."""

import os
import shutil

import tensorflow_data_validation as tfdv

from core import spans
from tests.conftest import TAXI_CONFIG, TAXI_DATA, retrain_cli


def _data(tmp_path):
    for s in (201611, 201612):
        shutil.copytree(spans.span_dir(TAXI_DATA, s), spans.span_dir(str(tmp_path / "data"), s))
    return str(tmp_path / "data")


def test_infer_with_a_label_keeps_it_out_of_serving(tmp_path):
    out = tmp_path / "schema.pbtxt"
    proc = retrain_cli("schema", "infer", "--config", TAXI_CONFIG, "--data-root", _data(tmp_path), "--out", str(out),
                       "--label", "tips", timeout=300)
    assert proc.returncode == 0, proc.stderr
    schema = tfdv.load_schema_text(str(out))
    assert list(schema.default_environment) == ["TRAINING", "SERVING"]
    assert list(tfdv.get_feature(schema, "tips").not_in_environment) == ["SERVING"]
    assert not tfdv.get_feature(schema, "fare").not_in_environment
    # A curated schema is never overwritten by accident; an unknown label writes nothing.
    again = retrain_cli("schema", "infer", "--config", TAXI_CONFIG, "--data-root", str(tmp_path / "data"),
                        "--out", str(out), timeout=300)
    assert again.returncode == 2 and "--force" in again.stderr
    other = tmp_path / "other.pbtxt"
    bad = retrain_cli("schema", "infer", "--config", TAXI_CONFIG, "--data-root", str(tmp_path / "data"),
                      "--out", str(other), "--label", "tip_amount", timeout=300)
    assert bad.returncode == 2 and "label 'tip_amount' is not a column" in bad.stderr and not os.path.exists(other)
