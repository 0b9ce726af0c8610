"""The checks before a run on Parquet spans (runner/preflight.py): the row count, the schema's
columns and each column's type against the schema (never cast to fit), and damaged files, each
named with the file (and column, row group or byte)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner import preflight
from tests import parquet_writers
from tests.conftest import REPO, TAXI_SCHEMA
from tests.parquet_engine.test_fast_parquet import ROWS, _month, _types


@pytest.fixture
def folder(tmp_path):
    """A taxi month as Parquet (two files), which passes every check."""
    header, rows = _month()
    folder = tmp_path / "data" / "span-201612"
    for i, part in enumerate((rows[:100], rows[100:])):
        parquet_writers._pyarrow(name=f"part-{i}.parquet")(row_group_size=30)(str(folder), header, part, _types())
    return folder


def _check(folder) -> list[str]:
    return preflight.check_span_files(str(folder), TAXI_SCHEMA, "parquet")


def _rewrite(path, **columns):
    """The file with columns replaced (or added)."""
    table = pq.read_table(path)
    for name, array in columns.items():
        table = (table.set_column(table.column_names.index(name), name, array) if name in table.column_names
                 else table.append_column(name, array))
    pq.write_table(table, path)


def test_a_good_month_passes_and_its_rows_are_counted(folder):
    assert _check(folder) == []
    assert sum(preflight.check_parquet_file(str(p)) for p in sorted(folder.iterdir())) == ROWS


def test_an_integer_column_where_the_schema_says_float_stops_naming_the_column_and_both_types(folder):
    path = str(folder / "part-0.parquet")
    for name, rows in (("part-0.parquet", 100), ("part-1.parquet", ROWS - 100)):  # the span's one kind
        _rewrite(str(folder / name), fare=pa.array(range(rows), pa.int64()))
    with pytest.raises(preflight.InputError) as e:
        _check(folder)
    assert str(e.value) == (f"{path}: column 'fare' is int64 (INT) where the schema says FLOAT: a column's values are"
                            " never cast to fit the schema; write the column as floating-point numbers, or make the"
                            " feature INT in the schema")


def test_a_float_column_where_the_schema_says_int_stops_with_what_pandas_does(folder):
    for name in ("part-0.parquet", "part-1.parquet"):  # both files: the same kind in the span
        table = pq.read_table(folder / name)
        _rewrite(str(folder / name), trip_seconds=pa.compute.cast(table.column("trip_seconds"), pa.float64()))
    with pytest.raises(preflight.InputError, match=r"part-0.parquet: column 'trip_seconds' is double \(FLOAT\) where"
                                                   r" the schema says INT: .* `df\[column\].astype\('Int64'\)`"):
        _check(folder)


@pytest.mark.parametrize("array, message", [
    (pa.array([0] * (ROWS - 100), pa.timestamp("ms")), "column 'company' is timestamp[ms]: a time"),
    (pa.array([None] * (ROWS - 100), pa.struct([("a", pa.int64())])), "column 'company' is struct<a: int64>: nested"),
])
def test_a_type_ingestion_refuses_stops_naming_the_file_and_column(folder, array, message):
    _rewrite(str(folder / "part-1.parquet"), company=array)
    with pytest.raises(preflight.InputError, match=f"^{folder / 'part-1.parquet'}: {message}".replace("[", r"\[")):
        _check(folder)


def test_a_column_of_the_null_type_fits_any_schema_type(folder):
    for name in ("part-0.parquet", "part-1.parquet"):
        _rewrite(str(folder / name), fare=pa.nulls(pq.read_metadata(folder / name).num_rows))
    assert _check(folder) == []


def test_a_missing_or_new_column_stops_as_for_csv(folder):
    path = str(folder / "part-0.parquet")
    pq.write_table(pq.read_table(path).drop_columns(["tips"]), path)
    with pytest.raises(preflight.InputError, match="columns differ"):  # first: the files of the span differ
        _check(folder)
    other = str(folder / "part-1.parquet")
    pq.write_table(pq.read_table(other).drop_columns(["tips"]), other)
    with pytest.raises(preflight.InputError, match=f"^{path} does not match the schema: missing column\\(s\\) tips"):
        _check(folder)


@pytest.mark.parametrize("damage, message", [
    ("truncated", "cut short: its {size} bytes end without Parquet's closing b'PAR1'"),
    ("csv", "byte 0: not a Parquet file: it starts with b'pickup_community', not Parquet's b'PAR1': text"),
    ("empty", "the file is empty (0 bytes)"),
    ("page", "row group 0 (rows 0..29): cannot be read"),
    ("checksum", "row group 0 (rows 0..29): cannot be read (could not verify page integrity"),
])
def test_damaged_files_are_bad_input_naming_the_file(folder, damage, message):
    path = folder / "part-1.parquet"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) - 100])
    elif damage == "csv":
        path.write_bytes(b"pickup_community_area,fare\n1,2.0\n")
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "checksum":  # one bit of a plain page whose checksum the writer wrote (parquet-mr does)
        pq.write_table(pq.read_table(path), path, row_group_size=30, compression="none", use_dictionary=False,
                       write_page_checksum=True)
        data = bytearray(path.read_bytes())
        column = pq.read_metadata(path).row_group(0).column(1)
        data[column.data_page_offset + column.total_compressed_size - 8] ^= 0x01
        path.write_bytes(bytes(data))
    else:  # bytes overwritten inside the first row group's first (gzip-compressed) page
        table = pq.read_table(path)
        pq.write_table(table, path, row_group_size=30, compression="gzip")
        data = bytearray(path.read_bytes())
        start = pq.read_metadata(path).row_group(0).column(1).data_page_offset + 40
        data[start:start + 24] = b"\x00" * 24
        path.write_bytes(bytes(data))
    size = os.path.getsize(path)
    with pytest.raises(preflight.InputError) as e:
        _check(folder)
    assert str(e.value).startswith(str(path)) and message.format(size=size) in str(e.value), str(e.value)


def test_a_schema_that_changes_between_files_of_the_span_is_bad_input_naming_the_file(folder):
    path = str(folder / "part-1.parquet")
    _rewrite(path, payment_type=pa.array(range(ROWS - 100), pa.int64()))
    with pytest.raises(preflight.InputError) as e:
        _check(folder)
    assert str(e.value) == (f"{path}: column 'payment_type' is int64 (INT) where {folder / 'part-0.parquet'} has it as"
                            " string (BYTES); the files of a span hold each column as one kind")


# --- the set-up guide's list of refused files (docs/guides/setup.md, "Parquet spans") ---

GUIDE = os.path.join(REPO, "docs", "guides", "setup.md")
_MINI_SCHEMA = "".join(f'feature {{\n  name: "{name}"\n  type: {kind}\n}}\n' for name, kind in (
    ("fare", "FLOAT"), ("company", "BYTES"), ("trip_seconds", "INT"), ("trip_start_timestamp", "INT"), ("ids", "INT")))


def _mini(**changes):
    columns = {"fare": pa.array([3.75, 4.5, 8.0]), "company": pa.array(["Flash Cab", None, "Sun Taxi"]),
               "trip_seconds": pa.array([60, 420, 300]), "trip_start_timestamp": pa.array([1, 2, 3]),
               "ids": pa.array([[1], [2, 3], []], pa.list_(pa.int64()))}
    columns.update(changes)
    return pa.table(columns)


def _refused(tmp_path, case: str) -> str:
    folder = tmp_path / "span-201612"
    folder.mkdir()
    path = folder / "data.parquet"
    if case == "csv":
        path.write_bytes(b"fare,company\n3.75,Flash Cab\n")
    elif case == "cut":
        pq.write_table(_mini(), path)
        path.write_bytes(path.read_bytes()[:200])
    elif case.startswith("files"):
        pq.write_table(_mini(), folder / "part-0.parquet")
        other = (_mini(fare=pa.array(["3.75", "4.5", "8.0"])) if case == "files_kind"
                 else _mini().drop_columns(["company"]))
        pq.write_table(other, folder / "part-1.parquet")
    else:
        changes = {
            "int_for_float": {"fare": pa.array([3, 4, 8])},
            "float_for_int": {"trip_seconds": pa.array([60.0, None, 300.0])},
            "time": {"trip_start_timestamp": pa.array([1, 2, 3], pa.timestamp("ms"))},
            "nested": {"company": pa.array([{"name": "Flash Cab", "id": 1}] * 3,
                                           pa.struct([("name", pa.string()), ("id", pa.int64())]))},
            "half": {"fare": pa.array(np.array([1, 2, 3], np.float16))},
            "null_in_list": {"ids": pa.array([[1], [3, None], []], pa.list_(pa.int64()))},
            "beyond": {"trip_seconds": pa.array([1, 2**64 - 1, 3], pa.uint64())},
        }[case]
        pq.write_table(_mini(**changes), path)
    schema = tmp_path / "schema.pbtxt"
    schema.write_text(_MINI_SCHEMA)
    with pytest.raises(preflight.InputError) as e:
        preflight.check_run_inputs(str(tmp_path), 201612, str(schema), "parquet")
    return str(e.value).replace(str(tmp_path) + os.sep, "")


@pytest.mark.parametrize("case", ["csv", "cut", "int_for_float", "float_for_int", "time", "nested", "half",
                                  "null_in_list", "beyond", "files_kind", "files_columns"])
def test_the_set_up_guide_says_what_each_refused_file_gives(tmp_path, case):
    with open(GUIDE, encoding="utf-8") as f:
        guide = f.read()
    message = _refused(tmp_path, case)
    assert message in guide, message
