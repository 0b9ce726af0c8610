"""CsvExampleGen's executor with a fast engine: the same examples, splits and artifact
properties as TFX's Beam pipeline, written by every core without Beam.

TFX's executor parses each CSV line in Python DoFns, infers column types, hashes each
example into its split and reshuffles everything before writing (about 5,000 rows/s on one
core, memory growing with the span). The fast engine (fast_csv) keeps the parts users and
downstream components rely on, identical by construction: the CsvExampleGen component,
node id and driver (span, version, input fingerprint), the split names and their
hash-bucket rule, the payload and file format properties, and gzipped TFRecords of
tf.Examples. It writes one shard per chunk of the input in input order (TFX's order is a
shuffle), and skips TFX's reshuffle. Anything it does not cover (another output layout,
files not on the local filesystem) runs TFX's own executor.

Both engines read the column names by the span CSV header rule (core/csv_header.py), so a
quoted header or a UTF-8 byte-order mark gives the names a plain header gives; TFX's own
executor would keep the quotes and the mark in the names.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from google.protobuf import json_format, struct_pb2
from tfx.components.example_gen import utils
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.components.util import examples_utils
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.example_gen.settings import IngestSettings
from core import csv_header, machine, spans
from csv_engine import fast_csv

logger = logging.getLogger(__name__)


# The custom_config key of the columns left out (the feature policy's `ingest: drop`).
NOT_INGESTED_KEY = "not_ingested"
# The custom_config key of the schema's columns, set under the gate policy's `columns.new:
# report`: a column of the files outside it (the source added it) is left out and listed.
SCHEMA_COLUMNS_KEY = "schema_columns"


def custom_config(settings: IngestSettings, not_ingested: list[str] | tuple[str, ...] = (),
                  schema_columns: list[str] | None = None) -> example_gen_pb2.CustomConfig:
    """The settings, the columns not ingested and (columns.new: report) the schema's columns as
    CsvExampleGen's `custom_config` (what this executor reads)."""
    values = settings.to_dict()
    if not_ingested:
        values[NOT_INGESTED_KEY] = sorted(not_ingested)
    if schema_columns is not None:
        values[SCHEMA_COLUMNS_KEY] = sorted(schema_columns)
    config = example_gen_pb2.CustomConfig()
    config.custom_config.Pack(json_format.ParseDict(values, struct_pb2.Struct()))
    return config


def _custom_values(exec_properties: dict[str, Any]) -> dict[str, Any]:
    text = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    if not text:
        return {}
    config = proto_utils.json_to_proto(text, example_gen_pb2.CustomConfig())
    values = struct_pb2.Struct()
    if config.custom_config.Is(struct_pb2.Struct.DESCRIPTOR):
        config.custom_config.Unpack(values)
    return json_format.MessageToDict(values)


def settings_from(exec_properties: dict[str, Any]) -> IngestSettings:
    plain = _custom_values(exec_properties)
    plain.pop(NOT_INGESTED_KEY, None)
    plain.pop(SCHEMA_COLUMNS_KEY, None)
    # Struct numbers are doubles.
    return IngestSettings.from_dict({k: int(v) if isinstance(v, float) else v for k, v in plain.items()})


def not_ingested_from(exec_properties: dict[str, Any]) -> list[str]:
    """The columns left out of the examples."""
    return [str(c) for c in _custom_values(exec_properties).get(NOT_INGESTED_KEY) or []]


def new_columns(exec_properties: dict[str, Any], files: list[str]) -> list[str]:
    """The files' columns outside the schema's, in header order, when the custom_config lists
    the schema's columns (gate policy columns.new: report); else none."""
    known = _custom_values(exec_properties).get(SCHEMA_COLUMNS_KEY)
    if known is None or not files:
        return []
    header = csv_header.read_header(files[0], opener=lambda path: fileio.open(path, "rb"))[0]
    return [c for c in dict.fromkeys(header) if c not in set(known)]


def _without(example, columns: frozenset):
    """A copy of the tf.Example without the columns (the Beam engine's step after TFX's CSV
    decoding; Beam's elements are not changed in place)."""
    if not columns & set(example.features.feature):
        return example
    out = type(example)()
    out.CopyFrom(example)
    for name in columns & set(out.features.feature):
        del out.features.feature[name]
    return out


def _why_not_fast(input_config, output_config, exec_properties, files: list[str]) -> str | None:
    """Why the fast engine cannot write this output exactly as TFX would, or None."""
    splits = output_config.split_config.splits
    if len(input_config.splits) != 1 or not splits:
        return "it writes hash-bucketed output splits of one input split only"
    if output_config.split_config.HasField("partition_feature_name"):
        return "partition_feature_name is not supported"
    if exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY,
                           example_gen_pb2.FORMAT_TF_EXAMPLE) != example_gen_pb2.FORMAT_TF_EXAMPLE:
        return "it writes tf.Examples only"
    if exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY,
                           example_gen_pb2.FORMAT_TFRECORDS_GZIP) not in (
            example_gen_pb2.FILE_FORMAT_UNSPECIFIED, example_gen_pb2.FORMAT_TFRECORDS_GZIP):
        return "it writes gzipped TFRecords only"
    remote = [f for f in files if "://" in f]
    if remote:
        return f"{remote[0]} is not on the local filesystem"
    return None


def _open_bytes(path: str):
    return fileio.open(path, "rb")


