"""DAG integrity: parses cleanly, mirrors the compiled IR, imports no TF/TFX, reads no Variable."""

import json
import os
import subprocess
import sys

import pytest

from airflow_tfx import alerts, links
from airflow_tfx import compiled_dag as template_lib
from airflow_tfx.dag_factory import build_arrivals_dag, build_dag

REPO = template_lib.REPO
DAGS = os.path.join(REPO, "dags")
TEMPLATE = os.path.join(DAGS, "compiled", "taxi.json")
DAG_IDS = {"diabetes_retraining": "diabetes", "digits_retraining": "digits", "taxi_retraining": "taxi"}
ARRIVAL_DAG_IDS = {"diabetes_span_arrivals", "digits_span_arrivals", "taxi_span_arrivals"}
# Canary-mode pipelines (taxi, the generated diabetes) get a rollout DAG; digits pushes directly.
ROLLOUT_DAG_IDS = {"diabetes_rollout", "taxi_rollout"}

_PARSE = r"""
import json, sys
from unittest import mock
def forbidden(*a, **k):
    raise AssertionError("DAG parsing must not read Variables or Connections")
with mock.patch("airflow.sdk.Variable.get", forbidden), \
     mock.patch("airflow.sdk.BaseHook.get_connection", forbidden), \
     mock.patch("airflow.sdk.Connection.get", forbidden):
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dag_ids": sorted(bag.dags),
    "downstream": {
        dag_id: {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} for dag_id, dag in bag.dags.items()
    },
    "heavy": sorted(m for m in ("tensorflow", "tfx", "tensorflow_transform", "ml_metadata") if m in sys.modules),
}))
"""


