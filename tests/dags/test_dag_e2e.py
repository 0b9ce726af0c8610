"""The taxi DAG through Airflow 3 (`airflow dags test`), every node in the TFX runtime.

A corrupted month: the DataGate task fails, no task after it runs, nothing is pushed, the
DAG run fails, and the operators get an e-mail (a real local SMTP server) with the span,
the reason and the report's link. A month without data on the monthly calendar: the run
is skipped, not failed. (A good month, started by its data's arrival and pushed, runs
through a real scheduler in test_standalone.py.)
"""

import csv
import json
import os
import re
import subprocess

import pytest

from airflow_tfx.compiled_dag import REPO
from core import layout
from task_host import spawn
from tests import smtp_inbox

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TAXI_DATA = os.path.join(REPO, "data", "taxi")
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AIRFLOW = os.path.join(REPO, ".venv-airflow", "bin", "airflow")


@pytest.fixture(scope="module")
def inbox():
    with smtp_inbox.serve() as served:
        yield served


@pytest.fixture(scope="module")
def env(tmp_path_factory, inbox):
    root = tmp_path_factory.mktemp("af")
    data = root / "data"
    data.mkdir()
    home = root / "airflow"
    home.mkdir()
    # One warm TFX runtime for the module's DAG runs, where `airflow.sh test-dag` looks for
    # it (it starts one per call when none answers there: TensorFlow's imports each time).
    warm = spawn.start_warm_runtime(str(home / "tfx-runtime.sock"), python=TFX_PYTHON, log=str(root / "warm.log"))
    yield {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "RETRAIN_WORKDIR": str(root / "work"),
        "RETRAIN_DATA_ROOT_TAXI": str(data),
        "RETRAIN_TFX_PYTHON": TFX_PYTHON,
        # Alerts by SMTP to the test's server (the connection the taxi config names).
        "RETRAIN_ALERTS_TO": "ops@example.org",
        "AIRFLOW_CONN_SMTP_DEFAULT": smtp_inbox.connection(inbox[1]),
        "AIRFLOW__API__BASE_URL": "http://airflow.example:8080",
    }
    spawn.stop(warm)


def dag_test(env, date: str, dag: str = "taxi_retraining", window: int = 2) -> tuple[str, str, dict]:
    proc = subprocess.run(
        [os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", date, "--conf", json.dumps({"window": window})],
        env={**env, "RETRAIN_DAG": dag}, capture_output=True, text=True, timeout=1800,
    )
    finished = re.search(r"run_id=(\S+) state=(\w+)", proc.stderr)
    assert finished, proc.stderr[-3000:]
    run_id, state = finished.groups()
    states = subprocess.run(
        [AIRFLOW, "tasks", "states-for-dag-run", dag, run_id, "-o", "json"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    by_task = {t["task_id"]: t["state"] for t in json.loads(states[states.index("["):])}
    return run_id, state, by_task


def summary(env, run_id: str, pipeline: str = "taxi") -> dict:
    out = subprocess.run(
        [TFX_PYTHON, "-m", "retrain.cli", "summary", "--workdir", env["RETRAIN_WORKDIR"],
         "--pipeline", pipeline, "--run-id", run_id, "--json"],
        capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def governance_report(env, run_id: str) -> dict:
    path = os.path.join(layout.report_dir(layout.pipeline_root(env["RETRAIN_WORKDIR"], "taxi"), run_id),
                        layout.REPORT_JSON)
    with open(path) as f:
        return json.load(f)


def versions(env) -> list[str]:
    d = os.path.join(env["RETRAIN_WORKDIR"], "serving", "taxi")
    return sorted(v for v in os.listdir(d) if v.isdigit()) if os.path.isdir(d) else []


def test_corrupted_month_is_stopped_at_the_gate_and_operators_are_told(env, inbox):
    with open(os.path.join(TAXI_DATA, "span-201304", "data.csv"), newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("payment_type")
    os.makedirs(os.path.join(env["RETRAIN_DATA_ROOT_TAXI"], "span-201304"))
    with open(os.path.join(env["RETRAIN_DATA_ROOT_TAXI"], "span-201304", "data.csv"), "w", newline="") as f:
        csv.writer(f).writerows([rows[0]] + [r[:col] + ["Bitcoin"] + r[col + 1:] for r in rows[1:]])
    before = versions(env)
    run_id, state, tasks = dag_test(env, "2013-05-01")  # the run for April 2013
    assert state == "failed"
    assert tasks["validate_data.DataGate"] == "failed"
    for later in ("train.Transform", "train.Trainer", "evaluate.Evaluator", "push.AtomicPusher"):
        assert tasks[later] == "upstream_failed", (later, tasks)
    assert tasks["run_summary"] == "failed"  # it ran, reported, and failed the DAG run
    assert tasks["governance_report"] == "success"  # a stopped span gets its report too
    report = governance_report(env, run_id)
    assert report["outcome"] == "stopped_by_data_gate" and "payment_type" in report["data_gate"]["blocking_features"]
    s = summary(env, run_id)
    assert s["outcome"] == "stopped_by_data_gate" and "payment_type" in s["data_gate"]["blocking_features"]
    assert versions(env) == before
    # The DataGate task's failure reached the operators with the span, the reason, the report.
    mail = inbox[0].wait_for("the data gate stopped the span")
    assert mail["to"] == ["ops@example.org"] and "span 201304" in mail["subject"]
    assert "payment_type" in mail["body"] and "validate_data.DataGate" in mail["body"]
    assert f"http://airflow.example:8080/retrain/reports/taxi/{layout.safe_id(run_id)}/report.html" in mail["body"]
    # One alert for the stop: run_summary, which fails the DAG run after it, does not repeat it.
    assert [m["subject"] for m in inbox[0].messages] == [mail["subject"]]


def test_a_month_without_data_is_skipped_not_failed(env, inbox):
    # The monthly calendar: the run for June 2013 waits for span 201306, which never comes;
    # its wait ended 72 h after the month did, so the run is skipped at once.
    monthly = {**env, "RETRAIN_SCHEDULE": "monthly"}
    run_id, state, tasks = dag_test(monthly, "2013-07-01")
    assert state == "success", tasks  # no red run
    assert tasks.pop("wait_for_span") == "skipped"
    assert set(tasks.values()) == {"skipped"}, tasks  # nothing ran, not even a report of nothing
    assert not os.path.exists(layout.run_dir(env["RETRAIN_WORKDIR"], "taxi", run_id))
    assert not [m for m in inbox[0].messages if "201306" in m["subject"]]  # a skip is not an alert


def test_the_generated_regression_pipeline_runs_through_airflow(env, inbox):
    # diabetes, as `retrain new` wrote it: the run for June 2024 (span 202406, its config's
    # window of 6) gates, trains, evaluates, checks and pushes, one task per TFX node.
    run_id, state, tasks = dag_test(env, "2024-07-01", dag="diabetes_retraining", window=6)
    assert state == "success", tasks
    for task in ("validate_data.DataGate", "train.Trainer", "evaluate.Evaluator", "push.ServingCheck",
                 "push.AtomicPusher", "governance_report", "run_summary"):
        assert tasks[task] == "success", (task, tasks)
    s = summary(env, run_id, "diabetes")
    assert s["outcome"] == "pushed" and s["span"] == 202406
    assert "mean_squared_error" in s["evaluation"]["candidate"]
    assert os.listdir(os.path.join(env["RETRAIN_WORKDIR"], "serving", "diabetes"))
