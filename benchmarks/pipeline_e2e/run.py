"""Benchmark: one full run of our taxi pipeline vs TFX's stock taxi example, same machine.

Prints wall time and peak memory (max RSS of the run's process; Beam in_memory runs
in-process, multi_processing workers are not counted) for:
  - ours, cold:   a fresh store; `retrain run` backfills the window, then runs span 2016-12
  - ours, steady: the next scheduled run; span 2016-11 was run before, 2016-12 arrives
  - stock:        tfx.examples.chicago_taxi_pipeline.taxi_pipeline_native_keras with
                  LocalDagRunner on the whole taxi CSV (TF_USE_LEGACY_KERAS=1), in each
                  Beam direct running mode asked for
and the ratios ours/stock. Each run is a fresh Python process (imports included).

    .venv/bin/python benchmarks/pipeline_e2e/run.py [--stock-modes in_memory,multi_processing]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_STOCK = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
# Beam 2.78's DirectRunner would first try to download Prism (no network here): skipped, as
# in our runs, so both sides run the same Python DirectRunner (runner/beam_fixes.py, fix 3).
from runner import beam_fixes
beam_fixes.no_prism()
from tfx.examples.chicago_taxi_pipeline import taxi_pipeline_native_keras as stock
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
root, mode = sys.argv[1], sys.argv[2]
here = os.path.dirname(stock.__file__)
LocalDagRunner().run(stock._create_pipeline(
    pipeline_name="stock_taxi",
    pipeline_root=os.path.join(root, "pipeline_root"),
    data_root=os.path.join(here, "data", "simple"),
    module_file=os.path.join(here, "taxi_utils_native_keras.py"),
    serving_model_dir=os.path.join(root, "serving"),
    metadata_path=os.path.join(root, "metadata.sqlite"),
    beam_pipeline_args=[f"--direct_running_mode={mode}", "--direct_num_workers=0"]))
assert os.listdir(os.path.join(root, "serving")), "stock example pushed nothing"
"""


def _measure(cmd: list[str], label: str) -> dict:
    """Runs a command to completion; returns wall seconds and the process's peak RSS."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            out.seek(0)
            tail = out.read().decode(errors="replace")[-3000:]
            raise SystemExit(f"{label} failed:\n{tail}")
        out.seek(0)
        text = out.read().decode(errors="replace")
    return {"label": label, "seconds": round(seconds, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024), "output": text}


def _retrain(workdir: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "retrain.cli", "run", "--json", "--workdir", workdir, *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stock-modes", default="in_memory,multi_processing")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        cold = _measure(_retrain(os.path.join(tmp, "cold")), "ours, cold (backfill + span 201612)")
        results.append(cold)
        steady_dir = os.path.join(tmp, "steady")
        sys.stderr.write("preparing the steady-state store (span 201611)...\n")
        _measure(_retrain(steady_dir, "--span", "201611"), "prep")
        steady = _measure(_retrain(steady_dir, "--span", "201612"), "ours, steady (span 201612 arrives)")
        results.append(steady)
        for r in (cold, steady):
            summary = json.loads(r["output"][r["output"].index("{"):])
            r["outcome"] = summary["outcome"]
            r["nodes"] = {k: v["seconds"] for k, v in summary["nodes"].items() if v["seconds"] >= 1}
        for mode in [m for m in args.stock_modes.split(",") if m]:
            results.append(
                _measure([sys.executable, "-c", _STOCK, os.path.join(tmp, f"stock-{mode}"), mode], f"stock, {mode}")
            )
    print(f"{'run':<42}{'wall s':>8}{'peak MiB':>10}")
    for r in results:
        print(f"{r['label']:<42}{r['seconds']:>8}{r['peak_rss_mib']:>10}")
    for r in results[:2]:
        print(f"  {r['label']}: outcome {r['outcome']}; nodes over 1 s: {r['nodes']}")
    for stock in results[2:]:
        for ours in results[:2]:
            print(
                f"ratio {ours['label'].split(' (')[0]} / {stock['label']}: "
                f"time {ours['seconds'] / stock['seconds']:.2f}, memory {ours['peak_rss_mib'] / stock['peak_rss_mib']:.2f}"
            )


if __name__ == "__main__":
    main()
