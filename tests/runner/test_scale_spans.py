"""`retrain scale-spans`: taxi-like months of any size from the embedded data, the same
bytes for the same seed, valid against the taxi schema, with the label's meaning kept."""

import datetime as dt

import numpy as np
import pyarrow.csv as pa_csv
import pytest

from core import spans
from runner import preflight, scale_spans
from tests.conftest import TAXI_DATA, TAXI_SCHEMA


def _table(root, span):
    return pa_csv.read_csv(f"{spans.span_dir(str(root), span)}/data.csv")


def test_spans_have_the_rows_asked_and_read_as_the_taxi_data(tmp_path):
    assert scale_spans.write_spans(str(tmp_path / "a"), [201611, 201612], 1200) == {201611: 1200, 201612: 1200}
    preflight.check_span_files(spans.span_dir(str(tmp_path / "a"), 201612), TAXI_SCHEMA)
    table = _table(tmp_path / "a", 201612)
    with open(f"{spans.span_dir(TAXI_DATA, 201612)}/data.csv") as f:
        assert table.column_names == f.readline().strip().split(",")
    assert table.num_rows == 1200
    stamps = table.column("trip_start_timestamp").to_numpy()
    days = [dt.datetime.fromtimestamp(int(s), dt.timezone.utc) for s in stamps]
    assert {(d.year, d.month) for d in days} == {(2016, 12)}
    assert set(table.column("trip_start_month").to_pylist()) == {12}
    assert [(d.isoweekday() % 7) + 1 for d in days] == table.column("trip_start_day").to_pylist()  # 1 = Sunday
    assert [d.hour for d in days] == table.column("trip_start_hour").to_pylist()


def test_the_same_seed_writes_the_same_bytes_and_the_label_keeps_its_share(tmp_path):
    scale_spans.write_spans(str(tmp_path / "a"), [201612], 5000)
    scale_spans.write_spans(str(tmp_path / "b"), [201612], 5000)
    scale_spans.write_spans(str(tmp_path / "c"), [201612], 5000, seed=1)
    read = lambda root: open(f"{spans.span_dir(str(root), 201612)}/data.csv", "rb").read()  # noqa: E731
    assert read(tmp_path / "a") == read(tmp_path / "b") != read(tmp_path / "c")

    def big_tip_share(table):
        fare = np.nan_to_num(table.column("fare").to_numpy().astype(float))
        tips = np.nan_to_num(table.column("tips").to_numpy().astype(float))
        return float(np.mean(tips > 0.2 * fare))

    source = [pa_csv.read_csv(f"{spans.span_dir(TAXI_DATA, s)}/data.csv") for s in spans.list_spans(TAXI_DATA)]
    expected = np.average([big_tip_share(t) for t in source], weights=[t.num_rows for t in source])
    assert big_tip_share(_table(tmp_path / "a", 201612)) == pytest.approx(expected, abs=0.03)


def test_existing_spans_and_bad_sizes_are_refused(tmp_path):
    scale_spans.write_spans(str(tmp_path), [201612], 10)
    with pytest.raises(spans.SpanError, match="already exist"):
        scale_spans.write_spans(str(tmp_path), [201612], 10)
    with pytest.raises(spans.SpanError, match="--rows must be at least 1"):
        scale_spans.write_spans(str(tmp_path), [201701], 0)
