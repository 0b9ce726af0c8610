"""Airflow plugin: serves governance reports at /retrain/reports/<pipeline>/<run>/report.html
and the model index at /retrain/reports/<pipeline>/index.html, from RETRAIN_WORKDIR.

Only files under each pipeline's `governance/` folder are served (no other artifacts).
Set AIRFLOW__CORE__PLUGINS_FOLDER to this folder (scripts/airflow.sh does).
"""

from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse

from airflow_tfx.dag_factory import WORKDIR_ENV
from airflow_tfx.template import REPO

app = FastAPI(title="Retraining governance reports")


def _governance_root(pipeline: str) -> str:
    workdir = os.environ.get(WORKDIR_ENV, os.path.join(REPO, "work"))
    return os.path.realpath(os.path.join(workdir, "pipeline_root", pipeline, "governance"))


@app.get("/reports/{pipeline}/{path:path}")
def report_file(pipeline: str, path: str) -> FileResponse:
    root = _governance_root(pipeline)
    target = os.path.realpath(os.path.join(root, path))
    if not target.startswith(root + os.sep) or not os.path.isfile(target):
        raise HTTPException(status_code=404, detail=f"no report {pipeline}/{path}")
    media = "text/html" if target.endswith(".html") else "application/json" if target.endswith(".json") else None
    return FileResponse(target, media_type=media)


class RetrainReportsPlugin(AirflowPlugin):
    name = "retrain_reports"
    fastapi_apps = [{"app": app, "url_prefix": "/retrain", "name": "Retraining governance reports"}]
