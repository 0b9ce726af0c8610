"""Checks made before a run touches MLMD or the serving directory, so bad input fails fast.

Each check raises `InputError` with a message naming the problem; nothing has been
written when one fails.
"""

from __future__ import annotations

import csv
import os

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from retrain import spans


class InputError(ValueError):
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


def check_header(span_folder: str, schema: schema_pb2.Schema) -> None:
    """The CSV columns must be exactly the schema's features.

    Raises:
      InputError: naming missing and unexpected columns.
    """
    expected = {f.name for f in schema.feature}
    for name in sorted(os.listdir(span_folder)):
        if not name.endswith(".csv"):
            continue
        path = os.path.join(span_folder, name)
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        missing = sorted(expected - set(header))
        extra = sorted(set(header) - expected)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column(s) {', '.join(missing)}")
            if extra:
                parts.append(f"column(s) not in the schema {', '.join(extra)}")
            raise InputError(f"{path} does not match the schema: {'; '.join(parts)}")


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


def check_run_inputs(data_root: str, span: int | None, schema_path: str, example_format: str = "csv") -> int:
    """Validates data folder, span, data files and schema; returns the concrete span.

    Raises:
      InputError: the first problem found.
    """
    try:
        resolved = spans.resolve_span(data_root, span, example_format)
    except spans.SpanError as e:
        raise InputError(str(e)) from e
    folder = spans.span_dir(data_root, resolved)
    if example_format == "csv":
        check_header(folder, load_schema(schema_path))
    else:
        check_example_features(folder, load_schema(schema_path))
    return resolved
