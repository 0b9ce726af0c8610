"""Builds the Airflow DAGs of a retraining pipeline from its compiled template.

One task per TFX node, with the IR's edges, grouped by stage; a `prepare_run` task first
(checks inputs, backfills the window, compiles and binds the run's IR in the TFX
runtime) and a `run_summary` task last (runs whatever happened, prints the summary and
fails the DAG run if the pipeline did not finish).

When runs start (`airflow.schedule`, airflow_tfx/arrivals.py): on each span's arrival
(an asset event per span, from the `<pipeline>_span_arrivals` DAG or the REST API), or
on the monthly calendar with a deferred `wait_for_span` that skips a month whose data
never came. Operators hear of every stop, refusal, failure and missed deadline
(airflow_tfx/alerts.py).

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
from airflow.sdk import (
    DAG,
    Asset,
    AssetOrTimeSchedule,
    AsyncCallback,
    CronDataIntervalTimetable,
    CronTriggerTimetable,
    DeadlineAlert,
    DeadlineReference,
    Param,
    PartitionedAssetTimetable,
    TaskGroup,
    TriggerRule,
)

from airflow_tfx import alerts, arrivals, links
from airflow_tfx import compiled_dag as template_lib
from airflow_tfx.operators import ProcessTasks
from core import airflow_settings, layout, metadata, nodes

# Deployment settings from the environment (never Variables or Connections at parse time).
WORKDIR_ENV = "RETRAIN_WORKDIR"
# Per pipeline, e.g. RETRAIN_DATA_ROOT_TAXI: each DAG reads its own data.
DATA_ROOT_ENV = "RETRAIN_DATA_ROOT_{pipeline}"
WAIT_FOR_SPAN = "wait_for_span"
RUN_SPAN = "{{ run_span(params, dag_run, data_interval_start, data_interval_end, logical_date) }}"
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


def data_source(template: dict, env=os.environ) -> tuple[str, str]:
    """(data folder, example format) this deployment's runs read: RETRAIN_DATA_ROOT_<PIPELINE>
    or the config's `data_root`."""
    data = template.get("deployment", {}).get("data") or {}
    root = env.get(DATA_ROOT_ENV.format(pipeline=template["pipeline"].upper())) or data.get("root")
    if not root:
        raise template_lib.TemplateError(f"the {template['pipeline']} template names no data folder; run `make compile`")
    return template_lib.repo_path(root), data.get("format", "csv")


def task_kinds(settings: dict, *, pipeline: str, workdir: str, data_root: str):
    """Makes the DAG's tasks: processes in the TFX runtime on the worker, or pods of its image."""
    if settings["execution"] == "kubernetes":
        from airflow_tfx.pods import PodTasks

        return PodTasks(settings["kubernetes"], pipeline=pipeline, workdir=workdir, data_root=data_root)
    return ProcessTasks(pipeline=pipeline, workdir=workdir)


