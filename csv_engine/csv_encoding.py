"""CSV records to serialized tf.Examples exactly as TFX's CsvExampleGen makes them, a chunk at a time.

What CsvExampleGen does (tfx/components/example_gen/csv_example_gen/executor.py, tfx_bsl's
csv_decoder), and where this module does the same:
- the header is the file's first line, `strip().split(",")`; ours is read by the span CSV
  header rule (core/csv_header.py), which gives the same names for such a header and also
  reads quoted names and a UTF-8 byte-order mark, where TFX keeps the quotes and the mark
  in the names;
- each later line is decoded as UTF-8; lines are joined until their double quotes balance
  (a quoted cell may hold newlines), and each such record is parsed by Python's `csv`
  module with the default dialect; a blank record is skipped (`parse_chunk`: chunks with no
  quote and no bare carriage return are parsed by Arrow without quoting, which splits
  cells exactly as `csv` does on them; any other chunk goes through `csv` itself);
- one type per column over the whole split: a cell is INT if `int()` reads it within
  int64, else STRING if it is a longer integer, else FLOAT if `float()` reads it, else
  STRING; an empty cell says nothing (UNKNOWN); the column takes the highest
  (`column_type`, applied to each distinct cell once);
- INT cells become an int64_list, FLOAT a float_list (float32), STRING a bytes_list, an
  empty cell an empty list of the column's kind, an all-empty column an empty Feature;
- the split of an example is `bisect(buckets, int(sha256(example).hexdigest(), 16) %
  total)` over its deterministic serialization (base_example_gen_executor._PartitionFn).

The examples are written in that deterministic serialization (map entries sorted by key),
so the bytes written are the bytes hashed. `encode_batch` builds them for many rows at
once: each distinct cell of a column is encoded once as its whole map entry, and each row
is the concatenation of its cells' entries (a padded gather, then a mask that drops the
padding), already framed as a TFRecord (length, masked CRC32C of the length, data, masked
CRC32C of the data).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import operator
import struct

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from core.csv_header import CsvInputError

# tfx_bsl.coders.csv_decoder.ColumnType (its module imports Beam: seconds per worker).
UNKNOWN, INT, FLOAT, STRING = -1, 0, 1, 2
TYPE_NAMES = {UNKNOWN: "UNKNOWN", INT: "INT", FLOAT: "FLOAT", STRING: "STRING"}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A TFRecord frame around each example: 8-byte length + its 4-byte CRC, data, data CRC.
FRAME_OVERHEAD = 16
_MAX_EXAMPLE_HEADER = 6  # 0x0A tag + a varint of up to 5 bytes (examples under 32 GiB)
# The padded row matrix of one batch is kept under this many bytes.
BATCH_BYTES = 48 << 20


def infer_value_type(cell: bytes) -> int:
    """The type of one cell (tfx_bsl's `_InferValueType`)."""
    if not cell:
        return UNKNOWN
    try:
        return INT if _INT64_MIN <= int(cell) <= _INT64_MAX else STRING
    except ValueError:
        try:
            float(cell)
        except ValueError:
            return STRING
        return FLOAT


# --- parsing -----------------------------------------------------------------------------


def _python_records(data: bytes, path: str, first_line: int):
    """(line number, record) as CsvExampleGen's line buffer yields them: the file's lines
    (split at b"\n", which each keeps) decoded as UTF-8, joined until the quotes balance."""
    pending: list[str] = []
    quotes = 0
    start = line_no = first_line
    pos = 0
    while pos < len(data):
        newline = data.find(b"\n", pos)
        end = len(data) if newline < 0 else newline + 1
        try:
            text = data[pos:end].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CsvInputError(f"{path}: line {line_no} is not valid UTF-8 ({e.reason})") from e
        if "\x00" in text:  # the `csv` module refuses NUL on some Pythons (3.10); stopped here on every one
            raise CsvInputError(f"{path}: line {line_no}: a NUL byte (binary data, not CSV text)")
        if not pending:
            start = line_no
        pending.append(text)
        quotes += text.count('"')
        if quotes % 2 == 0:
            yield start, "".join(pending)
            pending, quotes = [], 0
        pos, line_no = end, line_no + 1
    if pending:
        raise CsvInputError(f"{path}: the record starting at line {start} has unbalanced quotes")


class _Repeat:
    """The one-item iterator tfx_bsl's _CSVRecordReader feeds `csv.reader`."""

    item = ""

    def __iter__(self):
        return self

    def __next__(self):
        return self.item


def _parse_python(data: bytes, num_columns: int, path: str, first_line: int) -> list[list[bytes]]:
    source = _Repeat()
    reader = csv.reader(source, delimiter=",")
    columns: list[list[bytes]] = [[] for _ in range(num_columns)]
    for line_no, record in _python_records(data, path, first_line):
        source.item = record
        try:
            cells = next(reader)
        except csv.Error as e:
            raise CsvInputError(f"{path}: line {line_no}: {e}") from e
        if not cells:
            continue
        if len(cells) != num_columns:
            raise CsvInputError(
                f"{path}: line {line_no} has {len(cells)} cells where the header has {num_columns} columns:"
                f" {record.rstrip()[:200]!r}")
        for column, cell in zip(columns, cells):
            column.append(cell.encode())
    return columns


def arrow_safe(data: bytes) -> bool:
    """Whether Arrow without quoting splits this chunk as `csv` does: no quote at all, and
    every carriage return ends a line (`csv` refuses a bare one; Arrow takes it as a newline),
    and no NUL byte (`csv` refuses a line with one, so CsvExampleGen does; Arrow keeps it)."""
    return b'"' not in data and b"\x00" not in data and data.count(b"\r") == data.count(b"\r\n")


def parse_chunk(data: bytes, num_columns: int, path: str, first_line: int) -> list[pa.Array]:
    """The cells of a chunk of whole records, one binary array per column (empty cells b'').

    Args:
      data: the chunk's bytes: whole records (never a header).
      num_columns: the header's column count.
      path, first_line: where the chunk starts, for error messages.

    Raises:
      CsvInputError: a line that is not UTF-8, a record with the wrong number of cells,
        unbalanced quotes, or a bare carriage return, naming the file and line.
    """
    if arrow_safe(data):
        if not data.isascii():
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                line = first_line + data.count(b"\n", 0, e.start)
                raise CsvInputError(f"{path}: line {line} is not valid UTF-8 ({e.reason})") from e
        names = [f"c{i}" for i in range(num_columns)]
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(data),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=max(1 << 20, len(data) + 1)),
                parse_options=pa_csv.ParseOptions(delimiter=",", quote_char=False, double_quote=False,
                                                  escape_char=False, newlines_in_values=False, ignore_empty_lines=True),
                convert_options=pa_csv.ConvertOptions(column_types={n: pa.binary() for n in names}, null_values=[],
                                                      strings_can_be_null=False, check_utf8=False),
            )
        except pa.ArrowInvalid:
            # A record with the wrong number of cells: let `csv` find and name its line.
            _parse_python(data, num_columns, path, first_line)
            raise
        return [table.column(i).combine_chunks() if table.num_rows else pa.array([], pa.binary())
                for i in range(num_columns)]
    return [pa.array(column, pa.binary()) for column in _parse_python(data, num_columns, path, first_line)]


