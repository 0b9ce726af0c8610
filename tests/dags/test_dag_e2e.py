"""The taxi DAG through Airflow 3 (`airflow dags test`), every node in the TFX runtime.

A good month: every task succeeds and a model is pushed. Then a corrupted month: the
DataGate task fails, no task after it runs, nothing new is pushed, and the DAG run fails.
"""

import csv
import json
import os
import re
import shutil
import subprocess

import pytest

from airflow_tfx.template import REPO
from core import layout

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TAXI_DATA = os.path.join(REPO, "data", "taxi")
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AIRFLOW = os.path.join(REPO, ".venv-airflow", "bin", "airflow")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("af")
    data = root / "data"
    # Two 2013 months (~170-200 trips each): a two-month window's eval split (~85 trips) is
    # above the Evaluator's minimum (50), under which a candidate is not judged.
    for span in (201302, 201303):
        shutil.copytree(os.path.join(TAXI_DATA, f"span-{span}"), data / f"span-{span}")
    return {
        **os.environ,
        "AIRFLOW_HOME": str(root / "airflow"),
        "RETRAIN_WORKDIR": str(root / "work"),
        "RETRAIN_DATA_ROOT_TAXI": str(data),
        "RETRAIN_TFX_PYTHON": TFX_PYTHON,
    }


def dag_test(env, date: str) -> tuple[str, str, dict]:
    proc = subprocess.run(
        [os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", date, "--conf", json.dumps({"window": 2})],
        env=env, capture_output=True, text=True, timeout=1800,
    )
    finished = re.search(r"run_id=(\S+) state=(\w+)", proc.stderr)
    assert finished, proc.stderr[-3000:]
    run_id, state = finished.groups()
    states = subprocess.run(
        [AIRFLOW, "tasks", "states-for-dag-run", "taxi_retraining", run_id, "-o", "json"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    by_task = {t["task_id"]: t["state"] for t in json.loads(states[states.index("["):])}
    return run_id, state, by_task


def summary(env, run_id: str) -> dict:
    out = subprocess.run(
        [TFX_PYTHON, "-m", "retrain.cli", "summary", "--workdir", env["RETRAIN_WORKDIR"],
         "--pipeline", "taxi", "--run-id", run_id, "--json"],
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


def test_good_month_runs_every_task_and_pushes(env):
    run_id, state, tasks = dag_test(env, "2013-04-01")  # the run for March 2013
    assert state == "success"
    assert len(tasks) == 16  # prepare_run, 13 TFX nodes, governance_report, run_summary
    assert set(tasks.values()) == {"success"}, tasks
    s = summary(env, run_id)
    assert s["span"] == 201303 and s["run_id"] == run_id  # Airflow's run id is TFX's
    assert s["outcome"] == "pushed" and s["window_spans"] == [201302, 201303]
    assert [s["pushed"]["version"]] == versions(env)
    report = governance_report(env, run_id)
    assert report["outcome"] == "pushed" and report["run_id"] == run_id


def test_corrupted_month_is_stopped_at_the_gate(env):
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
