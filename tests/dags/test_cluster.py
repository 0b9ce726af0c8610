"""Airflow as teams run it, end to end: `scripts/airflow.sh cluster-start` (PostgreSQL
metadata DB, CeleryExecutor on a Redis broker, scheduler, API server, dag-processor,
triggerer and two Celery workers as separate processes), ML Metadata on MariaDB.

A backfill of two months with both runs active at once: both succeed, their tasks ran on
both workers, the later month waited for the earlier one's gate and model (the span
claims in MariaDB say so), and the pushes are in month order.
"""

import json
import os
import subprocess
import time

import pytest

from airflow_tfx.template import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AIRFLOW_SH = os.path.join(REPO, "scripts", "airflow.sh")
SERVICES = os.path.join(REPO, "scripts", "services.sh")
MONTHS = ("2013-03-01", "2013-04-01")  # spans 201303, 201304 (201302 is backfilled for the window)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_HOME"}
    env.update(AIRFLOW_CLUSTER_HOME=str(root / "airflow"), AIRFLOW_PORT="18095", RETRAIN_WORKDIR=str(root / "work"),
               RETRAIN_MLMD_DATABASE="cluster_test", RETRAIN_AIRFLOW_DATABASE="airflow_cluster_test",
               RETRAIN_REDIS_DB="1", KEEP_SERVICES="1", RETRAIN_TFX_PYTHON=TFX_PYTHON)
    subprocess.run([SERVICES, "mariadb-db", "cluster_test"], check=True, env=env, capture_output=True)
    subprocess.run([SERVICES, "postgres-db", "airflow_cluster_test"], check=True, env=env, capture_output=True)
    start = subprocess.run([AIRFLOW_SH, "cluster-start"], env=env, capture_output=True, text=True, timeout=600)
    try:
        assert start.returncode == 0, start.stdout + start.stderr[-3000:]
        yield env
    finally:
        subprocess.run([AIRFLOW_SH, "cluster-stop"], env=env, capture_output=True, timeout=300)


def airflow(env, *args, check=True) -> str:
    proc = subprocess.run([AIRFLOW_SH, "cluster-airflow", *args], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def json_rows(out: str) -> list[dict]:
    """The JSON list an `airflow ... -o json` command printed (after any warnings)."""
    lines = [line for line in out.splitlines() if line.startswith("[{") or line == "[]"]
    return json.loads(lines[-1]) if lines else []


def runs(env) -> dict[str, str]:
    return {r["run_id"]: r["state"] for r in json_rows(airflow(env, "dags", "list-runs", "taxi_retraining", "-o", "json"))}


def tfx(env, *args) -> subprocess.CompletedProcess:
    """`retrain <args>` in the TFX runtime with the cluster's MLMD settings (password from the services)."""
    exports = subprocess.run([SERVICES, "env"], env=env, capture_output=True, text=True, check=True).stdout
    secret = [line.split("=", 1)[1].strip("'") for line in exports.splitlines() if "RETRAIN_METADATA_PASSWORD" in line]
    mlmd = {"RETRAIN_METADATA_URL": f"mysql://retrain@127.0.0.1:13306/{env['RETRAIN_MLMD_DATABASE']}",
            "RETRAIN_METADATA_PASSWORD": secret[0]}
    return subprocess.run([TFX_PYTHON, "-m", "retrain.cli", *args], env={**env, **mlmd}, capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def test_a_parallel_backfill_runs_on_both_celery_workers_in_month_order(cluster):
    for _ in range(60):  # the dag-processor parses dags/ on its own schedule
        if "taxi_retraining" in airflow(cluster, "dags", "list", "-o", "plain", check=False):
            break
        time.sleep(2)
    airflow(cluster, "dags", "unpause", "taxi_retraining")
    airflow(cluster, "backfill", "create", "--dag-id", "taxi_retraining", "--from-date", MONTHS[0], "--to-date",
            MONTHS[-1], "--max-active-runs", "2", "--dag-run-conf", json.dumps({"train_steps": 100, "window": 2}))
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        backfill = {k: v for k, v in runs(cluster).items() if k.startswith("backfill__")}
        if len(backfill) == len(MONTHS) and all(s in ("success", "failed") for s in backfill.values()):
            break
        time.sleep(10)
    assert backfill and set(backfill.values()) == {"success"}, backfill

    work = cluster["RETRAIN_WORKDIR"]
    workers, reports = set(), {}
    for run in sorted(os.listdir(os.path.join(work, "runs", "taxi"))):
        folder = os.path.join(work, "runs", "taxi", run)
        with open(os.path.join(folder, "run.json")) as f:
            info = json.load(f)
        if not run.startswith("backfill__"):
            continue
        assert info["metadata"] == f"mysql://retrain@127.0.0.1:13306/{cluster['RETRAIN_MLMD_DATABASE']}"
        for name in os.listdir(os.path.join(folder, "nodes")):
            with open(os.path.join(folder, "nodes", name)) as f:
                workers.add(json.load(f)["worker"])
        summary = tfx(cluster, "summary", "--run-dir", folder, "--json")
        assert summary.returncode == 0, summary.stderr[-2000:]
        reports[info["span"]] = json.loads(summary.stdout)
    assert workers == {"worker1", "worker2"}, workers
    assert sorted(reports) == [201303, 201304]
    # The first month is pushed; the second was judged against it (its baseline existed when its
    # Evaluator ran: the earlier-runs sensor held it until the first run had finished).
    assert reports[201303]["outcome"] == "pushed", reports[201303]
    assert reports[201304]["outcome"] in ("pushed", "not_blessed"), reports[201304]
    assert reports[201304]["evaluation"]["baseline"], reports[201304]["evaluation"]
    if reports[201304]["pushed"]:
        assert int(reports[201303]["pushed"]["version"]) < int(reports[201304]["pushed"]["version"])

    claims = tfx(cluster, "metadata", "claims", "--json", "--workdir", work)
    assert claims.returncode == 0, claims.stderr[-2000:]
    by_span = {c["span"]: c for c in json.loads(claims.stdout)}
    assert {s: (c["kind"], c["gate"], c["active"]) for s, c in by_span.items()} == {
        201302: ("backfill", "passed", False), 201303: ("run", "passed", False), 201304: ("run", "passed", False)}
    # The later month's sensors ran (and waited on the earlier month where they had to).
    states = airflow(cluster, "tasks", "states-for-dag-run", "taxi_retraining", "backfill__2013-05-01T00:00:00+00:00",
                     "-o", "json")
    by_task = {t["task_id"]: t["state"] for t in json_rows(states)}
    assert {by_task[t] for t in ("validate_data.wait_for_baseline", "train.wait_for_window",
                                 "evaluate.wait_for_earlier_runs")} == {"success"}, by_task