# --- types ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Column:
    """One column of a chunk: each row's index into its distinct cells."""

    indices: np.ndarray
    distinct: list[bytes]

    @classmethod
    def of(cls, cells: pa.Array) -> Column:
        encoded = cells.dictionary_encode()
        return cls(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
                   encoded.dictionary.to_pylist())

    def type(self) -> int:
        """The highest type of the distinct cells (ColumnTypeInferrer over this chunk)."""
        best = UNKNOWN
        for cell in self.distinct:
            kind = infer_value_type(cell)
            if kind > best:
                best = kind
                if best == STRING:
                    break
        return best


def merge_types(types: list[list[int]]) -> list[int]:
    """The split's types from each chunk's (ColumnTypeInferrer.merge_accumulators)."""
    return [max(column) for column in zip(*types)]


# --- encoding -------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64s as protobuf writes them: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def _feature(kind: int, cell: bytes | tuple[bytes, ...]) -> bytes:
    """The serialized tf.train.Feature of one cell of a column of this type; a tuple of cells
    (a row of a Parquet list column, core/parquet_columns.py) is one list of every value."""
    if isinstance(cell, tuple):
        return _list_feature(kind, cell)
    if kind == INT:  # int64_list = 3, its packed value = 1
        return _length_delimited(0x1A, _length_delimited(0x0A, _varint(int(cell))) if cell else b"")
    if kind == FLOAT:  # float_list = 2
        return _length_delimited(0x12, _length_delimited(0x0A, np.float32(float(cell)).tobytes()) if cell else b"")
    if kind == STRING:  # bytes_list = 1
        return _length_delimited(0x0A, _length_delimited(0x0A, cell) if cell else b"")
    return b""  # an all-empty column: tf.train.Feature()


