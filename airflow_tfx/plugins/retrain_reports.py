"""Airflow plugin: serves governance reports at /retrain/reports/<pipeline>/<run>/report.html
and the model index at /retrain/reports/<pipeline>/index.html, from RETRAIN_WORKDIR; and the
Models view (airflow_tfx/models_ui.py) at /retrain/models/, shown in Airflow's navigation
("Models") and as a "Model" tab on each DAG run.

Only to users Airflow's auth manager lets read the pipeline's DAG runs: the UI's login
(its session cookie) or an API token (`Authorization: Bearer`), as for Airflow's own
API; anyone else gets 401 (no credentials) or 403 (not allowed). Only files under each
pipeline's `governance/` folder are served (no other artifacts).
Set AIRFLOW__CORE__PLUGINS_FOLDER to this folder (scripts/airflow.sh does).
"""

from __future__ import annotations

import os

from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse

from airflow_tfx import links, models_ui

app = FastAPI(title="Retraining governance reports and models")
app.include_router(models_ui.router)


def _governance_root(pipeline: str) -> str:
    return os.path.realpath(os.path.join(models_ui.workdir(), "pipeline_root", pipeline, "governance"))


def may_read_reports(pipeline: str, user: GetUserDep) -> None:
    """Raises 403 unless the user may read the runs of the pipeline's DAG (401 comes first
    from GetUserDep when the request carries no valid token)."""
    if not models_ui.may(user, pipeline, "GET"):
        raise HTTPException(status_code=403, detail=f"not allowed to read the runs of {links.dag_id(pipeline)}")


@app.get("/reports/{pipeline}/{path:path}", dependencies=[Depends(may_read_reports)])
def report_file(pipeline: str, path: str) -> FileResponse:
    root = _governance_root(pipeline)
    target = os.path.realpath(os.path.join(root, path))
    if not target.startswith(root + os.sep) or not os.path.isfile(target):
        raise HTTPException(status_code=404, detail=f"no report {pipeline}/{path}")
    media = "text/html" if target.endswith(".html") else "application/json" if target.endswith(".json") else None
    return FileResponse(target, media_type=media)


class RetrainReportsPlugin(AirflowPlugin):
    name = "retrain_reports"
    fastapi_apps = [{"app": app, "url_prefix": "/retrain", "name": "Retraining governance reports and models"}]
    external_views = models_ui.external_views()
