"""The data gate's decision on real TFDV statistics: clean, anomalous and drifted spans."""

import pandas as pd
import pytest
import tensorflow_data_validation as tfdv

from components.data_gate import evaluate_gate
from tests.conftest import TESTDATA

import os


@pytest.fixture(scope="module")
def frame():
    return pd.read_csv(os.path.join(TESTDATA, "taxi_rows.csv"))


def _schema(frame):
    schema = tfdv.infer_schema(tfdv.generate_statistics_from_dataframe(frame))
    tfdv.get_feature(schema, "payment_type").drift_comparator.jensen_shannon_divergence.threshold = 0.1
    tfdv.get_feature(schema, "fare").drift_comparator.jensen_shannon_divergence.threshold = 0.6
    return schema


def _stats(frame):
    return tfdv.generate_statistics_from_dataframe(frame)


def test_clean_span_passes_and_records_drift_values(frame):
    schema = _schema(frame)
    stats = _stats(frame)
    anomalies = tfdv.validate_statistics(stats, schema)
    result = evaluate_gate(stats, schema, {"train": anomalies}, baseline_statistics=stats)
    assert result["passed"] and result["blocking_features"] == []
    measured = {d["feature"]: d for d in result["drift"]}
    assert set(measured) == {"payment_type", "fare"}
    assert all(d["value"] == pytest.approx(0.0, abs=1e-6) and not d["drifted"] for d in measured.values())


def test_schema_anomaly_blocks_and_names_the_feature(frame):
    schema = _schema(frame)
    bad = frame.copy()
    bad["payment_type"] = "Bitcoin"
    stats = _stats(bad)
    anomalies = tfdv.validate_statistics(stats, schema)
    result = evaluate_gate(stats, schema, {"train": anomalies}, baseline_statistics=None)
    assert not result["passed"]
    assert "payment_type" in result["blocking_features"]
    assert not result["drift_checked"]


def test_drift_beyond_schema_threshold_blocks(frame):
    schema = _schema(frame)
    shifted = frame.copy()
    shifted["fare"] = shifted["fare"] * 40 + 500
    current = _stats(shifted)
    result = evaluate_gate(
        current, schema, {"train": tfdv.validate_statistics(current, schema)}, _stats(frame)
    )
    assert not result["passed"]
    fare = [d for d in result["drift"] if d["feature"] == "fare"][0]
    assert fare["drifted"] and fare["value"] > 0.6
    drift_entries = [a for a in result["anomalies"] if a["kind"] == "drift"]
    assert [a["feature"] for a in drift_entries] == ["fare"]
    assert drift_entries[0]["reasons"][0]["type"].startswith("COMPARATOR_")
