"""Parquet files to TFRecord shards of tf.Examples on every core, in bounded memory.

A span's Parquet files are read a row group at a time (`plan`: one chunk per row group);
worker processes turn each row group's columns into the CSV engine's cells by the Parquet
column rule (core/parquet_columns.py) and encode them with the CSV engine's encoder
(csv_engine/csv_encoding.py): one gzipped TFRecord shard per row group and output split,
named as Beam names its shards. So a month gives the same examples as Parquet and as CSV,
hashed into the same splits.

A column's kind is its Parquet type's. A row group with no value in a column is first
encoded as CSV encodes an all-empty column (an empty Feature) and again with the column's
kind when another row group has values (as the CSV engine does with chunks whose inferred
types differ from the split's). Memory per worker is one row group's columns and one
padded batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

from core import parquet_columns
from csv_engine import csv_encoding, fast_csv

logger = logging.getLogger(__name__)

# The CSV encoder's type of each feature kind.
KINDS = {parquet_columns.INT: csv_encoding.INT, parquet_columns.FLOAT: csv_encoding.FLOAT,
         parquet_columns.BYTES: csv_encoding.STRING}
# Below this many bytes of Parquet (compressed: about 4x as much CSV), workers cost more to
# start than they save.
IN_PROCESS_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One row group of a file: `rows` rows from the file's row `first_row`."""

    path: str
    row_group: int
    first_row: int
    rows: int


def plan(paths: list[str], drop: tuple[str, ...] | list[str] = ()) -> tuple[parquet_columns.SpanColumns, list[Chunk]]:
    """The span's columns (`parquet_columns.span_columns`) and its non-empty row groups.

    Raises:
      parquet_columns.ParquetInputError: a file that is not whole Parquet, a column of a
        refused type, files whose columns differ.
    """
    span = parquet_columns.span_columns(paths, drop)
    chunks = []
    for f in span.files:
        first = 0
        for index, rows in enumerate(f.row_groups):
            if rows:
                chunks.append(Chunk(f.path, index, first, rows))
            first += rows
    return span, chunks


def encode_chunk(task: dict) -> dict:
    """Encodes one row group into its shard files (one per output split); what a worker runs.

    Args:
      task: path, row_group, first_row, columns (the read columns, each a ColumnKind's
        fields), buckets, outputs (one shard path per split), level (gzip level), and types
        (the split's, or None to use the row group's own).

    Returns:
      {"types": the types it was encoded with, "rows": per split}.

    Raises:
      parquet_columns.ParquetInputError: a damaged row group, a value beyond int64, a null
        in a list, naming the file (and row).
    """
    columns = [parquet_columns.ColumnKind(*fields) for fields in task["columns"]]
    path = task["path"]
    table = parquet_columns.read_row_group(parquet_columns.open_file(path), path, task["row_group"],
                                           [c.name for c in columns])
    cells = [parquet_columns.cells(table.column(c.name), c, path, task["first_row"]) for c in columns]
    del table
    types = task["types"] or [KINDS[c.kind] if cell.has_values else csv_encoding.UNKNOWN
                              for c, cell in zip(columns, cells)]
    encoder = csv_encoding.Encoder([c.name for c in columns], types, task["buckets"])
    rows = fast_csv.write_shards(encoder, [csv_encoding.Column(c.indices, c.distinct) for c in cells],
                                 task["outputs"], task["level"])
    return {"types": types, "rows": rows}


def ingest(paths: list[str], split_dirs: list[str], buckets: list[int], workers: int, level: int = 1,
           drop: tuple[str, ...] | list[str] = ()) -> dict:
    """Writes the examples of a span's Parquet files into the split folders; returns what was done.

    Args:
      paths: the span's Parquet files.
      split_dirs: one output folder per output split, in the split config's order.
      buckets: cumulative hash buckets of the splits.
      workers: worker processes (0: this process).
      level: gzip level of the shards.
      drop: columns left out of the examples (the feature policy's `ingest: drop`, new
        columns under the gate policy's `columns.new: report`): never read.

    Returns:
      {"rows": per split, "chunks" (row groups), "rechecked" (encoded twice), "workers",
      "types" (of the columns written), "dropped" (the columns of `drop` the files have),
      "seconds"}.

    Raises:
      parquet_columns.ParquetInputError: bad input, naming the file (and column, row).
    """
    started = time.monotonic()
    span, chunks = plan(paths, drop)
    if sum(os.path.getsize(p) for p in paths) < IN_PROCESS_BYTES:
        workers = 0
    for d in split_dirs:
        os.makedirs(d, exist_ok=True)
    n = max(1, len(chunks))
    columns = [list(dataclasses.astuple(c)) for c in span.columns]
    total_rows = sum(c.rows for c in chunks)

    def task(i: int, types):
        chunk = chunks[i]
        return {"path": chunk.path, "row_group": chunk.row_group, "first_row": chunk.first_row, "columns": columns,
                "buckets": buckets, "types": types, "level": level,
                "outputs": [os.path.join(d, fast_csv.SHARD_NAME.format(index=i, total=n)) for d in split_dirs]}

    done = {"rows": 0}

    def progress(i: int, result: dict):
        done["rows"] += sum(result["rows"])
        seconds = time.monotonic() - started
        logger.info("ingested %d/%d rows (%.0f rows/s)", done["rows"], total_rows, done["rows"] / max(seconds, 1e-6))

    def run(tasks: list[dict], on_done=lambda i, result: None) -> list[dict]:
        return fast_csv.run_tasks(tasks, workers, on_done, encode=encode_chunk, module="parquet_engine.worker",
                                  input_error=parquet_columns.ParquetInputError)

    results = run([task(i, None) for i in range(len(chunks))], progress)
    types = (csv_encoding.merge_types([r["types"] for r in results]) if results
             else [csv_encoding.UNKNOWN] * len(columns))
    again = [i for i, r in enumerate(results) if r["types"] != types]
    if again:
        logger.info("%d row group(s) had no value in a column other row groups have: encoding them again", len(again))
        for i, result in zip(again, run([task(i, types) for i in again])):
            results[i] = result
    if not chunks:  # no rows: one empty shard per split, as Beam writes
        for d in split_dirs:
            fast_csv.encode_chunk_empty(os.path.join(d, fast_csv.SHARD_NAME.format(index=0, total=1)), level)
    rows = [sum(r["rows"][s] for r in results) for s in range(len(split_dirs))]
    return {"rows": rows, "chunks": len(chunks), "rechecked": len(again), "workers": workers,
            "types": dict(zip(span.names, (csv_encoding.TYPE_NAMES[t] for t in types))),
            "dropped": list(span.left_out), "seconds": round(time.monotonic() - started, 2)}
