"""The Parquet column rule (core/parquet_columns.py): which Parquet types give which feature
kind and which are refused, what a null, an empty string, a NaN and a decimal become, pandas'
index columns, and the file and span checks, each naming the file."""

from __future__ import annotations

import decimal
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import parquet_columns as pc_rule
from core import spans

KINDS = [
    (pa.int8(), "INT"), (pa.int16(), "INT"), (pa.int32(), "INT"), (pa.int64(), "INT"), (pa.uint8(), "INT"),
    (pa.uint32(), "INT"), (pa.uint64(), "INT"), (pa.bool_(), "INT"), (pa.decimal128(38, 0), "INT"),
    (pa.float32(), "FLOAT"), (pa.float64(), "FLOAT"), (pa.decimal128(10, 2), "FLOAT"),
    (pa.string(), "BYTES"), (pa.large_string(), "BYTES"), (pa.binary(), "BYTES"), (pa.large_binary(), "BYTES"),
    (pa.binary(4), "BYTES"), (pa.dictionary(pa.int8(), pa.string()), "BYTES"),
]


@pytest.mark.parametrize("arrow_type, kind", KINDS, ids=[str(t) for t, _ in KINDS])
def test_each_type_has_its_kind_and_a_list_of_it_a_list_of_that_kind(arrow_type, kind):
    column = pc_rule.column_kind("c", arrow_type)
    assert (column.kind, column.is_list, column.problem) == (kind, False, None)
    for list_type in (pa.list_(arrow_type), pa.large_list(arrow_type), pa.list_(arrow_type, 3)):
        column = pc_rule.column_kind("c", list_type)
        assert (column.kind, column.is_list, column.problem) == (kind, True, None)


REFUSED = [
    (pa.timestamp("s"), "a time"), (pa.timestamp("ms", tz="UTC"), "a time"), (pa.date32(), "a time"),
    (pa.time64("us"), "a time"), (pa.duration("s"), "a time"), (pa.float16(), "half-precision"),
    (pa.struct([("a", pa.int64())]), "nested fields"), (pa.map_(pa.string(), pa.int64()), "nested fields"),
    (pa.list_(pa.list_(pa.int64())), "a list of lists"), (pa.list_(pa.timestamp("s")), "a time"),
]


@pytest.mark.parametrize("arrow_type, problem", REFUSED, ids=[str(t) for t, _ in REFUSED])
def test_times_half_floats_and_nested_types_are_refused_naming_the_file_column_and_type(arrow_type, problem):
    column = pc_rule.column_kind("when", arrow_type)
    assert problem in column.problem
    with pytest.raises(pc_rule.ParquetInputError) as e:
        column.checked("span-201601/data.parquet")
    assert str(e.value).startswith(f"span-201601/data.parquet: column 'when' is {arrow_type}: ")


def test_the_null_type_has_no_values_and_no_problem():
    column = pc_rule.column_kind("c", pa.null())
    assert (column.kind, column.problem) == (None, None)
    cells = pc_rule.cells(pa.nulls(3), column, "f")
    assert cells.has_values is False and cells.distinct == [b""]
    assert pc_rule.row_values(pa.nulls(2), column, "f") == [[], []]


def test_values_are_the_cells_csv_ingestion_reads_back_as_the_same_values():
    cases = [
        (pa.array([3, None, -7, 0], pa.int32()), [[3], [], [-7], [0]], [b"3", b"", b"-7", b"0"]),
        (pa.array([True, False, None]), [[1], [0], []], [b"1", b"0", b""]),
        (pa.array([1.5, None, float("nan"), -0.0, 0.1], pa.float64()), None, [b"1.5", b"", b"nan", b"-0.0", b"0.1"]),
        (pa.array([0.1], pa.float32()), [[float(np.float32(0.1))]], [repr(float(np.float32(0.1))).encode()]),
        (pa.array([decimal.Decimal("14.65"), None], pa.decimal128(10, 2)), [[14.65], []], [b"14.65", b""]),
        (pa.array([decimal.Decimal(12), None], pa.decimal128(38, 0)), [[12], []], [b"12", b""]),
        (pa.array(["a", "", None, "é"], pa.large_string()), [[b"a"], [], [], ["é".encode()]],
         [b"a", b"", b"", "é".encode()]),
        (pa.array(["x", None, "x"]).dictionary_encode(), [[b"x"], [], [b"x"]], [b"x", b"", b"x"]),
    ]
    for array, values, cells in cases:
        column = pc_rule.column_kind("c", array.type)
        if values is not None:
            got = pc_rule.row_values(array, column, "f")
            assert got == values or all(a == b or (a != a and b != b) for a, b in zip(got, values)), array.type
        if cells is not None:
            found = pc_rule.cells(array, column, "f")
            assert [found.distinct[i] for i in found.indices] == cells, array.type
    nan = pc_rule.row_values(pa.array([float("nan")]), pc_rule.column_kind("c", pa.float64()), "f")[0][0]
    assert nan != nan