def _schedule(settings: dict, asset):
    if settings["schedule"] == "data":
        # One run per announced span (the event's partition key), none for a month without data.
        return PartitionedAssetTimetable(assets=asset)
    # A run at the start of month M+1 covers month M: its data interval is the span.
    return CronDataIntervalTimetable("0 0 1 * *", timezone="UTC")


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
    settings = airflow_settings.resolve_airflow(template["deployment"].get("airflow"))
    alert_settings = airflow_settings.resolve_alerts(template["deployment"].get("alerts"))
    data_root, example_format = data_source(template)
    asset = arrivals.spans_asset(template["pipeline"], data_root)
    workdir = os.environ.get(WORKDIR_ENV, os.path.join(template_lib.REPO, "work"))
    make = task_kinds(settings, pipeline=template["pipeline"], workdir=workdir, data_root=data_root)
    # Where the TFX runtime finds the project's files: this checkout, or the image's copy.
    config = make.path(template["config"])
    on_failure = alerts.FailureNotifier(pipeline=template["pipeline"], settings=alert_settings,
                                        gate_task=nodes.DATA_GATE, skew_task=nodes.SERVING_SKEW)
    with DAG(
        dag_id=dag_id,
        schedule=_schedule(settings, asset),
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
            # Called once a task has failed for good (not on a retry): a gate stop or a failure.
            "on_failure_callback": [on_failure],
        },
        deadline=_deadline(template["pipeline"], settings, alert_settings),
        params={
            "span": Param(None, type=["null", "string"],
                          description="YYYYMM; blank: the arrived span (data schedule) or the data interval's month"),
            "train_steps": Param(None, type=["null", "integer"], minimum=1, description="blank: the config's"),
            "window": Param(None, type=["null", "integer"], minimum=1, description="spans to train on"),
        },
        doc_md=doc_md,
        tags=["tfx", "retraining", template["pipeline"]],
        render_template_as_native_obj=False,
        user_defined_filters={"safe_run_id": layout.safe_id},
        user_defined_macros={"run_span": arrivals.run_span},
    ) as dag:
        pipeline = template["pipeline"]
        prepare = make.command(
            task_id="prepare_run",
            arguments=[
                "prepare-run", "--config", config, "--workdir", workdir, "--run-id", "{{ run_id }}",
                "--span", RUN_SPAN,
                "--train-steps", "{{ params.train_steps or '' }}",
                "--window", "{{ params.window or '' }}",
                "--expect", make.template(template_path),
                "--data-root", os.environ.get(DATA_ROOT_ENV.format(pipeline=template["pipeline"].upper()), ""),
            ],
            doc_md="Checks the span's data, backfills the window, compiles and binds the run's IR.",
        )
        skip_with = None
        if settings["schedule"] == "monthly":
            wait = arrivals.SpanWaitOperator(
                task_id=WAIT_FOR_SPAN, asset=asset, span=RUN_SPAN, data_root=data_root,
                example_format=example_format, settle_seconds=settings["settle_seconds"],
                wait_hours=settings["span_wait_hours"], retries=0,
                doc_md=f"Waits (deferred, no worker slot) for the month's span under `{data_root}`; skips the "
                       f"run if it has not arrived {settings['span_wait_hours']:g} h after the month ended.")
            wait >> prepare
            skip_with = WAIT_FOR_SPAN
        groups = {
            stage: TaskGroup(stage, tooltip=_STAGE_TOOLTIPS.get(stage, ""))
            for stage in _STAGE_ORDER
            if any(n["stage"] == stage for n in template["nodes"])
        }
        tasks = {}
        for node in template["nodes"]:
            tasks[node["id"]] = make.node(
                node_id=node["id"],
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
            _wait_tasks(make, tasks, groups, template["nodes"], prepare)
        if nodes.APPROVAL_GATE in tasks:
            _approval_tasks(make, tasks, groups.get("push"), workdir, pipeline)
        report = make.command(
            task_id="governance_report",
            arguments=["report", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}"],
            trigger_rule=TriggerRule.ALL_DONE,
            retries=1,
            skip_with=skip_with,
            doc_md="The run's governance report from ML Metadata, pushed or not (a rejected candidate "
                   "needs it most); open it with the task's **Governance report** link.",
        )
        summary = make.summary(
            task_id="run_summary",
            arguments=["summary", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
                       "--finish", "--outcome-line"],
            trigger_rule=TriggerRule.ALL_DONE,
            retries=0,
            skip_with=skip_with,
            alert_settings=alert_settings,
            span=RUN_SPAN,
            # The task that stopped the run has alerted already.
            on_failure_callback=[],
            doc_md="The run's summary; alerts on a refused candidate; fails when the pipeline did not "
                   "finish (gate stop, failure).",
        )
        for node in template["nodes"]:
            if not node["downstream"]:
                tasks[node["id"]] >> report
        report >> summary
    return dag


def _deadline(pipeline: str, settings: dict, alert_settings: dict) -> DeadlineAlert | None:
    """A run still going `run_deadline_hours` after it was queued is stuck or starved: tell someone."""
    hours = settings["run_deadline_hours"]
    if not hours:
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=dt.timedelta(hours=hours),
        callback=AsyncCallback(alerts.deadline_missed,
                               kwargs={"pipeline": pipeline, "settings": alert_settings, "deadline_hours": hours}))


def build_arrivals_dag(template_path: str, dag_id: str,
                       start_date: dt.datetime = pendulum.datetime(2026, 1, 1, tz="UTC")) -> DAG | None:
    """The `<pipeline>_span_arrivals` DAG of the data schedule (None on the monthly calendar):
    on `airflow.arrivals_check`, announces each newly arrived span as an asset event."""
    template = template_lib.read(template_path)
    settings = airflow_settings.resolve_airflow(template["deployment"].get("airflow"))
    if settings["schedule"] != "data":
        return None
    data_root, example_format = data_source(template)
    pipeline = template["pipeline"]
    asset = arrivals.spans_asset(pipeline, data_root)
    with DAG(
        dag_id=dag_id,
        schedule=CronTriggerTimetable(settings["arrivals_check"], timezone="UTC"),
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        tags=["tfx", "retraining", "data-arrival", pipeline],
        doc_md=f"Looks under `{data_root}` for new {pipeline} spans and announces each one on the asset "
               f"`{asset.name}` (partition key = span); `{pipeline}_retraining` runs once per announced span. "
               "Skipped when nothing new arrived.",
    ) as dag:
        arrivals.SpanArrivalOperator(
            task_id="announce_new_spans", asset=asset, data_root=data_root, example_format=example_format,
            settle_seconds=settings["settle_seconds"], retries=1,
            doc_md="Spans whose files stopped changing (or that hold a `_SUCCESS` marker) since the last "
                   "announced one.")
    return dag


