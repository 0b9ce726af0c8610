"""The Models view inside Airflow's UI: routes, access rules, data and actions.

Mounted by the plugin (airflow_tfx/plugins/retrain_reports.py) under `/retrain/models/`,
shown in Airflow's navigation ("Models") and as a "Model" tab on every DAG run:
- `/retrain/models/` one row per pipeline the user may read: what serves (stable, canary),
  its age, metrics, the last run, pending approvals, open alerts, quarantined spans;
- `/retrain/models/{pipeline}` the timeline of spans, a trend chart of the key metric, and
  the roll-back and quarantine forms for users who may edit the DAG;
- `/retrain/models/{pipeline}/versions/{version}` lineage, metrics per slice, serving-check
  latency, the history of labels and pins;
- `/retrain/models/run/{dag_id}/{run_id}` the DAG run's span (the run tab);
- `/retrain/models/api/{pipeline}` the same data as JSON.

Every route asks Airflow's auth manager: reading needs the DAG's runs (GET), actions need
edit rights on the DAG (PUT); no credentials is 401, no permission 403, and a pipeline the
user may not read is not listed. The data comes from the TFX runtime (`retrain view`,
governance/models_view.py: ML Metadata and the run records), run as TfxRuntimeHook runs
commands, and is kept for a few seconds unless the files behind it changed. Actions run
`retrain rollback` / `retrain quarantine` there too, with the Airflow user as who decided,
so they are recorded where the CLI records them.
"""

from __future__ import annotations

import glob
import hashlib
import hmac
import json
import logging
import os
import subprocess
import threading
import time
from typing import Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Form, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from airflow_tfx import links, models_html
from airflow_tfx.compiled_dag import REPO
from airflow_tfx.dag_factory import WORKDIR_ENV
from core import layout
from task_host import client as warm

log = logging.getLogger(__name__)
PREFIX = "/models"
# A view older than this is rebuilt even if no file behind it changed (MLMD on MariaDB).
CACHE_SECONDS = 10.0
router = APIRouter(prefix=PREFIX)
_cache: dict[str, tuple[float, str, dict]] = {}
_lock = threading.Lock()


def workdir() -> str:
    return os.environ.get(WORKDIR_ENV, os.path.join(REPO, "work"))


def pipelines() -> list[str]:
    """The pipelines with a compiled DAG (dags/compiled/<pipeline>.json)."""
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "dags", "compiled", "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                out.append(json.load(f)["pipeline"])
        except (OSError, ValueError, KeyError):
            continue
    return out


def _auth_manager():
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def may(user, pipeline: str, method: str = "GET") -> bool:
    """Whether Airflow lets `user` read (GET) or edit (PUT) the pipeline's retraining DAG."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    details = DagDetails(id=links.dag_id(pipeline))
    if method == "GET":
        return _auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, details=details,
                                                 user=user)
    return _auth_manager().is_authorized_dag(method=method, details=details, user=user)


def _require(user, pipeline: str, method: str = "GET") -> None:
    if pipeline not in pipelines():
        raise HTTPException(status_code=404, detail=f"no retraining pipeline {pipeline!r}")
    if not may(user, pipeline, method):
        verb = "read the runs of" if method == "GET" else "edit"
        raise HTTPException(status_code=403, detail=f"not allowed to {verb} {links.dag_id(pipeline)}")


def _fingerprint(pipeline: str) -> str:
    """The newest change to the files a pipeline's view is built from."""
    work = workdir()
    paths = [os.path.join(work, layout.RUNS_DIR, pipeline), os.path.join(layout.pipeline_root(work, pipeline),
             layout.REPORT_DIR), layout.metadata_path(work, pipeline), layout.alerts_path(work, pipeline)]
    serving = os.path.join(layout.serving_root(work), pipeline)
    paths += [serving, os.path.join(serving, "history.jsonl"), os.path.join(serving, "rollout.json"),
              os.path.join(layout.serving_root(work), "models.config")]
    stamps = []
    for p in paths:
        try:
            stamps.append(f"{p}:{os.stat(p).st_mtime_ns}")
        except OSError:
            stamps.append(f"{p}:-")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


def _runtime_env() -> dict[str, str]:
    from airflow_tfx.hooks import TfxRuntimeHook

    try:
        conn = TfxRuntimeHook().get_conn()
    except Exception:  # no metadata DB for connections here: the worker's own settings apply
        conn = {}
    return {**os.environ, "PYTHONUNBUFFERED": "1", **conn}


def _retrain(args: list[str], user: str | None = None) -> subprocess.CompletedProcess:
    from airflow_tfx.hooks import TfxRuntimeHook

    env = _runtime_env()
    if user:
        env["RETRAIN_USER"] = user
    cmd = TfxRuntimeHook().command(args)
    # Forked by the warm TFX runtime where one answers (as the tasks are): no interpreter start.
    proc = warm.start(cmd, env, REPO, separate_stderr=True, say=log.info)
    if proc is not None:
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err or "")
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def views(names: list[str]) -> dict[str, dict]:
    """The pipelines' view documents, from the TFX runtime in one `retrain view` call for
    those not cached (or whose files changed since)."""
    stamps = {p: _fingerprint(p) for p in names}
    out, missing = {}, []
    with _lock:
        for p in names:
            hit = _cache.get(p)
            if hit and hit[1] == stamps[p] and time.monotonic() - hit[0] < CACHE_SECONDS:
                out[p] = hit[2]
            else:
                missing.append(p)
    if missing:
        proc = _retrain(["view", *[a for p in missing for a in ("--pipeline", p)], "--workdir", workdir()])
        if proc.returncode != 0:
            raise HTTPException(status_code=500, detail=f"retrain view failed: {proc.stderr.strip()[-800:]}")
        fetched = json.loads(proc.stdout.strip().splitlines()[-1])
        with _lock:
            for p in missing:
                _cache[p] = (time.monotonic(), stamps[p], fetched[p])
                out[p] = fetched[p]
    return {p: out[p] for p in names}