def _list_feature(kind: int, cells: tuple[bytes, ...]) -> bytes:
    """The serialized tf.train.Feature of a list of cells, in order (an empty string in a list
    is a value; an empty tuple an empty list of the kind)."""
    if kind == INT:
        return _length_delimited(0x1A, _length_delimited(0x0A, b"".join(_varint(int(c)) for c in cells))
                                 if cells else b"")
    if kind == FLOAT:
        return _length_delimited(0x12, _length_delimited(0x0A, np.asarray([float(c) for c in cells], np.float32)
                                                         .astype("<f4").tobytes()) if cells else b"")
    if kind == STRING:
        return _length_delimited(0x0A, b"".join(_length_delimited(0x0A, c) for c in cells))
    return b""


def entries(name: str, kind: int, distinct: list[bytes]) -> list[bytes]:
    """Each distinct cell's whole `Features.feature` map entry (key, then value)."""
    key = _length_delimited(0x0A, name.encode("utf-8"))
    return [_length_delimited(0x0A, key + _length_delimited(0x12, _feature(kind, cell))) for cell in distinct]


class _Padded:
    """Byte strings as a padded matrix (one per row) and their lengths."""

    def __init__(self, items: list[bytes]):
        self.lengths = np.fromiter((len(b) for b in items), np.int64, len(items))
        self.width = int(self.lengths.max()) if len(items) else 0
        self.matrix = np.zeros((len(items), max(self.width, 1)), np.uint8)
        flat = np.frombuffer(b"".join(items), np.uint8)
        rows = np.repeat(np.arange(len(items)), self.lengths)
        cols = np.arange(len(flat)) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        self.matrix[rows, cols] = flat


