"""How a pipeline runs under Airflow: the config's `airflow:` and `alerts:` blocks, as settings classes.

The TFX runtime checks them when it loads a config (`pipelines/config/`) and copies them
into the compiled DAG file; the DAG factory reads them from there (no TFX import at
parse time). Both sides take the keys, defaults and checks from the classes here (the
shared loader of core/settings.py refuses unknown keys and wrong types).

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

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from core import nodes
from core.errors import BadInput
from core.settings import Settings, SettingsError

SCHEDULE_ENV = "RETRAIN_SCHEDULE"
EXECUTION_ENV = "RETRAIN_EXECUTION"
EXECUTIONS = ("process", "kubernetes")
DEADLINE_ENV = "RETRAIN_RUN_DEADLINE_HOURS"
ALERTS_TO_ENV = "RETRAIN_ALERTS_TO"
SCHEDULES = ("data", "monthly")
# A person's answers to a proposed canary decision (Airflow's HITL prompt, `retrain rollout
# decide --review`), with `rollout.approval: required`.
ROLLOUT_REVIEW_OPTIONS = ("Apply", "Veto", "Force promote", "Force roll back")
_RESOURCE_KEYS = {"cpu", "memory", "gpu"}
_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z]+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


class DeploymentError(BadInput):
    """An `airflow:` or `alerts:` setting that cannot be used; names the key."""


def _default_resources() -> dict[str, Any]:
    return {"default": {"cpu": "1", "memory": "2Gi"}}


@dataclasses.dataclass(frozen=True)
class KubernetesSettings(Settings):
    """`airflow.kubernetes:`: the pod of the TFX runtime image each task runs in
    (airflow_tfx/pods.py), with `airflow.execution: kubernetes`."""

    # The TFX runtime image (required for the pod execution).
    image: str | None = None
    namespace: str = "default"
    service_account: str | None = None
    # PVC mounted at the workdir: pipeline root, run folders, serving (required for pods).
    workdir_claim: str | None = None
    # PVC with the spans, mounted read-only at the data folder.
    data_claim: str | None = None
    # Secret with RETRAIN_METADATA_URL / RETRAIN_METADATA_PASSWORD.
    metadata_secret: str | None = None
    # {cpu, memory, gpu} per resource class (core/nodes.py); `default` for the rest.
    resources: Mapping[str, Any] = dataclasses.field(default_factory=_default_resources)
    # Node labels a GPU task's pod is scheduled by.
    gpu_node_selector: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"

    def check(self) -> None:
        for key in ("image", "namespace", "service_account", "workdir_claim", "data_claim", "metadata_secret"):
            if getattr(self, key) is not None and not getattr(self, key):
                raise SettingsError(f"{key}: expected a non-empty string, got {getattr(self, key)!r}")
        for name, spec in self.resources.items():
            if name != "default" and name not in nodes.RESOURCE_CLASSES:
                raise SettingsError(f"resources: unknown resource class {name!r}; known: "
                                    f"{sorted(nodes.RESOURCE_CLASSES) + ['default']}")
            if not isinstance(spec, Mapping) or set(spec) - _RESOURCE_KEYS:
                raise SettingsError(f"resources.{name}: expected keys among {sorted(_RESOURCE_KEYS)}")
            gpu = spec.get("gpu", 0)
            if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
                raise SettingsError(f"resources.{name}.gpu: must be an integer >= 0, got {gpu!r}")


@dataclasses.dataclass(frozen=True)
class AirflowSettings(Settings):
    """The `airflow:` block: schedule, arrivals, deadlines, concurrency and execution."""

    # data: a run per span when its data arrives (Airflow Assets, one partition per span);
    # monthly: the calendar, each run waiting (deferred) up to span_wait_hours for its month.
    # RETRAIN_SCHEDULE overrides it per deployment.
    schedule: Literal["data", "monthly"] = "data"
    # Cron of the `<pipeline>_span_arrivals` DAG that looks for new spans.
    arrivals_check: str = "*/10 * * * *"
    # Cron of the `<pipeline>_rollout` DAG: how often delayed labels are joined and the
    # canary decided (it also runs on each event of the `<pipeline>_feedback` asset).
    rollout_check: str = "*/30 * * * *"
    # A span has arrived when no file in it changed for this long (or it holds `_SUCCESS`).
    settle_seconds: int = 60
    # Monthly schedule: how long a run waits for its span; then it is skipped.
    span_wait_hours: float = 72
    # A run not finished this long after it was queued alerts; 0: none.
    # RETRAIN_RUN_DEADLINE_HOURS overrides it.
    run_deadline_hours: float = 12
    # Concurrency when the metadata store takes many writers (not SQLite).
    max_active_runs: int = 1
    max_active_tasks: int = 1
    # Slots per resource class (core/nodes.py): an Airflow pool each.
    pools: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # process: each task runs in the TFX runtime on the Airflow worker; kubernetes: each
    # task is a pod of the TFX runtime image. RETRAIN_EXECUTION overrides it.
    execution: Literal["process", "kubernetes"] = "process"
    kubernetes: KubernetesSettings = dataclasses.field(default_factory=KubernetesSettings)

    def check(self) -> None:
        if self.settle_seconds < 0:
            raise SettingsError(f"settle_seconds: must be an integer >= 0, got {self.settle_seconds!r}")
        for key in ("max_active_runs", "max_active_tasks"):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key}: must be an integer >= 1, got {getattr(self, key)!r}")
        if self.span_wait_hours <= 0:
            raise SettingsError(f"span_wait_hours: must be a number of hours > 0, got {self.span_wait_hours!r}")
        if self.run_deadline_hours < 0:
            raise SettingsError(f"run_deadline_hours: must be a number of hours >= 0, got {self.run_deadline_hours!r}")
        for key in ("arrivals_check", "rollout_check"):
            cron = getattr(self, key)
            if not (cron.startswith("@") or (len(cron.split()) == 5 and all(_CRON_FIELD.match(f) for f in cron.split()))):
                raise SettingsError(f"{key}: expected a cron expression such as '*/10 * * * *', got {cron!r}")
        if self.execution == "kubernetes":
            for key in ("image", "workdir_claim"):
                if not getattr(self.kubernetes, key):
                    raise SettingsError(f"kubernetes.{key}: required when airflow.execution is kubernetes")
        for name, slots in self.pools.items():
            if name not in nodes.RESOURCE_CLASSES:
                raise SettingsError(f"pools: unknown resource class {name!r}; known: {sorted(nodes.RESOURCE_CLASSES)}")
            if slots < 1:
                raise SettingsError(f"pools.{name}: must be an integer >= 1, got {slots!r}")


@dataclasses.dataclass(frozen=True)
class AlertSettings(Settings):
    """The `alerts:` block: who is told about gate stops, refused candidates, failures and
    missed deadlines, and how."""

    # Recipients (RETRAIN_ALERTS_TO, comma-separated, overrides); none: the task log only.
    to: tuple[str, ...] = ()
    # SMTP, the default notifier.
    from_email: str = "retrain@localhost"
    smtp_conn_id: str = "smtp_default"
    # Any Airflow notifier class instead (Slack, apprise...): its dotted path, and its
    # arguments, where `{subject}`, `{text}` and `{html}` are filled in per alert.
    notifier: str = "smtp"
    notifier_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def check(self) -> None:
        if not all(_EMAIL.match(a) for a in self.to):
            raise SettingsError(f"to: expected a list of e-mail addresses, got {list(self.to)!r}")
        for key in ("from_email", "smtp_conn_id", "notifier"):
            if not getattr(self, key):
                raise SettingsError(f"{key}: expected a non-empty string, got {getattr(self, key)!r}")
        if self.notifier != "smtp" and not re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", self.notifier):
            raise SettingsError(f"notifier: 'smtp' or the dotted path of a notifier class, got {self.notifier!r}")


def _parse(cls, values: Mapping[str, Any] | None, where: str):
    try:
        return cls.from_dict(values, where)
    except SettingsError as e:
        raise DeploymentError(str(e)) from None


def check_airflow(values: Mapping[str, Any] | None) -> AirflowSettings:
    """The `airflow:` block, parsed. Raises DeploymentError naming the first bad `airflow.<key>`."""
    return _parse(AirflowSettings, values, "airflow")


def check_alerts(values: Mapping[str, Any] | None) -> AlertSettings:
    """The `alerts:` block, parsed. Raises DeploymentError naming the first bad `alerts.<key>`."""
    return _parse(AlertSettings, values, "alerts")


def resolve_airflow(values: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The `airflow:` block with defaults filled in and the environment's overrides applied
    (plain values, as the DAG factory reads them).

    Raises:
      DeploymentError: a bad key, or RETRAIN_SCHEDULE, RETRAIN_EXECUTION or
        RETRAIN_RUN_DEADLINE_HOURS is not a valid value.
    """
    settings = _parse(AirflowSettings, values, "airflow")
    changes: dict[str, Any] = {}
    if env.get(SCHEDULE_ENV):
        if env[SCHEDULE_ENV] not in SCHEDULES:
            raise DeploymentError(f"{SCHEDULE_ENV}: must be one of {list(SCHEDULES)}, got {env[SCHEDULE_ENV]!r}")
        changes["schedule"] = env[SCHEDULE_ENV]
    if env.get(EXECUTION_ENV):
        if env[EXECUTION_ENV] not in EXECUTIONS:
            raise DeploymentError(f"{EXECUTION_ENV}: must be one of {list(EXECUTIONS)}, got {env[EXECUTION_ENV]!r}")
        changes["execution"] = env[EXECUTION_ENV]
    if env.get(DEADLINE_ENV):
        try:
            hours = float(env[DEADLINE_ENV])
        except ValueError:
            hours = -1.0
        if hours < 0:
            raise DeploymentError(f"{DEADLINE_ENV}: must be a number of hours >= 0, got {env[DEADLINE_ENV]!r}")
        changes["run_deadline_hours"] = hours
    settings = dataclasses.replace(settings, **changes)
    try:  # the environment's overrides obey the block's rules too (RETRAIN_EXECUTION=kubernetes)
        settings.check()
    except SettingsError as e:
        raise DeploymentError(f"airflow.{e}") from None
    return settings.to_dict()


def resolve_alerts(values: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The `alerts:` block with defaults filled in and RETRAIN_ALERTS_TO applied (plain values).

    Raises:
      DeploymentError: a bad key.
    """
    out = _parse(AlertSettings, values, "alerts").to_dict()
    out["to"] = list(out["to"])
    if env.get(ALERTS_TO_ENV) is not None:
        out["to"] = [a.strip() for a in env[ALERTS_TO_ENV].split(",") if a.strip()]
    return out