def view(pipeline: str) -> dict:
    """One pipeline's view document (see `views`)."""
    return views([pipeline])[pipeline]


def forget(pipeline: str) -> None:
    with _lock:
        _cache.pop(pipeline, None)


def _csrf_key() -> bytes:
    from airflow.configuration import conf

    return (conf.get("api_auth", "jwt_secret", fallback="") or "retrain-models").encode()


def csrf_token(user_name: str, pipeline: str) -> str:
    """A form token bound to the user and the pipeline: a page of another site cannot post
    an action with the user's cookie."""
    return hmac.new(_csrf_key(), f"{user_name}\0{pipeline}".encode(), hashlib.sha256).hexdigest()


def _user_name(user) -> str:
    return user.get_name() if hasattr(user, "get_name") else str(user)


@router.get("/", response_class=HTMLResponse)
def overview(user: GetUserDep) -> HTMLResponse:
    readable = [p for p in pipelines() if may(user, p)]
    return HTMLResponse(models_html.overview(list(views(readable).values()), _user_name(user)))


@router.get("/api/{pipeline}")
def api(pipeline: str, user: GetUserDep) -> JSONResponse:
    _require(user, pipeline)
    return JSONResponse(view(pipeline))


@router.get("/run/{dag_id}/{run_id}", response_class=HTMLResponse)
def run_tab(dag_id: str, run_id: str, user: GetUserDep) -> HTMLResponse:
    pipeline = next((p for p in pipelines() if links.dag_id(p) == dag_id), None)
    if pipeline is None:
        return HTMLResponse(models_html.not_retraining(dag_id))
    _require(user, pipeline)
    return HTMLResponse(models_html.run_tab(view(pipeline), run_id))


@router.get("/{pipeline}", response_class=HTMLResponse)
def pipeline_page(pipeline: str, user: GetUserDep, done: str | None = None) -> HTMLResponse:
    _require(user, pipeline)
    name = _user_name(user)
    token = csrf_token(name, pipeline) if may(user, pipeline, "PUT") else None
    return HTMLResponse(models_html.pipeline_page(view(pipeline), name, token, done))


@router.get("/{pipeline}/versions/{version}", response_class=HTMLResponse)
def version_page(pipeline: str, version: str, user: GetUserDep) -> HTMLResponse:
    _require(user, pipeline)
    data = view(pipeline)
    if version not in data["versions"] and version not in data["available_versions"]:
        raise HTTPException(status_code=404, detail=f"{pipeline}: no version {version}")
    return HTMLResponse(models_html.version_page(data, version))


def _action(pipeline: str, user, token: str, reason: str) -> str:
    _require(user, pipeline, "PUT")
    name = _user_name(user)
    if not hmac.compare_digest(token or "", csrf_token(name, pipeline)):
        raise HTTPException(status_code=403, detail="the form's token does not match: reload the page")
    if not reason.strip():
        raise HTTPException(status_code=400, detail="a reason is required")
    return name


def _done(pipeline: str, proc: subprocess.CompletedProcess) -> RedirectResponse:
    forget(pipeline)
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise HTTPException(status_code=400, detail=message)
    import urllib.parse

    said = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "done"
    return RedirectResponse(f"/retrain{PREFIX}/{pipeline}?done={urllib.parse.quote(said)}", status_code=303)


@router.post("/{pipeline}/rollback")
def rollback(pipeline: str, user: GetUserDep, version: int = Form(...), reason: str = Form(""),
             token: str = Form("")) -> RedirectResponse:
    name = _action(pipeline, user, token, reason)
    model = view(pipeline)["model"]
    # --opt=value: a reason or name that starts with "-" stays a value, never an option.
    return _done(pipeline, _retrain(["rollback", f"--model={model}", f"--to={version}", f"--reason={reason}",
                                     f"--by={name}", f"--workdir={workdir()}"], user=name))


@router.post("/{pipeline}/quarantine")
def quarantine(pipeline: str, user: GetUserDep, span: str = Form(...), reason: str = Form(""),
               token: str = Form("")) -> RedirectResponse:
    name = _action(pipeline, user, token, reason)
    return _done(pipeline, _retrain(["quarantine", f"--pipeline={pipeline}", f"--span={span}", f"--reason={reason}",
                                     f"--by={name}", f"--workdir={workdir()}"], user=name))


def external_views() -> list[dict[str, Any]]:
    """Airflow 3.1+ UI entries: the nav item and the tab on each DAG run (shown in an iframe)."""
    return [
        {"name": "Models", "href": f"/retrain{PREFIX}/", "destination": "nav", "url_route": "models",
         "nav_top_level": True},
        {"name": "Model", "href": f"/retrain{PREFIX}/run/{{DAG_ID}}/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "model_run"},
    ]
