"""A planted personal value: the taxi months with a `rider_email` column (one recognisable
address per trip), the schema and feature policy that name it (forbidden in the model,
dropped from request logs, never ingested: core/feature_policy.py, `ingest: drop`), and a
search of every file under a folder for it, gzip members decompressed (examples, statistics
and request logs are gzipped TFRecords).

The taxi e2e module (test_taxi_pipeline.py) runs on these months, so its one first run is
also the run the privacy test searches.
"""

import csv
import os
import zlib

import yaml

from core import spans
from tests.conftest import REPO, TAXI_DATA, TAXI_SCHEMA

# Recognisable, and in no file of the repository or the runtime.
TOKEN = "planted-pii-7c1e9a"
EMAIL = "rider{n}." + TOKEN + "@example.org"
COLUMN = "rider_email"


def read_rows(span: int, first: int = 1) -> tuple[list[str], list[dict]]:
    """An embedded month's header and trips (as corpus.read_rows gives them), each trip with
    a planted address, numbered from `first`."""
    with open(os.path.join(spans.span_dir(TAXI_DATA, span), "data.csv"), newline="") as f:
        reader = csv.DictReader(f)
        rows = [{**row, COLUMN: EMAIL.format(n=n)} for n, row in enumerate(reader, first)]
        return [*(reader.fieldnames or []), COLUMN], rows


def write_spans(data: str, span_list) -> None:
    """The embedded months `span_list` under `data`, each trip with a planted address."""
    n = 1
    for span in span_list:
        header, rows = read_rows(span, n)
        n += len(rows)
        spans.write_span(data, span, header, [[r[h] for h in header] for r in rows])


def pipeline_files(root) -> dict:
    """The shipped schema and feature policy with the planted column added, under `root`."""
    schema = root / "schema.pbtxt"
    with open(TAXI_SCHEMA) as f:
        schema.write_text(f.read() + f'feature {{\n  name: "{COLUMN}"\n  type: BYTES\n}}\n')
    with open(os.path.join(REPO, "schemas", "taxi", "feature_policy.yaml")) as f:
        policy = yaml.safe_load(f)
    policy["features"][COLUMN] = {"pii": "personal", "use_in_model": "forbidden", "log": "drop",
                                  "ingest": "drop", "reason": "contact data of a rider"}
    policy_path = root / "feature_policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy))
    return {"schema": str(schema), "feature_policy": str(policy_path)}


def _contents(path: str) -> bytes:
    """A file's bytes, and, where it is gzip data (one member or several, as TFRecord writers
    append them), its decompressed bytes too."""
    with open(path, "rb") as f:
        data = f.read()
    plain, rest = [], data
    while rest[:2] == b"\x1f\x8b":
        member = zlib.decompressobj(31)
        plain.append(member.decompress(rest))
        rest = member.unused_data
    return data + b"".join(plain)


def files_holding(root: str, needle: bytes = TOKEN.encode()) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and needle in _contents(path):
                found.append(os.path.relpath(path, root))
    return found
