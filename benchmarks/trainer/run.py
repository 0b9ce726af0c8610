"""Trainer throughput: the real input pipeline vs in-memory tensors, float32 vs mixed precision.

For each model, the same network is trained twice per precision policy, through the trainer
toolkit's session and `Model.fit`:
  real       TFRecord files -> interleave -> batch -> parse -> Transform graph -> cache -> prefetch
             (exactly what the pipeline's Trainer runs)
  in-memory  one already-transformed batch repeated from memory (the input costs nothing)
real / in-memory near 1 means training is compute-bound, well below 1 that the input
pipeline starves the device.

Models: taxi and digits train on the Transform output of a pipeline run (made once under
--workdir with `retrain run` if missing); synthetic64 (resnet_small on generated 64x64 PNGs)
and resnet50 (ResNet-50 on generated 224x224 PNGs; slow on CPU, not in the default list)
need only TensorFlow.

  .venv/bin/python benchmarks/trainer/run.py [--models taxi,digits,synthetic64] [--device cpu]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)  # run as a script from anywhere

from core import keras_env  # noqa: F401  (before TensorFlow: Keras 2, AutoGraph's rules)

PIPELINE_MODELS = {"taxi": "CsvExampleGen", "digits": "ImportExampleGen"}
SYNTHETIC = {"synthetic64": (64, "resnet_small", 2048), "resnet50": (224, "resnet50", 256)}


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="taxi,digits,synthetic64")
    p.add_argument("--precisions", default="float32,auto", help="auto = what the toolkit picks here")
    p.add_argument("--device", choices=["cpu", "auto"], default="auto", help="cpu hides GPUs")
    p.add_argument("--steps", type=int, default=0, help="steps per measurement (default per model)")
    p.add_argument("--repeats", type=int, default=2, help="best of N fits per figure")
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "bench-trainer"))
    p.add_argument("--json", help="also write the figures to this file")
    return p.parse_args(argv)


def _pipeline_artifacts(model: str, workdir: str) -> tuple[str, list[str]]:
    """(transform graph dir, train files) of a pipeline run under workdir; runs one if needed."""
    root = os.path.join(workdir, "pipeline_root", model)
    graphs = sorted(glob.glob(os.path.join(root, "Transform", "transform_graph", "*")), key=os.path.getmtime)
    if not graphs:
        sys.stderr.write(f"[bench] no {model} Transform output under {workdir}: running the pipeline once\n")
        subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "retrain"), "run", "--config",
             os.path.join(REPO, "pipelines", model, "config.yaml"), "--workdir", workdir],
            check=True, stdout=subprocess.DEVNULL,
        )
        graphs = sorted(glob.glob(os.path.join(root, "Transform", "transform_graph", "*")), key=os.path.getmtime)
    files = sorted(glob.glob(os.path.join(root, PIPELINE_MODELS[model], "examples", "*", "Split-train", "*")))
    return graphs[-1], files


def _write_synthetic_images(folder: str, size: int, count: int) -> list[str]:
    """PNG tf.Examples of class-dependent stripes plus noise (generated; nothing downloaded)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    files = []
    per_file = max(count // 4, 1)
    for f in range(4):
        path = os.path.join(folder, f"images-{size}-{f}.tfrecord.gz")
        files.append(path)
        if os.path.exists(path):
            continue
        with tf.io.TFRecordWriter(path + ".tmp", options="GZIP") as w:
            for _ in range(per_file):
                label = int(rng.integers(10))
                base = np.sin(np.arange(size) * (label + 1) * np.pi / size)[None, :] * 100 + 128
                image = np.clip(base + rng.normal(0, 30, (size, size)), 0, 255).astype(np.uint8)[..., None]
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                })).SerializeToString())
        os.rename(path + ".tmp", path)
    return files


