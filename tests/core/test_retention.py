"""Retention (core/retention.py): request logs and feedback files past max_age_days are
deleted by the server and by the rollout's decision task, and every deletion is logged."""

import logging
import os
import time

import pytest
import yaml

from core import exit_codes, layout, retention
from core.settings import SettingsError

DAY = 86400


def _file(path, age_days: float) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("x")
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))
    return str(path)


def test_files_past_the_period_are_deleted_and_each_deletion_is_logged(tmp_path, caplog):
    old, young = _file(tmp_path / "fb" / "a.csv", 31), _file(tmp_path / "fb" / "b.csv", 29)
    with caplog.at_level(logging.INFO, logger="core.retention"):
        deleted = retention.delete_expired(retention.files_in(str(tmp_path / "fb")), 30, "feedback")
    assert deleted == [old] and not os.path.exists(old) and os.path.exists(young)
    assert f"retention: deleted feedback {old} (31.0 days old, max_age_days 30)" in caplog.text
    [entry] = retention.read_audit(str(tmp_path / "fb"))
    assert entry["deleted"] == old and entry["kind"] == "feedback" and entry["max_age_days"] == 30
    assert entry["age_days"] == pytest.approx(31, abs=0.01)
    # The audit file is never itself deleted, nor listed as data.
    os.utime(tmp_path / "fb" / retention.AUDIT_FILE, (0, 0))
    assert retention.delete_expired(retention.files_in(str(tmp_path / "fb")), 30, "feedback") == []
    assert os.path.exists(tmp_path / "fb" / retention.AUDIT_FILE)
    with pytest.raises(SettingsError, match="max_age_days: must be > 0"):
        retention.RetentionSettings.from_dict({"max_age_days": 0})


def test_the_server_deletes_its_old_request_logs_when_it_closes_a_file(tmp_path):
    from serving.repository import model_config
    from serving.server import request_log

    prefix = str(tmp_path / "logs" / "toy" / "log")
    stale = _file(f"{prefix}.1000.1{request_log.SUFFIX}", 45)
    config = model_config.single_model("toy", str(tmp_path / "toy"))
    model_config.set_request_log(config, "toy", 1.0, prefix)
    logger = request_log.RequestLogger("toy", config.model_config_list.config[0].logging_config,
                                       request_log.LogLimits(max_age_days=30))
    logger.log(request_log.predict_log(*_empty_predict()), None, "serving_default", 1)
    logger.close()  # closes the current file: the retention period applies
    assert not os.path.exists(stale)
    assert len(list(request_log.read(prefix))) == 1  # the new log is kept
    assert [e["deleted"] for e in retention.read_audit(os.path.dirname(prefix))] == [stale]


def _empty_predict():
    from tensorflow_serving.apis import predict_pb2

    return predict_pb2.PredictRequest(), predict_pb2.PredictResponse()


def test_the_rollout_decision_task_applies_the_pipelines_retention(tmp_path, capsys):
    from retrain import cli
    from tests.conftest import TAXI_CONFIG

    with open(TAXI_CONFIG) as f:
        values = yaml.safe_load(f)
    for k in ("data_root", "schema_path", "gate_policy", "feature_policy"):
        values[k] = os.path.normpath(os.path.join(os.path.dirname(TAXI_CONFIG), values[k]))
    values["retention"] = {"max_age_days": 7}
    config = tmp_path / "taxi.yaml"
    config.write_text(yaml.safe_dump(values))
    work = tmp_path / "work"
    old_labels = _file(os.path.join(layout.feedback_dir(str(work), "taxi"), "labels-1.csv"), 8)
    new_labels = _file(os.path.join(layout.feedback_dir(str(work), "taxi"), "labels-2.csv"), 1)
    old_log = _file(layout.request_log_prefix(str(work), "taxi") + ".1.1.tfrecord", 10)
    writing = _file(layout.request_log_prefix(str(work), "taxi") + ".2.2.tfrecord.part", 10)
    code = cli.main(["rollout", "decide", "--config", str(config), "--workdir", str(work)])
    err = capsys.readouterr().err
    assert code == exit_codes.OK, err
    assert not os.path.exists(old_labels) and not os.path.exists(old_log)
    assert os.path.exists(new_labels) and os.path.exists(writing)  # young, or still being written
    assert "retention: deleted 2 file(s) older than 7 days" in err
    assert [e["kind"] for e in retention.read_audit(os.path.dirname(old_labels))] == ["feedback"]
