"""How a pipeline runs under Airflow: the config's `airflow:` and `alerts:` blocks, checked once.

The TFX runtime checks them when it loads a config (`pipelines/config.py`) and copies them
into the compiled DAG template; the DAG factory reads them from there (no TFX import at
parse time). Both sides take the defaults and the checks from here.

`airflow:` block:
  schedule          data: a run per span when its data arrives (Airflow Assets, one
                    partition per span); monthly: the calendar, each run waiting
                    (deferred, no worker slot) up to `span_wait_hours` for its month.
                    RETRAIN_SCHEDULE overrides it per deployment.
  arrivals_check    cron of the `<pipeline>_span_arrivals` DAG that looks for new spans.
  rollout_check     cron of the `<pipeline>_rollout` DAG (canary rollouts): how often the
                    delayed labels are joined and the canary decided; it also runs on
                    each event of the `<pipeline>_feedback` asset.
  settle_seconds    a span has arrived when no file in it changed for this long, or at
                    once when it holds a `_SUCCESS` marker.
  span_wait_hours   monthly schedule: how long a run waits for its span; then it is skipped.
  run_deadline_hours  a run not finished this long after it was queued alerts (Airflow's
                    deadline alerts); 0: none. RETRAIN_RUN_DEADLINE_HOURS overrides it.
  max_active_runs, max_active_tasks, pools: concurrency when the store takes many writers.
  execution         process: each task runs its command in the TFX runtime on the Airflow
                    worker (the warm runtime or a cold interpreter); kubernetes: each task
                    is a pod of the TFX runtime image (airflow_tfx/pods.py), set up by the
                    `kubernetes:` block. RETRAIN_EXECUTION overrides it.
  kubernetes        image, namespace, service_account, workdir_claim (PVC mounted at the
                    workdir: pipeline root, run folders, serving), data_claim (PVC with
                    the spans, read-only at the data folder), metadata_secret (Secret with
                    RETRAIN_METADATA_URL / RETRAIN_METADATA_PASSWORD), resources per
                    resource class ({cpu, memory, gpu}; `default` for the rest),
                    gpu_node_selector, image_pull_policy.

`alerts:` block (who is told about gate stops, refused candidates, failures, deadlines):
  to                recipients (RETRAIN_ALERTS_TO, comma-separated, overrides); none: alerts
                    are written to the task log only.
  from_email, smtp_conn_id   SMTP (the default notifier).
  notifier, notifier_args    any Airflow notifier class instead (Slack, apprise...): its
                    dotted path and arguments, where `{subject}`, `{text}` and `{html}` are
                    filled in per alert.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from core import nodes
from core.errors import BadInput

SCHEDULE_ENV = "RETRAIN_SCHEDULE"
EXECUTION_ENV = "RETRAIN_EXECUTION"
EXECUTIONS = ("process", "kubernetes")
DEADLINE_ENV = "RETRAIN_RUN_DEADLINE_HOURS"
ALERTS_TO_ENV = "RETRAIN_ALERTS_TO"
SCHEDULES = ("data", "monthly")
# A person's answers to a proposed canary decision (Airflow's HITL prompt, `retrain rollout
# decide --review`), with `rollout.approval: required`.
ROLLOUT_REVIEW_OPTIONS = ("Apply", "Veto", "Force promote", "Force roll back")

AIRFLOW_DEFAULTS: dict[str, Any] = {
    "schedule": "data",
    "arrivals_check": "*/10 * * * *",
    "rollout_check": "*/30 * * * *",
    "settle_seconds": 60,
    "span_wait_hours": 72,
    "run_deadline_hours": 12,
    "max_active_runs": 1,
    "max_active_tasks": 1,
    "pools": {},
    "execution": "process",
    "kubernetes": {},
}
KUBERNETES_DEFAULTS: dict[str, Any] = {
    "image": None,
    "namespace": "default",
    "service_account": None,
    "workdir_claim": None,
    "data_claim": None,
    "metadata_secret": None,
    "resources": {"default": {"cpu": "1", "memory": "2Gi"}},
    "gpu_node_selector": {},
    "image_pull_policy": "IfNotPresent",
}
_RESOURCE_KEYS = {"cpu", "memory", "gpu"}
ALERTS_DEFAULTS: dict[str, Any] = {
    "to": [],
    "from_email": "retrain@localhost",
    "smtp_conn_id": "smtp_default",
    "notifier": "smtp",
    "notifier_args": {},
}
_POSITIVE_INTS = ("max_active_runs", "max_active_tasks", "settle_seconds")
_HOURS = {"span_wait_hours": 0, "run_deadline_hours": -1}  # key: what it must exceed
_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z]+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


class DeploymentError(BadInput):
    """An `airflow:` or `alerts:` setting that cannot be used; names the key."""


def check_airflow(values: Mapping[str, Any]) -> None:
    """Raises DeploymentError naming the first bad `airflow.<key>`."""
    unknown = sorted(set(values) - set(AIRFLOW_DEFAULTS))
    if unknown:
        raise DeploymentError(f"airflow: unknown key(s) {unknown}; known: {sorted(AIRFLOW_DEFAULTS)}")
    if "schedule" in values and values["schedule"] not in SCHEDULES:
        raise DeploymentError(f"airflow.schedule: must be one of {list(SCHEDULES)}, got {values['schedule']!r}")
    for key in _POSITIVE_INTS:
        v = values.get(key, AIRFLOW_DEFAULTS[key])
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if key == "settle_seconds" else 1):
            raise DeploymentError(f"airflow.{key}: must be an integer >= {0 if key == 'settle_seconds' else 1}, got {v!r}")
    for key, floor in _HOURS.items():
        v = values.get(key, AIRFLOW_DEFAULTS[key])
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= floor:
            raise DeploymentError(f"airflow.{key}: must be a number of hours {'> 0' if floor == 0 else '>= 0'}, got {v!r}")
    for key in ("arrivals_check", "rollout_check"):
        cron = values.get(key, AIRFLOW_DEFAULTS[key])
        if not isinstance(cron, str) or not (cron.startswith("@") or (
                len(cron.split()) == 5 and all(_CRON_FIELD.match(f) for f in cron.split()))):
            raise DeploymentError(f"airflow.{key}: expected a cron expression such as '*/10 * * * *', got {cron!r}")
    if values.get("execution", "process") not in EXECUTIONS:
        raise DeploymentError(f"airflow.execution: must be one of {list(EXECUTIONS)}, got {values['execution']!r}")
    check_kubernetes(values.get("kubernetes") or {}, required=values.get("execution") == "kubernetes")
    pools = values.get("pools", {})
    if not isinstance(pools, Mapping):
        raise DeploymentError(f"airflow.pools: expected a mapping of resource class: slots, got {pools!r}")
    for name, slots in pools.items():
        if name not in nodes.RESOURCE_CLASSES:
            raise DeploymentError(f"airflow.pools: unknown resource class {name!r}; known: {sorted(nodes.RESOURCE_CLASSES)}")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise DeploymentError(f"airflow.pools.{name}: must be an integer >= 1, got {slots!r}")


def check_kubernetes(values: Mapping[str, Any], required: bool) -> None:
    """The `airflow.kubernetes:` block; `required`: the pod execution is chosen.

    Raises:
      DeploymentError: naming `airflow.kubernetes.<key>`.
    """
    if not isinstance(values, Mapping):
        raise DeploymentError("airflow.kubernetes: expected a mapping")
    unknown = sorted(set(values) - set(KUBERNETES_DEFAULTS))
    if unknown:
        raise DeploymentError(f"airflow.kubernetes: unknown key(s) {unknown}; known: {sorted(KUBERNETES_DEFAULTS)}")
    for key in ("image", "workdir_claim"):
        if required and not values.get(key):
            raise DeploymentError(f"airflow.kubernetes.{key}: required when airflow.execution is kubernetes")
    for key in ("image", "namespace", "service_account", "workdir_claim", "data_claim", "metadata_secret"):
        if values.get(key) is not None and (not isinstance(values[key], str) or not values[key]):
            raise DeploymentError(f"airflow.kubernetes.{key}: expected a non-empty string, got {values[key]!r}")
    resources = values.get("resources", {})
    if not isinstance(resources, Mapping):
        raise DeploymentError("airflow.kubernetes.resources: expected a mapping of resource class: {cpu, memory, gpu}")
    for name, spec in resources.items():
        if name != "default" and name not in nodes.RESOURCE_CLASSES:
            raise DeploymentError(f"airflow.kubernetes.resources: unknown resource class {name!r}; known: "
                                  f"{sorted(nodes.RESOURCE_CLASSES) + ['default']}")
        if not isinstance(spec, Mapping) or set(spec) - _RESOURCE_KEYS:
            raise DeploymentError(f"airflow.kubernetes.resources.{name}: expected keys among {sorted(_RESOURCE_KEYS)}")
        gpu = spec.get("gpu", 0)
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            raise DeploymentError(f"airflow.kubernetes.resources.{name}.gpu: must be an integer >= 0, got {gpu!r}")
    if values.get("image_pull_policy", "IfNotPresent") not in ("Always", "IfNotPresent", "Never"):
        raise DeploymentError("airflow.kubernetes.image_pull_policy: Always, IfNotPresent or Never")
    if not isinstance(values.get("gpu_node_selector", {}), Mapping):
        raise DeploymentError("airflow.kubernetes.gpu_node_selector: expected a mapping of label: value")


def check_alerts(values: Mapping[str, Any]) -> None:
    """Raises DeploymentError naming the first bad `alerts.<key>`."""
    unknown = sorted(set(values) - set(ALERTS_DEFAULTS))
    if unknown:
        raise DeploymentError(f"alerts: unknown key(s) {unknown}; known: {sorted(ALERTS_DEFAULTS)}")
    to = values.get("to", [])
    if not isinstance(to, list) or not all(isinstance(a, str) and _EMAIL.match(a) for a in to):
        raise DeploymentError(f"alerts.to: expected a list of e-mail addresses, got {to!r}")
    for key in ("from_email", "smtp_conn_id", "notifier"):
        if key in values and (not isinstance(values[key], str) or not values[key]):
            raise DeploymentError(f"alerts.{key}: expected a non-empty string, got {values[key]!r}")
    notifier = values.get("notifier", "smtp")
    if notifier != "smtp" and not re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", notifier):
        raise DeploymentError(f"alerts.notifier: 'smtp' or the dotted path of a notifier class, got {notifier!r}")
    if not isinstance(values.get("notifier_args", {}), Mapping):
        raise DeploymentError("alerts.notifier_args: expected a mapping of argument: value")


def airflow_settings(values: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The `airflow:` block with defaults filled in and the environment's overrides applied.

    Raises:
      DeploymentError: RETRAIN_SCHEDULE or RETRAIN_RUN_DEADLINE_HOURS is not a valid value.
    """
    out = {**AIRFLOW_DEFAULTS, **dict(values or {})}
    if env.get(SCHEDULE_ENV):
        if env[SCHEDULE_ENV] not in SCHEDULES:
            raise DeploymentError(f"{SCHEDULE_ENV}: must be one of {list(SCHEDULES)}, got {env[SCHEDULE_ENV]!r}")
        out["schedule"] = env[SCHEDULE_ENV]
    if env.get(EXECUTION_ENV):
        if env[EXECUTION_ENV] not in EXECUTIONS:
            raise DeploymentError(f"{EXECUTION_ENV}: must be one of {list(EXECUTIONS)}, got {env[EXECUTION_ENV]!r}")
        out["execution"] = env[EXECUTION_ENV]
    out["kubernetes"] = {**KUBERNETES_DEFAULTS, **dict(out.get("kubernetes") or {})}
    if out["execution"] == "kubernetes":
        check_kubernetes(out["kubernetes"], required=True)
    if env.get(DEADLINE_ENV):
        try:
            out["run_deadline_hours"] = float(env[DEADLINE_ENV])
        except ValueError:
            out["run_deadline_hours"] = -1.0
        if out["run_deadline_hours"] < 0:
            raise DeploymentError(f"{DEADLINE_ENV}: must be a number of hours >= 0, got {env[DEADLINE_ENV]!r}")
    return out


def alert_settings(values: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The `alerts:` block with defaults filled in and RETRAIN_ALERTS_TO applied."""
    out = {**ALERTS_DEFAULTS, **dict(values or {})}
    if env.get(ALERTS_TO_ENV) is not None:
        out["to"] = [a.strip() for a in env[ALERTS_TO_ENV].split(",") if a.strip()]
    return out
