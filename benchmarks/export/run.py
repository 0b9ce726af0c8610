"""Export benchmark for the digits model: SavedModel vs TFLite float / dynamic-range / int8
(file size, accuracy on the eval split, single-example latency on this CPU), and what
signing and verifying add to a push.

Uses a pushed digits model under --workdir (runs the pipeline once if there is none).

  .venv/bin/python benchmarks/export/run.py [--workdir work/bench-export] [--latency-runs 500]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import numpy as np

from core import keras_env  # noqa: F401  (before TensorFlow)

CONFIG = os.path.join(REPO, "pipelines", "digits", "config.yaml")


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "bench-export"))
    p.add_argument("--latency-runs", type=int, default=500)
    p.add_argument("--sign-runs", type=int, default=5)
    return p.parse_args(argv)


def _pushed(workdir: str) -> tuple[str, str]:
    """(the newest pushed version folder, the Trainer's SavedModel it came from)."""
    import json

    base = os.path.join(workdir, "serving", "digits")
    if not (os.path.isdir(base) and any(v.isdigit() for v in os.listdir(base))):
        sys.stderr.write(f"[bench] no pushed digits model under {workdir}: running the pipeline once\n")
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "retrain"), "run", "--config", CONFIG,
                        "--workdir", workdir], check=True, stdout=subprocess.DEVNULL)
    version = max(int(v) for v in os.listdir(base) if v.isdigit())
    path = os.path.join(base, str(version))
    with open(os.path.join(path, "assets.extra", "push_info.json")) as f:
        model_uri = json.load(f)["model_uri"]
    return path, os.path.join(model_uri, "Format-Serving")


def _latency_ms(fn, x: np.ndarray, runs: int) -> tuple[float, float]:
    for i in range(20):
        fn(x[i % len(x)][None])
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(x[i % len(x)][None])
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def main(argv=None) -> int:
    args = _args(argv)
    import tensorflow as tf

    from components.tflite_export import executor as tflite
    from serving.repository import signing

    version_dir, saved_model = _pushed(args.workdir)
    root = os.path.join(args.workdir, "pipeline_root", "digits")
    examples = sorted(glob.glob(os.path.join(root, "ImportExampleGen", "examples", "*")))
    eval_files = sorted(f for e in examples for f in glob.glob(os.path.join(e, "Split-eval", "*")))
    train_files = sorted(f for e in examples for f in glob.glob(os.path.join(e, "Split-train", "*")))
    loaded = tf.saved_model.load(saved_model)
    eval_x, eval_y = tflite.transformed_examples(loaded, eval_files, "image_xf", "label_xf")
    rep, _ = tflite.transformed_examples(loaded, train_files, "image_xf", "label_xf", limit=200)
    out = tempfile.mkdtemp(prefix="bench-export-")
    record = tflite.export(saved_model, "pixels", eval_x, eval_y, rep, tflite.VARIANTS, 1.0, out, model=loaded)

    pixels = loaded.signatures["pixels"]
    rows = [("SavedModel", record["saved_model"]["size_bytes"], record["saved_model"]["accuracy"],
             *_latency_ms(lambda x: pixels(tf.constant(x))["probabilities"].numpy(), eval_x, args.latency_runs))]
    for variant in tflite.VARIANTS:
        r = record["variants"][variant]
        with open(os.path.join(out, r["file"]), "rb") as f:
            runner = tflite.Runner(f.read())
        rows.append((f"TFLite {variant}", r["size_bytes"], r["accuracy"], *_latency_ms(runner, eval_x, args.latency_runs)))

    print(f"digits export benchmark: {len(eval_y)} eval examples, int8 calibrated on {len(rep)} training examples, "
          f"{args.latency_runs} single-example calls per model, {os.cpu_count()} cores")
    print(f"{'model':<22} {'size KiB':>9} {'vs SavedModel':>14} {'accuracy':>9} {'p50 ms':>8} {'p99 ms':>8}")
    saved_size = rows[0][1]
    for name, size, acc, p50, p99 in rows:
        print(f"{name:<22} {size / 1024:>9.1f} {size / saved_size:>13.1%} {acc:>9.4f} {p50:>8.3f} {p99:>8.3f}")

    # A push: the atomic copy alone vs with signing; verifying what was pushed.
    from components.atomic_pusher.executor import atomic_copy_dir

    key = signing.generate_key(os.path.join(out, "bench-key.pem"))
    trusted = [signing.public_key_path(key.path)]
    copy_s, signed_s, verify_s = [], [], []
    for i in range(args.sign_runs):
        base = os.path.join(out, f"push-{i}")
        t0 = time.perf_counter()
        atomic_copy_dir(saved_model, base, 1)
        copy_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        signed = atomic_copy_dir(saved_model, base, 2, sign_with=key)
        signed_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        info = signing.verify_version(signed, trusted)
        verify_s.append(time.perf_counter() - t0)
    size = sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(saved_model) for n in ns)
    print()
    print(f"push of the SavedModel ({size / 1024:.0f} KiB, {info['files']} files), median of {args.sign_runs}:")
    print(f"  atomic copy            {np.median(copy_s) * 1000:8.1f} ms")
    print(f"  atomic copy + signing  {np.median(signed_s) * 1000:8.1f} ms  (signing adds "
          f"{(np.median(signed_s) - np.median(copy_s)) * 1000:.1f} ms)")
    print(f"  verifying              {np.median(verify_s) * 1000:8.1f} ms")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
