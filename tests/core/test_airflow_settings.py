"""The `airflow:` and `alerts:` blocks: defaults, the errors that name the key, the environment's overrides."""

import pytest

from core import airflow_settings


def test_defaults_fill_in_and_the_environment_chooses_the_schedule():
    assert airflow_settings.resolve_airflow({}, env={})["schedule"] == "data"
    assert airflow_settings.resolve_airflow({"schedule": "data"}, env={"RETRAIN_SCHEDULE": "monthly"})["schedule"] == "monthly"
    assert airflow_settings.resolve_airflow({"max_active_runs": 3}, env={})["max_active_runs"] == 3
    with pytest.raises(airflow_settings.DeploymentError, match="RETRAIN_SCHEDULE"):
        airflow_settings.resolve_airflow({}, env={"RETRAIN_SCHEDULE": "hourly"})


def test_the_environment_sets_or_disables_the_run_deadline():
    assert airflow_settings.resolve_airflow({}, env={})["run_deadline_hours"] == 12
    assert airflow_settings.resolve_airflow({}, env={"RETRAIN_RUN_DEADLINE_HOURS": "0.02"})["run_deadline_hours"] == 0.02
    assert airflow_settings.resolve_airflow({}, env={"RETRAIN_RUN_DEADLINE_HOURS": "0"})["run_deadline_hours"] == 0
    for bad in ("-1", "soon"):
        with pytest.raises(airflow_settings.DeploymentError, match="RETRAIN_RUN_DEADLINE_HOURS"):
            airflow_settings.resolve_airflow({}, env={"RETRAIN_RUN_DEADLINE_HOURS": bad})


def test_alert_recipients_from_the_environment_win():
    assert airflow_settings.resolve_alerts({"to": ["a@x.org"]}, env={})["to"] == ["a@x.org"]
    assert airflow_settings.resolve_alerts({"to": ["a@x.org"]}, env={"RETRAIN_ALERTS_TO": "b@y.org, c@z.org"})["to"] == [
        "b@y.org", "c@z.org"]
    # Set but empty: nobody (the task log only).
    assert airflow_settings.resolve_alerts({"to": ["a@x.org"]}, env={"RETRAIN_ALERTS_TO": ""})["to"] == []


@pytest.mark.parametrize("values, key", [
    ({"schedule": "weekly"}, "airflow.schedule"),
    ({"arrivals_check": "every ten minutes"}, "airflow.arrivals_check"),
    ({"arrivals_check": 10}, "airflow.arrivals_check"),
    ({"settle_seconds": -1}, "airflow.settle_seconds"),
    ({"span_wait_hours": 0}, "airflow.span_wait_hours"),
    ({"run_deadline_hours": "6h"}, "airflow.run_deadline_hours"),
    ({"run_deadline_hours": -2}, "airflow.run_deadline_hours"),
    ({"max_active_runs": True}, "airflow.max_active_runs"),
    ({"pools": {"gpu": 1}}, "airflow.pools"),
    ({"pools": {"tfx_trainer": 0}}, "airflow.pools.tfx_trainer"),
    ({"shedule": "data"}, "unknown key"),
])
def test_bad_airflow_values_name_the_key(values, key):
    with pytest.raises(airflow_settings.DeploymentError, match=key):
        airflow_settings.check_airflow(values)


@pytest.mark.parametrize("values, key", [
    ({"to": "ops@x.org"}, "alerts.to"),
    ({"to": ["not an address"]}, "alerts.to"),
    ({"notifier": "slack!"}, "alerts.notifier"),
    ({"notifier_args": ["x"]}, "alerts.notifier_args"),
    ({"smtp_conn_id": ""}, "alerts.smtp_conn_id"),
    ({"recipients": []}, "unknown key"),
])
def test_bad_alert_values_name_the_key(values, key):
    with pytest.raises(airflow_settings.DeploymentError, match=key):
        airflow_settings.check_alerts(values)


def test_good_blocks_pass():
    airflow_settings.check_airflow({"schedule": "monthly", "arrivals_check": "@hourly", "settle_seconds": 0,
                              "span_wait_hours": 0.5, "pools": {"tfx_trainer": 1}})
    airflow_settings.check_alerts({"to": ["ops@x.org"], "notifier": "airflow.providers.slack.notifications.slack.SlackNotifier",
                             "notifier_args": {"text": "{subject}"}})
