"""CsvExampleGen and ParquetExampleGen with the fast ingestion engines: TFX's component (spec,
driver, node id, outputs), this package's executors, and the `ingestion:` settings as their
custom_config."""

from __future__ import annotations

from tfx.components.example_gen import component as example_gen_component
from tfx.dsl.components.base import executor_spec

from components.example_gen import executor, parquet_executor
from components.example_gen.settings import IngestSettings
from components.tfx_v1 import tfx


class CsvExampleGen(tfx.components.CsvExampleGen):
    """TFX's CsvExampleGen whose executor can write without Beam (executor.py).

    Args:
      input_base, input_config, output_config, range_config: as TFX's CsvExampleGen.
      ingest: the engine, workers and gzip level (IngestSettings).
      not_ingested: columns left out of every example (the feature policy's `ingest: drop`).
      schema_columns: with the gate policy's `columns.new: report`, the schema's columns: any
        other column a span's files have (one the source added) is left out of its examples
        and listed on the Examples artifact (`new_columns`); None: every column is ingested.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, input_base: str, input_config, output_config, range_config, ingest: IngestSettings,
                 not_ingested: list[str] | tuple[str, ...] = (), schema_columns: list[str] | None = None):
        # TFX's CsvExampleGen takes no custom_config; its base, FileBasedExampleGen, does.
        example_gen_component.FileBasedExampleGen.__init__(
            self, input_base=input_base, input_config=input_config, output_config=output_config,
            range_config=range_config, custom_config=executor.custom_config(ingest, not_ingested, schema_columns))


class ParquetExampleGen(example_gen_component.FileBasedExampleGen):
    """TFX's FileBasedExampleGen (spec, driver, outputs) over Parquet spans, with the executor
    of parquet_executor.py (the fast Parquet engine, or Beam; the same examples). Its node id,
    the class name as TFX's own ExampleGens have theirs, is ParquetExampleGen.

    Args: as CsvExampleGen's.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(parquet_executor.Executor)

    def __init__(self, input_base: str, input_config, output_config, range_config, ingest: IngestSettings,
                 not_ingested: list[str] | tuple[str, ...] = (), schema_columns: list[str] | None = None):
        super().__init__(input_base=input_base, input_config=input_config, output_config=output_config,
                         range_config=range_config,
                         custom_config=executor.custom_config(ingest, not_ingested, schema_columns))
