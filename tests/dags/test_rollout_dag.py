"""The taxi rollout DAG through Airflow 3 (`airflow dags test`): a degraded canary under
test with its delayed labels is rolled back by the `decide_canary` task, which runs the
controller in the TFX runtime, records the decision in MLMD and the history, and mails the
operators."""

import json
import os
import subprocess

import pytest

from airflow_tfx.compiled_dag import REPO
from core import layout
from tests import smtp_inbox
from tests.dags.test_dag_e2e import AIRFLOW, TFX_PYTHON

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_rollout_dag_rolls_a_degraded_canary_back(tmp_path):
    work = tmp_path / "work"
    made = subprocess.run([TFX_PYTHON, "-m", "tests.rollout.canary_workdir", str(work), "--canary-weight", "-2"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    with smtp_inbox.serve() as (inbox, port):
        env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "RETRAIN_WORKDIR": str(work),
               "RETRAIN_TFX_PYTHON": TFX_PYTHON, "RETRAIN_ALERTS_TO": "ops@example.org",
               "AIRFLOW_CONN_SMTP_DEFAULT": smtp_inbox.connection(port), "RETRAIN_DAG": "taxi_rollout"}
        proc = subprocess.run([os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", "2026-12-02"],
                              env=env, capture_output=True, text=True, timeout=1200)
        assert "state=success" in proc.stderr, proc.stderr[-3000:]
        run_id = proc.stderr.split("run_id=")[1].split()[0]
        states = subprocess.run([AIRFLOW, "tasks", "states-for-dag-run", "taxi_rollout", run_id, "-o", "json"],
                                env=env, capture_output=True, text=True, check=True).stdout
        assert {t["task_id"]: t["state"] for t in json.loads(states[states.index("["):])} == {"decide_canary": "success"}
        mail = inbox.wait_for("the canary was rolled back")
    assert mail["subject"] == "[retrain] taxi: the canary was rolled back"
    base = os.path.join(layout.serving_root(str(work)), "taxi")
    events = [json.loads(line) for line in open(os.path.join(base, "history.jsonl"))]
    assert events[-1]["event"] == "canary_rollback" and events[-1]["version"] == 2
    status = subprocess.run([TFX_PYTHON, "-m", "retrain.cli", "rollout", "status", "--workdir", str(work), "--json"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    answer = json.loads(status.stdout)
    assert answer["labels"] == {"stable": 1} and answer["canary"] is None
    assert answer["decisions"][-1]["action"] == "rollback" and answer["decisions"][-1]["decided_by"] == "controller"
