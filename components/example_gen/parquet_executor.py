"""ParquetExampleGen's executor: a span's Parquet files as tf.Examples, by the fast engine
(parquet_engine) or a Beam pipeline, the same examples and splits either way.

Both read columns, kinds and values by the Parquet column rule (core/parquet_columns.py),
so a month gives the examples its CSV gives. TFX's own Parquet executor
(tfx/components/example_gen/custom_executors/parquet_executor.py) is not used as it is:
its `utils.dict_to_example` writes an empty Feature for every falsy value (a fare of 0.0,
a count of 0, False, "", as well as a null), decodes binary values as UTF-8 and takes each
feature's kind from each Python value. The Beam path here reads as it does (Beam's Parquet
source, a table per row group) and builds each tf.Example with protobuf's API from the
rule's values; the fast engine encodes the rule's cells with the CSV engine's encoder, an
implementation of its own, and tests hold the two to the same examples.

Everything else is CsvExampleGen's executor (components/example_gen/executor.py): the
engine choice (`ingestion.engine`), the columns not ingested, new columns under the gate
policy's `columns.new: report`, the splits and the artifact's properties.
"""

from __future__ import annotations

import os
from typing import Any

import apache_beam as beam
from tfx.dsl.io import fileio
from tfx.types import standard_component_specs

from components.example_gen import executor as csv_based
from core import parquet_columns
from parquet_engine import fast_parquet


def _open(path: str, mode: str = "rb"):
    return fileio.open(path, mode)


def _has_values(path: str, table, columns: list[parquet_columns.ColumnKind] = ()) -> list[bool]:
    """Whether each column has a value in this row group (Beam's MapTuple wants defaults)."""
    return [any(parquet_columns.row_values(table.column(c.name), c, path, None)) for c in columns]


def _any_each(flags) -> list[bool]:
    """Per column: a value in some row group (CombineGlobally's function: also merges its own results)."""
    return [any(column) for column in zip(*flags)]


def _to_examples(path: str, table, columns: list[parquet_columns.ColumnKind] = (), present: list[bool] = ()):
    """The tf.Examples of one row group: each column's values as a list of its kind, an empty
    Feature where the span has no value in the column (CSV's all-empty column)."""
    import tensorflow as tf

    values = [parquet_columns.row_values(table.column(c.name), c, path, None) for c in columns]
    for row in range(table.num_rows):
        example = tf.train.Example()
        for column, rows, has_values in zip(columns, values, present):
            feature = example.features.feature[column.name]
            if not has_values:
                continue
            kind = (feature.int64_list if column.kind == parquet_columns.INT
                    else feature.float_list if column.kind == parquet_columns.FLOAT else feature.bytes_list)
            kind.SetInParent()
            kind.value.extend(rows[row])
        yield example


@beam.ptransform_fn
def _ParquetToExample(pipeline, exec_properties: dict[str, Any], split_pattern: str, drop: tuple[str, ...] = ()):
    """The split's Parquet files as tf.Examples, without the columns in `drop`.

    Raises:
      parquet_columns.ParquetInputError: files the rule refuses (checked before the pipeline).
    """
    pattern = os.path.join(exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
    files = sorted(fileio.glob(pattern))
    if not files:
        raise RuntimeError(f"Split pattern {pattern} does not match any files.")
    span = parquet_columns.span_columns(files, drop, opener=_open)
    columns = list(span.columns)
    tables = (pipeline
              | "CreateFilenames" >> beam.Create(files)
              | "ReadFromParquet" >> beam.io.ReadAllFromParquetBatched(columns=span.names, with_filename=True))
    present = beam.pvalue.AsSingleton(
        tables
        | "ValuesPresent" >> beam.MapTuple(_has_values, columns)
        | "AnyRowGroup" >> beam.CombineGlobally(_any_each))
    return tables | "ToTFExample" >> beam.FlatMapTuple(_to_examples, columns, present)


def new_columns(exec_properties: dict[str, Any], files: list[str]) -> list[str]:
    """The files' data columns outside the schema's, in file order, when the custom_config
    lists the schema's columns (gate policy columns.new: report); else none."""
    known = csv_based._custom_values(exec_properties).get(csv_based.SCHEMA_COLUMNS_KEY)
    if known is None or not files:
        return []
    names = parquet_columns.file_columns(files[0], opener=_open).names
    return [c for c in names if c not in set(known)]


class Executor(csv_based.Executor):
    """CsvExampleGen's executor (engine choice, columns left out, splits, properties) over
    Parquet: the fast Parquet engine, or the Beam pipeline of `_ParquetToExample`."""

    def _new_columns(self, exec_properties: dict[str, Any], files: list[str]) -> list[str]:
        return new_columns(exec_properties, files)

    def _ingest_fast(self, files: list[str], split_dirs: list[str], buckets: list[int], workers: int,
                     level: int) -> dict:
        return fast_parquet.ingest(files, split_dirs, buckets, workers, level, drop=self._not_ingested)

    def GetInputSourceToExamplePTransform(self):
        """`_ParquetToExample` without the columns not ingested (never read)."""
        drop = tuple(self._not_ingested)
        return lambda exec_properties, split_pattern: _ParquetToExample(exec_properties, split_pattern, drop)
