"""`make airflow`'s standalone Airflow, as a new user meets it: runs start when data arrives.

One standalone Airflow (the same script, its own port, home, work dir and data folder),
alerts by SMTP to a real local server:
- enabling the DAGs and checking for data announces the newest span (201303) on the
  `taxi_spans` asset; the scheduler starts one retraining run for it, which runs every
  task and pushes; the run outlives a deadline set short, and the deadline alert comes;
- checking again with nothing new announces nothing and starts no run;
- an external system announcing a span through the REST API starts its run;
- the grid and the Assets view render in headless Chromium, logged in;
- the Models view (airflow_tfx/models_ui.py): its nav entry and run tab, the overview with
  what serves, the pipeline page with the spans of real runs (one pushed beside the first,
  one corrupted and stopped), a roll-back done from the page that `retrain serve` then
  serves and the history records, and the access rules (no credentials 401; a viewer reads
  but its actions answer 403);
- `stop` ends all of it.

Logins are real: users reviewer (admin) and viewer. `airflow standalone` always uses the
simple auth manager, whose roles all read every DAG, so a user denied the DAG is tested on
the cluster (test_cluster.py, with tests/airflow_tfx/scoped_auth.py).

Task links and the governance report plugin are checked on the cluster (test_cluster.py).
"""

import csv
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from airflow_tfx.arrivals import SUCCESS_MARKER
from airflow_tfx.compiled_dag import REPO
from core import layout
from task_host import client as warm
from tests import smtp_inbox
from tests.dags import ui
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCRIPT = os.path.join(REPO, "scripts", "airflow.sh")
TAXI_DATA = os.path.join(REPO, "data", "taxi")
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
RETRAIN, ARRIVALS = "taxi_retraining", "taxi_span_arrivals"


def _runs(base: str, dag_id: str) -> list[dict]:
    return ui.api(base, "GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=id")["dag_runs"]


def _wait_run(base: str, dag_id: str, where, timeout_s: float, states=("success", "failed")) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in _runs(base, dag_id) if where(r) and r["state"] in states]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"no {dag_id} run in {states}: {_runs(base, dag_id)}"
        time.sleep(3)


def _tasks(base: str, dag_id: str, run_id: str) -> dict[str, str]:
    tis = ui.api(base, "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")
    return {t["task_id"]: t["state"] for t in tis["task_instances"]}


def _heartbeat_after(base: str, when: dt.datetime) -> dt.datetime | None:
    """The scheduler's latest heartbeat (Airflow's health endpoint), if it is later than `when`."""
    beat = ui.api(base, "GET", "/api/v2/monitor/health")["scheduler"].get("latest_scheduler_heartbeat")
    beat = dt.datetime.fromisoformat(beat) if beat else None
    return beat if beat and beat > when else None


def _check_for_data(base: str) -> dict:
    """Triggers the arrivals DAG now (its cron would) and waits for that run to end."""
    run_id = ui.api(base, "POST", f"/api/v2/dags/{ARRIVALS}/dagRuns", {"logical_date": None})["dag_run_id"]
    return _wait_run(base, ARRIVALS, lambda r: r["dag_run_id"] == run_id, 120)


def _span_events(base: str) -> list[dict]:
    [asset] = ui.api(base, "GET", "/api/v2/assets?name_pattern=taxi_spans")["assets"]
    return ui.api(base, "GET", f"/api/v2/assets/events?asset_id={asset['id']}&order_by=timestamp")["asset_events"]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    root = tmp_path_factory.mktemp("standalone")
    data = root / "data"
    # Two 2013 months (~170-200 trips each): the window's eval split (~85 trips) is above
    # the Evaluator's minimum (50), under which a candidate is not judged. Copies keep the
    # files' times, so both spans have long settled.
    for span in (201302, 201303):
        shutil.copytree(os.path.join(TAXI_DATA, f"span-{span}"), data / f"span-{span}")
    port = ui.free_port()
    with smtp_inbox.serve() as (inbox, smtp_port):
        env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"}
        env = {**env, "AIRFLOW_HOME": str(root / "airflow"), "AIRFLOW_PORT": str(port),
               # `airflow standalone` forces the simple auth manager, whose roles all read every
               # DAG: the user denied a DAG is tested on the cluster (test_cluster.py).
               "AIRFLOW_USERS": "reviewer:admin,viewer:viewer",
               "RETRAIN_WORKDIR": str(root / "work"), "RETRAIN_DATA_ROOT_TAXI": str(data),
               "RETRAIN_ALERTS_TO": "ops@example.org", "AIRFLOW_CONN_SMTP_DEFAULT": smtp_inbox.connection(smtp_port),
               # A deadline the run is sure to miss (36 s after it was queued): the alert must come.
               "RETRAIN_RUN_DEADLINE_HOURS": "0.01"}
        started = subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=300)
        try:
            assert started.returncode == 0, started.stdout + started.stderr[-3000:]
            base = f"http://127.0.0.1:{port}"
            with open(root / "airflow" / "simple_auth_manager_passwords.json.generated") as f:
                passwords = json.load(f)
            tokens = {user: ui.login(base, user, passwords[user], remember=user == "reviewer")
                      for user in ("reviewer", "viewer")}
            yield {"base": base, "env": env, "root": root, "data": data, "inbox": inbox,
                   "port": port, "started": started.stdout, "tokens": tokens}
        finally:
            subprocess.run([SCRIPT, "stop"], env=env, check=True, timeout=120)


