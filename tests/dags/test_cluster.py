"""Airflow as teams run it, end to end: `scripts/airflow.sh cluster-start` (PostgreSQL
metadata DB, CeleryExecutor on a Redis broker, scheduler, API server, dag-processor,
triggerer and two Celery workers as separate processes), ML Metadata on MariaDB.

A backfill of two months with both runs active at once: both succeed, their tasks ran on
both workers (forked from the host's warm TFX runtime), the later month waited for the
earlier one's gate and model (the span claims in MariaDB say so), and the pushes are in
month order. Then the UI: the DAG's grid renders in headless Chromium, every task links to
its run's governance report, which the Airflow plugin serves (and nothing else). Last, the
Models view over ML Metadata on MariaDB: both months on the timeline, a quarantine from the
page recorded in that store, and a user the auth manager denies the DAG refused everywhere.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from airflow_tfx.compiled_dag import REPO
from tests.dags import ui

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AIRFLOW_SH = os.path.join(REPO, "scripts", "airflow.sh")
SERVICES = os.path.join(REPO, "scripts", "services.sh")
MONTHS = ("2013-03-01", "2013-04-01")  # spans 201303, 201304 (201302 is backfilled for the window)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_HOME"}
    env.update(ui.ALL_ADMINS, AIRFLOW_CLUSTER_HOME=str(root / "airflow"), AIRFLOW_PORT="18095", RETRAIN_WORKDIR=str(root / "work"),
               RETRAIN_MLMD_DATABASE="cluster_test", RETRAIN_AIRFLOW_DATABASE="airflow_cluster_test",
               RETRAIN_REDIS_DB="1", KEEP_SERVICES="1", RETRAIN_TFX_PYTHON=TFX_PYTHON,
               # `airflow backfill` replays calendar months: the monthly schedule (runs on data
               # arrival are tested in test_standalone.py).
               RETRAIN_SCHEDULE="monthly",
               # DAG-level access as FAB or Keycloak rule it: `auditor` may not see taxi_retraining.
               AIRFLOW__CORE__AUTH_MANAGER="tests.airflow_tfx.scoped_auth.ScopedAuthManager",
               RETRAIN_TEST_DAG_DENY="auditor=taxi_retraining", PYTHONPATH=REPO)
    subprocess.run([SERVICES, "mariadb-db", "cluster_test"], check=True, env=env, capture_output=True)
    subprocess.run([SERVICES, "postgres-db", "airflow_cluster_test"], check=True, env=env, capture_output=True)
    start = subprocess.run([AIRFLOW_SH, "cluster-start"], env=env, capture_output=True, text=True, timeout=600)
    try:
        assert start.returncode == 0, start.stdout + start.stderr[-3000:]
        yield {**env, "root": str(root)}
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


def api_base(env) -> str:
    return f"http://127.0.0.1:{env['AIRFLOW_PORT']}"


def runs(env) -> dict[str, str]:
    """The DAG's runs and their states, from the REST API: polled every 10 s, where each
    `airflow dags list-runs` would pay a second of CPU importing Airflow."""
    return {r["dag_run_id"]: r["state"]
            for r in ui.api(api_base(env), "GET", "/api/v2/dags/taxi_retraining/dagRuns?limit=100")["dag_runs"]}


def tfx(env, *args) -> subprocess.CompletedProcess:
    """`retrain <args>` in the TFX runtime with the cluster's MLMD settings (password from the services)."""
    exports = subprocess.run([SERVICES, "env"], env=env, capture_output=True, text=True, check=True).stdout
    secret = [line.split("=", 1)[1].strip("'") for line in exports.splitlines() if "RETRAIN_METADATA_PASSWORD" in line]
    mlmd = {"RETRAIN_METADATA_URL": f"mysql://retrain@127.0.0.1:13306/{env['RETRAIN_MLMD_DATABASE']}",
            "RETRAIN_METADATA_PASSWORD": secret[0]}
    return subprocess.run([TFX_PYTHON, "-m", "retrain.cli", *args], env={**env, **mlmd}, capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def test_a_parallel_backfill_runs_on_both_celery_workers_in_month_order(cluster):
    base = api_base(cluster)
    ui.wait_for_dag(base, "taxi_retraining")  # the dag-processor parses dags/ on its own schedule
    ui.api(base, "PATCH", "/api/v2/dags/taxi_retraining", {"is_paused": False})
    airflow(cluster, "backfill", "create", "--dag-id", "taxi_retraining", "--from-date", MONTHS[0], "--to-date",
            MONTHS[-1], "--max-active-runs", "2", "--dag-run-conf", json.dumps({"train_steps": 300, "window": 2}))
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        backfill = {k: v for k, v in runs(cluster).items() if k.startswith("backfill__")}
        if len(backfill) == len(MONTHS) and all(s in ("success", "failed") for s in backfill.values()):
            break
        time.sleep(10)
    assert backfill and set(backfill.values()) == {"success"}, backfill

    work = cluster["RETRAIN_WORKDIR"]
    workers, reports, run_ids = set(), {}, {}
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
        run_ids[info["span"]] = info["run_id"]
        summary = tfx(cluster, "summary", "--run-dir", folder, "--json")
        assert summary.returncode == 0, summary.stderr[-2000:]
        reports[info["span"]] = json.loads(summary.stdout)
    assert workers == {"worker1", "worker2"}, workers
    # Every TFX node of both months forked from the warm runtime (a refused or unanswered
    # request would say "starting a cold process" in its task log).
    with open(os.path.join(cluster["root"], "airflow", "processes", "warm-runtime.log")) as f:
        warm_starts = f.read().count(" started node run ")
    assert warm_starts >= 2 * 12, warm_starts  # the later month's Pusher is skipped if not blessed
    task_logs = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(cluster["root"], "airflow", "logs"))
                 for n in names]
    assert not [p for p in task_logs if "cold process" in open(p, errors="replace").read()]
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

    # The UI: the grid, each task's link to its run's governance report, the report itself.
    ui.screenshot(f"{base}/dags/taxi_retraining", "airflow-taxi-grid.png", os.path.join(cluster["root"], "chromium"),
                  shows=("taxi_retraining", "validate_data"))
    run = urllib.parse.quote(run_ids[201303], safe="")
    links = ui.api(base, "GET", f"/api/v2/dags/taxi_retraining/dagRuns/{run}/taskInstances/governance_report/links")
    url = links["extra_links"]["Governance report"]
    assert url and url.endswith("/report.html") and "/retrain/reports/taxi/" in url, url
    url = base + url if url.startswith("/") else url
    with urllib.request.urlopen(url, timeout=30) as resp:
        page = resp.read().decode()
    assert "governance report" in page and "PUSHED" in page
    trainer = ui.api(base, "GET", f"/api/v2/dags/taxi_retraining/dagRuns/{run}/taskInstances/train.Trainer/links")
    assert trainer["extra_links"]["Governance report"] == links["extra_links"]["Governance report"]
    with pytest.raises(urllib.error.HTTPError):  # only governance files are served
        urllib.request.urlopen(base + "/retrain/reports/taxi/../../../metadata/taxi.sqlite", timeout=30)
    ui.screenshot(url, "airflow-governance-report.png", os.path.join(cluster["root"], "chromium2"), "1200,2400",
                  shows=("governance report", "PUSHED", "<svg"))

    # The Models view over ML Metadata on MariaDB (the hook hands the TFX runtime its URL):
    # both months, and a quarantine done from the page is recorded in that store.
    view = ui.api(base, "GET", "/retrain/models/api/taxi")
    assert sorted(t["span"] for t in view["timeline"] if t["run_id"] in run_ids.values()) == [201303, 201304]
    assert view["serving"]["stable"]["version"] == str(reports[201303]["pushed"]["version"])
    with urllib.request.urlopen(base + "/retrain/models/taxi", timeout=60) as resp:
        token = re.search(r"name='token' value='([0-9a-f]+)'", resp.read().decode()).group(1)
    form = urllib.parse.urlencode({"span": "201302", "reason": "late corrections", "token": token}).encode()
    with urllib.request.urlopen(urllib.request.Request(base + "/retrain/models/taxi/quarantine", data=form),
                                timeout=120) as resp:
        assert "span 201302 of taxi: quarantine" in resp.read().decode()
    spans = tfx(cluster, "spans", "--workdir", work, "--data-root", os.path.join(REPO, "data", "taxi"))
    assert "201302" in spans.stdout and "QUARANTINED" in spans.stdout.split("201302", 1)[1].split("\n", 1)[0]

    # A user Airflow denies the DAG (a token signed with the cluster's JWT secret, as its API
    # server signs them): taxi is not listed, and every page and action answers 403.
    with open(os.path.join(cluster["root"], "airflow", "jwt.secret")) as f:
        secret = f.read().strip()
    minted = subprocess.run([os.path.join(os.path.dirname(sys.executable), "python"), "-c", _MINT], text=True,
                            capture_output=True, timeout=120, cwd=REPO,
                            env={**cluster, "AIRFLOW__API_AUTH__JWT_SECRET": secret,
                                 "AIRFLOW_HOME": os.path.join(cluster["root"], "mint")})
    auditor = minted.stdout.strip().splitlines()[-1]
    pages = ["/retrain/models/taxi", "/retrain/models/api/taxi",
             f"/retrain/models/taxi/versions/{view['serving']['stable']['version']}",
             f"/retrain/models/run/taxi_retraining/{urllib.parse.quote(run_ids[201303], safe='')}"]
    actions = {"/retrain/models/taxi/rollback": {"version": "1", "reason": "r", "token": "x"},
               "/retrain/models/taxi/quarantine": {"span": "201303", "reason": "r", "token": "x"}}
    assert [_status(base + p, auditor) for p in pages] == [403] * len(pages)
    assert [_status(base + p, auditor, d) for p, d in actions.items()] == [403, 403]
    req = urllib.request.Request(base + "/retrain/models/", headers={"Authorization": f"Bearer {auditor}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        listed = resp.read().decode()
    assert "/retrain/models/taxi'" not in listed and "/retrain/models/digits'" in listed


_MINT = """
from airflow.api_fastapi.app import create_auth_manager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
print(create_auth_manager().generate_jwt(SimpleAuthManagerUser(username="auditor", role="admin")))
"""


def _status(url: str, token: str, data: dict | None = None) -> int:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
