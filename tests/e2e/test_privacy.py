"""A personal value in the raw data reaches no file under the workdir: a full taxi run (three
months, trained, evaluated, pushed) plus served traffic, over data with a `rider_email`
column the feature policy forbids in the model, drops from request logs and never ingests
(core/feature_policy.py, `ingest: drop`).

Every file under the workdir is read, gzip members decompressed (examples, statistics and
request logs are gzipped TFRecords), and searched for the planted value; the same search
finds it in the input data, so it can fail.
"""

import csv
import json
import os
import urllib.request
import zlib

import grpc
import pytest
import tensorflow as tf
import yaml
from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_service_pb2_grpc

from core import layout, spans
from runner import preflight
from serving.server import request_log
from tests.conftest import REPO, TAXI_CONFIG, TAXI_DATA, TAXI_SCHEMA, retrain_cli
from tests.serving import traffic
from tests.serving.conftest import InProcessServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPANS = (201610, 201611, 201612)
# Recognisable, and in no file of the repository or the runtime.
TOKEN = "planted-pii-7c1e9a"
EMAIL = "rider{n}." + TOKEN + "@example.org"


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


def files_holding(root: str, needle: bytes) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and needle in _contents(path):
                found.append(os.path.relpath(path, root))
    return found


def _data_with_emails(root) -> str:
    """The two months with a rider_email column, one planted address per trip."""
    data = root / "data"
    n = 0
    for span in SPANS:
        with open(os.path.join(spans.span_dir(TAXI_DATA, span), "data.csv"), newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            rows = []
            for row in reader:
                n += 1
                rows.append([*row, EMAIL.format(n=n)])
        spans.write_span(str(data), span, [*header, "rider_email"], rows)
    return str(data)


def _pipeline_files(root) -> dict:
    """The shipped schema and feature policy with the rider_email column added."""
    schema = root / "schema.pbtxt"
    with open(TAXI_SCHEMA) as f:
        schema.write_text(f.read() + 'feature {\n  name: "rider_email"\n  type: BYTES\n}\n')
    with open(os.path.join(REPO, "schemas", "taxi", "feature_policy.yaml")) as f:
        policy = yaml.safe_load(f)
    policy["features"]["rider_email"] = {"pii": "personal", "use_in_model": "forbidden", "log": "drop",
                                         "ingest": "drop", "reason": "contact data of a rider"}
    policy_path = root / "feature_policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy))
    with open(TAXI_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg.update(data_root=_data_with_emails(root), schema_path=str(schema),
               gate_policy=os.path.join(REPO, "schemas", "taxi", "gate.yaml"), feature_policy=str(policy_path),
               min_eval_examples=20)
    config = root / "taxi.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return {"config": str(config), "schema": str(schema), "data": cfg["data_root"]}


def _serve_traffic(work: str, schema: str, data: str) -> int:
    """December's trips, e-mail and census tracts included, sent to the pushed model by gRPC
    Predict, gRPC Classify and REST :classify with every request logged; the requests answered."""
    server = InProcessServer(["--model-name", "taxi", "--model-base-path", os.path.join(work, "serving", "taxi"),
                              "--request-log-sampling-rate", "1",
                              "--request-log-prefix", layout.request_log_prefix(work, "taxi")])
    try:
        with open(os.path.join(spans.span_dir(data, 201612), "data.csv"), newline="") as f:
            rows = list(csv.DictReader(f))[:24]
        types = {f.name: f.type for f in preflight.load_schema(schema).feature}
        examples = [traffic.example(r, types, "tips") for r in rows]
        assert all(e.features.feature["rider_email"].bytes_list.value for e in examples)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(server.grpc_target))
        predict = predict_pb2.PredictRequest()
        predict.model_spec.name = "taxi"
        predict.inputs["examples"].CopyFrom(tf.make_tensor_proto([e.SerializeToString() for e in examples[:8]]))
        answered = len(stub.Predict(predict, timeout=60).outputs["outputs"].float_val)
        classify = classification_pb2.ClassificationRequest()
        classify.model_spec.name, classify.model_spec.signature_name = "taxi", "classification"
        for e in examples[8:16]:
            classify.input.example_list.examples.add().CopyFrom(e)
        answered += len(stub.Classify(classify, timeout=60).result.classifications)
        body = {"signature_name": "classification",
                "examples": [{k: v for k, v in r.items() if v != "" and k != "tips"} for r in rows[16:24]]}
        for example in body["examples"]:
            for k, v in example.items():
                example[k] = v if types[k] == 1 else (int(v) if types[k] == 2 else float(v))
        request = urllib.request.Request(server.url + "/v1/models/taxi:classify", data=json.dumps(body).encode(),
                                         method="POST")
        with urllib.request.urlopen(request, timeout=60) as r:
            answered += len(json.load(r)["results"])
    finally:
        server.stop()  # the request log writer drains what is queued
    return answered


def test_a_planted_personal_value_reaches_no_file_under_the_workdir(tmp_path):
    files = _pipeline_files(tmp_path)
    work = str(tmp_path / "work")
    proc = retrain_cli("run", "--json", "--config", files["config"], "--workdir", work, "--data-root", files["data"],
                       "--window", "3", "--span", "201612")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["outcome"] == "pushed", summary.get("outcome")
    assert summary["feature_policy"]["not_ingested"] == ["rider_email"]
    assert _serve_traffic(work, files["schema"], files["data"]) == 24
    logged = list(request_log.read(layout.request_log_prefix(work, "taxi")))
    assert len(logged) == 3  # the traffic was logged, less what the policy drops
    logged_features = {f for log in logged for e in request_log.logged_examples(log)
                       for f in tf.train.Example.FromString(e).features.feature}
    assert "fare" in logged_features and not logged_features & {"rider_email", "pickup_census_tract"}

    needle = TOKEN.encode()
    assert len(files_holding(files["data"], needle)) == 3  # the search finds it where it is
    assert files_holding(work, needle) == []
    # Nor does any stored example or statistic carry the columns never ingested.
    examples_dir = os.path.join(layout.pipeline_root(work, "taxi"), "CsvExampleGen", "examples")
    shards = [os.path.join(d, n) for d, _, names in os.walk(examples_dir) for n in names if n.endswith(".gz")]
    assert shards
    stored = {f for record in tf.data.TFRecordDataset(shards, compression_type="GZIP")
              for f in tf.train.Example.FromString(record.numpy()).features.feature}
    assert "fare" in stored and "pickup_census_tract" in stored and "rider_email" not in stored
