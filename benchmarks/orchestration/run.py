"""Benchmark: Airflow's overhead for the taxi pipeline.

Prints, from one invocation:
  - DAG parse time of dags/ (Airflow's DagBag, median of N parses in fresh processes),
    beside the floor a DAG file importing TFX would pay: `from tfx import v1` plus
    create_pipeline() in the TFX runtime (the AirflowDagRunner route does at least this);
  - per-task start overhead: one node that does next to nothing (a resolver) of a prepared
    run, started as a cold interpreter vs forked by the warm TFX runtime (median of N);
  - wall time of one DAG run through Airflow (`airflow dags test`, every node a task in
    the TFX runtime), with every task cold (RETRAIN_WARM=0) and with the warm runtime
    already running (as `make airflow` / the cluster have it), vs `retrain run` on the same
    span and data, each from a fresh store, and the ratios (Airflow's overhead).

    .venv-airflow/bin/python benchmarks/orchestration/run.py [--parses 5] [--window 6] [--starts 3]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time

from core import nodes
from task_host import client as warm
from task_host import spawn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AF_PYTHON = os.path.join(REPO, ".venv-airflow", "bin", "python")
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

_PARSE = (
    "import time, sys; t = time.perf_counter()\n"
    "from airflow.dag_processing.dagbag import DagBag\n"
    "t1 = time.perf_counter(); bag = DagBag(dag_folder=sys.argv[1]); t2 = time.perf_counter()\n"
    "assert not bag.import_errors, bag.import_errors\n"
    "print(t2 - t1)"
)
_TFX_FLOOR = (
    "import time; t = time.perf_counter()\n"
    "import core.keras_env\n"
    "from tfx import v1\n"
    "from pipelines import config\n"
    "from pipelines.factory import create_pipeline\n"
    "create_pipeline(config.load('pipelines/taxi/config.yaml', {'span': 201612}))\n"
    "print(time.perf_counter() - t)"
)


def _timed(cmd, env=None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - start, proc


def _start_warm(sock: str) -> subprocess.Popen:
    return spawn.start_warm_runtime(sock, TFX_PYTHON, cwd=REPO)


def _task_starts(tmp: str, window: int, sock: str, n: int) -> tuple[list[float], list[float]]:
    """Wall seconds of a do-nothing node (a resolver): cold interpreters, then warm forks."""
    work = os.path.join(tmp, "starts")
    _timed([TFX_PYTHON, "-m", "retrain.cli", "prepare-run", "--run-id", "starts", "--span", "201612",
            "--window", str(window), "--workdir", work])
    cmd = [TFX_PYTHON, "-m", "retrain.cli", "node", "run", "--workdir", work, "--pipeline", "taxi",
           "--run-id", "starts", "--node", nodes.MODEL_RESOLVER]
    cold = [_timed(cmd)[0] for _ in range(n)]
    warm_s = []
    for _ in range(n):
        start = time.monotonic()
        proc = warm.start(cmd, dict(os.environ), REPO, socket_path=sock)
        if proc is None:
            raise SystemExit("the warm TFX runtime refused the node")
        proc.stdout.read()
        if proc.wait() != 0:
            raise SystemExit("the node failed in the warm runtime")
        warm_s.append(time.monotonic() - start)
    return cold, warm_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parses", type=int, default=5)
    parser.add_argument("--window", type=int, default=6)
    parser.add_argument("--starts", type=int, default=3, help="node starts per mode for the overhead figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AIRFLOW_HOME": os.path.join(tmp, "airflow")}
        parses = [float(_timed([AF_PYTHON, "-c", _PARSE, os.path.join(REPO, "dags")], env)[1].stdout.split()[-1])
                  for _ in range(args.parses)]
        floor = float(_timed([TFX_PYTHON, "-c", _TFX_FLOOR])[1].stdout.split()[-1])

        local_s, _ = _timed([TFX_PYTHON, "-m", "retrain.cli", "run", "--json", "--span", "201612",
                             "--window", str(args.window), "--workdir", os.path.join(tmp, "local")])
        dag = [os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", "2017-01-01",
               "--conf", json.dumps({"window": args.window})]
        cold_env = {**env, "RETRAIN_WARM": "0", "RETRAIN_WORKDIR": os.path.join(tmp, "airflow-cold")}
        cold_s, proc = _timed(dag, cold_env)
        cold_state = re.search(r"state=(\w+)", proc.stderr)
        # The warm runtime as `make airflow` runs it: started with Airflow, before the run.
        sock = os.path.join(env["AIRFLOW_HOME"], "tfx-runtime.sock")
        server = _start_warm(sock)
        try:
            starts_cold, starts_warm = _task_starts(tmp, args.window, sock, args.starts)
            warm_env = {**env, "RETRAIN_WORKDIR": os.path.join(tmp, "airflow-warm")}
            warm_s, proc = _timed(dag, warm_env)
            state = re.search(r"state=(\w+)", proc.stderr)
            served = (warm.ping(sock) or {}).get("served")
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    print(f"DAG parse (DagBag over dags/, median of {len(parses)}): {statistics.median(parses) * 1000:.1f} ms"
          f"  (min {min(parses) * 1000:.1f}, max {max(parses) * 1000:.1f})")
    print(f"TFX-importing DAG floor (import tfx.v1 + create_pipeline): {floor:.1f} s"
          f"  -> {floor / statistics.median(parses):.0f}x our parse time")
    print(f"retrain run (local runner), span 201612, window {args.window}: {local_s:.1f} s")
    print(f"one task's start (a resolver node), median of {args.starts}: cold {statistics.median(starts_cold):.2f} s,"
          f" warm {statistics.median(starts_warm):.2f} s  (cold {', '.join(f'{x:.2f}' for x in starts_cold)};"
          f" warm {', '.join(f'{x:.2f}' for x in starts_warm)})")
    print(f"airflow dags test, every task cold (RETRAIN_WARM=0): {cold_s:.1f} s, run "
          f"{cold_state.group(1) if cold_state else '?'}  -> {cold_s / local_s:.2f}x retrain run")
    print(f"airflow dags test, warm TFX runtime: {warm_s:.1f} s, run {state.group(1) if state else '?'}"
          f" ({served} commands forked)  -> {warm_s / local_s:.2f}x retrain run")


if __name__ == "__main__":
    main()
