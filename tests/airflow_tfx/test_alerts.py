"""Alerts through Airflow's notifiers, received by a real local SMTP server (aiosmtpd): each kind
carries the span, the reason and the report link; a provider notifier gets the same text; a
notifier that cannot deliver never raises."""

import asyncio
import json
import logging
import os
import sys
import types

import pytest
from airflow.sdk import BaseNotifier

from airflow_tfx import alerts
from core import airflow_settings
from core import outcome as outcomes
from tests import smtp_inbox


@pytest.fixture
def inbox(monkeypatch):
    with smtp_inbox.serve() as (box, port):
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_ALERTS", smtp_inbox.connection(port))
        monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
        yield box


SETTINGS = airflow_settings.resolve_alerts({"to": ["ops@example.org"], "from_email": "retrain@example.org",
                                      "smtp_conn_id": "smtp_alerts"}, env={})


def _assert_alert(message, span, *needles):
    assert message["to"] == ["ops@example.org"] and message["from"] == "retrain@example.org"
    assert f"span {span}" in message["subject"]
    assert "http://airflow.example:8080/retrain/reports/taxi/" in message["body"]
    for needle in needles:
        assert needle in message["body"], (needle, message["body"])


def _context(task_id, exception, span="201304"):
    ti = types.SimpleNamespace(task_id=task_id, dag_id="taxi_retraining", log=logging.getLogger("test"))
    return {"ti": ti, "run_id": "manual__2013-05-01", "exception": exception, "params": {"span": span},
            "dag_run": types.SimpleNamespace(partition_key=None, run_after=None)}


def test_a_gate_stop_is_mailed_with_span_reason_and_report(inbox):
    notifier = alerts.FailureNotifier(pipeline="taxi", settings=SETTINGS, gate_task="DataGate")
    notifier.notify(_context("validate_data.DataGate", RuntimeError("the data gate stopped this span: trip_miles drift 0.41 > 0.2")))
    [message] = inbox.messages
    assert "the data gate stopped the span" in message["subject"]
    _assert_alert(message, 201304, "trip_miles drift 0.41", "validate_data.DataGate", "manual__2013-05-01")


def test_a_serving_skew_block_is_mailed_as_a_skew_stop(inbox):
    notifier = alerts.FailureNotifier(pipeline="taxi", settings=SETTINGS, gate_task="DataGate", skew_task="ServingSkew")
    notifier.notify(_context("validate_data.ServingSkew", RuntimeError("serving skew: trip_miles L-infinity 0.5 > 0.2")))
    [message] = inbox.messages
    assert "serving skew stopped the span" in message["subject"]
    _assert_alert(message, 201304, "trip_miles L-infinity 0.5", "validate_data.ServingSkew", "manual__2013-05-01")


def test_a_task_failure_after_its_retries_is_mailed(inbox):
    notifier = alerts.FailureNotifier(pipeline="taxi", settings=SETTINGS, gate_task="DataGate")
    notifier.notify(_context("train.Trainer", RuntimeError("TFX runtime command failed with exit code 1: OOM")))
    [message] = inbox.messages
    assert "a task failed" in message["subject"]
    _assert_alert(message, 201304, "exit code 1: OOM", "train.Trainer")


@pytest.mark.parametrize("name, why", [
    (outcomes.NOT_BLESSED, "not blessed by the Evaluator"),
    (outcomes.FAILED_SERVING_CHECK, "failed the serving check"),
    (outcomes.REJECTED, "rejected by the reviewer"),
])
def test_a_refused_candidate_is_mailed(inbox, name, why):
    reason = alerts.refusal({"outcome": name, "reason": "auc 0.61 below 0.70", "span": 201304})
    assert reason == f"{why}: auc 0.61 below 0.70"
    alert = alerts.Alert(alerts.REFUSED, "taxi", "201304", "run-1", reason, "taxi_retraining", "run_summary")
    assert alerts.send(SETTINGS, alert, {})
    [message] = inbox.messages
    assert "the candidate model was refused" in message["subject"]
    _assert_alert(message, 201304, why, "auc 0.61 below 0.70")


def test_pushed_and_stopped_runs_are_not_refusals():
    assert alerts.refusal({"outcome": outcomes.PUSHED}) is None
    assert alerts.refusal({"outcome": outcomes.STOPPED_BY_DATA_GATE}) is None  # alerted by its task
    assert alerts.refusal({}) is None