class _CsvToExample(csv_executor._CsvToExample):
    """TFX's CSV-to-tf.Example transform with the column names of the span CSV header rule
    (core/csv_header.py: quoted names, a UTF-8 byte-order mark), the fast engine's: TFX reads
    them with `strip().split(",")`, keeping quotes and the mark in the names. The rest is
    TFX's own: its record reader (which skips the header line), cell parser, type
    inference and tf.Example conversion."""

    def expand(self, pipeline):
        import apache_beam as beam
        from tfx_bsl.coders import csv_decoder

        logger.info("Processing input csv data %s to TFExample.", self._csv_pattern)
        csv_files = fileio.glob(self._csv_pattern)
        if not csv_files:
            raise RuntimeError(f"Split pattern {self._csv_pattern} does not match any files.")
        column_names, _ = csv_header.split_columns(csv_files, _open_bytes)
        parsed_csv_lines = (
            pipeline
            | "CreateFilenames" >> beam.Create(csv_files)
            | "ReadFromText" >> beam.ParDo(csv_executor._ReadCsvRecordsFromTextFile())
            | "ParseCSVLine" >> beam.ParDo(csv_decoder.ParseCSVLine(delimiter=","))
            | "ExtractParsedCSVLines" >> beam.Keys())
        column_infos = beam.pvalue.AsSingleton(
            parsed_csv_lines
            | "InferColumnTypes" >> beam.CombineGlobally(
                csv_decoder.ColumnTypeInferrer(column_names, skip_blank_lines=True)))
        return parsed_csv_lines | "ToTFExample" >> beam.ParDo(csv_executor._ParsedCsvToTfExample(), column_infos)


class Executor(csv_executor.Executor):
    """TFX's CSV executor, or the fast engine (`ingestion.engine`, default auto); either
    leaves the columns not ingested out of every example."""

    _not_ingested: list[str] = []

    def _new_columns(self, exec_properties: dict[str, Any], files: list[str]) -> list[str]:
        """The files' columns outside the schema (gate policy columns.new: report), else none."""
        return new_columns(exec_properties, files)

    def _ingest_fast(self, files: list[str], split_dirs: list[str], buckets: list[int], workers: int,
                     level: int) -> dict:
        """The fast engine's examples of the files, without the columns not ingested."""
        return fast_csv.ingest(files, split_dirs, buckets, workers, level, drop=self._not_ingested)

    def GetInputSourceToExamplePTransform(self):
        """TFX's CSV-to-tf.Example transform with the span CSV header rule's column names
        (`_CsvToExample`), then the columns not ingested deleted: before TFX hashes each
        example into its split, as the fast engine encodes without them."""
        to_examples = _CsvToExample
        columns = frozenset(self._not_ingested)
        if not columns:
            return to_examples
        import apache_beam as beam

        @beam.ptransform_fn
        def _to_examples_without(pipeline, exec_properties, split_pattern):
            return (pipeline | "ToExamples" >> to_examples(exec_properties, split_pattern)
                    | "NotIngested" >> beam.Map(_without, columns))

        return _to_examples_without

    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        settings = settings_from(exec_properties)
        self._not_ingested = not_ingested_from(exec_properties)
        if self._not_ingested:
            logger.info("Columns not ingested (feature policy, ingest: drop): %s", ", ".join(self._not_ingested))
        input_config = proto_utils.json_to_proto(
            exec_properties[standard_component_specs.INPUT_CONFIG_KEY], example_gen_pb2.Input())
        output_config = proto_utils.json_to_proto(
            exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], example_gen_pb2.Output())
        pattern = os.path.join(exec_properties[standard_component_specs.INPUT_BASE_KEY],
                               input_config.splits[0].pattern) if input_config.splits else ""
        files = sorted(fileio.glob(pattern)) if pattern else []
        added = self._new_columns(exec_properties, files)
        if added:
            # The gate policy's columns.new: report: the source added them; left out and listed.
            logger.warning("Columns not in the schema, left out of the examples (gate policy columns.new: report): %s",
                           ", ".join(added))
            self._not_ingested = list(dict.fromkeys([*self._not_ingested, *added]))
        if SCHEMA_COLUMNS_KEY in _custom_values(exec_properties):
            # Listed only under report (absent otherwise, as from TFX's own executor).
            examples_artifact = artifact_utils.get_single_instance(output_dict[standard_component_specs.EXAMPLES_KEY])
            examples_artifact.set_string_custom_property(spans.NEW_COLUMNS_PROPERTY, json.dumps(added))
        reason = _why_not_fast(input_config, output_config, exec_properties, files)
        if settings.engine == "beam" or reason:
            if reason and settings.engine == "fast":
                logger.warning("ingestion engine fast cannot write this output (%s): TFX's Beam executor runs", reason)
            return super().Do(input_dict, output_dict, exec_properties)
        if not files:
            raise RuntimeError(f"Split pattern {pattern} does not match any files.")
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[standard_component_specs.EXAMPLES_KEY])
        names = utils.generate_output_split_names(input_config, output_config)
        examples.split_names = artifact_utils.encode_split_names(names)
        buckets, total = [], 0
        for split in output_config.split_config.splits:
            total += split.hash_buckets
            buckets.append(total)
        split_dirs = [artifact_utils.get_split_uri([examples], name) for name in names]
        workers = settings.workers or machine.usable_cpus()
        logger.info("Generating examples (fast engine, %d worker(s)) from %d file(s): %s", workers, len(files), pattern)
        done = self._ingest_fast(files, split_dirs, buckets, workers, settings.compression_level)
        logger.info("Examples generated: %s", done)
        payload = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
        if payload:
            examples_utils.set_payload_format(examples, payload)
        file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY,
                                          example_gen_pb2.FILE_FORMAT_UNSPECIFIED)
        if file_format:
            from tfx.components.example_gen import write_split

            examples_utils.set_file_format(examples, write_split.to_file_format_str(file_format))
