"""Benchmark: what the model tests add to a steady taxi run, in one invocation.

A steady run is the next scheduled one: span 2016-11 was run before (and pushed), 2016-12
arrives. From one prepared workdir, copies run span 2016-12 alternately with the model
tests on (the simple baseline fitted and scored, the served model's staleness, quality
across groups, permutation importance: the config as shipped) and off (all four disabled),
`--repeats` times each. Prints the wall time of each run and of the Trainer and Evaluator
nodes, the medians and the overhead; `--tuning-trial N` also times `retrain tune` with N
trials of the default length (the search's seconds, per trial).

    .venv/bin/python benchmarks/model_tests/run.py [--repeats 3] [--tuning-trial 3]
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(REPO, "pipelines", "taxi", "config.yaml")
RETRAIN = os.path.join(REPO, ".venv", "bin", "retrain")
OFF = ["--set", "simple_baseline.enabled=false", "--set", "simple_baseline.reason=benchmark without model tests",
       "--set", "staleness.enabled=false", "--set", "fairness.enabled=false", "--set", "importance.enabled=false"]


def run(workdir: str, span: int, extra: list[str]) -> dict:
    start = time.perf_counter()
    out = subprocess.run([RETRAIN, "run", "--config", CONFIG, "--span", str(span), "--workdir", workdir, "--json",
                          *extra], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"retrain run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    nodes = summary.get("nodes") or {}
    return {"wall_s": wall, "outcome": summary["outcome"],
            **{f"{n}_s": (nodes.get(n) or {}).get("seconds") for n in ("Trainer", "Evaluator", "Transform")}}


def tuning_trials(base: str, trials: int) -> None:
    """Times `retrain tune` (TRIALS trials) on span 201612: the Tuner node and each trial."""
    work = base + "-tune"
    shutil.copytree(base, work, symlinks=True)
    start = time.perf_counter()
    out = subprocess.run([RETRAIN, "tune", "--config", CONFIG, "--span", "201612", "--workdir", work, "--json",
                          "--trials", str(trials)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"retrain tune failed ({out.returncode}):\n{out.stderr[-3000:]}")
    node = (json.loads(out.stdout).get("nodes") or {}).get("Tuner") or {}
    [record] = glob.glob(os.path.join(work, "**", "tuning.json"), recursive=True) or [None]
    tuning = json.load(open(record)) if record else {}
    steps = tuning.get("trial_steps") or "the default (min(200, train_steps))"
    print(f"  tuning: {trials} trials of {steps} steps: run wall {wall:.1f} s, Tuner node {node.get('seconds')} s,"
          f" search {tuning.get('seconds')} s, {(tuning.get('seconds') or 0) / trials:.2f} s per trial", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tuning-trial", type=int, metavar="TRIALS", default=0,
                        help="also time a search of TRIALS trials (`retrain tune`, default trial length)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="model-tests-bench-") as tmp:
        base = os.path.join(tmp, "base")
        print("preparing: span 201611 run once (the served model of the steady run)", flush=True)
        run(base, 201611, [])
        results = {"with": [], "without": []}
        for i in range(args.repeats):
            for name, extra in (("with", []), ("without", OFF)):
                work = os.path.join(tmp, f"{name}-{i}")
                shutil.copytree(base, work, symlinks=True)
                r = run(work, 201612, extra)
                results[name].append(r)
                print(f"  {name:8s} #{i + 1}: wall {r['wall_s']:.1f} s, Transform {r['Transform_s']} s,"
                      f" Trainer {r['Trainer_s']} s, Evaluator {r['Evaluator_s']} s ({r['outcome']})", flush=True)
                shutil.rmtree(work, ignore_errors=True)
        if args.tuning_trial:
            tuning_trials(base, args.tuning_trial)
    print("\nmedian of", args.repeats, "runs each   with tests   without   overhead")
    for key in ("wall_s", "Transform_s", "Trainer_s", "Evaluator_s"):
        w = statistics.median(r[key] for r in results["with"] if r[key] is not None)
        o = statistics.median(r[key] for r in results["without"] if r[key] is not None)
        print(f"  {key[:-2]:22s} {w:10.1f} s {o:8.1f} s   {w - o:+6.1f} s ({100 * (w / o - 1):+.0f}%)")


if __name__ == "__main__":
    main()
