"""The governance-report plugin answers only requests Airflow's auth manager authenticates: the
Airflow API app with the plugin, in-process (FastAPI's TestClient), over a migrated SQLite
metadata DB and the simple auth manager's generated login, as `make airflow` runs it."""

import json
import os
import subprocess
import sys

from airflow_tfx.compiled_dag import REPO

_CHECK = r"""
import json, os
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app

client = TestClient(create_app("core"))
url = "/retrain/reports/taxi/r1/report.html"
out = {"anonymous": client.get(url).status_code,
       "bad token": client.get(url, headers={"Authorization": "Bearer not-a-token"}).status_code}
password = json.load(open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))["reviewer"]
token = client.post("/auth/token", json={"username": "reviewer", "password": password}).json()["access_token"]
bearer = client.get(url, headers={"Authorization": f"Bearer {token}"})
out["bearer"] = [bearer.status_code, bearer.text]
browser = client.get(url, cookies={"_token": token})  # the UI's session cookie, as a browser sends it
out["cookie"] = [browser.status_code, browser.text]
out["outside governance/"] = client.get("/retrain/reports/taxi/%2e%2e/%2e%2e/%2e%2e/metadata/taxi.sqlite",
                                        headers={"Authorization": f"Bearer {token}"}).status_code
print("RESULT " + json.dumps(out))
"""


def test_reports_need_an_airflow_login(tmp_path):
    report = tmp_path / "work" / "pipeline_root" / "taxi" / "governance" / "r1" / "report.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html>governance report of r1</html>")
    (tmp_path / "work" / "metadata").mkdir()
    (tmp_path / "work" / "metadata" / "taxi.sqlite").write_text("secret")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "RETRAIN_WORKDIR": str(tmp_path / "work"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "airflow_tfx", "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "reviewer:viewer",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json")}
    env.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", None)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    proc = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    # As Airflow's own API answers: no credentials 401, a token it cannot verify 403.
    assert got["anonymous"] == 401 and got["bad token"] == 403
    assert got["bearer"] == [200, "<html>governance report of r1</html>"]  # an API client with a token
    assert got["cookie"] == [200, "<html>governance report of r1</html>"]  # a browser logged in to the UI
    assert got["outside governance/"] == 404
