"""Benchmark: Airflow's overhead for the taxi pipeline.

Prints, from one invocation:
  - DAG parse time of dags/ (Airflow's DagBag, median of N parses in fresh processes),
    beside the floor a DAG file importing TFX would pay: `from tfx import v1` plus
    create_pipeline() in the TFX runtime (the AirflowDagRunner route does at least this);
  - wall time of one DAG run through Airflow (`airflow dags test`, every node a task in
    the TFX runtime) vs `retrain run` on the same span and data, each from a fresh store,
    and their ratio (Airflow's overhead).

    .venv-airflow/bin/python benchmarks/orchestration/run.py [--parses 5] [--window 6]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parses", type=int, default=5)
    parser.add_argument("--window", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AIRFLOW_HOME": os.path.join(tmp, "airflow")}
        parses = [float(_timed([AF_PYTHON, "-c", _PARSE, os.path.join(REPO, "dags")], env)[1].stdout.split()[-1])
                  for _ in range(args.parses)]
        floor = float(_timed([TFX_PYTHON, "-c", _TFX_FLOOR])[1].stdout.split()[-1])

        local_s, _ = _timed([TFX_PYTHON, "-m", "retrain.cli", "run", "--json", "--span", "201612",
                             "--window", str(args.window), "--workdir", os.path.join(tmp, "local")])
        af_env = {**env, "RETRAIN_WORKDIR": os.path.join(tmp, "airflow-work")}
        airflow_s, proc = _timed([os.path.join(REPO, "scripts", "airflow.sh"), "test-dag", "2017-01-01",
                                  "--conf", json.dumps({"window": args.window})], af_env)
        state = re.search(r"state=(\w+)", proc.stderr)
    print(f"DAG parse (DagBag over dags/, median of {len(parses)}): {statistics.median(parses) * 1000:.1f} ms"
          f"  (min {min(parses) * 1000:.1f}, max {max(parses) * 1000:.1f})")
    print(f"TFX-importing DAG floor (import tfx.v1 + create_pipeline): {floor:.1f} s"
          f"  -> {floor / statistics.median(parses):.0f}x our parse time")
    print(f"retrain run (local runner), span 201612, window {args.window}: {local_s:.1f} s")
    print(f"airflow dags test (one task per node), same span: {airflow_s:.1f} s, run {state.group(1) if state else '?'}")
    print(f"ratio airflow / local: {airflow_s / local_s:.2f}")


if __name__ == "__main__":
    main()