def test_a_missed_deadline_is_mailed_from_the_triggerer_callback(inbox):
    # The context Airflow's scheduler hands a deadline callback: the DAG run as JSON.
    context = {"dag_run": {"dag_id": "taxi_retraining", "dag_run_id": "asset_triggered__201304", "state": "running",
                           "queued_at": "2026-11-30T10:00:00+00:00", "partition_key": "201304", "conf": {}},
               "deadline": {"id": "x", "deadline_time": "2026-11-30T22:00:00+00:00"}}
    said = asyncio.run(alerts.deadline_missed(pipeline="taxi", settings=SETTINGS, deadline_hours=12, context=context))
    assert said.startswith("sent:")
    [message] = inbox.messages
    assert "missed its deadline" in message["subject"]
    _assert_alert(message, 201304, "not finished 12 h after it was queued", "state now: running")


def test_a_missed_deadline_names_the_span_as_the_runs_tasks_do(inbox):
    # A monthly-calendar run, as the scheduler serializes it: the span is the data interval's month.
    context = {"dag_run": {"dag_id": "taxi_retraining", "dag_run_id": "scheduled__2013-05-01T00:00:00+00:00",
                           "state": "running", "queued_at": "2026-11-30T10:00:00+00:00", "partition_key": None,
                           "conf": {}, "data_interval_start": "2013-04-01T00:00:00+00:00",
                           "data_interval_end": "2013-05-01T00:00:00+00:00",
                           "logical_date": "2013-05-01T00:00:00+00:00", "run_after": "2013-05-01T00:00:00+00:00"}}
    asyncio.run(alerts.deadline_missed(pipeline="taxi", settings=SETTINGS, deadline_hours=12, context=context))
    [message] = inbox.messages
    assert "span 201304" in message["subject"]


class RecordingNotifier(BaseNotifier):
    """A provider-style notifier (as Slack's or apprise's): keeps what it was built with."""

    sent = []

    def __init__(self, *, channel, text):
        super().__init__()
        self.channel, self.text = channel, text

    def notify(self, context):
        RecordingNotifier.sent.append((self.channel, self.text))


def test_any_notifier_class_gets_the_alert_text():
    settings = airflow_settings.resolve_alerts({
        "notifier": f"{__name__}.RecordingNotifier",
        "notifier_args": {"channel": "#ml-ops", "text": "{subject}\n{text}"}}, env={})
    alert = alerts.Alert(alerts.GATE_STOP, "taxi", "201304", "run-1", "drift", "taxi_retraining", "DataGate")
    assert alerts.send(settings, alert, {})
    [(channel, text)] = RecordingNotifier.sent
    assert channel == "#ml-ops" and text.startswith("[retrain] taxi span 201304") and "Reason: drift" in text


def test_nobody_configured_means_the_task_log_only(caplog):
    alert = alerts.Alert(alerts.TASK_FAILURE, "taxi", "201304", "run-1", "boom", "taxi_retraining", "Trainer")
    with caplog.at_level(logging.INFO, logger="airflow_tfx.alerts"):
        assert not alerts.send(airflow_settings.resolve_alerts({}, env={}), alert, {})
    assert "ALERT [retrain] taxi span 201304" in caplog.text and "no recipient configured" in caplog.text