def feedback_asset(pipeline: str, workdir: str) -> Asset:
    """The asset whose events say delayed labels arrived (a producer announces them through
    Airflow's REST API, `POST /api/v2/assets/events`); the rollout DAG runs on each."""
    return Asset(name=f"{pipeline}_feedback", uri=f"file://{os.path.abspath(layout.feedback_dir(workdir, pipeline))}",
                 group="retrain_feedback", extra={"pipeline": pipeline})


def build_rollout_dag(template_path: str, dag_id: str,
                      start_date: dt.datetime = pendulum.datetime(2026, 1, 1, tz="UTC")) -> DAG | None:
    """The `<pipeline>_rollout` DAG of a canary-mode pipeline (None in direct mode): joins the
    delayed labels and decides the canary (docs/rollout.md), on `airflow.rollout_check` and on
    each `<pipeline>_feedback` asset event. Nothing waits in a worker slot: a run decides with
    what has arrived and ends; an undecided canary is looked at again next time."""
    template = template_lib.read(template_path)
    if (template["deployment"].get("rollout") or {}).get("mode") != "canary":
        return None
    settings = airflow_settings.resolve_airflow(template["deployment"].get("airflow"))
    alert_settings = airflow_settings.resolve_alerts(template["deployment"].get("alerts"))
    pipeline = template["pipeline"]
    data_root, _ = data_source(template)
    workdir = os.environ.get(WORKDIR_ENV, os.path.join(template_lib.REPO, "work"))
    make = task_kinds(settings, pipeline=pipeline, workdir=workdir, data_root=data_root)
    config = make.path(template["config"])
    asset = feedback_asset(pipeline, workdir)
    on_failure = alerts.FailureNotifier(pipeline=pipeline, settings=alert_settings, gate_task=nodes.DATA_GATE)
    with DAG(
        dag_id=dag_id,
        schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable(settings["rollout_check"], timezone="UTC"),
                                     assets=[asset]),
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1), "on_failure_callback": [on_failure],
                      "execution_timeout": dt.timedelta(minutes=30)},
        tags=["tfx", "rollout", pipeline],
        doc_md=(f"### {pipeline} canary rollout\n\nJoins the request logs of `stable` and `canary` with the delayed "
                f"labels under `{layout.feedback_dir(workdir, pipeline)}`, runs the always-valid test and promotes, "
                "rolls back or continues (docs/rollout.md). Every decision is an MLMD execution "
                "(`RolloutDecision`); promotions and roll-backs go into the model's history.jsonl and are sent "
                f"as alerts. Runs on `{settings['rollout_check']}` and on each `{asset.name}` asset event. "
                f"People: `retrain rollout status | promote | rollback --reason`."),
    ) as dag:
        decide = make.rollout(
            task_id="decide_canary",
            arguments=["rollout", "decide", "--config", config, "--workdir", workdir, "--json"],
            alert_settings=alert_settings,
            doc_md="Ingests new request logs and feedback files, measures both versions over the same period, "
                   "and decides (with approval required: proposes). Its XCom is the decision: live metrics with "
                   "intervals, counts, reason.",
        )
        if (template["deployment"].get("rollout") or {}).get("approval") == "required":
            _rollout_review_tasks(make, decide, config, workdir, pipeline, alert_settings)
    return dag