@pytest.fixture(scope="module")
def first_run(standalone):
    base = standalone["base"]
    for dag_id in (RETRAIN, ARRIVALS):
        ui.wait_for_dag(base, dag_id)
        ui.api(base, "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    # Enabling the arrivals DAG runs its latest cron tick at once (catchup=False): that run
    # looks for data. (Triggered by hand if the scheduler has not started one.)
    deadline = time.monotonic() + 30
    while not _runs(base, ARRIVALS) and time.monotonic() < deadline:
        time.sleep(2)
    if not _runs(base, ARRIVALS):
        ui.api(base, "POST", f"/api/v2/dags/{ARRIVALS}/dagRuns", {"logical_date": None})
    checked = _wait_run(base, ARRIVALS, lambda r: True, 120)
    return checked, _wait_run(base, RETRAIN, lambda r: r["partition_key"] == "201303", 1500)


def test_the_newest_span_arrives_and_its_run_pushes(standalone, first_run):
    base, env = standalone["base"], standalone["env"]
    checked, run = first_run
    assert checked["state"] == "success" and _tasks(base, ARRIVALS, checked["dag_run_id"]) == {
        "announce_new_spans": "success"}
    # A new deployment announces the newest span only (like catchup=False), one event per span.
    [event] = _span_events(base)
    assert event["partition_key"] == "201303" and event["source_dag_id"] == ARRIVALS
    assert event["extra"]["spans"]["201303"]["files"] == 1
    assert run["run_type"] == "asset_triggered" and run["state"] == "success"
    tasks = _tasks(base, RETRAIN, run["dag_run_id"])
    assert len(tasks) == 19 and set(tasks.values()) == {"success"}, tasks  # prepare, 16 nodes, report, summary
    out = subprocess.run([TFX_PYTHON, "-m", "retrain.cli", "summary", "--workdir", env["RETRAIN_WORKDIR"],
                          "--pipeline", "taxi", "--run-id", run["dag_run_id"], "--json"],
                         capture_output=True, text=True, check=True).stdout
    summary = json.loads(out)
    assert summary["span"] == 201303 and summary["outcome"] == "pushed"
    assert summary["window_spans"] == [201302, 201303]
    serving = os.path.join(env["RETRAIN_WORKDIR"], "serving", "taxi")
    assert sorted(v for v in os.listdir(serving) if v.isdigit()) == [str(summary["pushed"]["version"])]
    report = layout.report_dir(layout.pipeline_root(env["RETRAIN_WORKDIR"], "taxi"), run["dag_run_id"])
    assert os.path.exists(os.path.join(report, layout.REPORT_HTML))


def test_a_run_past_its_deadline_alerts_the_operators(standalone, first_run):
    mail = standalone["inbox"].wait_for("missed its deadline", timeout_s=120)
    assert "span 201303" in mail["subject"] and mail["to"] == ["ops@example.org"]
    assert "not finished 0.01 h after it was queued" in mail["body"] and "/retrain/reports/taxi/" in mail["body"]


def test_no_new_data_announces_nothing_and_starts_no_run(standalone, first_run):
    base = standalone["base"]
    checked = _check_for_data(base)
    assert checked["state"] == "success"  # not red: skipped means "nothing new"
    assert _tasks(base, ARRIVALS, checked["dag_run_id"]) == {"announce_new_spans": "skipped"}
    # A run the check caused would be created by the scheduler's next loop: wait until two of
    # its heartbeats came after the check ended, so at least one whole loop ran since.
    ended = dt.datetime.fromisoformat(checked["end_date"])
    first = until(lambda: _heartbeat_after(base, ended), 120, "a scheduler heartbeat after the check")
    until(lambda: _heartbeat_after(base, first), 120, "a second scheduler heartbeat after the check")
    assert len(_span_events(base)) == 1 and len(_runs(base, RETRAIN)) == 1


def test_a_span_announced_through_the_rest_api_starts_its_run(standalone, first_run):
    base = standalone["base"]
    shutil.copytree(os.path.join(TAXI_DATA, "span-201304"), standalone["data"] / "span-201304")
    [asset] = ui.api(base, "GET", "/api/v2/assets?name_pattern=taxi_spans")["assets"]
    # What an external producer (the system that lands the data) sends when a span is complete.
    ui.api(base, "POST", "/api/v2/assets/events",
           {"asset_id": asset["id"], "partition_key": "201304", "extra": {"producer": "test"}})
    run = _wait_run(base, RETRAIN, lambda r: r["partition_key"] == "201304", 120,
                    states=("queued", "running", "success", "failed"))
    assert run["run_type"] == "asset_triggered"


@pytest.fixture(scope="module")
def browser(standalone):
    """Chromium logged in as reviewer (the UI's session cookie)."""
    b = ui.Browser(str(standalone["root"] / "chromium"))
    b.set_cookie(standalone["base"], "_token", standalone["tokens"]["reviewer"])
    yield b
    b.close()


def test_the_grid_and_the_assets_view_render(standalone, first_run, browser):
    base = standalone["base"]
    browser.open(f"{base}/dags/{RETRAIN}", shows=(RETRAIN, "validate_data"))
    browser.screenshot("airflow-taxi-dag.png")
    browser.open(f"{base}/assets", shows=("taxi_spans",))
    browser.screenshot("airflow-taxi-assets.png")


@pytest.fixture(scope="module")
def spans_for_the_models_view(standalone, first_run):
    """Span 201304 (announced through the REST API above) ends pushed beside 201303; then a
    corrupted 201305 (a payment type never seen) is announced and stopped at the gate."""
    base = standalone["base"]
    if not (standalone["data"] / "span-201304").exists():
        shutil.copytree(os.path.join(TAXI_DATA, "span-201304"), standalone["data"] / "span-201304")
        (standalone["data"] / "span-201304" / SUCCESS_MARKER).touch()
        _check_for_data(base)
    pushed = _wait_run(base, RETRAIN, lambda r: r["partition_key"] == "201304", 1500)
    report = _report(standalone["root"], pushed["dag_run_id"])
    assert report["outcome"] == "pushed", (report["outcome"], report["outcome_reason"], report["evaluation"])
    with open(os.path.join(TAXI_DATA, "span-201305", "data.csv"), newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("payment_type")
    os.makedirs(standalone["data"] / "span-201305")
    with open(standalone["data"] / "span-201305" / "data.csv", "w", newline="") as f:
        csv.writer(f).writerows([rows[0]] + [r[:col] + ["Bitcoin"] + r[col + 1:] for r in rows[1:]])
    # Complete, as a producer says it (else the sensor waits for the files to settle).
    (standalone["data"] / "span-201305" / SUCCESS_MARKER).touch()
    _check_for_data(base)
    stopped = _wait_run(base, RETRAIN, lambda r: r["partition_key"] == "201305", 900)
    return first_run[1], pushed, stopped


def _report(root, run_id: str) -> dict:
    """The governance report of the run: what it decided and why (read when a later check
    needs its outcome, so a refusal fails with its reasons rather than as a missing canary)."""
    reports = root / "work" / "pipeline_root" / "taxi" / "governance"
    [path] = [p for p in reports.glob("*/report.json") if json.loads(p.read_text())["run_id"] == run_id]
    return json.loads(path.read_text())


def _status(url: str, token: str | None = None, data: dict | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _view(base: str) -> dict:
    return ui.api(base, "GET", "/retrain/models/api/taxi")


def test_the_models_view_shows_what_serves_and_every_span(standalone, spans_for_the_models_view, browser):
    base = standalone["base"]
    first, pushed, stopped = spans_for_the_models_view
    assert (first["state"], pushed["state"], stopped["state"]) == ("success", "success", "failed")
    view = _view(base)
    stable, canary = view["serving"]["stable"]["version"], view["serving"]["canary"]["version"]
    # The nav entry opens the overview inside Airflow's UI: taxi with its stable and canary versions.
    text = browser.open(f"{base}/plugin/models", shows=("Models", "taxi", stable, canary, "stable", "canary"))
    assert "nothing served" in text  # digits and diabetes have no model yet
    browser.screenshot("airflow-models-overview.png")
    # The pipeline page: the three spans with their outcomes, the gate's verdict, the metric.
    text = browser.open(f"{base}/retrain/models/taxi", shows=("201303", "201304", "201305", "stopped: payment_type",
                                                             "pushed", "Roll back", "Quarantine"))
    assert "closest:" in text and "auc" in text
    browser.screenshot("airflow-models-taxi.png")
    by_span = {t["span"]: t for t in view["timeline"]}
    assert by_span[201303]["pushed_version"] == stable and by_span[201304]["pushed_version"] == canary
    assert by_span[201305]["shown_as"] == "stopped" and by_span[201305]["gate"]["blocking_features"] == ["payment_type"]
    assert by_span[201305]["run_id"] == stopped["dag_run_id"]
    # The version page: lineage down to the code commit, the SBOM digest and the signature.
    version = view["versions"][stable]
    text = browser.open(f"{base}/retrain/models/taxi/versions/{stable}",
                        shows=("Lineage", "201302, 201303", version["runtime"]["sbom_sha256"],
                               version["signature"]["digest"], "Metrics per slice", "p99"))
    browser.screenshot("airflow-models-version.png")
    # The Model tab on the stopped DAG run.
    browser.open(f"{base}/dags/{RETRAIN}/runs/{urllib.parse.quote(stopped['dag_run_id'], safe='')}/plugin/model_run",
                 shows=("Model", "span 201305", "stopped"))
    browser.screenshot("airflow-models-run-tab.png")


def test_a_rollback_from_the_page_is_served_and_recorded(standalone, spans_for_the_models_view, browser):
    base, env = standalone["base"], standalone["env"]
    view = _view(base)
    stable, canary = view["serving"]["stable"]["version"], view["serving"]["canary"]["version"]
    browser.open(f"{base}/retrain/models/taxi", shows=("Roll back",))
    # Fill in and submit the page's own form, as a person would.
    browser.send("Runtime.evaluate", expression=(
        "const f = document.querySelector(\"form[action$='/rollback']\");"
        f"f.querySelector('select').value = '{stable}';"
        "f.querySelector(\"input[name='reason']\").value = 'canary shows worse tips on airport trips';"
        "f.submit();"))
    until(lambda: f"serving version {stable}" in browser.text(), 60, "the roll-back's confirmation on the page")
    after = _view(base)
    assert after["serving"]["stable"]["version"] == stable and "canary" not in after["serving"]
    [event] = [e for e in after["history"] if e["event"] == "rollback"]
    assert event["user"] == "reviewer" and event["reason"] == "canary shows worse tips on airport trips"
    assert str(event["to_version"]) == stable
    # `retrain serve` over the same workdir serves the pinned version only.
    port = ui.free_port()
    server = subprocess.Popen([TFX_PYTHON, "-m", "retrain.cli", "serve", "--workdir", env["RETRAIN_WORKDIR"],
                               "--rest-port", str(port), "--grpc-port", str(ui.free_port())], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = until(lambda: json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/taxi",
                                                                 timeout=5).read()), 120,
                       "retrain serve answering", ignore=(OSError,))
        served = {s["version"]: s["state"] for s in status["model_version_status"]}
        assert served.get(stable) == "AVAILABLE" and served.get(canary) != "AVAILABLE", served
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_the_models_view_asks_for_a_login_and_edit_rights(standalone, spans_for_the_models_view):
    base, viewer = standalone["base"], standalone["tokens"]["viewer"]
    run_id = urllib.parse.quote(spans_for_the_models_view[2]["dag_run_id"], safe="")
    pages = ["/retrain/models/", "/retrain/models/taxi", "/retrain/models/api/taxi",
             f"/retrain/models/run/{RETRAIN}/{run_id}",
             f"/retrain/models/taxi/versions/{_view(base)['serving']['stable']['version']}"]
    actions = {"/retrain/models/taxi/rollback": {"version": "1", "reason": "r", "token": "x"},
               "/retrain/models/taxi/quarantine": {"span": "201304", "reason": "r", "token": "x"}}
    # No credentials: 401 on every page and action.
    assert [_status(base + p) for p in pages] == [401] * len(pages)
    assert [_status(base + p, None, d) for p, d in actions.items()] == [401, 401]
    # Airflow's viewer role reads the DAG but may not edit it: the pages, without the forms;
    # the actions answer 403.
    assert [_status(base + p, viewer) for p in pages] == [200] * len(pages)
    req = urllib.request.Request(base + "/retrain/models/taxi", headers={"Authorization": f"Bearer {viewer}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert "name='token'" not in r.read().decode()
    assert [_status(base + p, viewer, d) for p, d in actions.items()] == [403, 403]


def test_stop_ends_airflow_and_the_warm_runtime(standalone, first_run):
    sock = str(standalone["root"] / "airflow" / "tfx-runtime.sock")
    assert f"warm TFX runtime: {sock}" in standalone["started"]
    assert warm.ping(sock) is not None  # the tasks' warm runtime answers while Airflow runs
    subprocess.run([SCRIPT, "stop"], env=standalone["env"], check=True, timeout=120)
    with socket.socket() as s:  # `stop` really stops it: the port is free again
        assert s.connect_ex(("127.0.0.1", standalone["port"])) != 0
    assert warm.ping(sock) is None and not os.path.exists(sock)  # the warm runtime stopped with it
