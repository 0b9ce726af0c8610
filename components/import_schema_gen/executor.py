"""ImportSchemaGen's executor: TFX's copy of the schema file, less the features the run
never ingests."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from tfx.components.schema_gen import executor as schema_gen_executor
from tfx.components.schema_gen.import_schema_gen import executor as tfx_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

logger = logging.getLogger(__name__)

NOT_INGESTED_KEY = "not_ingested"


def without(schema, features: list[str]):
    """A copy of the schema proto without the features (and any sparse feature built on them).

    Raises:
      ValueError: a feature the schema does not have (the policy and the schema disagree).
    """
    names = {f.name for f in schema.feature}
    unknown = sorted(set(features) - names)
    if unknown:
        raise ValueError(f"features not ingested {unknown} are not in the schema: the feature policy and the"
                         " schema disagree")
    out = type(schema)()
    out.CopyFrom(schema)
    drop = set(features)
    kept = [f for f in out.feature if f.name not in drop]
    del out.feature[:]
    out.feature.extend(kept)
    sparse = [s for s in out.sparse_feature
              if not drop & ({i.name for i in s.index_feature} | {s.value_feature.name})]
    del out.sparse_feature[:]
    out.sparse_feature.extend(sparse)
    return out


class Executor(tfx_executor.Executor):
    """TFX's ImportSchemaGen executor; with features not ingested, writes the schema without them."""

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        features = json.loads(exec_properties.get(NOT_INGESTED_KEY) or "[]")
        if not features:
            return super().Do(input_dict, output_dict, exec_properties)
        source = exec_properties.get(standard_component_specs.SCHEMA_FILE_KEY)
        if not source:
            raise ValueError("Schema file path is missing in exec_properties.")
        schema = without(io_utils.SchemaReader().read(source), features)
        output = os.path.join(artifact_utils.get_single_uri(output_dict[standard_component_specs.SCHEMA_KEY]),
                              schema_gen_executor.DEFAULT_FILE_NAME)
        io_utils.write_pbtxt_file(output, schema)
        logger.info("Imported the schema %s without the features not ingested (feature policy): %s", source,
                    ", ".join(features))
