"""Feedback files and the join: what cannot be joined is counted and reported, never joined."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from core import tasks
from rollout import feedback, join, live_metrics


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
    # Keys chosen so that, at an even split, each is answered by the version its key picks.
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
    share = _share_choosing({"k1": 1, "k2": 2, "k3": 2, "batch": 1})
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        assert db.ingest_logs([logs], _read) == 5
        assert db.ingest_feedback(feedback.files(str(fb))) == 7  # label records, duplicates included
        assert db.ingest_logs([logs], _read) == 0 and db.ingest_feedback(feedback.files(str(fb))) == 0  # once
        # A low quantile: of this handful of requests, k2 never gets a usable label.
        compared = db.compare(1, 2, share, now=10_000, quantile=0.5)
    assert compared.tallies["stable"].count == 3  # k1, batch/0, batch/1
    assert compared.tallies["canary"].count == 1  # k3 (k2 is out: labelled twice)
    assert compared.counts["duplicate_label"] == 2 and compared.counts["duplicate_request"] == 1
    assert compared.counts["unmatched_label"] == 1
    assert compared.tallies["stable"].value("binary_accuracy") == pytest.approx(1.0)
    assert compared.delays["stable"] and 400 <= compared.delays["stable"][0] <= 900
    assert compared.requests == {"stable": 2, "canary": 2}  # requests, not examples: batch is one
    assert any("k2 also labelled at a.jsonl:2" in e for e in compared.rejected_examples)


def _share_choosing(wanted: dict[str, int]) -> float:
    """A canary share (canary = version 2) under which each key goes to the version given."""
    from serving.server import routing

    below = max([routing.key_fraction(k) for k, v in wanted.items() if v == 2] + [0.0])  # canary: under the share
    above = min([routing.key_fraction(k) for k, v in wanted.items() if v == 1] + [1.0])
    assert below < above, "no share splits these keys that way"
    return (below + above) / 2


def test_a_bad_feedback_file_leaves_nothing_of_itself_in_the_join(tmp_path):
    fb = tmp_path / "feedback"
    feedback.write(str(fb / "a.jsonl"), [{"request_key": "k1", "label": 1, "time": 1500}])
    (fb / "b.jsonl").write_text('{"request_key": "k9", "label": 5, "time": 1}\n')  # 5 is no binary label
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        with pytest.raises(feedback.FeedbackError, match="b.jsonl"):
            db.ingest_feedback(feedback.files(str(fb)))
        assert db._db.execute("SELECT key FROM label_records").fetchall() == [("k1",)]


def test_a_feedback_file_replaced_under_its_name_is_read_again_and_a_renamed_or_copied_one_is_not(tmp_path):
    fb = tmp_path / "feedback"
    feedback.write(str(fb / "day.jsonl"), [{"request_key": "k1", "label": 1, "time": 1500}])
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        db.add_predictions([("k1", 1, 0.9, 1000.0, 0, 0.9, 1), ("k2", 1, 0.2, 1000.0, 0, 0.9, 1),
                            ("c1", 2, 0.4, 1000.0, 0, 0.01, 1)])
        assert db.ingest_feedback(feedback.files(str(fb))) == 1
        # The day's file again, corrected and completed, under the same name (same size or not).
        feedback.write(str(fb / "day.jsonl"), [{"request_key": "k1", "label": 0, "time": 1500},
                                               {"request_key": "k2", "label": 0, "time": 1600},
                                               {"request_key": "c1", "label": 1, "time": 1600}])
        assert db.ingest_feedback(feedback.files(str(fb))) == 3
        assert sorted(db._db.execute("SELECT key, label FROM labels")) == [("c1", 1.0), ("k1", 0.0), ("k2", 0.0)]
        assert db.counters()["replaced_feedback"] == 1
        os.rename(fb / "day.jsonl", fb / "day-renamed.jsonl")  # renamed: not read twice
        assert db.ingest_feedback(feedback.files(str(fb))) == 0
        shutil.copy(fb / "day-renamed.jsonl", fb / "copy.jsonl")  # copied: not read twice either
        assert db.ingest_feedback(feedback.files(str(fb))) == 0
        compared = db.compare(1, 2, 0.1, now=10_000)
        assert compared.counts["duplicate_label"] == 0 and compared.tallies["stable"].count == 2
        assert compared.tallies["canary"].count == 1
        assert any("copied_feedback" in e for e in compared.rejected_examples)


def test_only_split_routed_requests_answered_by_their_keys_version_are_compared(tmp_path):
    """The population case: requests that named a label or a version bypass the split; a
    client asking for `stable` by label with easy examples once inflated stable's AUC (they
    were counted for it) and rolled back a canary as good as stable."""
    from rollout import verdict
    from rollout.settings import RolloutSettings
    from serving.server import routing

    rng = np.random.default_rng(3)
    rows, labels = [], []
    for i in range(20_000):
        key = f"r{i}"
        canary = routing.to_canary(key, 0.5)
        y = rng.random() < 0.3
        score = 1 / (1 + np.exp(-(rng.normal() + 1.19 * y)))  # AUC 0.80 in both versions
        rows.append((key, 2 if canary else 1, score, 1000.0, 0, routing.key_fraction(key), 1))
        labels.append((key, float(y), 2000.0, "f:1", "f"))
    for i in range(20_000):  # a label-addressed client of stable whose examples are easy (AUC 0.97)
        key = f"easy{i}"
        y = rng.random() < 0.3
        score = 1 / (1 + np.exp(-(rng.normal() + 2.7 * y)))
        rows.append((key, 1, score, 1000.0, 1, routing.key_fraction(key), 1))
        labels.append((key, float(y), 2000.0, "f:1", "f"))
    rows.append(("pinned", 2, 0.5, 1000.0, 2, routing.key_fraction("pinned"), 1))
    off = next(f"off{i}" for i in range(100) if routing.to_canary(f"off{i}", 0.5))  # canary's key, stable answered
    rows.append((off, 1, 0.5, 1000.0, 0, routing.key_fraction(off), 1))
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        db.add_predictions(rows)
        db._db.executemany("INSERT INTO label_records VALUES (?, ?, ?, ?, ?)", labels)
        db.refresh_labels()
        compared = db.compare(1, 2, 0.5, now=10_000)
        everything = db._db.execute("SELECT p.prediction, l.label FROM predictions p JOIN labels l ON p.key = l.key "
                                    "WHERE p.version = 1").fetchall()
    assert compared.routing["label"]["stable"]["requests"] == 20_000
    assert compared.routing["version"]["canary"]["requests"] == 1
    assert compared.routing["split_off_key"]["stable"]["requests"] == 1
    assert compared.tallies["stable"].count + compared.tallies["canary"].count == 20_000
    settings = RolloutSettings(mode="canary", max_regression=0.02)
    right = verdict.judge(compared.tallies["canary"], compared.tallies["stable"], "auc", settings, hours=10)
    assert right.action != "rollback", right.reason
    # What the old tally, every label of stable's version, made of the same canary:
    old = live_metrics.Tally(tasks.BINARY)
    old.add(*np.array(everything).T)
    wrong = verdict.judge(compared.tallies["canary"], old, "auc", settings, hours=10)
    assert wrong.action == "rollback"


def test_young_requests_are_not_compared_until_their_age_is_labelled_in_both_arms(tmp_path):
    from serving.server import routing

    rows, labels = [], []
    for i in range(4000):
        key = f"r{i}"
        logged = float(i)  # one a second, from t = 0 to 4000 s
        rows.append((key, 2 if routing.to_canary(key, 0.5) else 1, 0.7, logged, 0,
                     routing.key_fraction(key), 1))
        if logged < 3000:  # the last 1000 s have no labels yet
            labels.append((key, 1.0, logged + 10, "f:1", "f"))
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        db.add_predictions(rows)
        db._db.executemany("INSERT INTO label_records VALUES (?, ?, ?, ?, ?)", labels)
        db.refresh_labels()
        compared = db.compare(1, 2, 0.5, now=4000.0)
    horizon = compared.maturity["horizon_s"]
    assert 1000 <= horizon <= 1100  # requests older than the unlabelled last 1000 s
    mature = compared.maturity["mature_labelled"]
    assert sum(mature.values()) == compared.tallies["stable"].count + compared.tallies["canary"].count
    assert 2850 <= sum(mature.values()) <= 3000 and sum(compared.maturity["labelled"].values()) == 3000


def test_memory_stays_flat_while_a_million_logged_examples_stream_through(tmp_path):
    import resource

    def rows():
        rng = np.random.default_rng(0)
        for i in range(1_000_000):
            yield f"r{i}", 1 + (i % 2), float(rng.random()), 1000.0, 0, (i % 2) * 0.05 + 0.5 * (1 - i % 2), 1

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with join.Join(str(tmp_path / "db"), tasks.BINARY) as db:
        added, _ = db.add_predictions(rows())
        # Half of each version's requests labelled (so a quantile below one half matures them).
        labels = ((f"r{i}", float(i % 3 == 0), 2000.0, "x", "x") for i in range(1_000_000) if i % 4 < 2)
        db._db.executemany("INSERT INTO label_records VALUES (?, ?, ?, ?, ?)", labels)
        db.refresh_labels()
        compared = db.compare(1, 2, 0.1, now=10_000, quantile=0.4)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert added == 1_000_000 and compared.tallies["stable"].count == compared.tallies["canary"].count == 250_000
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
        rejected = db.compare(1, 2, 0.5).rejected_examples
    assert counts["unreadable_log"] == 2 and counts["duplicate_request"] == 1  # k1 again, before the damage
    assert any(e.startswith("log.3.3.tfrecord: unreadable_log: unreadable after 0 records") for e in rejected)


def test_a_logged_request_says_how_it_was_routed(tmp_path):
    """REST logs keep the URL's version or label in the request's model_spec, as TF Serving's
    REST handler fills it (gRPC logs the request as sent); the join reads the route back."""
    from serving.server import rest, routing

    for version, label, expected in ((None, None, routing.SPLIT), (None, "stable", routing.LABEL),
                                     (3, None, routing.VERSION)):
        for verb in ("predict", "classify", "regress"):
            log = rest._rest_log("toy", "serving_default", verb, {} if verb == "predict" else [],
                                 {} if verb == "predict" else [], version, label)
            assert join.logged_route(log) == expected, (verb, version, label)
    grpc_log = prediction_log_pb2.PredictionLog()
    grpc_log.predict_log.request.model_spec.version_label = "canary"
    assert join.logged_route(grpc_log) == routing.LABEL
