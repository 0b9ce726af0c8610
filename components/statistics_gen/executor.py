"""StatisticsGen's executor: TFX's, or TFDV's in-memory engine where the run chose it.

In memory, each split is read one Arrow record batch at a time (the same TFXIO reader TFX's
Beam source uses) by the generators `generate_statistics_in_memory` runs, their partial
results merged as Beam merges its bundles', with the same options; the file, split names and artifact properties are
those TFX's executor writes, so ExampleValidator, the data gate and the reports read
either the same way. What the in-memory engine does not do (sampling, sharded output,
read-path filtering) runs TFX's executor whatever the engine.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import tensorflow_data_validation as tfdv
from tensorflow_data_validation.statistics import stats_impl
from tfx.components.statistics_gen import executor as tfx_executor
from tfx.components.util import examples_utils, tfxio_utils
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, json_utils, stats_utils
from tfx_bsl.tfxio import dataset_options

logger = logging.getLogger(__name__)

ENGINE_KEY = "engine"
_BATCH_ROWS = 65536


def _split_names(examples, exclude: list[str]) -> list[str]:
    if examples.has_custom_property(examples_utils.CUSTOM_SPLIT_PATTERN_PROPERTY_NAME):
        splits = list(json_utils.loads(
            examples.get_string_custom_property(examples_utils.CUSTOM_SPLIT_PATTERN_PROPERTY_NAME)))
    else:
        splits = artifact_utils.decode_split_names(examples.split_names)
    return [s for s in splits if s not in exclude]


def split_statistics(examples, split: str, options: tfdv.StatsOptions):
    """The split's statistics and its number of examples, read one record batch at a time:
    each batch's partial statistics are merged into the generators' accumulators, as Beam
    merges each bundle's, so batches may differ in columns and types (a feature no example
    of a batch has) and only one batch is held at a time."""
    tfxio = tfxio_utils.get_split_tfxio(examples=[examples], split=split,
                                        telemetry_descriptors=tfx_executor._TELEMETRY_DESCRIPTORS)
    generators = stats_impl.get_generators(options, in_memory=True)
    accumulators = [g.create_accumulator() for g in generators]
    rows = 0
    for batch in tfxio.RecordBatches(dataset_options.RecordBatchesOptions(
            batch_size=_BATCH_ROWS, shuffle=False, num_epochs=1)):
        rows += batch.num_rows
        partial = stats_impl.generate_partial_statistics_in_memory(batch, options, generators)
        accumulators = [g.merge_accumulators([a, p]) for g, a, p in zip(generators, accumulators, partial)]
    return stats_impl.extract_statistics_output(accumulators, generators), rows


class Executor(tfx_executor.Executor):
    """TFX's StatisticsGen executor with an in-memory engine (exec property `engine`)."""

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        if exec_properties.get(ENGINE_KEY) != "in-memory":
            return super().Do(input_dict, output_dict, exec_properties)
        options = tfdv.StatsOptions()
        if exec_properties.get(standard_component_specs.STATS_OPTIONS_JSON_KEY):
            options = tfdv.StatsOptions.from_json(exec_properties[standard_component_specs.STATS_OPTIONS_JSON_KEY])
        sample_rates = json_utils.loads(exec_properties.get(standard_component_specs.SAMPLE_RATE_BY_SPLIT_KEY) or "null")
        beam_only = [what for what, used in (
            ("sample_rate", options.sample_rate is not None or bool(sample_rates)),
            ("sharded output", bool(exec_properties.get(standard_component_specs.SHARDED_STATS_OUTPUT_KEY))),
            ("experimental_filter_read_paths", options.experimental_filter_read_paths)) if used]
        if beam_only:
            logger.info("Statistics on Beam: the in-memory engine does not do %s", ", ".join(beam_only))
            return super().Do(input_dict, output_dict, exec_properties)

        examples = artifact_utils.get_single_instance(input_dict[standard_component_specs.EXAMPLES_KEY])
        exclude = json_utils.loads(exec_properties.get(standard_component_specs.EXCLUDE_SPLITS_KEY) or "null") or []
        if not isinstance(exclude, list):
            raise ValueError(f"exclude_splits in execution properties needs to be a list. Got {type(exclude)} instead.")
        splits = _split_names(examples, exclude)
        if not splits:
            raise ValueError(f"No splits for examples artifact: {examples}")
        if input_dict.get(standard_component_specs.SCHEMA_KEY):
            if options.schema:
                raise ValueError("A schema was provided as an input and the stats_options exec_property also "
                                 "contains a schema value. At most one of these may be set.")
            options.schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(
                artifact_utils.get_single_uri(input_dict[standard_component_specs.SCHEMA_KEY])))

        computed = {}
        for split in splits:
            started = time.monotonic()
            computed[split] = (*split_statistics(examples, split, options), time.monotonic() - started)
        empty = [split for split, (_, rows, _) in computed.items() if not rows]
        if empty:
            # No example to profile: TFX's executor writes what an empty split's statistics are.
            logger.info("Statistics on Beam: split(s) %s hold no example", ", ".join(empty))
            return super().Do(input_dict, output_dict, exec_properties)

        statistics = artifact_utils.get_single_instance(output_dict[standard_component_specs.STATISTICS_KEY])
        statistics.split_names = artifact_utils.encode_split_names(splits)
        statistics.span = examples.span
        statistics.set_string_custom_property(tfx_executor.STATS_DASHBOARD_LINK,
                                              stats_utils.generate_stats_dashboard_link(statistics))
        statistics.set_json_value_custom_property(tfx_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME,
                                                  json_utils.dumps({s: 1.0 for s in splits}))
        for split, (stats, rows, seconds) in computed.items():
            path = os.path.join(artifact_utils.get_split_uri([statistics], split), tfx_executor.DEFAULT_FILE_NAME)
            io_utils.write_bytes_file(path, stats.SerializeToString())
            logger.info("Statistics for split %s (%d examples) computed in memory in %.2f s, written to %s",
                        split, rows, seconds, path)
