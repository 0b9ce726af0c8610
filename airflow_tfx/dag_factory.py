"""Builds the Airflow DAG of a retraining pipeline from its compiled template.

One task per TFX node, with the IR's edges, grouped by stage; a `prepare_run` task first
(checks inputs, backfills the window, compiles and binds the run's IR in the TFX
runtime) and a `run_summary` task last (runs whatever happened, prints the summary and
fails the DAG run if the pipeline did not finish).

Concurrency follows the metadata store. SQLite takes one writer: one task and one run of
the pipeline at a time. A MySQL/MariaDB store takes many: runs and tasks at once as the
config's `airflow:` block says, nodes in pools by resource class (`core.nodes`), and
sensors (`wait_for_baseline`, `wait_for_window`, `wait_for_earlier_runs`) that let a node
read other months' results only once they are decided (`runner/span_ledger.py`).
"""

from __future__ import annotations

import datetime as dt
import os

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, TaskGroup, TriggerRule

from airflow_tfx import links
from airflow_tfx import template as template_lib
from airflow_tfx.operators import (
    EarlierRunsSensor,
    SpanWaitSensor,
    TfxNodeOperator,
    TfxRuntimeOperator,
)
from core import layout, metadata, nodes

# Deployment settings from the environment (never Variables or Connections at parse time).
WORKDIR_ENV = "RETRAIN_WORKDIR"
# Per pipeline, e.g. RETRAIN_DATA_ROOT_TAXI: each DAG reads its own data.
DATA_ROOT_ENV = "RETRAIN_DATA_ROOT_{pipeline}"
_STAGE_ORDER = ("validate_data", "train", "evaluate", "push", "other")
_STAGE_TOOLTIPS = {
    "validate_data": "ingest the span, profile it, check it against the schema, the data gate",
    "train": "the window of spans, Transform, Trainer",
    "evaluate": "the last blessed model and the candidate, TFMA thresholds",
    "push": "atomic push of a blessed model to the serving directory",
}


def concurrency(template: dict, env=os.environ) -> dict:
    """Runs, tasks and pools for this deployment: one at a time on SQLite, else the config's.

    The store is the environment's `RETRAIN_METADATA_URL` (as the tasks will see it) or
    the config's `metadata:`; only its kind is read here, never a password.
    """
    deployment = template.get("deployment", {})
    store = metadata.parse(env.get(metadata.URL_ENV) or deployment.get("metadata") or metadata.SQLITE, "")
    if store.is_sqlite:
        return {"parallel": False, "max_active_runs": 1, "max_active_tasks": 1, "pools": {}}
    settings = deployment.get("airflow") or {}
    return {"parallel": True, "max_active_runs": settings.get("max_active_runs", 1),
            "max_active_tasks": settings.get("max_active_tasks", 1), "pools": dict(settings.get("pools") or {})}


def build_dag(
    template_path: str,
    dag_id: str,
    doc_md: str,
    start_date: dt.datetime = pendulum.datetime(2013, 1, 1, tz="UTC"),
    task_timeout: dt.timedelta = dt.timedelta(minutes=30),
) -> DAG:
    """Builds the DAG. Reads only the template file: no TFX import, no Variable, no Connection.

    Raises:
      template_lib.StaleTemplateError: the template was compiled from other pipeline code.
    """
    template = template_lib.read(template_path)
    limits = concurrency(template)
    workdir = os.environ.get(WORKDIR_ENV, os.path.join(template_lib.REPO, "work"))
    config = os.path.join(template_lib.REPO, template["config"])
    with DAG(
        dag_id=dag_id,
        # A run at the start of month M+1 covers month M: its data interval is the span.
        schedule=CronDataIntervalTimetable("0 0 1 * *", timezone="UTC"),
        start_date=start_date,
        catchup=False,
        max_active_runs=limits["max_active_runs"],
        max_active_tasks=limits["max_active_tasks"],
        default_args={
            "retries": 2,
            "retry_delay": dt.timedelta(minutes=1),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
            "execution_timeout": task_timeout,
        },
        params={
            "span": Param(None, type=["null", "string"], description="YYYYMM; blank: the data interval's month"),
            "train_steps": Param(None, type=["null", "integer"], minimum=1, description="blank: the config's"),
            "window": Param(None, type=["null", "integer"], minimum=1, description="spans to train on"),
        },
        doc_md=doc_md,
        tags=["tfx", "retraining", template["pipeline"]],
        render_template_as_native_obj=False,
        user_defined_filters={"safe_run_id": layout.safe_id},
    ) as dag:
        pipeline = template["pipeline"]
        prepare = TfxRuntimeOperator(
            task_id="prepare_run",
            pipeline=pipeline,
            arguments=[
                "prepare-run", "--config", config, "--workdir", workdir, "--run-id", "{{ run_id }}",
                "--span", "{{ params.span or data_interval_start.strftime('%Y%m') }}",
                "--train-steps", "{{ params.train_steps or '' }}",
                "--window", "{{ params.window or '' }}",
                "--expect", template_path,
                "--data-root", os.environ.get(DATA_ROOT_ENV.format(pipeline=template["pipeline"].upper()), ""),
            ],
            doc_md="Checks the span's data, backfills the window, compiles and binds the run's IR.",
        )
        groups = {
            stage: TaskGroup(stage, tooltip=_STAGE_TOOLTIPS.get(stage, ""))
            for stage in _STAGE_ORDER
            if any(n["stage"] == stage for n in template["nodes"])
        }
        tasks = {}
        for node in template["nodes"]:
            tasks[node["id"]] = TfxNodeOperator(
                task_id=node["id"],
                node_id=node["id"],
                workdir=workdir,
                pipeline=template["pipeline"],
                task_group=groups[node["stage"]],
                doc_md=f"TFX node `{node['id']}` ({node['type']}).",
                **_pool(node["id"], limits["pools"]),
            )
        for node in template["nodes"]:
            for up in node["upstream"]:
                tasks[up] >> tasks[node["id"]]
            if not node["upstream"]:
                prepare >> tasks[node["id"]]
        if limits["parallel"]:
            _wait_tasks(tasks, groups, template["nodes"], prepare, workdir, pipeline)
        if nodes.APPROVAL_GATE in tasks:
            _approval_tasks(tasks, groups.get("push"), workdir, pipeline)
        report = TfxRuntimeOperator(
            task_id="governance_report",
            pipeline=pipeline,
            arguments=["report", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}"],
            trigger_rule=TriggerRule.ALL_DONE,
            retries=1,
            doc_md="The run's governance report from ML Metadata, pushed or not (a rejected candidate "
                   "needs it most); open it with the task's **Governance report** link.",
        )
        summary = TfxRuntimeOperator(
            task_id="run_summary",
            pipeline=pipeline,
            arguments=["summary", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
                       "--finish"],
            trigger_rule=TriggerRule.ALL_DONE,
            retries=0,
            doc_md="The run's summary; fails when the pipeline did not finish (gate stop, failure).",
        )
        for node in template["nodes"]:
            if not node["downstream"]:
                tasks[node["id"]] >> report
        report >> summary
    return dag


