"""The columns of a span's Parquet files: the one rule every reader of Parquet spans gets
column names, feature kinds and values from.

Both ingestion engines (the fast engine, parquet_engine/, and the Beam path of
ParquetExampleGen's executor), the checks before a run and the span checks read Parquet
files here, so they never disagree.

A column's feature kind is its Parquet type's, never the schema's (the checks before a run
hold it to the curated schema, naming the column and both types; nothing is cast to fit):
- INT (int64_list): signed and unsigned integers of any width, booleans (0 and 1), decimals
  of scale 0 (`NUMBER(38,0)` as warehouses unload it); a value beyond int64 is refused;
- FLOAT (float_list, float32 as every FLOAT feature is): float32 and float64, and decimals
  with a fraction (read as their decimal text is read from a CSV cell, so `14.65` gives the
  float the CSV cell `14.65` gives);
- BYTES (bytes_list): string, large_string, string_view, binary, large_binary, fixed-size
  binary, and dictionary-encoded columns of them (pandas' categoricals);
- a list (list, large_list, fixed_size_list) of one of those kinds: the row's values in order,
  as one feature list of that kind; a null inside a list is refused (a tf.Example list holds
  values only);
- a column of Parquet's null type (pandas writes an all-None column so): no values, an empty
  Feature in every example, as an all-empty CSV column.
Refused, naming the file, the column and its type: dates, times, timestamps, durations and
intervals (no one number is right: seconds or milliseconds, which time zone; write Unix
seconds or text), float16, structs, maps, unions and lists of lists (a tf.Example feature
is one flat list of one kind).

A null is an empty CSV cell: an empty list of the column's kind, and an empty Feature where
the whole span has no value in the column (CSV's type inference has no type for it). An
empty string is an empty cell too (a CSV file cannot tell the two apart), so a month gives
the same examples as Parquet and as CSV. A NaN is `nan`, as the CSV cell `nan`.

pandas' index columns (`__index_level_0__`, what `df.to_parquet()` adds for an index that is
not a plain range unless `index=False`) are not data: they are never read. Every file of a
span has the same data columns (in any order), each of one kind in every file; the widths
within a kind may differ (int32 in one file, int64 in another give the same examples).

pyarrow is imported on use: the Airflow side imports `core` without it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable

from core.errors import BadInput

INT, FLOAT, BYTES = "INT", "FLOAT", "BYTES"
MAGIC = b"PAR1"
# pandas' index columns (pandas/io/parquet.py, pyarrow's pandas_compat): never data.
PANDAS_INDEX_RE = re.compile(r"__index_level_\d+__")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class ParquetInputError(BadInput):
    """A Parquet file that ingestion refuses, naming the file (and the column, row group or row)."""


@dataclasses.dataclass(frozen=True)
class ColumnKind:
    """One data column of a file: its name, feature kind and Parquet (Arrow) type.

    `kind` is None for a column of the null type (no values); `problem` says why a column
    cannot be ingested (raised only when the column is read: a column the pipeline never
    ingests may hold any type).
    """

    name: str
    kind: str | None
    is_list: bool
    arrow_type: str
    problem: str | None = None

    def describe(self) -> str:
        """e.g. `int64 (INT)`, `list<item: double> (a list of FLOAT)`."""
        kind = self.kind or "no values"
        return f"{self.arrow_type} ({'a list of ' if self.is_list else ''}{kind})"

    def checked(self, path: str) -> ColumnKind:
        """The column, or ParquetInputError naming the file when it cannot be ingested."""
        if self.problem:
            raise ParquetInputError(f"{path}: column {self.name!r} is {self.arrow_type}: {self.problem}")
        return self


_TIME_PROBLEM = ("a time, which a tf.Example cannot hold as it is and no one conversion is right for (seconds or"
                 " milliseconds, which time zone): write it as an integer (e.g. Unix seconds, as the taxi data's"
                 " trip_start_timestamp) or as text")
_NESTED_PROBLEM = ("nested fields; a tf.Example feature is one flat list of integers, floats or bytes: flatten it"
                   " into columns upstream")


def _scalar_kind(t) -> tuple[str | None, str | None]:
    """(kind, problem) of a non-list Arrow type."""
    import pyarrow as pa

    types = pa.types
    if types.is_dictionary(t):
        return _scalar_kind(t.value_type)
    if types.is_null(t):
        return None, None
    if types.is_boolean(t) or types.is_integer(t):
        return INT, None
    if types.is_float16(t):
        return None, "half-precision floats are not read: write the column as float32 or float64"
    if types.is_floating(t):
        return FLOAT, None
    if types.is_decimal(t):
        return (INT if t.scale <= 0 else FLOAT), None
    if (types.is_string(t) or types.is_large_string(t) or types.is_binary(t) or types.is_large_binary(t)
            or types.is_fixed_size_binary(t) or _is(t, "is_string_view") or _is(t, "is_binary_view")):
        return BYTES, None
    if (types.is_temporal(t) or _is(t, "is_interval")):
        return None, _TIME_PROBLEM
    if types.is_struct(t) or types.is_map(t) or types.is_union(t) or _is_list(t):
        return None, _NESTED_PROBLEM
    return None, ("not a type ingestion reads (integers, floats, decimals, booleans, strings and binary, or lists"
                  " of them)")


def _is(t, predicate: str) -> bool:
    import pyarrow as pa

    check = getattr(pa.types, predicate, None)  # newer pyarrow types (views) exist only in newer releases
    return bool(check and check(t))


def _is_list(t) -> bool:
    import pyarrow as pa

    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or _is(t, "is_list_view") or _is(t, "is_large_list_view"))


def column_kind(name: str, t) -> ColumnKind:
    """The feature kind of a column of Arrow type `t` (the rule in the module docstring)."""
    if _is_list(t):
        value_type = t.value_type
        if _is_list(value_type):
            return ColumnKind(name, None, True, str(t), "a list of lists; " + _NESTED_PROBLEM)
        kind, problem = _scalar_kind(value_type)
        if kind is None and problem is None:  # a list of nulls: no values
            problem = "a list of nulls (no values to ingest)"
        return ColumnKind(name, kind, True, str(t), problem and f"a list of {value_type}: {problem}")
    kind, problem = _scalar_kind(t)
    return ColumnKind(name, kind, False, str(t), problem)


# --- files --------------------------------------------------------------------------------


def _looks_like(head: bytes) -> str:
    if head.startswith(b"\x1f\x8b"):
        return ": gzip-compressed data"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return ": UTF-16 text"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    return ": text (a CSV file named .parquet?)" if head.strip() else ""


def _opened(path: str, opener: Callable | None):
    return opener(path, "rb") if opener else open(path, "rb")


def _source(path: str, opener: Callable | None):
    """What pyarrow reads a file from: the local path; a remote one (`gs://...`) through Arrow's
    filesystems, or else read whole through `opener` (pyarrow cannot read TensorFlow's GFile)."""
    if "://" not in path:
        return path
    import pyarrow as pa
    import pyarrow.fs

    try:
        filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
        return filesystem.open_input_file(inner)
    except (pa.ArrowException, OSError, ValueError):
        with _opened(path, opener) as f:
            return pa.BufferReader(f.read())


def open_file(path: str, opener: Callable | None = None):
    """A pyarrow ParquetFile of `path`, after checking it is a whole Parquet file.

    Args:
      path: the file.
      opener: opens a path for reading bytes (e.g. TFX's fileio.open for remote files): for
        the checks of its first and last bytes, and for the file itself where Arrow has no
        filesystem for its scheme; default: the local filesystem.

    Raises:
      ParquetInputError: naming the file: empty, not Parquet (its first bytes), cut short
        (no closing PAR1: the footer that lists its columns is missing) or a damaged footer.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _opened(path, opener) as f:
            head = f.read(64)
            size = f.seek(0, os.SEEK_END)
            if size is None:  # a file object whose seek returns nothing
                size = f.tell()
            f.seek(max(0, size - 4))
            tail = f.read(4)
    except OSError as e:
        raise ParquetInputError(f"cannot read {path}: {e}") from e
    if not size:
        raise ParquetInputError(f"{path}: the file is empty (0 bytes); a Parquet file holds at least its footer")
    if head[:4] != MAGIC:
        raise ParquetInputError(f"{path}, byte 0: not a Parquet file: it starts with {head[:16]!r}, not Parquet's"
                                f" {MAGIC!r}{_looks_like(head)}")
    if size < 12 or tail != MAGIC:
        raise ParquetInputError(f"{path}: cut short: its {size} bytes end without Parquet's closing {MAGIC!r}, so the"
                                " footer that lists its columns and row groups is missing; the file is truncated"
                                " (an upload or copy that stopped?)")
    try:
        source = _source(path, opener)
        # Pages written with a checksum (parquet-mr and Spark write them) are verified.
        parquet_file = pq.ParquetFile(source, page_checksum_verification=True)
        parquet_file.schema_arrow  # a footer whose types Arrow cannot read fails here, not later
        return parquet_file
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ParquetInputError(f"{path}: the Parquet footer is damaged ({e}); the file is corrupt or cut short") from e


@dataclasses.dataclass(frozen=True)
class FileColumns:
    """A Parquet file's data columns (pandas' index columns left out), in file order."""

    path: str
    columns: tuple[ColumnKind, ...]
    num_rows: int
    row_groups: tuple[int, ...]  # rows of each row group
    index_columns: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> ColumnKind:
        return next(c for c in self.columns if c.name == name)


def file_columns(path: str, parquet_file=None, opener: Callable | None = None) -> FileColumns:
    """The file's data columns and row groups (its footer only; no data is read).

    Raises:
      ParquetInputError: not a whole Parquet file (`open_file`), or a column name twice.
    """
    pf = parquet_file if parquet_file is not None else open_file(path, opener)
    schema = pf.schema_arrow
    meta = pf.metadata
    columns, index = [], []
    seen: set[str] = set()
    for field in schema:
        if PANDAS_INDEX_RE.fullmatch(field.name):
            index.append(field.name)
            continue
        if field.name in seen:
            raise ParquetInputError(f"{path}: column {field.name!r} appears twice; a tf.Example holds one feature"
                                    " per name")
        seen.add(field.name)
        columns.append(column_kind(field.name, field.type))
    return FileColumns(path, tuple(columns), meta.num_rows,
                       tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)), tuple(index))


@dataclasses.dataclass(frozen=True)
class SpanColumns:
    """The data columns of a span's files: the first file's, which every file has."""

    files: tuple[FileColumns, ...]
    columns: tuple[ColumnKind, ...]  # the columns read (those not left out), first file's order
    left_out: tuple[str, ...]  # data columns the files have and ingestion leaves out

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def span_columns(paths: list[str], drop: Iterable[str] = (), opener: Callable | None = None,
                 files: list[FileColumns] | None = None) -> SpanColumns:
    """The span's columns: every file with the same data columns, each read column of one
    kind (a list or not) in every file and of a type ingestion reads.

    Args:
      paths: the span's Parquet files.
      drop: columns left out (never read: any type is fine).
      opener: as `open_file`.
      files: the files' columns already read (else read from each footer).

    Raises:
      ParquetInputError: naming the file and the column: not a whole Parquet file, a column
        of a type refused, or a file whose columns or kinds differ from the first file's.
    """
    drop = set(drop)
    files = files if files is not None else [file_columns(p, opener=opener) for p in paths]
    if not files:
        raise ParquetInputError("no Parquet file to read")
    first = files[0]
    for other in files[1:]:
        missing = [n for n in first.names if n not in other.names]
        more = [n for n in other.names if n not in first.names]
        if missing or more:
            parts = ([f"lacks column(s) {', '.join(missing)}"] if missing else []) + (
                [f"has column(s) {', '.join(more)} it does not"] if more else [])
            raise ParquetInputError(f"{other.path}: its columns differ from {first.path}'s: it {' and '.join(parts)};"
                                    " the files of a span have the same columns")
        for column in first.columns:
            theirs = other.column(column.name)
            if column.name not in drop and (theirs.kind, theirs.is_list) != (column.kind, column.is_list) and (
                    column.kind is not None and theirs.kind is not None):
                raise ParquetInputError(
                    f"{other.path}: column {column.name!r} is {theirs.describe()} where {first.path} has it as"
                    f" {column.describe()}; the files of a span hold each column as one kind")
    read = []
    for column in first.columns:
        if column.name in drop:
            continue
        # A null-typed column in one file and a typed one in another: the typed kind.
        typed = next((f.column(column.name) for f in files if f.column(column.name).kind is not None), column)
        for f in files:
            f.column(column.name).checked(f.path)
        read.append(typed)
    return SpanColumns(tuple(files), tuple(read), tuple(n for n in first.names if n in drop))


# --- values -------------------------------------------------------------------------------


def _rows(path: str, first_row: int | None, first: int, last: int) -> str:
    """Where rows are, for a message: the file's rows, or (first_row None: Beam's source says
    no more) the rows of one of its row groups."""
    if first_row is None:
        return f"{path}, row {first} of a row group" if first == last else f"{path}, a row group"
    if first == last:
        return f"{path}, row {first_row + first}"
    return f"{path}, rows {first_row + first}..{first_row + last}"


def _normalized(array, column: ColumnKind, path: str, first_row: int | None):
    """The column's values as one Arrow array of int64, float64 or string (decimals with a
    fraction: their text) or large_binary, or a large_list of those; nulls kept.

    Raises:
      ParquetInputError: a value beyond int64, or a null inside a list (naming the row).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    value_type = array.type.value_type if column.is_list else array.type
    if pa.types.is_dictionary(value_type):
        value_type = value_type.value_type
    if column.kind == INT:
        target = pa.int64()
    elif column.kind == FLOAT:
        target = pa.string() if pa.types.is_decimal(value_type) else pa.float64()
    else:
        target = pa.large_binary()
    if column.is_list:
        values = array.flatten()
        if values.null_count:
            row = next(i for i, v in enumerate(array.to_pylist()) if v is not None and None in v)
            raise ParquetInputError(f"{_rows(path, first_row, row, row)}: column {column.name!r} ({column.arrow_type})"
                                    " holds a list with a null in it; a tf.Example list holds values only: leave"
                                    " nulls out of the list, or make the whole cell null")
        target = pa.large_list(target)
    try:
        return pc.cast(array, target)
    except pa.ArrowInvalid as e:
        if column.kind == INT:
            for row, cell in enumerate(array.to_pylist()):
                big = next((int(v) for v in (cell if column.is_list else [cell]) or ()
                            if v is not None and not _INT64_MIN <= int(v) <= _INT64_MAX), None)
                if big is not None:
                    raise ParquetInputError(
                        f"{_rows(path, first_row, row, row)}: column {column.name!r} ({column.arrow_type}) holds"
                        f" {big}, beyond int64, which a tf.Example's int64_list cannot hold") from e
        raise ParquetInputError(f"{_rows(path, first_row, 0, len(array) - 1)}: column {column.name!r}"
                                f" ({column.arrow_type}) cannot be read as {column.kind} values ({e})") from e


