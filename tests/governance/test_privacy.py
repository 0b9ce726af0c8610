"""The privacy scan (governance/privacy.py) on a crafted workdir: it passes only where the
sensitive values are absent, and each of its steps finds a planted leak."""

from __future__ import annotations

import datetime as dt
import os
import types

import pytest
import yaml

from core import feature_policy as policy_lib
from core import layout
from governance import privacy, scorecard

TRACTS = ("17031081500", "17031320100", "17031839100")


def _config(tmp_path, **changes):
    policy = {"features": {
        "tract": {"pii": "pseudonymous", "use_in_model": "forbidden", "reason": "a test", "log": "drop"},
        "email": {"pii": "personal", "use_in_model": "forbidden", "reason": "a test", "log": "hash"},
        "fare": {"pii": "none", "use_in_model": "allowed", "log": "keep"}}}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    span = tmp_path / "data" / "span-201601"
    span.mkdir(parents=True, exist_ok=True)
    rows = [f"{t},rider{i}@example.org,{10 + i}.5" for i, t in enumerate(TRACTS)]
    (span / "data.csv").write_text("tract,email,fare\n" + "\n".join(rows) + "\n")
    workdir = tmp_path / "work"
    values = dict(feature_policy=str(tmp_path / "policy.yaml"), example_format="csv", data_root=str(tmp_path / "data"),
                  window_spans=6, workdir=str(workdir), model_name="taxi", pipeline_name="taxi",
                  pipeline_root=layout.pipeline_root(str(workdir), "taxi"),
                  retention_settings=types.SimpleNamespace(max_age_days=30.0))
    values.update(changes)
    return types.SimpleNamespace(**values)


def _log(config, examples: list[dict], n: int = 0) -> str:
    """A request log file as the server writes it: PredictionLog TFRecords."""
    import tensorflow as tf
    from tensorflow_serving.apis import classification_pb2

    from serving.server import request_log

    request = classification_pb2.ClassificationRequest()
    for values in examples:
        example = request.input.example_list.examples.add()
        example.CopyFrom(tf.train.Example(features=tf.train.Features(feature={
            k: (tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()])) if isinstance(v, str) else
                tf.train.Feature(float_list=tf.train.FloatList(value=[v]))) for k, v in values.items()})))
    log = request_log.classify_log(request, classification_pb2.ClassificationResponse())
    path = f"{layout.request_log_prefix(config.workdir, config.model_name)}.1700000000000.{n}.tfrecord"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(request_log.tfrecord(log.SerializeToString()))
    return path


def _report_file(config, text: str) -> str:
    folder = os.path.join(config.pipeline_root, layout.REPORT_DIR, "run-1")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "report.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_a_clean_workdir_passes_and_lists_every_input_with_its_digest(tmp_path):
    config = _config(tmp_path)
    hashed = policy_lib.HASH_PREFIX + "ab" * 32
    path = _log(config, [{"fare": 10.5, "email": hashed}])
    _report_file(config, '{"features": [{"name": "tract", "redacted": "pseudonymous"}]}')
    scan = privacy.scan(config)
    assert scan["ran"] and scan["passed"], scan["findings"]
    assert scan["declared"]["values"] == {"email": 3, "tract": 3} and scan["declared"]["searched"] == 6
    assert scan["planted"]["features"] == ["email", "tract"] and not scan["planted"]["findings"]
    assert [f["path"] for f in scan["request_logs"]["files"]] == [path]
    assert scan["request_logs"]["files"][0]["sha256"] == privacy.sha256_file(path)
    assert scan["texts"]["files"] == 1
    card = scorecard.compute([], {"privacy": scan})
    data5 = scorecard.find(card, "data.5")
    assert data5["status"] == "automated-passing"
    assert {"kind": "request_log", "path": path, "sha256": privacy.sha256_file(path), "logs": 1} in \
        data5["evidence"]["inputs"]
    assert "grep -rlwF -f values.txt" in scorecard.explain(card, "data.5")


@pytest.mark.parametrize("leak, finding", [
    ("report", "a raw value of sensitive feature tract"),
    ("dropped", "tract (pseudonymous, log: drop) is in the log"),
    ("unhashed", "email (personal, log: hash) is logged unhashed"),
    ("renamed", "a value of sensitive feature email is logged (under note)"),
    ("old", "older than the retention period (30 days)"),
    ("corrupt", "unreadable after 0 logs, so not proven clean"),
])
def test_each_leak_fails_the_scan(tmp_path, leak, finding):
    config = _config(tmp_path)
    if leak == "report":
        _report_file(config, f'{{"top_values": ["{TRACTS[1]}.0"]}}')
    elif leak == "dropped":
        _log(config, [{"fare": 1.0, "tract": TRACTS[0]}])
    elif leak == "unhashed":
        _log(config, [{"email": "someone@example.org"}])
    elif leak == "renamed":
        _log(config, [{"note": "rider2@example.org"}])
    elif leak == "corrupt":
        path = _log(config, [{"fare": 1.0}])
        with open(path, "r+b") as f:
            f.write(b"\xff" * 16)
    else:
        path = _log(config, [{"fare": 1.0}])
        old = (dt.datetime.now() - dt.timedelta(days=40)).timestamp()
        os.utime(path, (old, old))
    scan = privacy.scan(config)
    assert not scan["passed"]
    assert any(finding in f for f in scan["findings"]), scan["findings"]
    assert scorecard.find(scorecard.compute([], {"privacy": scan}), "data.5")["status"] == "automated-failing"


def test_the_planted_values_catch_a_log_policy_that_lets_them_through(tmp_path, monkeypatch):
    from serving.server import request_log

    monkeypatch.setattr(request_log, "apply_policy", lambda log, policy, key: None)
    scan = privacy.scan(_config(tmp_path))
    assert not scan["passed"]
    assert any("the planted value of tract is in the serialized log" in f for f in scan["planted"]["findings"])


def test_a_feature_never_ingested_must_be_absent_from_the_newest_artifacts(tmp_path):
    config = _config(tmp_path)
    policy = yaml.safe_load((tmp_path / "policy.yaml").read_text())
    policy["features"]["tract"]["ingest"] = "drop"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    folder = os.path.join(config.pipeline_root, "CsvExampleGen", "examples", "5", "Split-train")
    os.makedirs(folder)
    import gzip

    with gzip.open(os.path.join(folder, "data_tfrecord-00000-of-00001.gz"), "wb") as f:
        f.write(b"\x0a\x05tract\x12")
    scan = privacy.scan(config)
    assert any("holds feature tract (ingest: drop)" in f for f in scan["findings"])


def test_nothing_declared_sensitive_is_no_scan(tmp_path):
    assert privacy.scan(_config(tmp_path, feature_policy=None))["ran"] is False
    card = scorecard.compute([], {"privacy": privacy.scan(_config(tmp_path, feature_policy=None))})
    assert scorecard.find(card, "data.5")["status"] == "missing"


def test_declared_values_are_read_from_parquet_spans_too(tmp_path):
    # A Parquet month's declared column is read as its text (nulls and empty strings are no
    # value), at most max_rows rows, as a CSV month's cells are.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "data.parquet")
    pq.write_table(pa.table({"email": ["a@example.org", None, "", "b@example.org"], "tract": [17031081500, 2, 3, 4],
                             "when": pa.array([1, 2, 3, 4], pa.timestamp("ms"))}), path)
    assert privacy.declared_values([path], ["email", "tract", "when"], max_rows=3) == {
        "email": {"a@example.org"}, "tract": {"17031081500", "2", "3"}, "when": set()}