def _job(model: str, workdir: str):
    """(build_model, files, feature_spec, transform, per-replica batch, default steps)."""
    import tensorflow as tf

    if model == "taxi":
        import tensorflow_transform as tft

        from pipelines.taxi import model as taxi

        graph, files = _pipeline_artifacts(model, workdir)
        tft_output = tft.TFTransformOutput(graph)
        hp = taxi.HParams(batch_size=32)
        return (lambda: taxi.build_model(tft_output, hp), files, tft_output.raw_feature_spec(),
                taxi.transform_fn(tft_output), hp.batch_size, 3000)
    if model == "digits":
        import tensorflow_transform as tft

        from pipelines.digits import model as digits

        graph, files = _pipeline_artifacts(model, workdir)
        tft_output = tft.TFTransformOutput(graph)
        hp = digits.HParams()
        return (lambda: digits._build_model(hp), files, tft_output.raw_feature_spec(),
                digits.transform_fn(tft_output), hp.batch_size, 1000)
    from pipelines.digits import model as digits
    from pipelines.digits.preprocessing import decode_images

    size, arch, count = SYNTHETIC[model]
    files = _write_synthetic_images(os.path.join(workdir, "synthetic"), size, count)
    hp = digits.HParams(architecture=arch, image_size=size)
    spec = {"image": tf.io.FixedLenFeature([1], tf.string), "label": tf.io.FixedLenFeature([1], tf.int64)}

    def transform(raw):
        images = (decode_images(raw["image"], size) - 0.5) / 0.25
        return {"image_xf": images}, tf.reshape(raw["label"], [-1])

    return (lambda: digits._build_model(hp, input_size=size), files, spec, transform, 32,
            60 if model == "synthetic64" else 8)


def _measure(model: str, precision_name: str, steps: int, workdir: str, repeats: int) -> dict:
    import tensorflow as tf

    from trainer_toolkit import dataset, training
    from trainer_toolkit.settings import TrainerSettings

    session = training.setup(TrainerSettings(precision=precision_name, backup_every_steps=0, tensorboard=False))
    build, files, spec, transform, batch, default_steps = _job(model, workdir)
    steps = steps or default_steps
    options = session.input_options(batch, seed=0)
    real = dataset.make_dataset(files, spec, transform, options)
    one_batch = next(iter(real))
    in_memory = tf.data.Dataset.from_tensors(one_batch).repeat()
    out = {"model": model, "precision": session.precision_choice.policy, "strategy": session.strategy_choice.name,
           "replicas": session.replicas, "global_batch": options.global_batch_size, "steps": steps}
    for _ in range(repeats):
        for name, ds in (("real", real), ("in_memory", in_memory)):
            tf.keras.utils.set_random_seed(0)
            net = session.build(build)
            meter = training.Progress(steps, options.global_batch_size, every=10**9)
            start = time.perf_counter()
            net.fit(ds, steps_per_epoch=steps, callbacks=[meter], verbose=0)
            rate = round(meter.examples_per_sec(), 1)
            if rate > out.get(f"{name}_examples_per_sec", 0):
                out[f"{name}_examples_per_sec"] = rate
                out[f"{name}_wall_s"] = round(time.perf_counter() - start, 2)
    out["real_over_in_memory"] = round(out["real_examples_per_sec"] / out["in_memory_examples_per_sec"], 2)
    return out


def main(argv=None) -> int:
    args = _args(argv)
    import tensorflow as tf

    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    from trainer_toolkit import hardware

    hw = hardware.detect()
    device = ", ".join(g.name for g in hw.gpus) if hw.gpus else f"CPU ({os.cpu_count()} cores)"
    print(f"trainer benchmark on {device}, TensorFlow {tf.__version__}")
    rows = []
    for model in args.models.split(","):
        for precision_name in args.precisions.split(","):
            rows.append(_measure(model, precision_name, args.steps, args.workdir, args.repeats))
            r = rows[-1]
            print(f"  {r['model']:<12} {r['precision']:<15} real {r['real_examples_per_sec']:>9.1f} ex/s   "
                  f"in-memory {r['in_memory_examples_per_sec']:>9.1f} ex/s   ratio {r['real_over_in_memory']:.2f}",
                  flush=True)
    print()
    print(f"{'model':<12} {'precision':<15} {'batch':>5} {'steps':>5} {'real ex/s':>10} {'in-mem ex/s':>12} {'real/in-mem':>11}")
    for r in rows:
        print(f"{r['model']:<12} {r['precision']:<15} {r['global_batch']:>5} {r['steps']:>5} "
              f"{r['real_examples_per_sec']:>10.1f} {r['in_memory_examples_per_sec']:>12.1f} {r['real_over_in_memory']:>11.2f}")
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["precision"]] = r["real_examples_per_sec"]
    for model, figures in by_model.items():
        if "float32" in figures and len(figures) > 1:
            for policy, value in figures.items():
                if policy != "float32":
                    print(f"{model}: {policy} / float32 (real input) = {value / figures['float32']:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": device, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
