"""The taxi pipeline end to end on Beam's portable runner: Beam's own job service and an SDK
worker pool (EXTERNAL environment) started and stopped by scripts/beam_portable.sh, every
Beam node submitted as a job, its stages run by out-of-process workers; the same job
submission, artifact staging and workers as Flink's and Spark's portable runners."""

import json
import os
import re
import shutil
import socket
import subprocess

import pytest
import yaml

from core import spans
from tests.conftest import REPO, TAXI_CONFIG, TAXI_DATA, TAXI_SCHEMA, retrain_cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCRIPT = os.path.join(REPO, "scripts", "beam_portable.sh")
SPAN = 201304  # ~190 rows: an eval split the Evaluator judges


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    root = tmp_path_factory.mktemp("services")
    env = {**os.environ, "RETRAIN_SERVICES": str(root), "RETRAIN_BEAM_JOB_PORT": str(_free_port()),
           "RETRAIN_BEAM_WORKER_PORT": str(_free_port())}
    subprocess.run([SCRIPT, "start"], env=env, check=True, timeout=120)
    try:
        yield env, root / "beam"
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, check=True, timeout=120)
    status = subprocess.run([SCRIPT, "status"], env=env, capture_output=True, text=True, check=True).stdout
    assert status.split() == ["job:", "stopped", "workers:", "stopped"]


def test_the_taxi_pipeline_runs_on_the_portable_runner(portable, tmp_path):
    env, beam_root = portable
    data = tmp_path / "data"
    shutil.copytree(spans.span_dir(TAXI_DATA, SPAN), spans.span_dir(str(data), SPAN))
    with open(TAXI_CONFIG) as f:
        cfg = yaml.safe_load(f)
    # Every Beam node on the portable runner, ExampleGen too (TFX's own executor); the
    # window is this span only, and the per-hour slices are off (a few examples each).
    # The simple baseline is scored (paired with the candidate after TFMA's job) but
    # tolerated 0.1 AUC: trained on this month alone, the network loses to the logistic
    # model on its ~50 eval trips (AUC 0.87 vs 0.95) and is rightly refused by the shipped
    # rule, which is not what this test is about.
    cfg.update(data_root=str(data), schema_path=TAXI_SCHEMA, slice_features=[], window_spans=1, min_eval_examples=20,
               gate_policy=os.path.join(REPO, "schemas", "taxi", "gate.yaml"),
               feature_policy=os.path.join(REPO, "schemas", "taxi", "feature_policy.yaml"), ingestion={"engine": "beam"},
               simple_baseline={"min_lift": 0.1})
    config = tmp_path / "taxi.yaml"
    config.write_text(yaml.safe_dump(cfg))
    args = subprocess.run([SCRIPT, "run-args"], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert args[:2] == ["--beam-profile", "portable"]
    work = tmp_path / "work"
    proc = retrain_cli("run", "--json", "--config", str(config), "--workdir", str(work), "--span", str(SPAN), *args,
                       env=env, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["outcome"] == "pushed", summary
    assert {n: summary["beam"][n]["profile"] for n in ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")} \
        == dict.fromkeys(("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator"), "portable")
    job_log = (beam_root / "job.log").read_text()
    # One job per Beam node, each run to completion by the job service...
    assert len(re.findall(r"Completed job in [\d.]+ seconds with state DONE", job_log)) == 4, job_log[-3000:]
    # ...whose stages ran in SDK workers the pool started as processes of the TFX runtime.
    workers = (beam_root / "workers.log").read_text()
    assert len(re.findall(r"Starting worker with command \['python'", workers)) >= 4, workers[-3000:]
