"""Trainer throughput of two TFX runtimes side by side: the same toolkit CPU benchmark
(benchmarks/trainer/run.py) run by each runtime's own checkout and interpreter, one after the
other in one invocation, and the examples/s of each figure with the new/old ratio.

    python3 benchmarks/trainer/compare_runtimes.py --old /path/to/old-checkout [--models taxi,synthetic64]

Each checkout is a clone of this repo with its own `.venv` built by its own `make venv`
(e.g. `git worktree add ../old 71cf2ac`, TFX 1.16 / TF 2.16 / Python 3.10). Runs on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(checkout: str, models: str, steps: int, repeats: int, workdir: str) -> dict:
    python = os.path.join(checkout, ".venv", "bin", "python")
    out = os.path.join(workdir, "figures.json")
    cmd = [python, os.path.join(checkout, "benchmarks", "trainer", "run.py"), "--models", models, "--device", "cpu",
           "--repeats", str(repeats), "--workdir", workdir, "--json", out]
    if steps:
        cmd += ["--steps", str(steps)]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=checkout, check=True)
    versions = subprocess.run([python, "-c", "import sys, tensorflow as tf; print(tf.__version__, sys.version.split()[0])"],
                              cwd=checkout, capture_output=True, text=True, check=True).stdout.split()
    return {"figures": json.load(open(out)), "tensorflow": versions[0], "python": versions[1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the other runtime's checkout (with its .venv)")
    p.add_argument("--new", default=REPO, help="this checkout (default)")
    p.add_argument("--models", default="taxi,synthetic64")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
        for name, checkout in (("old", args.old), ("new", args.new)):
            results[name] = _run(checkout, args.models, args.steps, args.repeats, os.path.join(tmp, name))
    old, new = results["old"], results["new"]
    print(f"\nold: TensorFlow {old['tensorflow']}, Python {old['python']}   "
          f"new: TensorFlow {new['tensorflow']}, Python {new['python']}   (CPU: {new['figures']['device']})")
    print(f"{'model':<12} {'precision':<16} {'input':<10} {'old ex/s':>10} {'new ex/s':>10} {'new/old':>8}")
    # The same models x precisions, in the same order (run.py's loop).
    for o, r in zip(old["figures"]["rows"], new["figures"]["rows"]):
        assert o["model"] == r["model"], (o["model"], r["model"])
        for col, label in (("real_examples_per_sec", "real"), ("in_memory_examples_per_sec", "in-memory")):
            if col in r and col in o:
                print(f"{r['model']:<12} {r['precision']:<16} {label:<10} {o[col]:>10.1f} {r[col]:>10.1f} "
                      f"{r[col] / o[col]:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
