"""TFX's ImportSchemaGen with one more parameter: the features not ingested (the feature
policy's `ingest: drop`), which the imported schema leaves out.

The curated schema names every column of the raw data, those too; the examples of a run do
not hold them (CsvExampleGen leaves them out), so the schema the run validates, transforms
and trains against must not expect them. Node id, output and artifact are TFX's.
"""

from __future__ import annotations

import json

from tfx import types
from tfx.components.schema_gen.import_schema_gen import component as tfx_component
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components.import_schema_gen import executor

NOT_INGESTED_KEY = executor.NOT_INGESTED_KEY


class ImportSchemaGenSpec(standard_component_specs.ImportSchemaGenSpec):
    PARAMETERS = {
        **standard_component_specs.ImportSchemaGenSpec.PARAMETERS,
        # A JSON list of feature names.
        NOT_INGESTED_KEY: ExecutionParameter(type=str, optional=True),
    }


class ImportSchemaGen(tfx_component.ImportSchemaGen):
    """Imports `schema_file` less the features in `not_ingested`.

    Args:
      schema_file: the curated schema (schema.pbtxt).
      not_ingested: feature names the imported schema leaves out.
    """

    SPEC_CLASS = ImportSchemaGenSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, schema_file: str, not_ingested: list[str] | tuple[str, ...] = ()):
        spec = ImportSchemaGenSpec(
            schema_file=schema_file,
            schema=types.Channel(type=standard_artifacts.Schema),
            **({NOT_INGESTED_KEY: json.dumps(sorted(not_ingested))} if not_ingested else {}))
        base_component.BaseComponent.__init__(self, spec=spec)
