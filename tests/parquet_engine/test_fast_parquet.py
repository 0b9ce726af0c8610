"""The fast Parquet engine: a month of taxi trips written by every writer of
tests/parquet_writers.py (pyarrow with each codec, row-group size, dictionary or not,
large_string, int32 and float32; pandas with its index column and categoricals; a warehouse
unload with decimals; several files) gives the examples of the same month as CSV, byte for
byte, in the same splits; a null is an empty CSV cell; list columns are lists; row groups on
worker processes that disagree on which columns hold values give the one-process result."""

from __future__ import annotations

import csv
import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from core import parquet_columns
from csv_engine import fast_csv
from parquet_engine import fast_parquet
from tests import dialects, parquet_writers
from tests.conftest import TAXI_SCHEMA

ROWS = 300
BUCKETS = [3, 4]  # train 3 : eval 1, as the pipelines split


def _month() -> tuple[list[str], list[list[str]]]:
    """The first ROWS trips of the embedded 2016 spans, as CSV cells."""
    return dialects.embedded_trips(ROWS)


def _types() -> dict[str, str]:
    with open(TAXI_SCHEMA) as f:
        schema = text_format.Parse(f.read(), schema_pb2.Schema())
    return {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}


def records(folder: str) -> list[bytes]:
    """The serialized examples of a folder's shards, in shard order."""
    files = sorted(glob.glob(os.path.join(folder, "*.gz")))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")] if files else []


