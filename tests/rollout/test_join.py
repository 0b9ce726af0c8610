"""Feedback files and the join: what cannot be joined is counted and reported, never joined."""

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from core import tasks
from rollout import feedback, join


def _log(key: str, version: int, scores: list[float], at: int = 1000) -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.response.outputs["outputs"].CopyFrom(tf.make_tensor_proto(np.array(scores, np.float32).reshape(-1, 1)))
    log.log_metadata.model_spec.version.value = version
    log.log_metadata.request_origin = key
    log.log_metadata.timestamp_secs = at
    return log


def _logs(path, logs):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return str(path)


def _read(path):
    for record in tf.data.TFRecordDataset(path):
        yield prediction_log_pb2.PredictionLog.FromString(record.numpy())


def test_malformed_feedback_is_counted_by_reason_with_its_place(tmp_path):
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join([
        json.dumps({"request_key": "a", "label": 1, "time": "2016-12-03T10:00:00Z"}),
        json.dumps({"label": 1, "time": 5}),                                   # missing key
        json.dumps({"request_key": "b", "label": "yes", "time": 5}),           # label of the wrong type
        json.dumps({"request_key": "c", "label": 1, "time": "yesterday"}),     # no time
        json.dumps({"request_key": "d", "label": 1, "time": "2016-12-03T10:00:00"}),  # no zone
        "{not json",
        json.dumps({"request_key": "e", "label": 0.0, "time": 1480759200}),
    ]) + "\n")
    rejected = feedback.Rejected()
    labels = list(feedback.read(str(path), tasks.BINARY, rejected))
    assert [(l.key, l.label) for l in labels] == [("a", 1.0), ("e", 0.0)]
    assert labels[0].time == 1480759200.0
    assert rejected.counts == {"missing_key": 1, "bad_label": 1, "bad_time": 2, "malformed": 1}
    assert rejected.examples[0].startswith("batch.jsonl:2: missing_key")


def test_a_file_with_no_usable_record_is_an_error_and_csv_needs_its_header(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x01binary\n")
    with pytest.raises(feedback.FeedbackError, match="bad.jsonl: none of its 1 records"):
        list(feedback.read(str(bad), tasks.BINARY, feedback.Rejected()))
    headless = tmp_path / "x.csv"
    headless.write_text("key,label\na,1\n")
    with pytest.raises(feedback.FeedbackError, match="header lacks request_key, time"):
        list(feedback.read(str(headless), tasks.BINARY, feedback.Rejected()))
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"request_key,label,time\n\xff\xfe\n")
    with pytest.raises(feedback.FeedbackError, match="not UTF-8"):
        list(feedback.read(str(binary), tasks.BINARY, feedback.Rejected()))


def test_the_join_counts_duplicates_and_unknown_keys_and_joins_the_rest(tmp_path):
    logs = _logs(tmp_path / "log.1.1.tfrecord", [
        _log("k1", 1, [0.9]), _log("k2", 2, [0.2]), _log("k3", 2, [0.7]),
        _log("k3", 1, [0.1]),                   # a retry of k3: the first answer counts
        _log("batch", 1, [0.8, 0.3]),           # two examples: batch/0, batch/1
    ])
    fb = tmp_path / "feedback"
    feedback.write(str(fb / "a.jsonl"), [
        {"request_key": "k1", "label": 1, "time": 1500},
        {"request_key": "k2", "label": 0, "time": 1600},
        {"request_key": "k3", "label": 1, "time": 1700},
        {"request_key": "batch/0", "label": 1, "time": 1800},
        {"request_key": "batch/1", "label": 0, "time": 1900},
        {"request_key": "nobody", "label": 1, "time": 2000},  # unknown
    ])
    feedback.write(str(fb / "b.jsonl"), [{"request_key": "k2", "label": 1, "time": 2100}])  # k2 twice
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        assert db.ingest_logs([logs], _read) == 5
        assert db.ingest_feedback(feedback.files(str(fb))) == 5
        assert db.ingest_logs([logs], _read) == 0 and db.ingest_feedback(feedback.files(str(fb))) == 0  # once
        joined = db.joined([1, 2])
    assert joined.tallies[1].count == 3  # k1, batch/0, batch/1
    assert joined.tallies[2].count == 1  # k3 (k2 is out: labelled twice)
    assert joined.counts["duplicate_label"] == 2 and joined.counts["duplicate_request"] == 1
    assert joined.counts["unmatched_label"] == 1
    assert joined.tallies[1].value("binary_accuracy") == pytest.approx(1.0)
    assert joined.delays[1] and 400 <= joined.delays[1][0] <= 900
    assert any("k2 also labelled at a.jsonl:2" in e for e in joined.rejected_examples)


def test_a_bad_feedback_file_leaves_nothing_of_itself_in_the_join(tmp_path):
    fb = tmp_path / "feedback"
    feedback.write(str(fb / "a.jsonl"), [{"request_key": "k1", "label": 1, "time": 1500}])
    (fb / "b.jsonl").write_text('{"request_key": "k9", "label": 5, "time": 1}\n')  # 5 is no binary label
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        with pytest.raises(feedback.FeedbackError, match="b.jsonl"):
            db.ingest_feedback(feedback.files(str(fb)))
        assert db._db.execute("SELECT key FROM labels").fetchall() == [("k1",)]


def test_memory_stays_flat_while_a_million_logged_examples_stream_through(tmp_path):
    import resource

    def rows():
        rng = np.random.default_rng(0)
        for i in range(1_000_000):
            yield f"r{i}", 1 + (i % 2), float(rng.random()), 1000.0

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        added, _ = db.add_predictions(rows())
        labels = ((f"r{i}", float(i % 3 == 0), 2000.0, "x") for i in range(0, 1_000_000, 2))
        db._db.executemany("INSERT INTO labels VALUES (?, ?, ?, ?)", labels)
        joined = db.joined([1, 2])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert added == 1_000_000 and joined.tallies[1].count == 500_000
    assert grown_mb < 200, f"the join grew the process by {grown_mb:.0f} MB"


def test_a_damaged_request_log_file_is_reported_and_its_good_records_still_count(tmp_path):
    good = _logs(tmp_path / "log.1.1.tfrecord", [_log("k1", 1, [0.9]), _log("k2", 2, [0.1])])
    damaged = tmp_path / "log.2.2.tfrecord"
    damaged.write_bytes(open(good, "rb").read()[:-7])  # cut short in its last record
    (tmp_path / "log.3.3.tfrecord").write_bytes(b"not a tfrecord at all")
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        db.ingest_logs([good], _read)
        db.ingest_logs([str(damaged), str(tmp_path / "log.3.3.tfrecord")], _read)
        counts = db.counters()
        rejected = db.joined([1, 2]).rejected_examples
    assert counts["unreadable_log"] == 2 and counts["duplicate_request"] == 1  # k1 again, before the damage
    assert any(e.startswith("log.3.3.tfrecord: unreadable_log: unreadable after 0 records") for e in rejected)
