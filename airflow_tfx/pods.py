"""The pod execution mode: each task a pod of the TFX runtime image (`airflow.execution: kubernetes`).

The image is built from `Dockerfile` (the same `requirements/tfx.lock` as the local venv,
the project installed). Every task of the DAG becomes a `KubernetesPodOperator` that runs
`python -m task_host.pod -- <the same retrain command>`; the pod leaves the command's
exit code and `RESULT` line where the operator's xcom sidecar reads them, and the task's
state is decided by the same code as for a local process (airflow_tfx/outcomes.py): a
gate stop still fails without retries, a skipped node is still skipped.

Each pod gets: the image and pull policy; the workdir's PersistentVolumeClaim mounted at
the workdir path the DAG uses (pipeline root, run folders, MLMD SQLite if used, the
serving folder TF Serving reads); the data claim read-only at the data folder; ML
Metadata's URL and password from a Secret (`envFrom`, never in the pod spec); CPU and
memory per resource class (core.nodes), `nvidia.com/gpu` limits, the GPU node selector
and toleration for the Trainer's class. A pod is a cold process: no warm runtime here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from kubernetes.client import models as k8s

from airflow_tfx import outcomes
from airflow_tfx.hooks import CommandRun, drop_empty_options
from airflow_tfx.links import GovernanceReportLink
from airflow_tfx.operators import RetrainTask, node_arguments
from core import nodes
from task_host import pod

# Where the Dockerfile installs the project (its WORKDIR): configs, schemas, templates.
IMAGE_ROOT = "/opt/retrain"
ENTRYPOINT = ["python", "-m", "task_host.pod", "--reply", pod.POD_REPLY_PATH, "--"]
GPU_RESOURCE = "nvidia.com/gpu"
WORKDIR_VOLUME, DATA_VOLUME = "retrain-workdir", "retrain-data"


def pod_name(pipeline: str, task_id: str) -> str:
    """A DNS-1123 name for the task's pods (the operator adds a random suffix)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{pipeline}-{task_id}".lower()).strip("-")
    return name[:50].rstrip("-")


def resources(settings: Mapping[str, Any], resource_class: str | None) -> tuple[k8s.V1ResourceRequirements, int]:
    """(requests = limits for the class, GPUs) from `kubernetes.resources` (`default` otherwise)."""
    spec = dict(settings["resources"].get(resource_class or "default") or settings["resources"].get("default") or {})
    gpus = int(spec.pop("gpu", 0))
    amounts = {k: str(v) for k, v in spec.items()}
    limits = {**amounts, **({GPU_RESOURCE: str(gpus)} if gpus else {})}
    return k8s.V1ResourceRequirements(requests=dict(amounts), limits=limits), gpus


