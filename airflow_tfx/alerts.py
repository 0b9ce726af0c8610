"""Alerts where operators look: a stop, a refusal, a failure or a missed deadline, as a message.

Kinds, each with the span, the reason and a link to the run's governance report:
- `gate_stop`: the data gate stopped the span (the DataGate task's failure);
- `refused`: the candidate was not blessed, failed the serving check or was rejected
  (the `run_summary` task reads the run's outcome);
- `task_failure`: any other task failed after its retries (`on_failure_callback`);
- `deadline_missed`: the run was not finished `run_deadline_hours` after it was queued
  (Airflow 3's deadline alerts; the callback runs in the triggerer);
- `promoted` / `rolled_back`: the rollout controller decided a canary from delayed labels
  (the `<pipeline>_rollout` DAG), and `live_floor`: the stable version's live quality is
  past the configured floor.

They go through Airflow's notifier mechanism: SMTP (the provider's `SmtpNotifier`) by
default, or any notifier class named in the `alerts:` block (Slack, apprise...).
Every alert is also written to the task log; with no recipient configured that is all.
A notifier that cannot deliver is logged, never raised: the task's own outcome stands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import html
import importlib
import json
import logging
import os
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pendulum
from airflow.sdk import BaseNotifier

from airflow_tfx import arrivals, links
from core import layout
from core import outcome as outcomes

GATE_STOP = "gate_stop"
SKEW_STOP = "skew_stop"
REFUSED = "refused"
TASK_FAILURE = "task_failure"
DEADLINE_MISSED = "deadline_missed"
PROMOTED = "promoted"
ROLLED_BACK = "rolled_back"
LIVE_FLOOR = "live_floor"
# A rollout decision's own alerts name their kind before ": " (rollout/verdict.py writes them).
ROLLOUT_INCONCLUSIVE = "rollout_inconclusive"
ROLLOUT_SRM = "rollout_srm"
STALE = "stale"
RUNTIME_CHANGED = "runtime_changed"
NEW_COLUMNS = "new_columns"
KINDS = (GATE_STOP, SKEW_STOP, REFUSED, TASK_FAILURE, DEADLINE_MISSED, PROMOTED, ROLLED_BACK, LIVE_FLOOR,
         ROLLOUT_INCONCLUSIVE, ROLLOUT_SRM, STALE, RUNTIME_CHANGED, NEW_COLUMNS)
_TITLES = {
    GATE_STOP: "the data gate stopped the span",
    SKEW_STOP: "serving skew stopped the span (the served model's traffic differs from its training data)",
    REFUSED: "the candidate model was refused",
    TASK_FAILURE: "a task failed",
    DEADLINE_MISSED: "the run missed its deadline",
    PROMOTED: "the canary was promoted to stable",
    ROLLED_BACK: "the canary was rolled back",
    LIVE_FLOOR: "the served model's live quality is below its floor",
    ROLLOUT_INCONCLUSIVE: "the canary test is inconclusive at its budget: a person decides",
    ROLLOUT_SRM: "the canary's traffic share does not match the split (sample-ratio mismatch)",
    STALE: "the served model is stale (quality lost on new data, or too old)",
    RUNTIME_CHANGED: "a blessed candidate brings runtime package changes (its SBOM differs from the baseline's)",
    NEW_COLUMNS: "the source added columns: left out of the examples (gate policy columns.new: report)",
}
ROLLOUT_KINDS = (PROMOTED, ROLLED_BACK, LIVE_FLOOR, ROLLOUT_INCONCLUSIVE, ROLLOUT_SRM)
_REFUSALS = {
    outcomes.NOT_BLESSED: "not blessed by the Evaluator",
    outcomes.FAILED_SERVING_CHECK: "failed the serving check",
    outcomes.REJECTED: "rejected by the reviewer",
}
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Alert:
    kind: str
    pipeline: str
    span: str | None
    run_id: str
    reason: str
    dag_id: str
    task_id: str | None = None

    @property
    def report_url(self) -> str:
        return links.report_url(self.pipeline, self.run_id)

    @property
    def subject(self) -> str:
        if self.kind in ROLLOUT_KINDS:
            return f"[retrain] {self.pipeline}: {_TITLES[self.kind]}"
        return f"[retrain] {self.pipeline} span {self.span or '?'}: {_TITLES[self.kind]}"

    def fields(self) -> list[tuple[str, str]]:
        rows = [("What", _TITLES[self.kind]), ("Pipeline", self.pipeline), ("Span", str(self.span or "unknown")),
                ("DAG run", f"{self.dag_id} / {self.run_id}")]
        if self.task_id:
            rows.append(("Task", self.task_id))
        return rows + [("Reason", self.reason), ("Governance report", self.report_url)]

    @property
    def text(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in self.fields())

    @property
    def html(self) -> str:
        rows = "".join(
            f"<tr><th align='left'>{html.escape(k)}</th><td>"
            + (f"<a href='{html.escape(v)}'>{html.escape(v)}</a>" if k == "Governance report"
               else f"<pre>{html.escape(v)}</pre>" if k == "Reason" else html.escape(v))
            + "</td></tr>" for k, v in self.fields())
        return f"<p>{html.escape(self.subject)}</p><table>{rows}</table>"


def notifier_for(settings: Mapping[str, Any], alert: Alert) -> BaseNotifier | None:
    """The configured notifier carrying this alert, or None when nobody is configured."""
    if settings["notifier"] == "smtp":
        if not settings["to"]:
            return None
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        return SmtpNotifier(to=list(settings["to"]), from_email=settings["from_email"],
                            smtp_conn_id=settings["smtp_conn_id"], subject=alert.subject,
                            html_content=alert.html)
    module, _, name = settings["notifier"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    values = {"subject": alert.subject, "text": alert.text, "html": alert.html}
    args = {k: v.format(**values) if isinstance(v, str) else v for k, v in settings["notifier_args"].items()}
    return cls(**args)


def record(alert: Alert, logger=log) -> None:
    """Appends the alert to `<workdir>/alerts/<pipeline>.jsonl` (the Models view lists those
    since the pipeline's last push as open). A workdir that cannot be written only logs."""
    workdir = os.environ.get("RETRAIN_WORKDIR")
    if not workdir:
        return
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "kind": alert.kind,
             "pipeline": alert.pipeline, "span": alert.span, "run_id": alert.run_id, "task_id": alert.task_id,
             "subject": alert.subject, "reason": alert.reason[:2000]}
    path = layout.alerts_path(workdir, alert.pipeline)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as e:
        logger.error("alert not recorded in %s: %s", path, e)


