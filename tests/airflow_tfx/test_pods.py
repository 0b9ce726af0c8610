"""The pod execution mode by construction (no Kubernetes here): every task of the DAG is a
KubernetesPodOperator with the image, command, environment, resources, volumes and secrets
its node needs; a pod's answer (written by `task_host.pod`, run for real) maps to the same
task state as the same command run as a local process."""

import json
import os
import subprocess
import sys
import types

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_tfx import pods
from airflow_tfx.compiled_dag import REPO
from airflow_tfx.dag_factory import build_dag
from airflow_tfx.operators import TfxNodeOperator
from task_host import pod

TEMPLATE = os.path.join(REPO, "dags", "compiled", "taxi.json")
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
FAKE = os.path.join(os.path.dirname(__file__), "fake_node.py")
KUBERNETES = {
    "image": "registry.example/retrain-tfx:1.21", "namespace": "ml", "service_account": "retrain",
    "workdir_claim": "retrain-work", "data_claim": "taxi-spans", "metadata_secret": "retrain-mlmd",
    "resources": {"default": {"cpu": "500m", "memory": "1Gi"}, "tfx_beam": {"cpu": "2", "memory": "8Gi"},
                  "tfx_trainer": {"cpu": "4", "memory": "16Gi", "gpu": 1}},
    "gpu_node_selector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
}


