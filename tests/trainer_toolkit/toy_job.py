"""A small training job run through the trainer toolkit in its own process.

The tests start it as a subprocess because strategy set-up (logical CPU devices, a
multi-worker cluster) must happen before TensorFlow's runtime starts, once per process.

  python -m tests.trainer_toolkit.toy_job --data DIR --out DIR [--strategy mirrored]
      [--logical-cpus 2] [--precision float32] [--steps 20] [--backup-every 0]
      [--learning-rate 0.01] [--no-check-numerics] [--write-data]
"""

import argparse
import json
import os
import sys

from core import keras_env  # noqa: F401  (before TensorFlow)

FEATURE_SPEC_DIM = 4


def write_data(folder: str, rows: int = 512, files: int = 4) -> None:
    """Gzipped TFRecords of tf.Examples, split like ExampleGen's output: label = x0 + x1 > 0."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for split in ("train", "eval"):
        os.makedirs(os.path.join(folder, f"Split-{split}"), exist_ok=True)
        for i in range(files):
            path = os.path.join(folder, f"Split-{split}", f"data_tfrecord-{i:05d}-of-{files:05d}.gz")
            with tf.io.TFRecordWriter(path, options="GZIP") as w:
                for _ in range(rows // files):
                    x = rng.normal(size=FEATURE_SPEC_DIM).astype("float32")
                    ex = tf.train.Example(features=tf.train.Features(feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x[0] + x[1] > 0)])),
                    }))
                    w.write(ex.SerializeToString())


def build_model(learning_rate: float = 0.01):
    import tensorflow as tf

    inp = tf.keras.layers.Input(shape=(FEATURE_SPEC_DIM,), name="x")
    hidden = tf.keras.layers.Dense(16, activation="relu")(inp)
    out = tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32")(hidden)
    model = tf.keras.Model(inp, out)
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--precision", default="float32")
    p.add_argument("--logical-cpus", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--epochs", type=float, help="an epochs budget (TrainingBudget) instead of --steps")
    p.add_argument("--max-batch", type=int, default=0, help="trainer.max_batch_size")
    p.add_argument("--growth-above", type=int, default=5000, help="trainer.batch_growth_above_steps")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=0.01)
    p.add_argument("--no-check-numerics", action="store_true")
    p.add_argument("--backup-every", type=int, default=0)
    p.add_argument("--backup-root")
    p.add_argument("--write-data", action="store_true")
    args = p.parse_args(argv)
    if args.write_data:
        write_data(args.data)
        return 0

    import tensorflow as tf

    if args.logical_cpus:
        [cpu] = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)

    from trainer_toolkit import settings as settings_lib
    from trainer_toolkit import training

    settings = settings_lib.TrainerSettings(
        strategy=args.strategy, precision=args.precision, backup_every_steps=args.backup_every,
        backup_root=args.backup_root, log_every_steps=10, max_batch_size=args.max_batch,
        batch_growth_above_steps=args.growth_above, check_numerics=not args.no_check_numerics,
    )
    session = training.setup(settings)
    train_files = [os.path.join(args.data, "Split-train", "*")]
    budget = {"steps": args.steps} if args.epochs is None else {"epochs": args.epochs}
    plan = training.plan_training(session, argparse.Namespace(custom_config={"training": budget},
                                                              train_files=train_files, train_steps=None), args.batch)
    spec = {"x": tf.io.FixedLenFeature([FEATURE_SPEC_DIM], tf.float32), "y": tf.io.FixedLenFeature([1], tf.int64)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(serialized):
        return {"outputs": model_ref[0](tf.io.parse_example(serialized, {"x": spec["x"]})["x"])}

    model_ref = []

    def build():
        model_ref.append(build_model(args.learning_rate))
        return model_ref[0]

    record = training.train_and_export(
        session,
        build_model=build,
        spec=training.FitSpec(
            train_files=train_files,
            eval_files=[os.path.join(args.data, "Split-eval", "*")],
            feature_spec=spec,
            transform=lambda f: ({"x": f["x"]}, f["y"]),
            per_replica_batch_size=plan["per_replica_batch_size"],
            train_steps=plan["steps"],
            budget=plan,
            eval_steps=2,
            model_run_dir=os.path.join(args.out, "model_run"),
            serving_model_dir=os.path.join(args.out, "serving"),
            seed=1,
        ),
        signatures=lambda model: {"serving_default": serve},
    )
    sys.stdout.write("PROVENANCE " + json.dumps(record) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