def _varint_matrix(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints of non-negative int64s as a [n, width] byte matrix and their lengths."""
    out = np.zeros((len(values), width), np.uint8)
    lengths = np.ones(len(values), np.int64)
    rest = values.astype(np.uint64)
    for i in range(width):
        more = rest > 0x7F
        out[:, i] = (rest & 0x7F) | (more.astype(np.uint64) << 7)
        rest = rest >> 7
        lengths += more
        if not more.any():
            break
    return out, lengths


def _masked_crc(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC32C."""
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass
class EncodedBatch:
    """TFRecord frames of a batch of examples, in row order, and each example's split."""

    frames: np.ndarray
    starts: np.ndarray  # frame i is frames[starts[i]:starts[i + 1]]
    partitions: np.ndarray

    def split_bytes(self, partition: int) -> bytes:
        """The frames of one partition, in row order."""
        view = memoryview(self.frames)
        starts = self.starts
        return b"".join([view[starts[i]:starts[i + 1]] for i in np.flatnonzero(self.partitions == partition)])


class Encoder:
    """Encodes the rows of chunks, given each column's type for the whole split.

    Args:
      names: the header's column names.
      types: one type per column (the split's).
      buckets: cumulative hash buckets of the output splits (e.g. [3, 4] for 3:1).
    """

    def __init__(self, names: list[str], types: list[int], buckets: list[int]):
        # A repeated column name has one type, the highest of its columns (TFX infers
        # types by name), and the example keeps its last column (a dict of the cells).
        by_name: dict[str, int] = {}
        for name, kind in zip(names, types):
            by_name[name] = max(kind, by_name.get(name, UNKNOWN))
        self.names, self.types = names, [by_name[name] for name in names]
        self.buckets = np.asarray(buckets, np.int64)
        # Sorted keys: deterministic serialization sorts map keys by their bytes.
        last = {name: i for i, name in enumerate(names)}
        self.order = [last[name] for name in sorted(last, key=lambda n: n.encode("utf-8"))]

    def batches(self, columns: list[Column]):
        """Encoded batches of a chunk's rows, in order, each under BATCH_BYTES of padded matrix."""
        tables = [(_Padded(entries(self.names[i], self.types[i], columns[i].distinct)), columns[i].indices)
                  for i in self.order]
        rows = len(columns[0].indices) if columns else 0
        width = FRAME_OVERHEAD + _MAX_EXAMPLE_HEADER + sum(table.width for table, _ in tables)
        step = max(1, BATCH_BYTES // width)
        for start in range(0, rows, step):
            yield self._encode(tables, slice(start, min(rows, start + step)))

    def _encode(self, tables, rows: slice) -> EncodedBatch:
        count = rows.stop - rows.start
        lengths = [table.lengths[indices[rows]] for table, indices in tables]
        body = np.sum(lengths, axis=0) if lengths else np.zeros(count, np.int64)
        varint, varint_len = _varint_matrix(body, _MAX_EXAMPLE_HEADER - 1)
        example_len = 1 + varint_len + body
        distinct_len, where = np.unique(example_len, return_inverse=True)
        len_crc = _masked_crc(np.array([google_crc32c.value(struct.pack("<Q", int(n))) for n in distinct_len],
                                       np.uint64))[where]
        # One padded row per example (frame header, example tag and length, the entries,
        # frame footer), then a mask keeps each part's real bytes: the frames, in row order.
        widths = [12, 1, varint.shape[1], *(table.matrix.shape[1] for table, _ in tables), 4]
        matrix = np.zeros((count, sum(widths)), np.uint8)
        keep = np.ones((count, sum(widths)), bool)
        matrix[:, :8] = example_len.astype("<u8").view(np.uint8).reshape(count, 8)
        matrix[:, 8:12] = len_crc.astype("<u4").view(np.uint8).reshape(count, 4)
        matrix[:, 12] = 0x0A
        at = 13
        for width, block, n in [(widths[2], varint, varint_len),
                                *((t.matrix.shape[1], t.matrix[i[rows]], ln) for (t, i), ln in zip(tables, lengths))]:
            matrix[:, at:at + width] = block
            keep[:, at:at + width] = np.arange(width)[None, :] < n[:, None]
            at += width
        frames = matrix[keep]
        starts = np.zeros(count + 1, np.int64)
        np.cumsum(example_len + FRAME_OVERHEAD, out=starts[1:])
        # google_crc32c reads bytes only (not memoryviews): slices of an immutable copy.
        whole = frames.tobytes()
        examples = [whole[a:a + n] for a, n in zip((starts[:-1] + 12).tolist(), example_len.tolist())]
        crcs = np.fromiter(map(google_crc32c.value, examples), np.uint64, count)
        digests = np.frombuffer(b"".join(map(_DIGEST, map(hashlib.sha256, examples))), np.uint8).reshape(count, 32)
        frames[(starts[1:] - 4)[:, None] + np.arange(4)] = (
            _masked_crc(crcs).astype("<u4").view(np.uint8).reshape(count, 4))
        return EncodedBatch(frames, starts, np.searchsorted(self.buckets, _mod(digests, int(self.buckets[-1])),
                                                            side="right"))


_DIGEST = operator.methodcaller("digest")


def _mod(digests: np.ndarray, total: int) -> np.ndarray:
    """int(sha256 hexdigest, 16) % total for each row of 32 digest bytes (big-endian)."""
    acc = np.zeros(len(digests), np.int64)
    for i in range(digests.shape[1]):
        acc = (acc * 256 + digests[:, i]) % total
    return acc