@pytest.fixture(scope="module")
def dag(tmp_path_factory):
    template = json.loads(open(TEMPLATE).read())
    template["deployment"]["airflow"].update(execution="kubernetes", kubernetes=KUBERNETES)
    path = tmp_path_factory.mktemp("pods") / "taxi.json"
    path.write_text(json.dumps(template))
    env = {"RETRAIN_WORKDIR": "/srv/retrain", "RETRAIN_DATA_ROOT_TAXI": "/data/taxi", "RETRAIN_SCHEDULE": "data"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield build_dag(str(path), "taxi_retraining", doc_md="doc")
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _container(task):
    pod = task.build_pod_request_obj(dry_run=True)  # what the operator would send, no cluster needed
    [container] = [c for c in pod.spec.containers if c.name == "base"]
    return pod, container


def test_every_task_is_a_pod_of_the_tfx_image(dag):
    template = json.loads(open(TEMPLATE).read())
    for node in template["nodes"]:
        task = dag.get_task(f"{node['stage']}.{node['id']}")
        assert isinstance(task, pods.TfxNodePodOperator), node["id"]
        pod, container = _container(task)
        assert container.image == "registry.example/retrain-tfx:1.21" and pod.metadata.namespace == "ml"
        assert container.command == ["python", "-m", "task_host.pod", "--reply", "/airflow/xcom/return.json", "--"]
        assert container.args == ["node", "run", "--workdir", "/srv/retrain", "--pipeline", "taxi", "--run-id",
                                  "{{ run_id }}", "--node", node["id"]]
        assert pod.spec.service_account_name == "retrain"
        assert pod.metadata.labels["retrain/pipeline"] == "taxi"
        # The answer travels through the xcom sidecar, which reads the folder in_pod writes to.
        assert task.do_xcom_push and "airflow-xcom-sidecar" in [c.name for c in pod.spec.containers]
        assert "/airflow/xcom" in [m.mount_path for m in container.volume_mounts]
    for task_id in ("prepare_run", "governance_report", "run_summary"):
        assert isinstance(dag.get_task(task_id), pods.TfxPodOperator), task_id
    assert isinstance(dag.get_task("run_summary"), pods.RunSummaryPodOperator)


def test_environment_secrets_and_volumes(dag):
    pod, container = _container(dag.get_task("train.Transform"))
    env = {e.name: e for e in container.env}
    assert env["RETRAIN_WORKDIR"].value == "/srv/retrain" and env["PYTHONUNBUFFERED"].value == "1"
    assert env["RETRAIN_WORKER_NAME"].value_from.field_ref.field_path == "metadata.name"
    # ML Metadata's URL and password come from the Secret, never from the pod spec.
    assert [e.secret_ref.name for e in container.env_from] == ["retrain-mlmd"]
    assert not [e for e in container.env if "PASSWORD" in e.name or "METADATA" in e.name]
    volumes = {v.name: v for v in pod.spec.volumes}
    assert {"retrain-workdir", "retrain-data"} <= set(volumes)
    mounts = {m.name: m for m in container.volume_mounts}
    assert volumes["retrain-workdir"].persistent_volume_claim.claim_name == "retrain-work"
    assert mounts["retrain-workdir"].mount_path == "/srv/retrain" and not mounts["retrain-workdir"].read_only
    assert volumes["retrain-data"].persistent_volume_claim.claim_name == "taxi-spans"
    assert volumes["retrain-data"].persistent_volume_claim.read_only
    assert mounts["retrain-data"].mount_path == "/data/taxi" and mounts["retrain-data"].read_only


@pytest.mark.parametrize("task_id, requests, gpus", [
    ("train.Trainer", {"cpu": "4", "memory": "16Gi"}, 1),
    ("validate_data.CsvExampleGen", {"cpu": "2", "memory": "8Gi"}, 0),
    ("evaluate.Evaluator", {"cpu": "2", "memory": "8Gi"}, 0),
    ("validate_data.DataGate", {"cpu": "500m", "memory": "1Gi"}, 0),
    ("prepare_run", {"cpu": "500m", "memory": "1Gi"}, 0),
])
def test_resources_per_resource_class_and_gpu_limits_for_the_trainer(dag, task_id, requests, gpus):
    pod, container = _container(dag.get_task(task_id))
    assert container.resources.requests == requests
    assert container.resources.limits == {**requests, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    if gpus:
        assert pod.spec.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
        assert [(t.key, t.operator, t.effect) for t in pod.spec.tolerations] == [("nvidia.com/gpu", "Exists", "NoSchedule")]
    else:
        assert not pod.spec.node_selector and not pod.spec.tolerations


def test_rendered_arguments_match_the_process_mode(dag):
    task = dag.get_task("prepare_run")
    context = {"run_id": "asset_triggered__x", "params": {"span": None, "train_steps": None, "window": None},
               "dag_run": types.SimpleNamespace(partition_key="201303", run_after=None),
               "data_interval_start": None, "data_interval_end": None, "logical_date": None}
    task.render_template_fields(context, jinja_env=dag.get_template_env())
    args = task.arguments
    assert args[args.index("--span") + 1] == "201303" and args[args.index("--run-id") + 1] == "asset_triggered__x"
    # The project's files as the image has them (where the Dockerfile installs the project).
    assert args[args.index("--config") + 1] == "/opt/retrain/pipelines/taxi/config.yaml"
    assert args[args.index("--expect") + 1] == "/opt/retrain/dags/compiled/taxi.json"
    assert "--train-steps" not in args and "--window" not in args  # blank params dropped, as for a process


def test_the_pod_mode_waits_in_pods_when_runs_go_in_parallel(tmp_path, monkeypatch):
    template = json.loads(open(TEMPLATE).read())
    template["deployment"]["airflow"].update(execution="kubernetes", kubernetes=KUBERNETES)
    template["deployment"]["metadata"] = "mysql://retrain@127.0.0.1:3306/mlmd"
    path = tmp_path / "taxi.json"
    path.write_text(json.dumps(template))
    monkeypatch.delenv("RETRAIN_METADATA_URL", raising=False)
    dag = build_dag(str(path), "t", doc_md="doc")
    for task_id, what in (("validate_data.wait_for_baseline", "baseline"), ("train.wait_for_window", "window"),
                          ("evaluate.wait_for_earlier_runs", "models")):
        task = dag.get_task(task_id)
        assert isinstance(task, pods.TfxPodOperator)
        assert task.arguments[-4:] == ["--for", what, "--timeout", str(pods.PodTasks.WAIT_TIMEOUT_S)]


def test_a_kubernetes_mode_without_an_image_is_refused(tmp_path, monkeypatch):
    from core import airflow_settings

    monkeypatch.setenv("RETRAIN_EXECUTION", "kubernetes")
    with pytest.raises(airflow_settings.DeploymentError, match="airflow.kubernetes.image: required"):
        build_dag(TEMPLATE, "t", doc_md="doc")


class _TI:
    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def _pod_reply(tmp_path, mode: str) -> dict:
    """What a pod answers: `task_host.pod` run for real around the node stand-in."""
    reply = tmp_path / f"{mode}.json"
    proc = subprocess.run([TFX_PYTHON, "-m", "task_host.pod", "--reply", str(reply), "--module",
                           "tests.airflow_tfx.fake_node", "--", mode, "node", "run"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr  # the container succeeds once it has answered
    assert "fake node: starting" in proc.stdout  # the command's output is the pod's log
    return json.loads(reply.read_text())


@pytest.mark.parametrize("mode", ["complete", "cached", "skipped", "failed", "gate"])
def test_a_pods_answer_maps_to_the_same_task_state_as_a_process(tmp_path, dag, mode):
    def outcome(run):
        ti = _TI()
        try:
            return ("ok", run(ti), ti.xcom)
        except (AirflowSkipException, AirflowFailException, AirflowException) as e:
            return (type(e).__name__, str(e).splitlines()[0], ti.xcom)

    process = TfxNodeOperator(task_id="Fake", node_id="Fake", workdir="/w", pipeline="taxi",
                              entrypoint=[sys.executable, FAKE, mode])
    pod_task = dag.get_task("train.Trainer")
    pod_task.tfx_node_id = "Fake"
    rc, lines, result = pod.read_pod_reply(_pod_reply(tmp_path, mode))
    assert outcome(lambda ti: pod_task.finish({"ti": ti}, rc, lines, result)) == outcome(
        lambda ti: process.execute({"ti": ti}))


def test_a_command_that_answers_bad_input_fails_without_retry(tmp_path, dag):
    reply = tmp_path / "reply.json"
    subprocess.run([TFX_PYTHON, "-m", "task_host.pod", "--reply", str(reply), "--", "node", "run", "--workdir",
                    str(tmp_path), "--pipeline", "taxi", "--run-id", "nope", "--node", "Trainer"], cwd=REPO,
                   check=True, capture_output=True, timeout=120)
    rc, lines, result = pod.read_pod_reply(json.loads(reply.read_text()))
    assert rc == 2 and result is None
    with pytest.raises(AirflowFailException, match="bad input"):
        dag.get_task("prepare_run").finish({"ti": _TI()}, rc, lines, result)
    with pytest.raises(ValueError, match="not a retrain pod answer"):
        pod.read_pod_reply({"hello": 1})


def test_the_dockerfile_builds_the_runtime_from_the_lock_file():
    """What the image must hold for these pods (no Docker here: read, not built)."""
    import re

    text = open(os.path.join(REPO, "Dockerfile")).read()
    assert re.search(r"^WORKDIR " + re.escape(pods.IMAGE_ROOT) + "$", text, re.M)
    # Built by the runtime's own install script from the lock files (tests/runtime checks the
    # steps and runs the pods' command in the runtime it builds).
    assert "runtime/install.sh deps /opt/venv" in text and "runtime/install.sh project /opt/venv" in text
    assert "requirements/tfx.lock" in text
    copied = re.findall(r"^COPY (\S+) ", text, re.M)
    for src in copied:
        assert os.path.exists(os.path.join(REPO, src)), src
    setup = open(os.path.join(REPO, "setup.py")).read()
    packages = re.findall(r'"(\w+)\*"', setup)
    assert set(packages) <= set(copied), set(packages) - set(copied)
    assert {"schemas", "dags/compiled"} <= set(copied)  # configs' schemas, prepare_run's --expect
    # What the pods run exists in the image's packages.
    assert os.path.exists(os.path.join(REPO, "task_host", "pod.py")) and pods.ENTRYPOINT[2] == "task_host.pod"
    ignored = open(os.path.join(REPO, ".dockerignore")).read().split()
    assert {".venv", ".venv-airflow", "work", ".git"} <= set(ignored)