def test_a_decimal_with_a_fraction_is_the_float_of_its_text_as_a_csv_cell_is():
    array = pa.array([decimal.Decimal("41.978829526")], pa.decimal128(18, 9))
    assert pc_rule.row_values(array, pc_rule.column_kind("c", array.type), "f") == [[float("41.978829526")]]


def test_lists_keep_their_values_and_a_null_inside_a_list_or_an_integer_beyond_int64_is_refused():
    column = pc_rule.column_kind("ids", pa.list_(pa.int64()))
    array = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64()))
    assert pc_rule.row_values(array, column, "f") == [[1, 2], [], [], [3]]
    found = pc_rule.cells(array, column, "f")
    assert [found.distinct[i] for i in found.indices] == [(b"1", b"2"), (), (), (b"3",)] and found.has_values
    with pytest.raises(pc_rule.ParquetInputError, match=r"^f, row 12: column 'ids' \(list<item: int64>\) holds a list"
                                                        r" with a null in it"):
        pc_rule.cells(pa.array([[1], [None, 2]], pa.list_(pa.int64())), column, "f", first_row=11)
    big = pa.array([1, 2**64 - 1], pa.uint64())
    with pytest.raises(pc_rule.ParquetInputError, match=r"^f, row 1: column 'n' \(uint64\) holds 18446744073709551615,"
                                                        " beyond int64"):
        pc_rule.cells(big, pc_rule.column_kind("n", big.type), "f")


def _write(path, table, **args):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, **args)
    return path


def test_pandas_index_columns_are_not_data(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"]}, index=pd.Index([4, 8, 9]))
    frame.to_parquet(tmp_path / "p.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "p.parquet").names  # what pandas writes
    found = pc_rule.file_columns(str(tmp_path / "p.parquet"))
    assert found.names == ["a", "b"] and found.index_columns == ("__index_level_0__",)


def test_files_that_are_not_whole_parquet_are_named_with_what_they_are(tmp_path):
    good = _write(str(tmp_path / "good.parquet"), pa.table({"a": list(range(100))}))
    data = open(good, "rb").read()
    cases = {
        "empty.parquet": (b"", r"the file is empty \(0 bytes\)"),
        "csv.parquet": (b"a,b\n1,2\n", r"byte 0: not a Parquet file: it starts with b'a,b\\n1,2\\n', not Parquet's"
                                       r" b'PAR1': text \(a CSV file named .parquet\?\)"),
        "gzip.parquet": (b"\x1f\x8b\x08\x00rest", "not a Parquet file: .* gzip-compressed data"),
        "cut.parquet": (data[: len(data) // 2], f"cut short: its {len(data) // 2} bytes end without Parquet's closing"
                                                " b'PAR1'"),
        "footer.parquet": (data[:4] + b"\x00" * (len(data) - 8) + data[-4:], "the Parquet footer is damaged"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(pc_rule.ParquetInputError, match=message) as e:
            pc_rule.open_file(str(path))
        assert str(e.value).startswith(str(path)), name


def test_the_files_of_a_span_have_the_same_columns_of_one_kind_each(tmp_path):
    folder = tmp_path / "span-201601"
    a = _write(str(folder / "a.parquet"), pa.table({"x": pa.array([1], pa.int64()), "y": ["u"]}))
    _write(str(folder / "b.parquet"), pa.table({"y": ["v"], "x": pa.array([2], pa.int32())}))  # order, width: fine
    pc_rule.check_span_parquet(str(folder))
    assert pc_rule.span_columns(sorted(str(p) for p in folder.iterdir())).names == ["x", "y"]
    c = _write(str(folder / "c.parquet"), pa.table({"x": pa.array([2.5]), "y": ["w"]}))
    with pytest.raises(pc_rule.ParquetInputError) as e:
        pc_rule.check_span_parquet(str(folder))
    assert str(e.value) == (f"{c}: column 'x' is double (FLOAT) where {a} has it as int64 (INT); the files of a span"
                            " hold each column as one kind")
    _write(c, pa.table({"x": [3], "y": ["w"], "z": [1.0]}))
    with pytest.raises(pc_rule.ParquetInputError, match=f"^{c}: its columns differ from {a}'s: it has column"
                                                        r"\(s\) z it does not; the files of a span have the same"):
        pc_rule.check_span_parquet(str(folder))
    os.remove(c)
    with pytest.raises(spans.SpanError, match="holds no .parquet file"):
        spans.check_span_parquet(str(tmp_path))
