"""Monthly span layout: `<data_root>/span-YYYYMM/<files>`, one folder per month.

Span numbers are YYYYMM integers, so they sort in time order and read as dates in
MLMD, the CLI and the Airflow UI. ExampleGen finds a span's files with the input
pattern `span-{SPAN}/*.csv` (CSV), `span-{SPAN}/*.parquet` (Parquet, as warehouses and lakes
export months: core/parquet_columns.py) or `span-{SPAN}/*.tfrecord.gz` (gzipped TFRecords of
tf.Examples, for data CSV cannot hold, such as encoded images).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
from collections import defaultdict
from collections.abc import Iterable

from core import csv_header
from core.errors import BadInput

SPAN_DIR_PREFIX = "span-"
# The file pattern of a span's files, per example format.
FILE_SUFFIXES = {"csv": ".csv", "parquet": ".parquet", "tfrecord": ".tfrecord.gz"}
SPAN_GLOB = SPAN_DIR_PREFIX + "{SPAN}/*.csv"
# The Examples artifact's property listing the columns the source added that ExampleGen left
# out (the gate policy's `columns.new: report`; components/data_gate/columns.py), as JSON.
NEW_COLUMNS_PROPERTY = "new_columns"


def span_glob(example_format: str = "csv") -> str:
    """ExampleGen's input pattern for a format."""
    return SPAN_DIR_PREFIX + "{SPAN}/*" + FILE_SUFFIXES[example_format]
_SPAN_DIR_RE = re.compile(r"^span-(\d{6})$")


class SpanError(BadInput):
    """A data folder or span that cannot be used."""


def parse_span(text: str | int) -> int:
    """Parses `YYYYMM`, `YYYY-MM` or an int into a span number.

    Raises:
      SpanError: not a valid month.
    """
    s = str(text).strip().replace("-", "")
    if not re.fullmatch(r"\d{6}", s) or not 1 <= int(s[4:]) <= 12:
        raise SpanError(f"span {text!r} is not a month; use YYYYMM, e.g. 201612")
    return int(s)