def _rollout_review_tasks(make, decide, config: str, workdir: str, pipeline: str, alert_settings: dict) -> None:
    """With `rollout.approval: required`: a proposed promotion or roll-back waits (deferred,
    in the triggerer) for a person's Apply / Veto / Force in Airflow's HITL prompt; their answer
    and name are recorded with the decision (MLMD, history). An `inconclusive` test (undecided at
    its budget, or blocked by a sample-ratio mismatch) already holds and alerts; the prompt is
    where the person decides it (Force promote, Force roll back, or Apply: keep holding). A
    `continue` needs nobody."""
    from airflow.providers.standard.operators.hitl import HITLOperator
    from airflow.providers.standard.operators.python import ShortCircuitOperator

    proposal = "ti.xcom_pull(task_ids='decide_canary')"
    needs = ShortCircuitOperator(
        task_id="needs_review", python_callable=_proposes_a_change, op_args=["{{ " + proposal + " | tojson }}"],
        doc_md="Goes on only when the test proposes a promotion or a roll-back, or is inconclusive (a person "
               "decides).")
    prompt = HITLOperator(
        task_id="review_decision",
        subject=f"{pipeline} canary: {{{{ {proposal}['action'] }}}}?",
        body=("{% if " + proposal + "['action'] == 'inconclusive' %}The rollout test is **inconclusive** for canary "
              "version {{ " + proposal + "['canary'] }} (stable {{ " + proposal + "['stable'] }}): it holds until "
              "you decide. Force promote or Force roll back decides it; Apply keeps it holding.{% else %}"
              "The rollout test proposes **{{ " + proposal + "['action'] }}** for canary version {{ " + proposal
              + "['canary'] }} (stable {{ " + proposal + "['stable'] }}).{% endif %}\n\n{{ " + proposal
              + "['reason'] }}"),
        options=list(airflow_settings.ROLLOUT_REVIEW_OPTIONS), defaults=None, response_timeout=dt.timedelta(days=3), retries=0)
    pulled = "ti.xcom_pull(task_ids='review_decision')"
    record = make.rollout(
        task_id="record_review",
        arguments=["rollout", "decide", "--config", config, "--workdir", workdir, "--json",
                   "--review", "{{ " + pulled + "['chosen_options'][0] }}",
                   "--reviewer", "{{ (" + pulled + "['responded_by_user'] or {}).get('name') or " + pulled
                   + "['responded_by_user'] }}"],
        alert_settings=alert_settings, retries=0,
        doc_md="Applies the person's answer (Apply, Veto, Force promote, Force roll back) and records who and why.")
    decide >> needs >> prompt >> record


def _proposes_a_change(decision_json: str) -> bool:
    import json

    return (json.loads(decision_json or "null") or {}).get("action") in ("promote", "rollback", "inconclusive")


def _pool(node_id: str, pools: dict) -> dict:
    """The node's pool by resource class, when the deployment sizes that class."""
    resource = nodes.resource_class(node_id)
    return {"pool": resource} if resource in pools else {}


def _wait_tasks(make, tasks: dict, groups: dict, template_nodes: list, prepare) -> None:
    """Sensors before the nodes that read other months' results (parallel runs only)."""
    stage = {n["id"]: n["stage"] for n in template_nodes}
    waits = {nodes.BASELINE_RESOLVER: ("wait_for_baseline", "baseline"),
             nodes.WINDOW_RESOLVER: ("wait_for_window", "window"),
             nodes.MODEL_RESOLVER: ("wait_for_earlier_runs", "models")}
    for node_id, (task_id, what) in waits.items():
        if node_id not in tasks:
            continue
        if what == "models":
            doc = ("Waits until earlier months' runs are finished: the Evaluator's baseline and the push order "
                   "are then those of a sequential backfill.")
        else:
            doc = f"Waits until the earlier spans' data gates this {what} reads have decided."
        sensor = make.span_wait(task_id=task_id, what=what, task_group=groups[stage[node_id]], doc_md=doc)
        prepare >> sensor >> tasks[node_id]


def _approval_tasks(make, tasks: dict, group, workdir: str, pipeline: str) -> None:
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
    record = make.command(
        task_id="record_approval",
        task_group=group,
        arguments=[
            "approve", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
            "--config", make.path(os.path.join("pipelines", pipeline, "config.yaml")),
            "--decision", "{{ ti.xcom_pull(task_ids='push.request_approval')['chosen_options'][0] }}",
            "--reviewer", "{{ (ti.xcom_pull(task_ids='push.request_approval')['responded_by_user'] or {}).get('name') "
                          "or ti.xcom_pull(task_ids='push.request_approval')['responded_by_user'] }}",
            "--comment", "decided in the Airflow UI", "--source", "airflow",
        ],
        retries=0,
    )
    preview = make.command(
        task_id="candidate_report",
        task_group=group,
        arguments=["report", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}"],
        retries=0,
        doc_md="The report so far, for the reviewer to read before deciding.",
    )
    for up in list(gate.upstream_list):
        up >> preview
    preview >> prompt >> record >> gate
