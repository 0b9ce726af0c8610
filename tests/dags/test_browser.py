"""Browser check: `make airflow`'s Airflow runs the DAG when triggered through the REST API,
and the DAG's grid view renders in headless Chromium (screenshot kept in test-artifacts/).

The Airflow instance here is the script `make airflow` uses, on its own port, home and
work dir, with every user an admin (no login page to click through in a headless browser).
"""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from airflow_tfx.template import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCRIPT = os.path.join(REPO, "scripts", "airflow.sh")
ARTIFACTS = os.path.join(REPO, "test-artifacts")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, method: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(
        base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    data = root / "data"
    # Two 2013 months (~170-200 trips each): an eval split (~85 trips) the Evaluator judges.
    for span in (201302, 201303):
        shutil.copytree(os.path.join(REPO, "data", "taxi", f"span-{span}"), data / f"span-{span}")
    port = _free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW_PORT": str(port),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "RETRAIN_WORKDIR": str(root / "work"),
        "RETRAIN_DATA_ROOT_TAXI": str(data),
    }
    subprocess.run([SCRIPT, "start"], env=env, check=True, timeout=300)
    try:
        yield {"base": f"http://127.0.0.1:{port}", "env": env, "port": port, "root": root}
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, check=True, timeout=120)
        with socket.socket() as s:  # `stop` really stops it: the port is free again
            assert s.connect_ex(("127.0.0.1", port)) != 0


def test_triggered_run_succeeds_and_the_grid_renders(airflow):
    base = airflow["base"]
    deadline = time.monotonic() + 180
    while True:  # the dag-processor parses the DAG shortly after start
        try:
            _api(base, "GET", "/api/v2/dags/taxi_retraining")
            break
        except OSError:
            assert time.monotonic() < deadline, "DAG never appeared in the API"
            time.sleep(3)
    _api(base, "PATCH", "/api/v2/dags/taxi_retraining", {"is_paused": False})
    run = _api(base, "POST", "/api/v2/dags/taxi_retraining/dagRuns",
               {"logical_date": "2013-04-01T00:00:00Z", "conf": {"window": 2}})
    run_id = run["dag_run_id"]
    deadline = time.monotonic() + 1500
    state = run["state"]
    while state not in ("success", "failed"):
        assert time.monotonic() < deadline, f"run {run_id} still {state}"
        time.sleep(10)
        state = _api(base, "GET", f"/api/v2/dags/taxi_retraining/dagRuns/{run_id}")["state"]
    assert state == "success"

    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "airflow-taxi-grid.png")
    if os.path.exists(shot):
        os.remove(shot)
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={airflow['root'] / 'chromium'}", "--window-size=1600,1000",
         "--virtual-time-budget=20000", f"--screenshot={shot}", f"{base}/dags/taxi_retraining"],
        check=True, timeout=180, capture_output=True,
    )
    assert os.path.getsize(shot) > 20_000  # a rendered page, not a blank one

    # The run's governance report: linked from its tasks, served by the Airflow plugin.
    links = _api(base, "GET", f"/api/v2/dags/taxi_retraining/dagRuns/{run_id}/taskInstances/governance_report/links")
    url = links["extra_links"]["Governance report"]
    assert url and url.endswith("/report.html") and "/retrain/reports/taxi/" in url
    with urllib.request.urlopen(base + url if url.startswith("/") else url, timeout=30) as resp:
        page = resp.read().decode()
    assert "governance report" in page and "PUSHED" in page
    trainer_links = _api(base, "GET", f"/api/v2/dags/taxi_retraining/dagRuns/{run_id}/taskInstances/train.Trainer/links")
    assert trainer_links["extra_links"]["Governance report"] == url
    with pytest.raises(urllib.error.HTTPError):  # only governance files are served
        urllib.request.urlopen(base + "/retrain/reports/taxi/../../../metadata/taxi.sqlite", timeout=30)
    shot = os.path.join(ARTIFACTS, "airflow-governance-report.png")
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={airflow['root'] / 'chromium2'}",
         "--window-size=1200,2400", f"--screenshot={shot}", base + url if url.startswith("/") else url],
        check=True, timeout=180, capture_output=True,
    )
    assert os.path.getsize(shot) > 20_000