def _pool(node_id: str, pools: dict) -> dict:
    """The node's pool by resource class, when the deployment sizes that class."""
    resource = nodes.resource_class(node_id)
    return {"pool": resource} if resource in pools else {}


def _wait_tasks(tasks: dict, groups: dict, template_nodes: list, prepare, workdir: str, pipeline: str) -> None:
    """Sensors before the nodes that read other months' results (parallel runs only)."""
    stage = {n["id"]: n["stage"] for n in template_nodes}
    waits = {nodes.BASELINE_RESOLVER: ("wait_for_baseline", "baseline"),
             nodes.WINDOW_RESOLVER: ("wait_for_window", "window"),
             nodes.MODEL_RESOLVER: ("wait_for_earlier_runs", "models")}
    for node_id, (task_id, what) in waits.items():
        if node_id not in tasks:
            continue
        common = dict(task_id=task_id, workdir=workdir, pipeline=pipeline, task_group=groups[stage[node_id]])
        if what == "models":
            sensor = EarlierRunsSensor(
                doc_md="Waits until earlier months' runs are finished: the Evaluator's baseline and the "
                       "push order are then those of a sequential backfill.", **common)
        else:
            sensor = SpanWaitSensor(
                what=what, doc_md=f"Waits until the earlier spans' data gates this {what} reads have decided.",
                **common)
        prepare >> sensor >> tasks[node_id]


def _approval_tasks(tasks: dict, group, workdir: str, pipeline: str) -> None:
    """A reviewer's Approve/Reject (Airflow's human-in-the-loop prompt) before ApprovalGate.

    The prompt shows the candidate's report so far; `record_approval` writes the decision
    and who made it where the ApprovalGate node reads it and records it in MLMD. Either
    answer lets the run continue: a rejection is recorded, and the push is skipped.
    """
    from airflow.providers.standard.operators.hitl import HITLOperator

    gate = tasks[nodes.APPROVAL_GATE]
    prompt = HITLOperator(
        task_id="request_approval",
        task_group=group,
        subject=f"Push the new {pipeline} model?",
        body=(f"Candidate of run `{{{{ run_id }}}}`: blessed by the Evaluator and passed the serving check.\n\n"
              f"[Governance report so far]({links.report_url(pipeline, 'RUN').replace('RUN', '{{ run_id | safe_run_id }}')}) — "
              "metrics vs the served model, data checks, training provenance."),
        options=["Approve", "Reject"],
        defaults=None,
        response_timeout=dt.timedelta(days=3),
        retries=0,
    )
    record = TfxRuntimeOperator(
        task_id="record_approval",
        task_group=group,
        pipeline=pipeline,
        arguments=[
            "approve", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
            "--config", os.path.join(template_lib.REPO, "pipelines", pipeline, "config.yaml"),
            "--decision", "{{ ti.xcom_pull(task_ids='push.request_approval')['chosen_options'][0] }}",
            "--reviewer", "{{ (ti.xcom_pull(task_ids='push.request_approval')['responded_by_user'] or {}).get('name') "
                          "or ti.xcom_pull(task_ids='push.request_approval')['responded_by_user'] }}",
            "--comment", "decided in the Airflow UI", "--source", "airflow",
        ],
        retries=0,
    )
    preview = TfxRuntimeOperator(
        task_id="candidate_report",
        task_group=group,
        pipeline=pipeline,
        arguments=["report", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}"],
        retries=0,
        doc_md="The report so far, for the reviewer to read before deciding.",
    )
    for up in list(gate.upstream_list):
        up >> preview
    preview >> prompt >> record >> gate
