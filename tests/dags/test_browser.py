"""`make airflow`'s standalone Airflow: it starts (with its warm TFX runtime), parses the DAG,
renders the DAG's grid in headless Chromium, and `stop` ends all of it.

The same script, on its own port, home and work dir. A DAG run through the UI's API, its
task links and the governance report plugin are checked on the cluster (test_cluster.py),
which runs DAG runs anyway.
"""

import os
import socket
import subprocess

import pytest

from airflow_tfx.template import REPO
from core import warm
from tests.dags import ui

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCRIPT = os.path.join(REPO, "scripts", "airflow.sh")


def test_standalone_starts_renders_the_grid_and_stops(tmp_path):
    port = ui.free_port()
    env = {**os.environ, **ui.ALL_ADMINS, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW_PORT": str(port),
           "RETRAIN_WORKDIR": str(tmp_path / "work")}
    started = subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=300)
    sock = str(tmp_path / "airflow" / "tfx-runtime.sock")
    try:
        assert started.returncode == 0, started.stdout + started.stderr[-3000:]
        assert f"warm TFX runtime: {sock}" in started.stdout
        base = f"http://127.0.0.1:{port}"
        dag = ui.wait_for_dag(base, "taxi_retraining")
        assert dag["dag_id"] == "taxi_retraining"
        assert warm.ping(sock) is not None  # the tasks' warm runtime answers
        ui.screenshot(f"{base}/dags/taxi_retraining", "airflow-taxi-dag.png", str(tmp_path / "chromium"))
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, check=True, timeout=120)
    with socket.socket() as s:  # `stop` really stops it: the port is free again
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert warm.ping(sock) is None and not os.path.exists(sock)  # the warm runtime stopped with it