def shift_span(span: int, months: int) -> int:
    """Returns the span `months` months after `span` (negative: before)."""
    year, month = divmod(span, 100)
    index = year * 12 + (month - 1) + months
    return (index // 12) * 100 + index % 12 + 1


def window(span: int, num_spans: int) -> tuple[int, int]:
    """Returns (first, last) span of the `num_spans` months ending at `span`."""
    if num_spans < 1:
        raise SpanError(f"window must cover at least one span, got {num_spans}")
    return shift_span(span, -(num_spans - 1)), span


def list_spans(data_root: str) -> list[int]:
    """Lists the spans present under `data_root`, oldest first.

    Raises:
      SpanError: the folder is missing or holds no span folder.
    """
    if not os.path.isdir(data_root):
        raise SpanError(f"data folder {data_root!r} does not exist")
    spans = sorted(
        int(m.group(1))
        for name in os.listdir(data_root)
        if (m := _SPAN_DIR_RE.match(name)) and os.path.isdir(os.path.join(data_root, name))
    )
    if not spans:
        raise SpanError(
            f"data folder {data_root!r} holds no span folders (expected span-YYYYMM/*.csv)"
        )
    return spans


def span_dir(data_root: str, span: int) -> str:
    return os.path.join(data_root, f"{SPAN_DIR_PREFIX}{span}")


def resolve_span(data_root: str, span: int | None, example_format: str = "csv") -> int:
    """Returns `span`, or the latest one, after checking its folder holds readable data.

    Raises:
      SpanError: unknown span, empty span folder, a CSV without a header row, a Parquet
        file that is not whole Parquet (or files whose columns differ) or a TFRecord file
        that does not hold tf.Examples.
    """
    spans = list_spans(data_root)
    if span is None:
        span = spans[-1]
    elif span not in spans:
        raise SpanError(
            f"span {span} not found under {data_root!r}; available: {spans[0]}..{spans[-1]}"
            f" ({len(spans)} spans)"
        )
    if example_format == "csv":
        check_span_csv(span_dir(data_root, span))
    elif example_format == "parquet":
        check_span_parquet(span_dir(data_root, span))
    else:
        check_span_tfrecord(span_dir(data_root, span))
    return span


def check_span_parquet(folder: str) -> None:
    """Fails early on a span whose Parquet files are missing, not Parquet, cut short, hold no
    rows or differ in their columns (their footers: core/parquet_columns.py).

    Raises:
      SpanError: naming the file and the problem.
    """
    from core import parquet_columns  # pyarrow: not on the Airflow side

    try:
        parquet_columns.check_span_parquet(folder)
    except parquet_columns.ParquetInputError as e:
        raise SpanError(str(e)) from e


def check_span_tfrecord(folder: str) -> None:
    """Fails early on a span whose gzipped TFRecord files are missing, empty or not tf.Examples.

    Raises:
      SpanError: naming the file and the problem.
    """
    first_example(folder)


def first_example(folder: str):
    """The first tf.Example of a span's first TFRecord file (imports TensorFlow).

    Raises:
      SpanError: no file, an empty or unreadable file, or a record that is not a tf.Example.
    """
    import tensorflow as tf

    files = sorted(f for f in os.listdir(folder) if f.endswith(FILE_SUFFIXES["tfrecord"]))
    if not files:
        raise SpanError(f"span folder {folder!r} holds no {FILE_SUFFIXES['tfrecord']} file")
    path = os.path.join(folder, files[0])
    try:
        record = next(iter(tf.data.TFRecordDataset(path, compression_type="GZIP").take(1)), None)
    except tf.errors.OpError as e:
        raise SpanError(f"cannot read {path} as gzipped TFRecords: {e.message}") from e
    if record is None:
        raise SpanError(f"{path} holds no records")
    try:
        return tf.train.Example.FromString(record.numpy())
    except Exception as e:  # protobuf's DecodeError has no stable public import path
        raise SpanError(f"{path}: the first record is not a serialized tf.Example ({e})") from e


def check_span_csv(folder: str) -> None:
    """Fails early on a span whose CSV files are missing, empty or unreadable.

    Raises:
      SpanError: naming the file and the problem.
    """
    files = sorted(f for f in os.listdir(folder) if f.endswith(".csv"))
    if not files:
        raise SpanError(f"span folder {folder!r} holds no .csv file")
    header = None
    for name in files:
        path = os.path.join(folder, name)
        try:
            # A NUL byte in the header or first row (what is read here) means a binary file,
            # not CSV text: Python 3.10's csv module refused it, 3.11+ reads it as data, so it
            # is named here on every Python. Later ones are named with their line by the full
            # read before a run (csv_engine's encoding check).
            with open(path, "rb") as raw:
                head = raw.read(64 * 1024)
            first_rows = b"\n".join(head.split(b"\n", 2)[:2])
            nul = first_rows.find(b"\x00")
            if nul >= 0:
                raise SpanError(f"cannot read {path}: a NUL byte at byte {nul} of its first rows "
                                "(a binary file, not CSV text)")
            # The header as ingestion reads it (core/csv_header.py); undecodable bytes after it
            # are reported with their row by the full read before a run
            # (preflight.check_csv_structure): here only the shape of the file matters.
            first, data_start = csv_header.read_header(path)
            with open(path, "rb") as raw:
                raw.seek(data_start)
                rest = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
                second = next(csv.reader(rest), None)
        except csv_header.CsvInputError as e:
            raise SpanError(str(e)) from e
        except (OSError, csv.Error) as e:
            raise SpanError(f"cannot read {path}: {e}") from e
        if first == [""] or second is None:
            raise SpanError(f"{path} has no data rows (a header and at least one row expected)")
        if header is not None and first != header:
            raise SpanError(f"{path} has a different header from the other files of its span")
        header = first


def split_csv_by_month(
    csv_path: str, out_root: str, timestamp_column: str = "trip_start_timestamp"
) -> dict[int, int]:
    """Splits one CSV into monthly span folders by a Unix-seconds timestamp column.

    Existing span folders are left alone (never overwritten); returns rows per span written.

    Raises:
      SpanError: the column is missing or a span folder already exists.
    """
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        if timestamp_column not in header:
            raise SpanError(f"{csv_path} has no column {timestamp_column!r}")
        col = header.index(timestamp_column)
        by_span: dict[int, list[list[str]]] = defaultdict(list)
        for row in reader:
            when = dt.datetime.fromtimestamp(int(row[col]), tz=dt.timezone.utc)
            by_span[when.year * 100 + when.month].append(row)
    clashes = [s for s in by_span if os.path.exists(span_dir(out_root, s))]
    if clashes:
        raise SpanError(f"span folders already exist under {out_root!r}: {sorted(clashes)}")
    for span, rows in sorted(by_span.items()):
        write_span(out_root, span, header, rows)
    return {s: len(r) for s, r in sorted(by_span.items())}


def write_span(out_root: str, span: int, header: list[str], rows: Iterable[list[str]]) -> str:
    """Writes one span folder atomically (a half-written span is never visible)."""
    final = span_dir(out_root, span)
    tmp = final + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "data.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")  # as the embedded spans are written
        w.writerow(header)
        w.writerows(rows)
    os.rename(tmp, final)
    return final