def pod_arguments(settings: Mapping[str, Any], *, pipeline: str, task_id: str, workdir: str, data_root: str,
                  resource_class: str | None = None) -> dict[str, Any]:
    """The KubernetesPodOperator arguments every retrain pod shares, for one task."""
    requirements, gpus = resources(settings, resource_class)
    volumes = [k8s.V1Volume(name=WORKDIR_VOLUME, persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
        claim_name=settings["workdir_claim"]))]
    mounts = [k8s.V1VolumeMount(name=WORKDIR_VOLUME, mount_path=workdir)]
    if settings.get("data_claim"):
        volumes.append(k8s.V1Volume(name=DATA_VOLUME, persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
            claim_name=settings["data_claim"], read_only=True)))
        mounts.append(k8s.V1VolumeMount(name=DATA_VOLUME, mount_path=data_root, read_only=True))
    env_from = []
    if settings.get("metadata_secret"):
        env_from.append(k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=settings["metadata_secret"])))
    return {
        "name": pod_name(pipeline, task_id),
        "namespace": settings["namespace"],
        "image": settings["image"],
        "image_pull_policy": settings["image_pull_policy"],
        "service_account_name": settings.get("service_account"),
        "cmds": list(ENTRYPOINT),
        "env_vars": {"PYTHONUNBUFFERED": "1", "RETRAIN_WORKDIR": workdir},
        # The worker name each node records (run folders, reports): the pod's own name.
        "pod_runtime_info_envs": [k8s.V1EnvVar(name="RETRAIN_WORKER_NAME", value_from=k8s.V1EnvVarSource(
            field_ref=k8s.V1ObjectFieldSelector(field_path="metadata.name")))],
        "env_from": env_from,
        "volumes": volumes,
        "volume_mounts": mounts,
        "container_resources": requirements,
        "node_selector": dict(settings.get("gpu_node_selector") or {}) if gpus else None,
        "tolerations": [k8s.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")] if gpus else None,
        "labels": {"app.kubernetes.io/part-of": "retrain", "retrain/pipeline": pipeline,
                   "retrain/resource-class": resource_class or "default"},
        "do_xcom_push": True,
        "get_logs": True,
        "on_finish_action": "delete_succeeded_pod",
    }


class TfxPodOperator(RetrainTask, KubernetesPodOperator):
    """`retrain <arguments>` in a pod of the TFX runtime image; the task fails if the command does."""

    ui_color = "#e6eefa"
    operator_extra_links = (GovernanceReportLink(),)

    def __init__(self, *, arguments: Sequence[str], pipeline: str, pod: Mapping[str, Any],
                 skip_with: str | None = None, **kwargs):
        super().__init__(arguments=list(arguments), **pod, **kwargs)
        self.retrain_pipeline = pipeline
        self.skip_with = skip_with

    def _do_render_template_fields(self, parent, template_fields, context, jinja_env, seen_oids) -> None:
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is self:  # blank optional params (`--window ""`) are dropped, as for a process
            self.arguments = drop_empty_options(self.arguments)

    def run_command(self, context: Any) -> CommandRun:
        return CommandRun(*pod.read_pod_reply(KubernetesPodOperator.execute(self, context)))


class RunSummaryPodOperator(TfxPodOperator):
    """The run's summary in a pod; alerts on a refused candidate."""

    outcome = staticmethod(outcomes.summary)
    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "span")

    def __init__(self, *, alert_settings: dict, span: str, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings
        self.span = span


class RolloutDecisionPodOperator(TfxPodOperator):
    """The rollout controller's decision in a pod; alerts on promotions, roll-backs and the floor."""

    outcome = staticmethod(outcomes.rollout)
    def __init__(self, *, alert_settings: dict, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings


class TfxNodePodOperator(TfxPodOperator):
    """One TFX node of the run in a pod sized for its resource class."""

    ui_color = "#fff3d6"
    outcome = staticmethod(outcomes.node)

    def __init__(self, *, node_id: str, workdir: str, pipeline: str, **kwargs):
        super().__init__(arguments=node_arguments(node_id, workdir, pipeline), pipeline=pipeline, **kwargs)
        self.tfx_node_id = node_id


class PodTasks:
    """How the DAG factory makes its tasks in the pod mode (the process mode's twin:
    operators.ProcessTasks)."""

    # A wait in a pod blocks (the span ledger polls) instead of rescheduling: each poke
    # would be a pod start.
    WAIT_TIMEOUT_S = 6 * 3600

    def __init__(self, settings: Mapping[str, Any], *, pipeline: str, workdir: str, data_root: str):
        self.settings, self.pipeline, self.workdir, self.data_root = settings, pipeline, workdir, data_root

    def path(self, repo_relative: str) -> str:
        """A project file as the pods see it: in the image."""
        return os.path.join(IMAGE_ROOT, repo_relative)

    def template(self, template_path: str) -> str:
        """The image's copy of the DAG's template (`make compile` output, copied by the Dockerfile)."""
        return os.path.join(IMAGE_ROOT, "dags", "compiled", os.path.basename(template_path))

    def _pod(self, task_id: str, resource_class: str | None = None) -> dict[str, Any]:
        return pod_arguments(self.settings, pipeline=self.pipeline, task_id=task_id, workdir=self.workdir,
                             data_root=self.data_root, resource_class=resource_class)

    def command(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> TfxPodOperator:
        return TfxPodOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline, pod=self._pod(task_id),
                              **kwargs)

    def summary(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> RunSummaryPodOperator:
        return RunSummaryPodOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline,
                                     pod=self._pod(task_id), **kwargs)

    def node(self, *, node_id: str, **kwargs) -> TfxNodePodOperator:
        return TfxNodePodOperator(task_id=node_id, node_id=node_id, workdir=self.workdir, pipeline=self.pipeline,
                                  pod=self._pod(node_id, nodes.resource_class(node_id)), **kwargs)

    def rollout(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> RolloutDecisionPodOperator:
        return RolloutDecisionPodOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline,
                                          pod=self._pod(task_id), **kwargs)

    def span_wait(self, *, task_id: str, what: str, **kwargs) -> TfxPodOperator:
        return self.command(task_id=task_id, arguments=[
            "wait", "--workdir", self.workdir, "--pipeline", self.pipeline, "--run-id", "{{ run_id }}",
            "--for", what, "--timeout", str(self.WAIT_TIMEOUT_S)], **kwargs)