@pytest.fixture(scope="module")
def parsed():
    out = subprocess.run([sys.executable, "-c", _PARSE, DAGS], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_no_import_errors(parsed):
    assert parsed["errors"] == {}
    assert parsed["dag_ids"] == sorted(set(DAG_IDS) | ARRIVAL_DAG_IDS | ROLLOUT_DAG_IDS)
    # The report plugin authorizes a pipeline's reports against this DAG id.
    assert {links.dag_id(p) for p in DAG_IDS.values()} == set(DAG_IDS)
    for dag_id in ARRIVAL_DAG_IDS:
        assert parsed["downstream"][dag_id] == {"announce_new_spans": []}
    for dag_id in ROLLOUT_DAG_IDS:
        assert parsed["downstream"][dag_id] == {"decide_canary": []}


def test_the_rollout_dag_runs_on_feedback_and_on_its_cron(monkeypatch, tmp_path):
    from airflow_tfx.dag_factory import build_rollout_dag

    monkeypatch.setenv("RETRAIN_WORKDIR", str(tmp_path))
    dag = build_rollout_dag(TEMPLATE, "taxi_rollout")
    from airflow.sdk import AssetOrTimeSchedule

    assert isinstance(dag.schedule, AssetOrTimeSchedule)
    assert "expression='*/30 * * * *'" in repr(dag.schedule.timetable)
    assert [a.name for a in dag.schedule.asset_condition.objects] == ["taxi_feedback"]
    assert dag.max_active_runs == 1
    [task] = dag.tasks
    assert task.arguments[:3] == ["rollout", "decide", "--config"] and "--json" in task.arguments
    assert build_rollout_dag(os.path.join(DAGS, "compiled", "digits.json"), "digits_rollout") is None


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_task_graph_equals_the_compiled_ir(parsed, dag_id):
    template = template_lib.read(os.path.join(DAGS, "compiled", f"{DAG_IDS[dag_id]}.json"))
    qualified = {n["id"]: f"{n['stage']}.{n['id']}" for n in template["nodes"]}
    expected = {
        qualified[n["id"]]: sorted(
            [qualified[d] for d in n["downstream"]] + ([] if n["downstream"] else ["governance_report"])
        )
        for n in template["nodes"]
    }
    expected["prepare_run"] = sorted(qualified[n["id"]] for n in template["nodes"] if not n["upstream"])
    expected["governance_report"] = ["run_summary"]
    expected["run_summary"] = []
    assert parsed["downstream"][dag_id] == expected
    # Every node of the factory's pipeline; digits adds TFLiteExport (its config turns it on).
    assert len(template["nodes"]) == {"taxi": 16, "digits": 17, "diabetes": 16}[DAG_IDS[dag_id]]


def test_parsing_imports_neither_tensorflow_nor_tfx(parsed):
    assert parsed["heavy"] == []


def test_schedule_and_safety_settings(monkeypatch):
    monkeypatch.delenv("RETRAIN_SCHEDULE", raising=False)
    dag = build_dag(TEMPLATE, "t", doc_md="doc")
    assert dag.max_active_runs == 1 and dag.max_active_tasks == 1
    # Runs start when a span arrives: one run per partition (span) of the pipeline's asset.
    assert type(dag.timetable).__name__ == "PartitionedAssetTimetable"
    assert dag.timetable.asset_condition.name == "taxi_spans"
    assert "wait_for_span" not in dag.task_dict
    assert set(dag.params) == {"span", "train_steps", "window"}
    node = dag.get_task("train.Trainer")
    assert node.retries == 2 and node.retry_exponential_backoff and node.execution_timeout
    assert dag.get_task("run_summary").trigger_rule == "all_done"
    assert dag.get_task("governance_report").trigger_rule == "all_done"  # pushed or not, a report
    assert [l.name for l in dag.get_task("train.Trainer").operator_extra_links] == ["Governance report"]
    assert {g for g in dag.task_group.children} >= {"validate_data", "train", "evaluate", "push"}


def test_the_monthly_calendar_waits_for_its_span_and_skips_what_never_came(monkeypatch):
    monkeypatch.setenv("RETRAIN_SCHEDULE", "monthly")
    dag = build_dag(TEMPLATE, "t", doc_md="doc")
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    wait = dag.get_task("wait_for_span")
    assert type(wait).__name__ == "SpanWaitOperator" and wait.downstream_task_ids == {"prepare_run"}
    assert wait.wait_hours == 72 and wait.data_root == os.path.join(REPO, "data", "taxi")
    assert [o.name for o in wait.outlets] == ["taxi_spans"]  # arrivals show in the Assets view here too
    # The report and the summary of a run that never started are skipped with it, not failed.
    assert dag.get_task("governance_report").skip_with == "wait_for_span"
    assert dag.get_task("run_summary").skip_with == "wait_for_span"
    assert build_arrivals_dag(TEMPLATE, "a") is None


def test_the_arrivals_dag_announces_on_the_pipelines_asset(monkeypatch):
    monkeypatch.delenv("RETRAIN_SCHEDULE", raising=False)
    monkeypatch.setenv("RETRAIN_DATA_ROOT_TAXI", "/data/taxi")
    dag = build_arrivals_dag(TEMPLATE, "a")
    task = dag.get_task("announce_new_spans")
    assert type(dag.timetable).__name__ == "CronTriggerTimetable" and dag.timetable.expression == "*/10 * * * *"
    assert [o.uri for o in task.outlets] == ["file:///data/taxi"] and task.settle_seconds == 60
    assert dag.catchup is False and dag.max_active_runs == 1


def test_every_stop_refusal_failure_and_deadline_alerts(monkeypatch):
    monkeypatch.setenv("RETRAIN_ALERTS_TO", "ops@example.org")
    dag = build_dag(TEMPLATE, "t", doc_md="doc")
    for task_id in ("prepare_run", "validate_data.DataGate", "train.Trainer", "governance_report"):
        [notifier] = dag.get_task(task_id).on_failure_callback
        assert isinstance(notifier, alerts.FailureNotifier) and notifier.settings["to"] == ["ops@example.org"]
    summary = dag.get_task("run_summary")
    assert not summary.on_failure_callback  # the task that stopped the run has alerted
    assert summary.alert_settings["to"] == ["ops@example.org"] and "--outcome-line" in summary.arguments
    [deadline] = dag.deadline
    assert deadline.interval.total_seconds() == 12 * 3600
    assert type(deadline.reference).__name__ == "DagRunQueuedAtDeadline"
    assert deadline.callback.path == "airflow_tfx.alerts.deadline_missed"
    assert deadline.callback.kwargs["settings"]["to"] == ["ops@example.org"]


def test_stale_template_fails_loudly(tmp_path):
    stale = tmp_path / "taxi.json"
    data = json.loads(open(TEMPLATE).read())
    data["fingerprint"] = "0" * 64
    stale.write_text(json.dumps(data))
    with pytest.raises(template_lib.StaleTemplateError, match="make compile"):
        build_dag(str(stale), "t", doc_md="doc")
    # What `make` asks before it starts the TFX runtime to compile one again.
    assert template_lib.is_fresh(TEMPLATE)
    assert not template_lib.is_fresh(str(stale)) and not template_lib.is_fresh(str(tmp_path / "none.json"))


@pytest.mark.parametrize("pipeline", sorted(DAG_IDS.values()))
def test_template_is_fresh_for_the_code_in_this_checkout(pipeline):
    # `make compile` regenerates it; a stale committed template would break the DAG.
    path = os.path.join(DAGS, "compiled", f"{pipeline}.json")
    assert template_lib.read(path)["fingerprint"] == template_lib.source_fingerprint()


def test_each_dag_reads_its_own_data_root(monkeypatch):
    monkeypatch.setenv("RETRAIN_DATA_ROOT_DIGITS", "/data/digits")
    monkeypatch.setenv("RETRAIN_DATA_ROOT_TAXI", "/data/taxi")
    digits = build_dag(os.path.join(DAGS, "compiled", "digits.json"), "d", doc_md="doc")
    args = digits.get_task("prepare_run").arguments
    assert args[args.index("--data-root") + 1] == "/data/digits"
    assert "pipelines/digits/config.yaml" in args[args.index("--config") + 1]


def _ir(edges: dict):
    from types import SimpleNamespace as NS

    return NS(nodes=[NS(pipeline_node=NS(node_info=NS(id=k), upstream_nodes=v)) for k, v in edges.items()])


def test_prepare_run_refuses_an_ir_whose_graph_differs_from_the_dag():
    template = {"nodes": [{"id": "A", "upstream": []}, {"id": "B", "upstream": ["A"]}]}
    assert template_lib.mismatch(template, _ir({"A": [], "B": ["A"]})) is None
    problem = template_lib.mismatch(template, _ir({"A": [], "B": [], "C": ["B"]}))
    assert "unexpected ['C']" in problem and "edges changed for ['B']" in problem


def test_report_link_points_at_the_runs_report(monkeypatch):
    from airflow_tfx import links

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
    url = links.report_url("taxi", "scheduled__2017-01-01T00:00:00+00:00")
    assert url == "http://airflow.example:8080/retrain/reports/taxi/scheduled__2017-01-01T00_00_00_00_00/report.html"


def test_approval_gate_gets_a_human_in_the_loop_prompt(tmp_path):
    template = json.loads(open(TEMPLATE).read())
    nodes = {n["id"]: n for n in template["nodes"]}
    # The taxi template with `require_approval: true`: ApprovalGate between check and push.
    nodes["ApprovalGate"] = {"id": "ApprovalGate", "type": "ApprovalGate", "upstream": ["Evaluator", "ServingCheck", "Trainer"],
                             "downstream": ["AtomicPusher"], "stage": "push"}
    nodes["AtomicPusher"]["upstream"].append("ApprovalGate")
    for up in ("Evaluator", "ServingCheck", "Trainer"):
        nodes[up]["downstream"].append("ApprovalGate")
    template["nodes"] = list(nodes.values())
    path = tmp_path / "approval.json"
    path.write_text(json.dumps(template))
    dag = build_dag(str(path), "t", doc_md="doc")
    prompt = dag.get_task("push.request_approval")
    assert type(prompt).__name__ == "HITLOperator" and prompt.options == ["Approve", "Reject"]
    assert dag.get_task("push.candidate_report").downstream_task_ids == {"push.request_approval"}
    assert dag.get_task("push.request_approval").downstream_task_ids == {"push.record_approval"}
    assert "push.record_approval" in dag.get_task("push.ApprovalGate").upstream_task_ids
    assert "push.candidate_report" in dag.get_task("push.ServingCheck").downstream_task_ids
    args = dag.get_task("push.record_approval").arguments
    assert args[:2] == ["approve", "--workdir"] and "--decision" in args and "--reviewer" in args


def test_a_rollout_with_approval_waits_for_a_person_to_apply_veto_or_force(monkeypatch, tmp_path):
    from airflow_tfx.dag_factory import _proposes_a_change, build_rollout_dag
    from retrain.rollout_commands import REVIEW_CHOICES

    template = json.load(open(TEMPLATE))
    template["deployment"]["rollout"] = {"mode": "canary", "approval": "required"}
    path = tmp_path / "taxi.json"
    path.write_text(json.dumps(template))
    monkeypatch.setattr(template_lib, "check_fresh", lambda *a, **k: None, raising=False)
    dag = build_rollout_dag(str(path), "taxi_rollout")
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "decide_canary": ["needs_review"], "needs_review": ["review_decision"],
        "review_decision": ["record_review"], "record_review": []}
    prompt = dag.get_task("review_decision")
    assert type(prompt).__name__ == "HITLOperator" and tuple(prompt.options) == REVIEW_CHOICES
    assert "--review" in dag.get_task("record_review").arguments
    assert _proposes_a_change('{"action": "rollback"}') and not _proposes_a_change('{"action": "continue"}')
    # An inconclusive test holds and alerts; the prompt is where a person decides it.
    assert _proposes_a_change('{"action": "inconclusive"}') and "inconclusive" in prompt.body
