"""Checks made before a run touches MLMD or the serving directory, so bad input fails fast.

Each check raises `InputError` with a message naming the problem; nothing has been
written when one fails.
"""

from __future__ import annotations

import csv
import io
import os
import re

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from core import csv_header, parquet_columns, spans
from core.errors import BadInput


class InputError(BadInput):
    """Bad input to a run: data folder, span, data files or schema."""


def load_schema(path: str) -> schema_pb2.Schema:
    """Parses a schema.pbtxt.

    Raises:
      InputError: missing or unparsable schema file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return text_format.Parse(f.read(), schema_pb2.Schema())
    except OSError as e:
        raise InputError(f"cannot read schema {path}: {e}") from e
    except text_format.ParseError as e:
        raise InputError(f"schema {path} is not a valid Schema text proto: {e}") from e


def check_header(span_folder: str, schema: schema_pb2.Schema, policy=None,
                 example_format: str = "csv") -> list[str]:
    """The CSV (or Parquet) columns must be the schema's features: a missing one always stops;
    a new one (the source added it) stops unless the gate policy says `columns.new: report`
    (components/data_gate/columns.py). Returns the new columns a run leaves out.

    Raises:
      InputError: naming missing and unexpected columns, and a new column that looks like a
        missing one renamed.
    """
    from components.data_gate import columns
    from components.data_gate import policy as gate_policy

    policy = policy or gate_policy.GatePolicy()
    expected = [f.name for f in schema.feature]
    added: list[str] = []
    suffix = spans.FILE_SUFFIXES[example_format]
    for name in sorted(os.listdir(span_folder)):
        if not name.endswith(suffix):
            continue
        path = os.path.join(span_folder, name)
        names = _header(path) if example_format == "csv" else _parquet_columns(path).names
        missing, new = columns.compare(names, expected)
        hints = []
        if missing and new:
            folder = os.path.abspath(span_folder)
            try:
                span = spans.parse_span(os.path.basename(folder).removeprefix(spans.SPAN_DIR_PREFIX))
                hints = columns.rename_hints(os.path.dirname(folder), span, example_format, missing, new, policy)
            except (spans.SpanError, csv_header.CsvInputError, parquet_columns.ParquetInputError):
                hints = []  # not a span folder, or an earlier span unreadable: no hint, the stop stands
        problem = columns.stop_message(path, missing, new, policy, hints)
        if problem:
            raise InputError(problem)
        added.extend(c for c in new if c not in added)
    return added


def _header(path: str) -> list[str]:
    """The file's column names, as both ingestion engines read them (core/csv_header.py).

    Raises:
      InputError: a header the rule refuses (file, line 1, byte).
    """
    try:
        return csv_header.read_header(path)[0]
    except csv_header.CsvInputError as e:
        raise InputError(str(e)) from e


def _parquet_columns(path: str) -> parquet_columns.FileColumns:
    """A Parquet file's data columns (core/parquet_columns.py), from its footer.

    Raises:
      InputError: not a whole Parquet file (file, byte or footer).
    """
    try:
        return parquet_columns.file_columns(path)
    except parquet_columns.ParquetInputError as e:
        raise InputError(str(e)) from e


# What to write a column as, for a feature of each schema type.
_WRITE_AS = {"INT": "integers", "FLOAT": "floating-point numbers", "BYTES": "strings (or binary)"}


def check_parquet_types(span_folder: str, schema: schema_pb2.Schema, skip: list[str] | tuple[str, ...] = ()) -> None:
    """Each Parquet column of a schema feature is of a type ingestion reads, of the kind the
    schema says (core/parquet_columns.py): never cast to fit. A column of Parquet's null type
    (no values) fits any. Columns in `skip` (new ones a run leaves out) are not read.

    Raises:
      InputError: naming the file, the column, its Parquet type and kind, and the schema's type.
    """
    wanted = {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}
    for name in sorted(os.listdir(span_folder)):
        if not name.endswith(spans.FILE_SUFFIXES["parquet"]):
            continue
        path = os.path.join(span_folder, name)
        for column in _parquet_columns(path).columns:
            if column.name in skip or column.name not in wanted:
                continue
            try:
                column.checked(path)
            except parquet_columns.ParquetInputError as e:
                raise InputError(str(e)) from e
            want = wanted[column.name]
            if column.kind is None or column.kind == want:
                continue
            advice = f"write the column as {_WRITE_AS.get(want, want)}, or make the feature {column.kind} in the schema"
            if want == "INT" and column.kind == "FLOAT":
                advice += (" (pandas makes an integer column with missing values float64: `df[column].astype('Int64')`"
                           " writes integers, with nulls where values are missing)")
            raise InputError(f"{path}: column {column.name!r} is {column.describe()} where the schema says {want}:"
                             f" a column's values are never cast to fit the schema; {advice}")


def check_parquet_file(path: str) -> int:
    """Reads a whole Parquet file the way ParquetExampleGen will: its footer, then every row
    group of its data columns, each value of a column ingestion reads checked for its kind
    (an integer within int64, a list without a null). Returns the number of rows.

    Raises:
      InputError: naming the file and where: not Parquet (its first bytes), cut short (no
        footer), a damaged footer, a row group that cannot be read (its rows), a value that
        cannot be ingested (its rows and column).
    """
    try:
        parquet_file = parquet_columns.open_file(path)
        found = parquet_columns.file_columns(path, parquet_file)
        readable = [c for c in found.columns if c.problem is None]
        first = 0
        for index, rows in enumerate(found.row_groups):
            table = parquet_columns.read_row_group(parquet_file, path, index, found.names)
            if table.num_rows != rows:
                raise parquet_columns.ParquetInputError(
                    f"{path}, row group {index}: {table.num_rows} rows read where its footer says {rows}; the file is"
                    " damaged")
            for column in readable:
                parquet_columns.check_values(table.column(column.name), column, path, first)
            first += rows
    except parquet_columns.ParquetInputError as e:
        raise InputError(str(e)) from e
    return found.num_rows


def check_csv_structure(path: str) -> int:
    """Reads a whole CSV file the way CsvExampleGen will, failing on what would break it later.

    Blank lines are skipped and quoted fields may span lines, as CsvExampleGen allows.
    Returns the number of data rows. A file with no quote and no bare carriage return (the
    usual large export) is checked a chunk at a time by the ingestion engine's parser, in
    bounded memory; any other file, or one that fails there, is read whole by `csv`, whose
    message names the row and line.

    Raises:
      InputError: naming the file, the row (and line and byte) and the problem: bytes that
        are not UTF-8, a header the span CSV header rule refuses (another delimiter, a
        quoted name left open: core/csv_header.py), a row with more or fewer fields than
        the header, a truncated last line or quoted field.
    """
    rows = _count_rows_in_chunks(path)
    return rows if rows is not None else _check_csv_whole(path)


def _count_rows_in_chunks(path: str) -> int | None:
    """Data rows of a file without quotes, parsed by chunks; None: check it whole instead."""
    from csv_engine import csv_encoding, fast_csv

    try:
        names, chunks = fast_csv.plan([path], fast_csv.CHUNK_BYTES)
        rows = 0
        with open(path, "rb") as f:
            for chunk in chunks:
                f.seek(chunk.start)
                data = f.read(chunk.end - chunk.start)
                if not csv_encoding.arrow_safe(data) or data.endswith(b"\r"):
                    return None
                cells = csv_encoding.parse_chunk(data, len(names), path, 0)
                rows += len(cells[0]) if cells else 0
        return rows
    except csv_encoding.CsvInputError:
        return None


def _check_csv_whole(path: str) -> int:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        bad = raw[e.start : e.end + 3]
        raise InputError(
            f"{path}, line {line} (byte {e.start}): not valid UTF-8 ({e.reason}: {bad!r});"
            + (" the file is gzip-compressed, not CSV text" if raw.startswith(b"\x1f\x8b") else
               " the file is UTF-16 text; re-export it as UTF-8" if raw.startswith((b"\xff\xfe", b"\xfe\xff")) else
               " binary data or another encoding; re-export the file as UTF-8 CSV")
        ) from e
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise InputError(f"{path}, line {line} (byte {nul}): a NUL byte: binary data, not CSV text"
                         " (CsvExampleGen refuses the line)")
    # The header as both engines read it (a byte-order mark, quoted names), or what the rule
    # refuses: another delimiter, a quoted name left open.
    header = _header(path)
    # Windows line endings count as one line break, as in the editor that shows the line.
    text = text.replace("\r\n", "\n")
    body = text[text.find("\n") + 1:] if "\n" in text else ""
    reader = csv.reader(io.StringIO(body, newline=""), strict=True)
    rows = 0
    start = 2  # the line the record being read starts on
    try:
        for fields in reader:
            line = reader.line_num + 1  # the line it ends on
            if not fields:  # a blank line: CsvExampleGen skips it too
                start = line + 1
                continue
            rows += 1
            if len(fields) != len(header):
                last = line == text.count("\n") + (0 if text.endswith("\n") else 1)
                truncated = last and not text.endswith(("\n", "\r")) and len(fields) < len(header)
                problem = (
                    "the last line is cut short (truncated upload?)"
                    if truncated
                    else "more fields than the header" if len(fields) > len(header)
                    else "fewer fields than the header"
                )
                raise InputError(
                    f"{path}, row {rows} (line {start}): {len(fields)} field(s) where the header has"
                    f" {len(header)}: {problem} (the row starts at byte {_line_byte(raw, start)})"
                )
            start = line + 1
    except csv.Error as e:
        where = f"row {rows + 1} (line {start})"
        at = f"(the row starts at byte {_line_byte(raw, start)})"
        if "unexpected end of data" in str(e) or "EOF" in str(e):
            raise InputError(f"{path}, {where}: a quoted field is never closed: the file is truncated {at}") from e
        raise InputError(f"{path}, {where}: not valid CSV: {e} {at}") from e
    return rows


def _line_byte(raw: bytes, line: int) -> int:
    """The byte where a line (1-based; lines end with b"\\n") of the file starts."""
    at = 0
    for _ in range(line - 1):
        found = raw.find(b"\n", at)
        if found < 0:
            return len(raw)
        at = found + 1
    return at


GZIP_MAGIC = b"\x1f\x8b"
# Records read and parsed at a time by `check_tfrecord_file`.
_RECORD_BATCH = 4096


def check_tfrecord_file(path: str) -> int:
    """Reads a whole gzipped TFRecord file the way ImportExampleGen will: every frame (length,
    CRCs, data) and every record as a tf.Example. Returns the number of records.

    Raises:
      InputError: naming the file and where: not gzip (its first bytes), a gzip stream or a
        record frame that is corrupt or cut short (the record it reached), a record that is
        not a serialized tf.Example (its index).
    """
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise InputError(f"{path}: the file is empty (a span's TFRecord file holds at least one tf.Example)")
    if not head.startswith(GZIP_MAGIC):
        raise InputError(f"{path}, byte 0: not gzip-compressed (starts with {head!r}); span files named"
                         " *.tfrecord.gz must be gzipped TFRecords of tf.Examples")
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    count = 0
    records = iter(tf.data.TFRecordDataset(path, compression_type="GZIP").batch(_RECORD_BATCH))
    while True:
        try:
            batch = next(records, None)
        except tf.errors.OpError as e:
            reached = _records_before_error(path, count)
            raise InputError(f"{path}, record {reached}: not a readable gzipped TFRecord stream after"
                             f" {reached} good record(s) ({_op_message(e)}); the file is corrupt or cut short") from e
        if batch is None:
            break
        serialized = batch.numpy().tolist()
        try:
            decoder.DecodeBatch(serialized)
        except RuntimeError:
            for i, record in enumerate(serialized):
                try:
                    decoder.DecodeBatch([record])
                except RuntimeError as e:
                    raise InputError(f"{path}, record {count + i} ({len(record)} bytes): not a serialized"
                                     f" tf.Example ({e})") from e
            raise
        count += len(serialized)
    if not count:
        raise InputError(f"{path} holds no records")
    return count


def _records_before_error(path: str, start: int) -> int:
    """How many records of `path` read before the first error (a record at a time from `start`)."""
    import tensorflow as tf

    count = start
    try:
        for _ in tf.data.TFRecordDataset(path, compression_type="GZIP").skip(start):
            count += 1
    except tf.errors.OpError:
        pass  # the error the caller reports
    return count


def _op_message(e) -> str:
    """TensorFlow's error text without its function-node prefix and op suffix."""
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", e.message.splitlines()[0])
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", text).strip()


