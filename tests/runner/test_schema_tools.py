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


def test_infer_reads_parquet_spans_of_a_parquet_config_as_the_csv_spans_types(tmp_path):
    # The taxi months as Parquet (pandas, nullable integers, written with the curated types):
    # each feature's inferred type is the one inferred from the same months as CSV.
    import csv

    import yaml
    from tensorflow_metadata.proto.v0 import schema_pb2

    from tests import parquet_writers
    from tests.conftest import TAXI_SCHEMA

    curated = tfdv.load_schema_text(TAXI_SCHEMA)
    types = {f.name: schema_pb2.FeatureType.Name(f.type) for f in curated.feature}
    for s in (201611, 201612):
        with open(os.path.join(spans.span_dir(TAXI_DATA, s), "data.csv"), newline="") as f:
            header, *rows = list(csv.reader(f))
        parquet_writers.WRITERS["pandas_index_column"](spans.span_dir(str(tmp_path / "data"), s), header, rows, types)
    with open(TAXI_CONFIG) as f:
        config = yaml.safe_load(f)
    config.update(example_format="parquet", data_root=str(tmp_path / "data"),
                  schema_path=TAXI_SCHEMA, gate_policy=os.path.join(os.path.dirname(TAXI_SCHEMA), "gate.yaml"),
                  feature_policy=os.path.join(os.path.dirname(TAXI_SCHEMA), "feature_policy.yaml"))
    (tmp_path / "taxi.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "schema.pbtxt"
    proc = retrain_cli("schema", "infer", "--config", str(tmp_path / "taxi.yaml"), "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    inferred = tfdv.load_schema_text(str(out))
    as_csv = tmp_path / "csv_schema.pbtxt"
    assert retrain_cli("schema", "infer", "--config", TAXI_CONFIG, "--data-root", _data(tmp_path / "csv"), "--out",
                       str(as_csv), timeout=300).returncode == 0
    expected = {f.name: f.type for f in tfdv.load_schema_text(str(as_csv)).feature}
    assert {f.name: f.type for f in inferred.feature} == expected
