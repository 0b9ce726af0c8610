"""What a finished `retrain` command means for its task, however it ran (a process through
TfxRuntimeHook, or a pod): one function per kind of task, `outcome(task, context, run)`.

- `command`: fails as its exit code says; a JSON answer goes to XCom.
- `node` (`retrain node run`): the `RESULT` line decides. Complete and cached nodes
  succeed (cached ones say so), a node the pipeline's condition skipped is skipped, a
  data-gate stop fails without retries, any other failure fails with the cause in the log.
- `summary` (`retrain summary --outcome-line`): alerts when the candidate was refused
  (the run finished green and nobody would know otherwise) and when the served model is
  stale; fails when the run did not finish.
- `rollout` (`retrain rollout decide --json`): the decision to XCom; promotions,
  roll-backs and a live-quality floor crossed are sent as alerts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_tfx.hooks import CommandRun
from core import exit_codes
from core.results import CACHED, FAILED, SKIPPED

# Exit code -> (Airflow exception, what the task log says). AirflowFailException fails the
# task without retries: a verdict on the data or a missing decision does not change on retry.
_FAILURES = {
    exit_codes.GATE_STOPPED: (AirflowFailException, "a data check (the data gate, or serving skew set to block) "
                                                    "stopped this span (no retry)"),
    exit_codes.BAD_INPUT: (AirflowFailException, "bad input (no retry)"),
    exit_codes.AWAITING_APPROVAL: (AirflowFailException, "no reviewer decision recorded for this candidate (no retry)"),
}


def failure_for_exit_code(rc: int, tail: str) -> Exception:
    """The exception that ends a task whose command exited with `rc` (not 0)."""
    cls, what = _FAILURES.get(rc, (AirflowException, f"TFX runtime command failed with exit code {rc}"))
    return cls(f"{what}:\n{tail}")


def last_json_line(lines: Sequence[str]) -> Any:
    """The last line that is a JSON object (commands that answer in JSON hand it to XCom)."""
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def _fail_unless_ok(run: CommandRun) -> None:
    if run.rc != exit_codes.OK:
        raise failure_for_exit_code(run.rc, "\n".join(run.lines[-5:]))


def command(task, context: Any, run: CommandRun) -> Any:
    _fail_unless_ok(run)
    return last_json_line(run.lines)


def node(task, context: Any, run: CommandRun) -> Any:
    node_id, result = task.tfx_node_id, run.result
    if result is None:
        raise AirflowException(f"node {node_id} ended (exit code {run.rc}) without a result")
    if result.status == FAILED:
        # The cause as the task log's last line, not only the exit code.
        task.log.error("%s failed: %s", node_id, result.error or "no error message")
        raise failure_for_exit_code(run.rc, "\n".join((run.lines + [result.error or ""])[-5:]))
    if result.status == SKIPPED:
        raise AirflowSkipException(
            f"{node_id} was skipped by the pipeline (its condition was false, e.g. the model was not blessed)")
    outputs = {key: [a["uri"] for a in arts] for key, arts in result.outputs.items()}
    if result.status == CACHED:
        task.log.info("CACHED: %s reused the outputs of execution %s; nothing was recomputed", node_id,
                      result.execution_id)
    for key, uris in outputs.items():
        task.log.info("output %s: %s", key, ", ".join(uris))
    context["ti"].xcom_push(key="status", value=result.status)
    return outputs


def summary(task, context: Any, run: CommandRun) -> Any:
    from airflow_tfx import alerts

    outcome = last_json_line(run.lines) or {}
    why = alerts.refusal(outcome)
    if why:
        ti = context["ti"]
        alerts.send(task.alert_settings, alerts.Alert(
            alerts.REFUSED, task.retrain_pipeline, str(outcome.get("span") or task.span), ti.run_id, why,
            ti.dag_id, ti.task_id), context, task.log)
    if outcome.get("stale"):
        ti = context["ti"]
        alerts.send(task.alert_settings, alerts.Alert(
            alerts.STALE, task.retrain_pipeline, str(outcome.get("span") or task.span), ti.run_id,
            "; ".join(outcome["stale"]), ti.dag_id, ti.task_id), context, task.log)
    if outcome.get("runtime_changed"):
        ti = context["ti"]
        alerts.send(task.alert_settings, alerts.Alert(
            alerts.RUNTIME_CHANGED, task.retrain_pipeline, str(outcome.get("span") or task.span), ti.run_id,
            "; ".join(outcome["runtime_changed"]), ti.dag_id, ti.task_id), context, task.log)
    if outcome.get("new_columns"):
        ti = context["ti"]
        alerts.send(task.alert_settings, alerts.Alert(
            alerts.NEW_COLUMNS, task.retrain_pipeline, str(outcome.get("span") or task.span), ti.run_id,
            f"not in the schema, left out of the examples: {', '.join(outcome['new_columns'])}", ti.dag_id,
            ti.task_id), context, task.log)
    _fail_unless_ok(run)
    return outcome


def rollout(task, context: Any, run: CommandRun) -> Any:
    from airflow_tfx import alerts

    _fail_unless_ok(run)
    decision = last_json_line(run.lines) or {}
    ti = context["ti"]
    for kind, reason in alerts.rollout_alerts(decision):
        alerts.send(task.alert_settings, alerts.Alert(kind, task.retrain_pipeline, None, ti.run_id, reason,
                                                      ti.dag_id, ti.task_id), context, task.log)
    return decision
