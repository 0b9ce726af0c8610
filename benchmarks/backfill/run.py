"""Benchmark: a backfill of N months through Airflow, today's mode vs the cluster mode.

    .venv-airflow/bin/python benchmarks/backfill/run.py [--months 12] [--first 2013-03]
                                                       [--train-steps 50] [--window 2] [--max-active-runs 4]

In one invocation, on the embedded taxi months and the shipped pipeline config:
  A. standalone: SQLite ML Metadata and SQLite Airflow DB, the DAG one task and one run at
     a time (what `make demo` does: `airflow dags test`, month after month), tasks forked
     from a warm TFX runtime started beforehand;
  B. cluster: `scripts/airflow.sh cluster-start` (PostgreSQL, CeleryExecutor + Redis, two
     workers, the host's warm TFX runtime), ML Metadata on MariaDB, `airflow backfill create
     --max-active-runs N`.
Prints each mode's wall time, per month and in total, the ratio, and whether both modes
decided the same (outcome and window per month, pushes in month order).
"""

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
AIRFLOW_SH = os.path.join(REPO, "scripts", "airflow.sh")
SERVICES = os.path.join(REPO, "scripts", "services.sh")
sys.path.insert(0, REPO)

from task_host import spawn  # noqa: E402  (TF-free: runs in the Airflow environment too)


def months(first: str, n: int) -> list[dt.date]:
    year, month = map(int, first.split("-"))
    out = []
    for _ in range(n):
        out.append(dt.date(year, month, 1))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def say(text: str) -> None:
    print(text, flush=True)


def summaries(work: str, env: dict) -> dict[int, dict]:
    """span -> the run's summary (outcome, window, pushed version), from its run folder."""
    out = {}
    root = os.path.join(work, "runs", "taxi")
    for run in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        proc = subprocess.run([TFX_PYTHON, "-m", "retrain.cli", "summary", "--run-dir", os.path.join(root, run),
                               "--json"], capture_output=True, text=True, env=env, cwd=REPO)
        if proc.stdout.startswith("{"):
            s = json.loads(proc.stdout)
            out[s["span"]] = {"outcome": s["outcome"], "window": s.get("window_spans"),
                              "version": (s.get("pushed") or {}).get("version")}
    return out


def standalone(spans: list[dt.date], root: str, conf: dict) -> tuple[float, list[float], dict]:
    env = {**os.environ, "AIRFLOW_HOME": os.path.join(root, "airflow"), "RETRAIN_WORKDIR": os.path.join(root, "work"),
           "RETRAIN_TFX_PYTHON": TFX_PYTHON}
    env.pop("RETRAIN_METADATA_URL", None)
    # The warm TFX runtime as `make airflow` has it: running before the first run (not
    # counted, like the cluster's start); each `test-dag` finds it instead of starting one.
    os.makedirs(env["AIRFLOW_HOME"], exist_ok=True)
    sock = os.path.join(env["AIRFLOW_HOME"], "tfx-runtime.sock")
    t0 = time.monotonic()
    warm_runtime = spawn.start_warm_runtime(sock, TFX_PYTHON, env=env, cwd=REPO)
    say(f"  warm TFX runtime up in {time.monotonic() - t0:.0f} s (not counted)")
    try:
        return _standalone_months(spans, env, conf)
    finally:
        spawn.stop(warm_runtime)


def _standalone_months(spans: list[dt.date], env: dict, conf: dict) -> tuple[float, list[float], dict]:
    per_month, start = [], time.monotonic()
    for i, month in enumerate(spans, 1):
        t = time.monotonic()
        logical = months(month.strftime("%Y-%m"), 2)[1]  # the run at the start of M+1 ingests M
        proc = subprocess.run([AIRFLOW_SH, "test-dag", logical.isoformat(), "--conf", json.dumps(conf)], env=env,
                              capture_output=True, text=True)
        state = re.search(r"state=(\w+)", proc.stderr)
        per_month.append(time.monotonic() - t)
        say(f"  standalone {month:%Y%m}: {per_month[-1]:6.1f} s  {state.group(1) if state else 'rc=' + str(proc.returncode)}"
            f"  ({i}/{len(spans)})")
    return time.monotonic() - start, per_month, summaries(env["RETRAIN_WORKDIR"], env)