def _float(value) -> float:
    """A FLOAT value as Python reads the CSV cell holding it: decimals' text by float(), NaN as `nan`."""
    value = float(value)
    return math.nan if value != value else value


def _cell(value, kind: str) -> bytes:
    """A value as the CSV cell that CSV ingestion reads back as the same feature value."""
    if value is None:
        return b""
    if kind == INT:
        return str(value).encode()
    if kind == FLOAT:
        return repr(_float(value)).encode()  # repr: the shortest text float() reads back exactly
    return bytes(value)


@dataclasses.dataclass
class Cells:
    """A column of a row group as CSV ingestion's cells: each row's index into its distinct
    cells (b'' for a null or an empty string; a tuple of cells per row for a list column)."""

    indices: object  # numpy int64 array
    distinct: list
    has_values: bool


def cells(array, column: ColumnKind, path: str, first_row: int | None = 0) -> Cells:
    """The cells of one column of a row group (the fast engine's input: csv_engine's encoder
    encodes cells into features exactly as it does CSV's).

    Raises:
      ParquetInputError: as `_normalized`.
    """
    import numpy as np
    import pyarrow as pa

    if column.kind is None:  # the null type: every row an empty cell
        return Cells(np.zeros(len(array), np.int64), [b""], False)
    array = _normalized(array, column, path, first_row)
    if column.is_list:
        index: dict[tuple, int] = {}
        rows = (tuple(_cell(v, column.kind) for v in row or ()) for row in array.to_pylist())
        indices = np.fromiter((index.setdefault(row, len(index)) for row in rows), np.int64, len(array))
        distinct = list(index)
        return Cells(indices, distinct, any(distinct))
    if pa.types.is_float64(array.type):
        # Distinct by their bits: -0.0 is not 0.0 (two CSV cells), a NaN is any NaN.
        encoded = array.view(pa.int64()).dictionary_encode()
        floats = encoded.dictionary.to_numpy(zero_copy_only=False).view(np.float64).tolist()
        distinct = [_cell(v, column.kind) for v in floats]
    else:
        encoded = array.dictionary_encode()
        distinct = [_cell(v, column.kind) for v in encoded.dictionary.to_pylist()]
    has_values = any(distinct)
    distinct.append(b"")  # the null's cell
    indices = encoded.indices.fill_null(len(distinct) - 1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return Cells(indices, distinct, has_values)


def row_values(array, column: ColumnKind, path: str, first_row: int | None = 0) -> list[list]:
    """Each row's feature values as Python ints, floats or bytes ([] for a null or an empty
    string): the Beam path builds its tf.Examples from these.

    Raises:
      ParquetInputError: as `_normalized`.
    """
    if column.kind is None:
        return [[] for _ in range(len(array))]
    array = _normalized(array, column, path, first_row)
    convert = int if column.kind == INT else _float if column.kind == FLOAT else bytes
    if column.is_list:
        return [[convert(v) for v in row] if row else [] for row in array.to_pylist()]
    return [[] if v is None or v == b"" else [convert(v)] for v in array.to_pylist()]


def read_row_group(parquet_file, path: str, index: int, names: list[str]):
    """One row group's columns as an Arrow table.

    Raises:
      ParquetInputError: the row group cannot be read (a damaged page, cut short), naming it.
    """
    import pyarrow as pa

    try:
        return parquet_file.read_row_group(index, columns=names)
    except (pa.ArrowException, OSError, ValueError) as e:
        first = sum(parquet_file.metadata.row_group(i).num_rows for i in range(index))
        rows = parquet_file.metadata.row_group(index).num_rows
        raise ParquetInputError(f"{path}, row group {index} (rows {first}..{first + rows - 1}): cannot be read"
                                f" ({e}); the file is damaged") from e


def check_span_parquet(folder: str) -> None:
    """Fails early on a span whose Parquet files are missing, not Parquet, cut short, empty,
    or whose columns differ between files (footers only; the data are read before a run by
    runner.preflight).

    Raises:
      ParquetInputError: naming the file and the problem.
    """
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".parquet"))
    if not paths:
        raise ParquetInputError(f"span folder {folder!r} holds no .parquet file")
    files = [file_columns(p) for p in paths]
    for f in files:
        if not f.columns:
            raise ParquetInputError(f"{f.path} has no data columns")
    if not sum(f.num_rows for f in files):
        raise ParquetInputError(f"{folder}: its Parquet files hold no rows")
    # The same columns in every file, each of one kind (a column of a type ingestion refuses is
    # named when it is read: one the run leaves out may hold any type).
    refused = {c.name for f in files for c in f.columns if c.problem}
    span_columns(paths, drop=refused, files=files)


def check_values(array, column: ColumnKind, path: str, first_row: int | None = 0) -> None:
    """Every value of a column of a row group can be ingested as its kind: integers within
    int64, lists without a null (what the checks before a run read each row group for).

    Raises:
      ParquetInputError: naming the file, the rows and the column.
    """
    if column.kind is not None:
        _normalized(array, column, path, first_row)