def check_example_features(span_folder: str, schema: schema_pb2.Schema) -> None:
    """The first tf.Example's features must be exactly the schema's.

    Raises:
      InputError: naming missing and unexpected features.
    """
    try:
        example = spans.first_example(span_folder)
    except spans.SpanError as e:
        raise InputError(str(e)) from e
    expected = {f.name for f in schema.feature}
    found = set(example.features.feature)
    parts = []
    if expected - found:
        parts.append(f"missing feature(s) {', '.join(sorted(expected - found))}")
    if found - expected:
        parts.append(f"feature(s) not in the schema {', '.join(sorted(found - expected))}")
    if parts:
        raise InputError(f"tf.Examples in {span_folder} do not match the schema: {'; '.join(parts)}")


def check_span_structure(folder: str, example_format: str = "csv") -> None:
    """Every data file of a span folder reads whole: CSV (`check_csv_structure`), Parquet
    (`check_parquet_file`; and the span's files have the same columns, of one kind each,
    and hold rows) or gzipped TFRecords of tf.Examples (`check_tfrecord_file`).

    Raises:
      InputError: the first problem found, naming the file and the position.
    """
    suffix = spans.FILE_SUFFIXES[example_format]
    check = {"csv": check_csv_structure, "parquet": check_parquet_file}.get(example_format, check_tfrecord_file)
    for name in sorted(os.listdir(folder)):
        if name.endswith(suffix):
            check(os.path.join(folder, name))
    if example_format == "parquet":
        try:
            parquet_columns.check_span_parquet(folder)
        except parquet_columns.ParquetInputError as e:
            raise InputError(str(e)) from e