def cluster(spans: list[dt.date], root: str, conf: dict, max_active_runs: int) -> tuple[float, dict, dict]:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_HOME"}
    env.update(AIRFLOW_CLUSTER_HOME=os.path.join(root, "airflow"), AIRFLOW_PORT="18097",
               RETRAIN_WORKDIR=os.path.join(root, "work"), RETRAIN_MLMD_DATABASE="bench_backfill",
               RETRAIN_AIRFLOW_DATABASE="airflow_bench", RETRAIN_REDIS_DB="2", RETRAIN_TFX_PYTHON=TFX_PYTHON,
               RETRAIN_SCHEDULE="monthly")  # `airflow backfill` replays calendar months
    subprocess.run([SERVICES, "mariadb-db", "bench_backfill"], check=True, env=env, capture_output=True)
    subprocess.run([SERVICES, "postgres-db", "airflow_bench"], check=True, env=env, capture_output=True)
    t0 = time.monotonic()
    subprocess.run([AIRFLOW_SH, "cluster-start"], env=env, check=True, capture_output=True, text=True)
    say(f"  cluster up in {time.monotonic() - t0:.0f} s (not counted)")

    def airflow(*args) -> str:
        return subprocess.run([AIRFLOW_SH, "cluster-airflow", *args], env=env, capture_output=True, text=True).stdout

    try:
        while "taxi_retraining" not in airflow("dags", "list", "-o", "plain"):
            time.sleep(2)
        airflow("dags", "unpause", "taxi_retraining")
        start = time.monotonic()
        airflow("backfill", "create", "--dag-id", "taxi_retraining", "--from-date", spans[0].isoformat(),
                "--to-date", spans[-1].isoformat(), "--max-active-runs", str(max_active_runs),
                "--dag-run-conf", json.dumps(conf))
        done: dict[str, float] = {}
        while len(done) < len(spans):
            out = airflow("dags", "list-runs", "taxi_retraining", "-o", "json")
            rows = [line for line in out.splitlines() if line.startswith("[{")]
            for r in json.loads(rows[-1]) if rows else []:
                if r["run_id"].startswith("backfill__") and r["state"] in ("success", "failed") and r["run_id"] not in done:
                    done[r["run_id"]] = time.monotonic() - start
                    say(f"  cluster {r['run_id']}: {r['state']} after {done[r['run_id']]:6.1f} s ({len(done)}/{len(spans)})")
            time.sleep(5)
        total = time.monotonic() - start
        exports = subprocess.run([SERVICES, "env"], env=env, capture_output=True, text=True).stdout
        password = next(line.split("=", 1)[1].strip("'") for line in exports.splitlines() if "METADATA_PASSWORD" in line)
        mlmd = {**env, "RETRAIN_METADATA_URL": "mysql://retrain@127.0.0.1:13306/bench_backfill",
                "RETRAIN_METADATA_PASSWORD": password}
        return total, done, summaries(env["RETRAIN_WORKDIR"], mlmd)
    finally:
        subprocess.run([AIRFLOW_SH, "cluster-stop"], env={**env, "KEEP_SERVICES": "1"}, capture_output=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--months", type=int, default=12)
    p.add_argument("--first", default="2013-03", help="first month, YYYY-MM (2013: ~170-200 trips a month)")
    p.add_argument("--train-steps", type=int, default=50)
    p.add_argument("--window", type=int, default=2)
    p.add_argument("--max-active-runs", type=int, default=4)
    p.add_argument("--skip-standalone", action="store_true")
    args = p.parse_args()
    spans = months(args.first, args.months)
    conf = {"train_steps": args.train_steps, "window": args.window}
    say(f"backfill of {len(spans)} months {spans[0]:%Y%m}..{spans[-1]:%Y%m}, conf {conf}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as root:
        subprocess.run([SERVICES, "start"], check=True, capture_output=True)
        a_total, a_months, a_runs = (None, [], {}) if args.skip_standalone else standalone(spans, os.path.join(root, "a"), conf)
        b_total, b_runs_done, b_runs = cluster(spans, os.path.join(root, "b"), conf, args.max_active_runs)
    say("")
    say("| mode | ML Metadata | Airflow | concurrency | wall time | per month |")
    say("|---|---|---|---|---|---|")
    if a_total is not None:
        say(f"| standalone (today) | SQLite | SQLite, `airflow dags test` | 1 task, 1 run | {a_total:.0f} s "
            f"| {a_total / len(spans):.0f} s |")
    say(f"| cluster | MariaDB | PostgreSQL, Celery x2 workers | {args.max_active_runs} runs | {b_total:.0f} s "
        f"| {b_total / len(spans):.0f} s |")
    if a_total is not None:
        say(f"\ncluster / standalone wall time: {b_total / a_total:.2f}  (speed-up {a_total / b_total:.2f}x)")
        same = {s: (r["outcome"], r["window"]) for s, r in a_runs.items()} == \
               {s: (r["outcome"], r["window"]) for s, r in b_runs.items()}
        order = lambda runs: [s for s, r in sorted(runs.items(), key=lambda x: int(x[1]["version"] or 0)) if r["version"]]  # noqa: E731
        say(f"same outcomes and windows per month: {same}; pushes in month order: standalone "
            f"{order(a_runs) == sorted(order(a_runs))}, cluster {order(b_runs) == sorted(order(b_runs))}")
        for s in sorted(set(a_runs) | set(b_runs)):
            say(f"  {s}: standalone {a_runs.get(s)}  cluster {b_runs.get(s)}")
    sys.exit(0)


if __name__ == "__main__":
    main()