def _write_csv(path: str, header: list[str], rows: list[list[str]]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    return path


def _splits(out) -> list[str]:
    return [str(out / "train"), str(out / "eval")]


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The month, its CSV examples per split and the CSV engine's column types."""
    root = tmp_path_factory.mktemp("csv")
    header, rows = _month()
    path = _write_csv(str(root / "span-201612" / "data.csv"), header, rows)
    done = fast_csv.ingest([path], _splits(root / "out"), BUCKETS, workers=0)
    return {"header": header, "rows": rows, "types": done["types"],
            "splits": [records(d) for d in _splits(root / "out")]}


@pytest.mark.parametrize("writer", sorted(parquet_writers.WRITERS))
def test_every_writer_gives_the_examples_of_the_same_month_as_csv_in_the_same_splits(tmp_path, month, writer):
    folder = tmp_path / "span-201612"
    parquet_writers.WRITERS[writer](str(folder), month["header"], month["rows"], _types())
    paths = sorted(glob.glob(str(folder / "*.parquet")))
    done = fast_parquet.ingest(paths, _splits(tmp_path / "out"), BUCKETS, workers=0)
    assert done["types"] == month["types"]  # the schema's kinds, as CSV infers them for this month
    got = [records(d) for d in _splits(tmp_path / "out")]
    assert sum(map(len, got)) == ROWS and all(got)
    # Byte for byte, in the file's row order (several files: the rows in file order too).
    assert got == month["splits"]


def test_several_row_groups_on_workers_that_disagree_on_values_give_the_one_process_examples(tmp_path, month,
                                                                                              monkeypatch, caplog):
    # `company` and `tips` have no value in the first row groups, so those are encoded again
    # with the column's kind once a later row group has values (as CSV chunks are).
    header, rows = month["header"], [list(r) for r in month["rows"]]
    for name in ("company", "tips"):
        for row in rows[:40]:
            row[header.index(name)] = ""
    folder = tmp_path / "span-201612"
    parquet_writers.WRITERS["pyarrow_gzip_small_row_groups"](str(folder), header, rows, _types())
    csv_path = _write_csv(str(tmp_path / "csv" / "data.csv"), header, rows)
    fast_csv.ingest([csv_path], _splits(tmp_path / "csv_out"), BUCKETS, workers=0)
    monkeypatch.setattr(fast_parquet, "IN_PROCESS_BYTES", 0)
    with caplog.at_level("INFO", logger=fast_parquet.__name__):
        done = fast_parquet.ingest([str(folder / "data.parquet")], _splits(tmp_path / "out"), BUCKETS, workers=2)
    assert done["workers"] == 2 and done["chunks"] == -(-ROWS // 7) and done["rechecked"] >= 5
    assert "had no value in a column other row groups have" in caplog.text
    assert len(os.listdir(tmp_path / "out" / "train")) == done["chunks"]  # one shard per row group
    assert [records(d) for d in _splits(tmp_path / "out")] == [records(d) for d in _splits(tmp_path / "csv_out")]


def test_nulls_are_empty_csv_cells_and_a_column_without_values_is_csvs_all_empty_column(tmp_path):
    header = ["i", "f", "s", "none_int", "null_typed"]
    rows = [["1", "2.5", "a", "", ""], ["", "", "", "", ""], ["3", "nan", "", "", ""]]
    csv_path = _write_csv(str(tmp_path / "c" / "data.csv"), header, rows)
    table = pa.table({"i": pa.array([1, None, 3]), "f": pa.array([2.5, None, float("nan")]),
                      "s": pa.array(["a", None, ""]), "none_int": pa.array([None, None, None], pa.int64()),
                      "null_typed": pa.nulls(3)})
    pq.write_table(table, tmp_path / "data.parquet")
    fast_csv.ingest([csv_path], [str(tmp_path / "csv_out")], [1], workers=0)
    done = fast_parquet.ingest([str(tmp_path / "data.parquet")], [str(tmp_path / "out")], [1], workers=0)
    assert done["types"] == {"i": "INT", "f": "FLOAT", "s": "STRING", "none_int": "UNKNOWN", "null_typed": "UNKNOWN"}
    got = records(str(tmp_path / "out"))
    assert got == records(str(tmp_path / "csv_out"))
    empty = tf.train.Example.FromString(got[1]).features.feature
    assert empty["i"].HasField("int64_list") and not empty["i"].int64_list.value  # an empty list of the kind
    assert empty["s"].HasField("bytes_list") and not empty["s"].bytes_list.value
    assert empty["none_int"].WhichOneof("kind") is None  # no value in the span: an empty Feature


def test_list_columns_become_lists_of_their_kind(tmp_path):
    table = pa.table({
        "ids": pa.array([[1, 2, 3], None, []], pa.list_(pa.int32())),
        "scores": pa.array([[0.5], [1.5, 2.5], None], pa.large_list(pa.float32())),
        "tags": pa.array([["a", ""], ["b"], None], pa.list_(pa.string())),
        "pair": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int64(), 2)),
    })
    pq.write_table(table, tmp_path / "data.parquet")
    fast_parquet.ingest([str(tmp_path / "data.parquet")], [str(tmp_path / "out")], [1], workers=0)
    examples = [tf.train.Example.FromString(r).features.feature for r in records(str(tmp_path / "out"))]
    assert [list(e["ids"].int64_list.value) for e in examples] == [[1, 2, 3], [], []]
    assert [list(e["scores"].float_list.value) for e in examples] == [[0.5], [1.5, 2.5], []]
    assert [list(e["tags"].bytes_list.value) for e in examples] == [[b"a", b""], [b"b"], []]  # "" in a list: a value
    assert [list(e["pair"].int64_list.value) for e in examples] == [[1, 2], [3, 4], [5, 6]]
    assert all(e["ids"].HasField("int64_list") and e["tags"].HasField("bytes_list") for e in examples)


def test_columns_left_out_are_never_read_whatever_their_type(tmp_path):
    table = pa.table({"x": [1, 2], "when": pa.array([0, 1], pa.timestamp("s")), "email": ["a@b", "c@d"]})
    pq.write_table(table, tmp_path / "data.parquet")
    path = str(tmp_path / "data.parquet")
    with pytest.raises(parquet_columns.ParquetInputError, match="column 'when' is timestamp"):
        fast_parquet.ingest([path], [str(tmp_path / "refused")], [1], workers=0)
    done = fast_parquet.ingest([path], [str(tmp_path / "out")], [1], workers=0, drop=["when", "email"])
    assert done["dropped"] == ["when", "email"] and list(done["types"]) == ["x"]
    assert all(set(tf.train.Example.FromString(r).features.feature) == {"x"} for r in records(str(tmp_path / "out")))
