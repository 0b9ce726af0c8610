"""ParquetExampleGen's executor: the fast engine and the Beam path give the same examples in
the same splits with the same artifact properties, on a month of several files and row
groups holding every kind the rule reads (narrow and unsigned integers, booleans, decimals,
float32, dictionary and large strings, lists, nulls, empty strings, NaN, a column with no
value), with the columns not ingested left out; and the same month as CSV gives them too."""

from __future__ import annotations

import decimal
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tfx.types import standard_component_specs

from components.example_gen import executor, parquet_executor
from components.example_gen.settings import IngestSettings
from tests.csv_engine.test_fast_csv import _content, _exec_properties, _properties, _run

N = 40


def _table(first: int):
    rows = range(first, first + N)
    return pa.table({
        "i8": pa.array([r % 100 - 50 for r in rows], pa.int8()),
        "u32": pa.array([r * 7 for r in rows], pa.uint32()),
        "flag": pa.array([None if r % 5 == 0 else r % 2 == 0 for r in rows]),
        "price": pa.array([decimal.Decimal(r) / 8 if r % 6 else None for r in rows], pa.decimal128(12, 3)),
        "count": pa.array([decimal.Decimal(r * 3) for r in rows], pa.decimal128(38, 0)),
        "f32": pa.array([r / 3 if r % 4 else float("nan") for r in rows], pa.float32()),
        "f64": pa.array([None if r % 3 == 0 else r * 0.1 for r in rows], pa.float64()),
        "word": pa.array(["abc"[r % 3] if r % 7 else "" for r in rows]).dictionary_encode(),
        "text": pa.array([None if r % 9 == 0 else f"ü{r}, \"q\"\n" for r in rows], pa.large_string()),
        "raw": pa.array([bytes([r % 256, 0, 255]) for r in rows], pa.binary()),
        "ids": pa.array([list(range(r % 4)) if r % 5 else None for r in rows], pa.list_(pa.int64())),
        "tags": pa.array([["x", ""][: r % 3] for r in rows], pa.large_list(pa.string())),
        "late": pa.array([None if r < 60 else r for r in rows], pa.int64()),  # values in later row groups only
        "never": pa.array([None] * N, pa.float64()),
        "email": pa.array([f"rider{r}@example.org" for r in rows]),
    })


@pytest.fixture
def span(tmp_path):
    folder = tmp_path / "in" / "span-1"
    folder.mkdir(parents=True)
    pq.write_table(_table(0), folder / "a.parquet", row_group_size=9, compression="zstd")
    pq.write_table(_table(N), folder / "b.parquet", row_group_size=16, use_dictionary=False)
    return str(tmp_path / "in")


def _both(tmp_path, input_base: str, **settings):
    runs = {}
    for engine in ("fast", "beam"):
        props = _exec_properties(input_base, "span-1/*.parquet", IngestSettings(engine=engine))
        if settings:
            props[standard_component_specs.CUSTOM_CONFIG_KEY] = _custom(engine, **settings)
        runs[engine] = _run(parquet_executor.Executor, str(tmp_path / engine), props)
    return runs["fast"], runs["beam"]


def _custom(engine: str, not_ingested=(), schema_columns=None) -> str:
    from tfx.utils import proto_utils

    return proto_utils.proto_to_json(executor.custom_config(IngestSettings(engine=engine), not_ingested, schema_columns))


def test_the_fast_engine_and_the_beam_path_give_the_same_examples_splits_and_properties(tmp_path, span, monkeypatch):
    monkeypatch.setattr("parquet_engine.fast_parquet.IN_PROCESS_BYTES", 0)  # worker processes
    fast, beam = _both(tmp_path, span)
    assert _properties(fast) == _properties(beam)
    expected = _content(beam)
    assert sum(len(v) for v in expected.values()) == 2 * N and all(expected.values())
    assert _content(fast) == expected


def test_columns_not_ingested_and_new_columns_under_report_are_left_out_by_both(tmp_path, span):
    schema_columns = [c for c in _table(0).column_names if c != "text"]  # `text`: a column the source added
    fast, beam = _both(tmp_path, span, not_ingested=["email"], schema_columns=schema_columns)
    expected = _content(beam)
    assert _content(fast) == expected
    import tensorflow as tf

    features = {name for split in expected.values() for r in split
                for name in tf.train.Example.FromString(r).features.feature}
    assert "email" not in features and "text" not in features and "ids" in features
    assert fast.get_string_custom_property("new_columns") == beam.get_string_custom_property("new_columns") == '["text"]'


def test_a_month_as_parquet_gives_the_examples_of_the_month_as_csv_through_each_executor(tmp_path):
    import csv

    from tests.parquet_engine.test_fast_parquet import _month, _types
    from tests.parquet_writers import WRITERS

    header, rows = _month()
    WRITERS["several_files"](str(tmp_path / "pq" / "span-1"), header, rows, _types())
    os.makedirs(tmp_path / "csv" / "span-1")
    with open(tmp_path / "csv" / "span-1" / "data.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    as_csv = _run(executor.Executor, str(tmp_path / "csv_out"),
                  _exec_properties(str(tmp_path / "csv"), "span-1/*.csv", IngestSettings(engine="fast")))
    expected = _content(as_csv)
    for engine in ("fast", "beam"):
        ours = _run(parquet_executor.Executor, str(tmp_path / engine),
                    _exec_properties(str(tmp_path / "pq"), "span-1/*.parquet", IngestSettings(engine=engine)))
        assert _content(ours) == expected, engine