def check_run_inputs(data_root: str, span: int | None, schema_path: str, example_format: str = "csv",
                     policy=None) -> int:
    """Validates data folder, span, data files and schema (columns as the gate policy says:
    `check_header`); returns the concrete span.

    Raises:
      InputError: the first problem found.
    """
    try:
        resolved = spans.resolve_span(data_root, span, example_format)
    except spans.SpanError as e:
        raise InputError(str(e)) from e
    check_span_files(spans.span_dir(data_root, resolved), schema_path, example_format, policy)
    return resolved


def check_span_files(folder: str, schema_path: str, example_format: str = "csv", policy=None) -> list[str]:
    """A span folder's files match the schema (new columns as the gate policy says) and read
    whole; returns the new columns a run leaves out (gate policy columns.new: report).

    Raises:
      InputError: the first problem found, naming the file (and row).
    """
    if example_format == "csv":
        check_span_structure(folder)  # first: it names the row of a byte that is not UTF-8
        return check_header(folder, load_schema(schema_path), policy)
    if example_format == "parquet":
        check_span_structure(folder, example_format)  # first: every footer and row group reads
        schema = load_schema(schema_path)
        added = check_header(folder, schema, policy, example_format)
        check_parquet_types(folder, schema, skip=added)
        return added
    check_span_structure(folder, example_format)  # first: every frame and record reads
    check_example_features(folder, load_schema(schema_path))
    return []