def test_an_unreachable_smtp_server_is_logged_not_raised(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_ALERTS", smtp_inbox.connection(smtp_inbox.free_port()))
    alert = alerts.Alert(alerts.TASK_FAILURE, "taxi", "201304", "run-1", "boom", "taxi_retraining", "Trainer")
    with caplog.at_level(logging.INFO, logger="airflow_tfx.alerts"):
        assert not alerts.send(SETTINGS, alert, {})
    assert "alert not delivered through smtp" in caplog.text


def _summary_task(outcome_name, *extra):
    from airflow_tfx.operators import RunSummaryOperator

    fake = os.path.join(os.path.dirname(__file__), "fake_summary.py")
    return RunSummaryOperator(task_id="run_summary", arguments=["summary"], pipeline="taxi", span="201304",
                              alert_settings=SETTINGS, entrypoint=[sys.executable, fake, outcome_name, *extra])


def _context_for_summary():
    ti = types.SimpleNamespace(task_id="run_summary", dag_id="taxi_retraining", run_id="r1")
    return {"ti": ti}


def test_run_summary_mails_a_refused_candidate_and_stays_green(inbox):
    out = _summary_task(outcomes.NOT_BLESSED).execute(_context_for_summary())
    assert out["outcome"] == outcomes.NOT_BLESSED  # the run finished: the task succeeds
    [message] = inbox.messages
    assert "the candidate model was refused" in message["subject"]
    _assert_alert(message, 201304, "not blessed by the Evaluator: auc 0.61 below 0.70", "run_summary")


def test_run_summary_sends_nothing_for_a_push_and_repeats_no_stop(inbox):
    from airflow.sdk.exceptions import AirflowFailException

    assert _summary_task(outcomes.PUSHED).execute(_context_for_summary())["outcome"] == outcomes.PUSHED
    with pytest.raises(AirflowFailException, match="data gate"):  # fails the DAG run, as before
        _summary_task(outcomes.STOPPED_BY_DATA_GATE).execute(_context_for_summary())
    assert inbox.messages == []  # the DataGate task alerted for the stop


def test_run_summary_mails_a_stale_served_model_even_when_the_candidate_was_pushed(inbox):
    out = _summary_task(outcomes.PUSHED, "stale").execute(_context_for_summary())
    assert out["outcome"] == outcomes.PUSHED and out["stale"]
    [message] = inbox.messages
    assert "the served model is stale" in message["subject"]
    _assert_alert(message, 201304, "the served model is 9 spans old, older than max_age_spans 6", "run_summary")


def test_run_summary_mails_the_columns_the_source_added_and_the_run_left_out(inbox):
    out = _summary_task(outcomes.PUSHED, "new_columns").execute(_context_for_summary())
    assert out["outcome"] == outcomes.PUSHED and out["new_columns"] == ["surge_multiplier"]
    [message] = inbox.messages
    assert "the source added columns" in message["subject"]
    _assert_alert(message, 201304, "not in the schema, left out of the examples: surge_multiplier", "run_summary")


def test_run_summary_mails_the_runtime_changes_a_blessed_candidate_brings(inbox):
    out = _summary_task(outcomes.PUSHED, "runtime").execute(_context_for_summary())
    assert out["outcome"] == outcomes.PUSHED and out["runtime_changed"][0] == "tensorflow 2.16.1 -> 2.16.2"
    [message] = inbox.messages
    assert "runtime package changes" in message["subject"]
    # The body is HTML: the arrow arrives escaped.
    _assert_alert(message, 201304, "tensorflow 2.16.1 -&gt; 2.16.2; + zstd 1.5", "run_summary")


def test_rollout_decisions_alert_on_promotion_rollback_and_the_live_floor():
    applied = {"applied": True, "action": "rollback", "canary": 3, "stable": 2, "reason": "auc -0.21: worse",
               "alerts": ["live_floor: stable version 2 live auc 0.61 is past the floor 0.7"]}
    kinds = alerts.rollout_alerts(applied)
    assert [k for k, _ in kinds] == [alerts.ROLLED_BACK, alerts.LIVE_FLOOR]
    assert kinds[0][1].startswith("version 3 (stable was 2): auc -0.21")
    assert alerts.rollout_alerts({"applied": False, "action": "continue", "alerts": []}) == []
    assert [k for k, _ in alerts.rollout_alerts({**applied, "action": "promote", "alerts": []})] == [alerts.PROMOTED]
    held = {"applied": False, "action": "inconclusive", "alerts": [
        "rollout_inconclusive: the canary holds until a person promotes or rolls it back",
        "rollout_srm: canary share 0.05 of 2,000 split requests, 0.10 asked"]}
    assert [k for k, _ in alerts.rollout_alerts(held)] == [alerts.ROLLOUT_INCONCLUSIVE, alerts.ROLLOUT_SRM]
    alert = alerts.Alert(alerts.PROMOTED, "taxi", None, "scheduled__x", "why", "taxi_rollout", "decide_canary")
    assert alert.subject == "[retrain] taxi: the canary was promoted to stable"


def test_every_alert_is_recorded_for_the_models_view(monkeypatch, tmp_path):
    monkeypatch.setenv("RETRAIN_WORKDIR", str(tmp_path))
    for run in ("run-1", "run-2"):
        alerts.send(airflow_settings.resolve_alerts({}, env={}),
                    alerts.Alert(alerts.TASK_FAILURE, "taxi", "201304", run, "boom", "taxi_retraining", "Trainer"), {})
    with open(tmp_path / "alerts" / "taxi.jsonl") as f:
        recorded = [json.loads(line) for line in f]
    assert [r["run_id"] for r in recorded] == ["run-1", "run-2"]  # appended, earlier ones kept
    assert recorded[0]["subject"].startswith("[retrain] taxi span 201304") and recorded[0]["task_id"] == "Trainer"
