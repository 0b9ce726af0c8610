"""The "Governance report" link on every retraining task, and where it points.

Reports live in `<workdir>/pipeline_root/<pipeline>/governance/<run id>/report.html`; the
Airflow plugin in `airflow_tfx/plugins/` serves that folder at `/retrain/reports/`, so the
link is known from the pipeline and the run id alone (no XCom lookups).
"""

from __future__ import annotations

import os

from airflow.sdk import BaseOperatorLink

from core import layout

REPORTS_PREFIX = "/retrain/reports"
BASE_URL_ENV = "AIRFLOW__API__BASE_URL"


def dag_id(pipeline: str) -> str:
    """The pipeline's retraining DAG (dags/<pipeline>_retraining.py); reports belong to its runs."""
    return f"{pipeline}_retraining"


def report_url(pipeline: str, run_id: str) -> str:
    base = os.environ.get(BASE_URL_ENV, "").rstrip("/")
    return f"{base}{REPORTS_PREFIX}/{pipeline}/{layout.safe_id(run_id)}/{layout.REPORT_HTML}"


class GovernanceReportLink(BaseOperatorLink):
    """Opens the run's governance report (written by the `governance_report` task)."""

    name = "Governance report"

    def get_link(self, operator, *, ti_key) -> str:
        pipeline = getattr(operator, "retrain_pipeline", None)
        return report_url(pipeline, ti_key.run_id) if pipeline else ""