def send(settings: Mapping[str, Any], alert: Alert, context: Any, logger=log) -> bool:
    """Logs and records the alert and hands it to the configured notifier. True when a
    notifier took it."""
    logger.warning("ALERT %s\n%s", alert.subject, alert.text)
    record(alert, logger)
    try:
        notifier = notifier_for(settings, alert)
        if notifier is None:
            logger.warning("alert not sent: no recipient configured (alerts.to in the pipeline config, "
                           "or RETRAIN_ALERTS_TO)")
            return False
        notifier.notify(context)
    except Exception as e:  # a broken notifier must not change the task's own outcome
        logger.error("alert not delivered through %s: %s: %s", settings["notifier"], type(e).__name__, e)
        return False
    logger.info("alert sent through %s", settings["notifier"])
    return True


def refusal(summary: Mapping[str, Any]) -> str | None:
    """Why the run's candidate was refused, or None when it was not (from the outcome line)."""
    name = summary.get("outcome")
    if name not in outcomes.REFUSED:
        return None
    why = _REFUSALS[name]
    return f"{why}: {summary['reason']}" if summary.get("reason") else why


def rollout_alerts(decision: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(kind, reason) of each alert a rollout decision (`retrain rollout decide --json`) raises."""
    out = []
    if decision.get("applied") and decision.get("action") in ("promote", "rollback"):
        kind = PROMOTED if decision["action"] == "promote" else ROLLED_BACK
        out.append((kind, f"version {decision.get('canary')} (stable was {decision.get('stable')}): "
                          f"{decision.get('reason')}"))
    for text in decision.get("alerts") or ():
        kind = text.split(": ", 1)[0]
        out.append((kind if kind in ROLLOUT_KINDS else LIVE_FLOOR, text))
    return out


def span_of(context: Mapping[str, Any]) -> str | None:
    """The run's span as the DAG's templates compute it (params, partition, data interval)."""
    return arrivals.run_span(context.get("params") or {}, context.get("dag_run"), context.get("data_interval_start"),
                    context.get("data_interval_end"), context.get("logical_date"))


class FailureNotifier(BaseNotifier):
    """`on_failure_callback` of every task: a gate stop or a failure after the last retry."""

    def __init__(self, *, pipeline: str, settings: Mapping[str, Any], gate_task: str, skew_task: str | None = None):
        super().__init__()
        self.pipeline, self.settings, self.gate_task, self.skew_task = pipeline, dict(settings), gate_task, skew_task

    def notify(self, context: Any) -> None:
        ti = context["ti"]
        error = context.get("exception")
        reason = str(error) if error else "see the task log"
        kind = TASK_FAILURE
        if ti.task_id.endswith(self.gate_task):
            kind = GATE_STOP
        elif self.skew_task and ti.task_id.endswith(self.skew_task):
            kind = SKEW_STOP
        alert = Alert(kind, self.pipeline, span_of(context), context["run_id"], reason, ti.dag_id, ti.task_id)
        send(self.settings, alert, context, getattr(ti, "log", log))


async def deadline_missed(*, pipeline: str, settings: Mapping[str, Any], deadline_hours: float,
                          context: Mapping[str, Any] | None = None) -> str:
    """The deadline alert's callback (runs in the triggerer with the DAG run as `context`)."""
    run = dict((context or {}).get("dag_run") or {})
    # The run as the scheduler serialized it: the same span rule as the run's own tasks.
    when = {k: pendulum.parse(run[k]) if run.get(k) else None
            for k in ("data_interval_start", "data_interval_end", "logical_date", "run_after")}
    span = arrivals.run_span(run.get("conf") or {},
                             SimpleNamespace(partition_key=run.get("partition_key"), run_after=when["run_after"]),
                             when["data_interval_start"], when["data_interval_end"], when["logical_date"])
    alert = Alert(DEADLINE_MISSED, pipeline, span, run.get("dag_run_id") or run.get("run_id") or "?",
                  f"not finished {deadline_hours:g} h after it was queued ({run.get('queued_at')}); "
                  f"state now: {run.get('state')}", run.get("dag_id") or "?")
    delivered = await asyncio.to_thread(send, settings, alert, dict(context or {}))
    return f"{'sent' if delivered else 'logged'}: {alert.subject}"
