"""The Models view's access rules and actions: the Airflow API app with the plugin, in-process
(FastAPI's TestClient), over a migrated SQLite metadata DB, with the simple auth manager's
logins and DAG-level access (tests/airflow_tfx/scoped_auth.py: `auditor` may not see
taxi_retraining). The data comes from the TFX runtime's `retrain view`, as in production;
the pages' content over real runs is checked through a real Airflow in
tests/dags/test_standalone.py."""

import json
import os
import subprocess
import sys

from airflow_tfx.compiled_dag import REPO

_CHECK = r"""
import json, os, re
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app

client = TestClient(create_app("core"))
passwords = json.load(open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))
def token(user):
    return client.post("/auth/token", json={"username": user, "password": passwords[user]}).json()["access_token"]
tokens = {u: token(u) for u in ("reviewer", "viewer", "auditor")}
pages = ["/retrain/models/taxi", "/retrain/models/api/taxi", "/retrain/models/run/taxi_retraining/r1"]
posts = {"/retrain/models/taxi/quarantine": {"span": "201304", "reason": "late corrections"},
         "/retrain/models/taxi/rollback": {"version": "1", "reason": "bad canary"}}
out = {"anonymous": [client.get(p).status_code for p in ["/retrain/models/", *pages]]
                    + [client.post(p, data=d).status_code for p, d in posts.items()]}
for user, t in tokens.items():
    h = {"Authorization": f"Bearer {t}"}
    got = {"overview": client.get("/retrain/models/", headers=h).text}
    got["pages"] = [client.get(p, headers=h).status_code for p in pages]
    page = client.get("/retrain/models/taxi", headers=h).text
    form_token = re.search(r"name='token' value='([0-9a-f]+)'", page)
    got["form"] = bool(form_token)
    got["posts"] = [client.post(p, headers=h, data={**d, "token": form_token.group(1) if form_token else "x"},
                                follow_redirects=False).status_code for p, d in posts.items()
                    if p.endswith("quarantine")]
    got["forged"] = client.post("/retrain/models/taxi/quarantine", headers=h, data={
        "span": "201305", "reason": "r", "token": "0" * 64}).status_code
    got["cookie"] = client.get("/retrain/models/", cookies={"_token": t}).status_code  # a browser's session
    out[user] = got
out["version_missing"] = client.get("/retrain/models/taxi/versions/99",
                                    headers={"Authorization": f"Bearer {tokens['reviewer']}"}).status_code
out["after"] = client.get("/retrain/models/api/taxi", headers={"Authorization": f"Bearer {tokens['reviewer']}"}).json()
print("RESULT " + json.dumps(out))
"""


def test_models_view_access_and_a_recorded_quarantine(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "RETRAIN_WORKDIR": str(work),
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "airflow_tfx", "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "reviewer:admin,viewer:viewer,auditor:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json"),
           "AIRFLOW__CORE__AUTH_MANAGER": "tests.airflow_tfx.scoped_auth.ScopedAuthManager",
           "RETRAIN_TEST_DAG_DENY": "auditor=taxi_retraining", "PYTHONPATH": REPO}
    env.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", None)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    proc = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    assert got["anonymous"] == [401] * 6  # no credentials: nothing, not even the list
    # An admin reads every page, gets the action forms, and a quarantine from the page is recorded.
    admin = got["reviewer"]
    assert admin["pages"] == [200, 200, 200] and admin["form"] and admin["cookie"] == 200
    assert "taxi" in admin["overview"] and "digits" in admin["overview"]
    assert admin["posts"] == [303] and admin["forged"] == 403  # a post without the page's token is refused
    [held] = got["after"]["quarantined"]
    assert held["span"] == 201304 and held["decided_by"] == "reviewer" and held["reason"] == "late corrections"
    # A viewer reads, but may not act: no forms, and the actions answer 403.
    viewer = got["viewer"]
    assert viewer["pages"] == [200, 200, 200] and not viewer["form"] and viewer["posts"] == [403]
    # A user Airflow denies the DAG: taxi is not listed, and every page and action answers 403.
    auditor = got["auditor"]
    assert "/retrain/models/taxi'" not in auditor["overview"] and "/retrain/models/digits'" in auditor["overview"]
    assert auditor["pages"] == [403, 403, 403] and auditor["posts"] == [403] and auditor["forged"] == 403
    assert got["version_missing"] == 404
