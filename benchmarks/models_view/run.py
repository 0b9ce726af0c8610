"""The Models view in Airflow: how long its pages take with 48 spans for each of 3 pipelines.

A workdir is built from one real taxi run's record (its report.json, MLMD store and pushed
version; the run is made first unless --source names a workdir that has one): 48 monthly
runs per pipeline (taxi, digits, diabetes), every 7th stopped at the gate and every 11th
refused, each with its report. Then, through the Airflow API app with the plugin
(FastAPI's TestClient, the simple auth manager's admin), each page is fetched cold (the
plugin's cache empty: `retrain view` runs in the TFX runtime, once as a new process and
once forked by a warm TFX runtime, as under `make airflow`) and cached, and `retrain view`
alone is timed. Medians of --repeat fetches.

  .venv/bin/python benchmarks/models_view/run.py [--source WORKDIR] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core import layout  # noqa: E402
from pipelines import config as config_lib  # noqa: E402
from task_host import client, spawn  # noqa: E402

PIPELINES = ("taxi", "digits", "diabetes")
SPANS = 48
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AF_PYTHON = os.path.join(REPO, ".venv-airflow", "bin", "python")

_FETCH = r"""
import json, statistics, sys, time
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
from airflow_tfx import models_ui

client = TestClient(create_app("core"))
repeat, version = int(sys.argv[1]), sys.argv[2]
pages = {"overview": "/retrain/models/", "pipeline (48 spans)": "/retrain/models/taxi",
         "version": f"/retrain/models/taxi/versions/{version}", "run tab": "/retrain/models/run/taxi_retraining/run-201612"}
out = {}
for name, url in pages.items():
    cold, warm = [], []
    for _ in range(repeat):
        models_ui._cache.clear()
        t = time.perf_counter(); r = client.get(url); cold.append(time.perf_counter() - t)
        assert r.status_code == 200, (url, r.status_code, r.text[:500])
        t = time.perf_counter(); client.get(url); warm.append(time.perf_counter() - t)
    out[name] = {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm), "bytes": len(r.content)}
print("RESULT " + json.dumps(out))
"""


def _source(path: str | None) -> str:
    if path:
        return path
    work = tempfile.mkdtemp(prefix="models-view-src-")
    print(f"making one real taxi run in {work} (about a minute)", flush=True)
    subprocess.run([TFX_PYTHON, "-m", "retrain.cli", "run", "--workdir", work, "--span", "201302", "--window", "2",
                    "--train-steps", "50"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return work


def build(source: str, out: str) -> str:
    """The 3 x 48-span workdir; returns the served version's name."""
    src_root = layout.pipeline_root(source, "taxi")
    runs = os.path.join(source, layout.RUNS_DIR, "taxi")
    with open(os.path.join(runs, sorted(os.listdir(runs))[-1], layout.RUN_INFO)) as f:
        run_id = json.load(f)["run_id"]
    with open(os.path.join(layout.report_dir(src_root, run_id), layout.REPORT_JSON)) as f:
        template = json.load(f)
    version = str(template["push"]["version"])
    for pipeline in PIPELINES:
        config = config_lib.load(os.path.join(REPO, "pipelines", pipeline, "config.yaml"))
        os.makedirs(os.path.join(out, "metadata"), exist_ok=True)
        shutil.copy(layout.metadata_path(source, "taxi"), layout.metadata_path(out, pipeline))
        base = os.path.join(layout.serving_root(out), config.model_name)
        shutil.copytree(os.path.join(layout.serving_root(source), "taxi", version), os.path.join(base, version))
        for i in range(SPANS):
            span = (2013 + i // 12) * 100 + i % 12 + 1
            run_id = f"run-{span}"
            r = copy.deepcopy(template)
            r.update(pipeline=pipeline, run_id=run_id, generated_at=f"{span // 100}-{span % 100:02d}-02T00:00:00+00:00")
            r["data"]["span"] = span
            for n in r["nodes"].values():
                n["started"] = f"{span // 100}-{span % 100:02d}-01T00:00:00+00:00"
            if i % 7 == 3:
                r.update(outcome="stopped_by_data_gate", blessed=None, evaluation=None, push={"pushed": False})
                r["data_gate"]["passed"] = False
                r["data_gate"]["blocking_features"] = ["payment_type"]
            elif i % 11 == 5:
                r.update(outcome="not_blessed", blessed=False, push={"pushed": False})
            elif i != SPANS - 1:
                r["push"] = {**r["push"], "version": str(1000 + i)}  # pushed earlier, since retired
            folder = os.path.join(out, layout.RUNS_DIR, pipeline, run_id)
            os.makedirs(folder)
            with open(os.path.join(folder, layout.RUN_INFO), "w") as f:
                json.dump({"run_id": run_id, "span": span, "pipeline": pipeline}, f)
            report_dir = layout.report_dir(layout.pipeline_root(out, pipeline), run_id)
            os.makedirs(report_dir)
            with open(os.path.join(report_dir, layout.REPORT_JSON), "w") as f:
                json.dump(r, f)
    return version


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--source", help="a workdir with a finished taxi run (default: make one)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args(argv)
    source = _source(a.source)
    work = tempfile.mkdtemp(prefix="models-view-")
    version = build(source, os.path.join(work, "work"))
    view_s = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        subprocess.run([TFX_PYTHON, "-m", "retrain.cli", "view", "--pipeline", "taxi", "--workdir",
                        os.path.join(work, "work")], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        view_s.append(time.perf_counter() - t)
    env = {**os.environ, "AIRFLOW_HOME": os.path.join(work, "home"), "RETRAIN_WORKDIR": os.path.join(work, "work"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(REPO, "airflow_tfx", "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    subprocess.run([os.path.join(REPO, ".venv-airflow", "bin", "airflow"), "db", "migrate"], env=env, check=True,
                   capture_output=True)
    runs = {}
    sock = os.path.join(work, "warm.sock")
    runtime = spawn.start_warm_runtime(sock, python=TFX_PYTHON, log=os.path.join(work, "warm.log"))
    try:
        # Cold pages without a warm runtime (`retrain view` starts an interpreter), then with
        # one (as under `make airflow`: forked, its imports done).
        for mode, extra in (("process", {client.SOCKET_ENV: ""}), ("warm runtime", {client.SOCKET_ENV: sock})):
            proc = subprocess.run([AF_PYTHON, "-c", _FETCH, str(a.repeat), version], env={**env, **extra}, cwd=REPO,
                                  capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if not lines:
                sys.stderr.write(proc.stderr[-3000:])
                return 1
            runs[mode] = json.loads(lines[-1][len("RESULT "):])
    finally:
        spawn.stop(runtime)
    pages = {name: {**m, "cold_warm_runtime_s": runs["warm runtime"][name]["cold_s"]}
             for name, m in runs["process"].items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    print(f"\nModels view, {len(PIPELINES)} pipelines x {SPANS} spans, median of {a.repeat}, commit {commit.strip()}")
    print(f"{'page':<22}{'uncached, process':>20}{'uncached, warm runtime':>25}{'cached':>10}{'HTML':>9}")
    for name, m in pages.items():
        print(f"{name:<22}{m['cold_s']:>18.3f} s{m['cold_warm_runtime_s']:>23.3f} s{m['warm_s']:>8.4f} s"
              f"{m['bytes'] / 1024:>6.0f} KB")
    print(f"{'retrain view alone':<22}{statistics.median(view_s):>20.3f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pages": pages, "retrain_view_s": statistics.median(view_s), "commit": commit.strip()}, f,
                      indent=2)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
