"""The toolkit's real code paths on CPU: MirroredStrategy over two logical devices, a
two-worker MultiWorkerMirroredStrategy on localhost, mixed precision, BackupAndRestore
resuming a killed job, warm start, and the input pipeline."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.trainer_toolkit import toy_job
from trainer_toolkit import dataset, precision, provenance
from trainer_toolkit.warm_start import warm_start_from


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("toy_data"))
    toy_job.write_data(folder)
    return folder


def _job(data, out, *args, env=None):
    return [sys.executable, "-m", "tests.trainer_toolkit.toy_job", "--data", data, "--out", str(out), *args]


def _run(cmd, env=None, timeout=180) -> dict:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [l for l in proc.stdout.splitlines() if l.startswith("PROVENANCE ")]
    return json.loads(line[len("PROVENANCE "):])


def _serves(serving_dir) -> np.ndarray:
    loaded = tf.saved_model.load(str(serving_dir))
    ex = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[2.0, 2.0, 0.0, 0.0]))}))
    return loaded.signatures["serving_default"](tf.constant([ex.SerializeToString()]))["outputs"].numpy()


def test_mirrored_over_two_logical_cpus(data, tmp_path):
    record = _run(_job(data, tmp_path, "--strategy", "mirrored", "--logical-cpus", "2", "--batch", "8"))
    assert (record["strategy"], record["replicas"], record["devices"]) == ("mirrored", 2, ["/cpu:0", "/cpu:1"])
    assert record["global_batch_size"] == 16  # scales with replicas
    assert record["steps_this_attempt"] == 20 and record["examples_per_sec"] > 0
    # The numbers checked: every step's loss, and the outputs on the eval split's 2 global batches.
    assert record["numerics"]["loss_finite_every_step"] and record["numerics"]["eval_outputs_checked"] == 32
    assert provenance.read(str(tmp_path / "serving")) == record
    assert _serves(tmp_path / "serving").shape == (1, 1)


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_multi_worker_on_localhost_exports_one_model(data, tmp_path):
    ports = _free_ports(2)
    procs = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps({
            "cluster": {"worker": [f"localhost:{p}" for p in ports]}, "task": {"type": "worker", "index": index}})}
        procs.append(subprocess.Popen(
            _job(data, tmp_path, "--steps", "10"), cwd=REPO, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    records = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        records.append(json.loads(next(l for l in out.splitlines() if l.startswith("PROVENANCE "))[11:]))
    assert {(r["strategy"], r["workers"], r["replicas"]) for r in records} == {("multi_worker", 2, 2)}
    assert records[0]["global_batch_size"] == 32
    # One model, written by the chief (worker 0); the other worker's scratch copy is gone.
    assert sorted(os.listdir(tmp_path)) == ["model_run", "serving"]
    assert provenance.read(str(tmp_path / "serving"))["workers"] == 2
    assert _serves(tmp_path / "serving").shape == (1, 1)


def test_an_epochs_budget_trains_on_that_many_passes_over_the_training_split(data, tmp_path):
    """2 epochs of the 512 training examples at batch 16: 64 steps, 1,024 examples seen; with
    the batch allowed to grow while a run exceeds 20 steps, 2 epochs become 16 steps of 64."""
    record = _run(_job(data, tmp_path, "--epochs", "2", "--batch", "16"))
    budget = record["budget"]
    assert budget["available_examples"] == 512 and budget["asked"] == {"epochs": 2}
    assert record["train_steps"] == record["steps_this_attempt"] == 64
    assert record["train_examples"] == 1024 and budget["epochs"] == 2.0
    grown = _run(_job(data, tmp_path / "grown", "--epochs", "2", "--batch", "16", "--max-batch", "64",
                      "--growth-above", "20"))
    assert grown["global_batch_size"] == 64 and grown["steps_this_attempt"] == 16
    assert grown["budget"]["model_batch_size"] == 16 and grown["train_examples"] == 1024


def test_an_exploding_learning_rate_fails_the_trainer_and_exports_nothing(data, tmp_path):
    """Adam at 1e30 overflows the weights within two steps: the loss becomes NaN, the job fails
    naming the step and the learning rate, and no SavedModel is written. With the check off
    the same job exports a model, and its NaN outputs are what the check refuses."""
    proc = subprocess.run(_job(data, tmp_path, "--learning-rate", "1e30"), cwd=REPO, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode != 0
    assert "NumericalInstabilityError: trainer: the training loss became nan at step" in proc.stderr
    assert "(learning rate 1e+30)" in proc.stderr and "no model was exported" in proc.stderr
    assert not (tmp_path / "serving").exists()
    record = _run(_job(data, tmp_path / "unchecked", "--learning-rate", "1e30", "--no-check-numerics"))
    assert record["numerics"] is None and not np.isfinite(record["final_metrics"]["loss"])
    assert np.isnan(_serves(tmp_path / "unchecked" / "serving")).all()


def test_check_outputs_names_the_output_and_counts_what_is_not_finite():
    from trainer_toolkit import training

    inputs = tf.keras.layers.Input(shape=(2,), name="x")
    model = tf.keras.Model(inputs, {"score": tf.keras.layers.Lambda(lambda t: tf.math.log(t))(inputs),
                                    "ok": tf.keras.layers.Lambda(lambda t: t * 2)(inputs)})
    good = tf.data.Dataset.from_tensor_slices(({"x": np.ones((12, 2), np.float32)}, np.zeros(12))).batch(4)
    assert training.check_outputs(model, good, None) == 12
    assert training.check_outputs(model, good, 2) == 8
    # log(-1) is NaN and log(0) is -inf: 3 of the 8 values in the second batch.
    x = np.ones((12, 2), np.float32)
    x[5] = [-1.0, 0.0]
    x[7, 1] = 0.0
    bad = tf.data.Dataset.from_tensor_slices(({"x": x}, np.zeros(12))).batch(4)
    with pytest.raises(training.NumericalInstabilityError, match=r"'score' is NaN or infinite for 3 of 8 values "
                                                                 r"in eval batch 2"):
        training.check_outputs(model, bad, None)


def test_training_budget_plans_steps_batch_and_ceiling():
    from trainer_toolkit.settings import TrainingBudget

    plan = TrainingBudget(epochs=30, max_examples=10_000_000).plan(32, 1, 303, 1024, 5000)
    assert (plan["steps"], plan["per_replica_batch_size"]) == (285, 32)  # the embedded window: unchanged
    big = TrainingBudget(epochs=30, max_examples=10_000_000).plan(32, 1, 7_500_000, 1024, 5000)
    assert big["per_replica_batch_size"] == 1024 and big["steps"] == 9766 and big["epochs"] == 1.333
    two = TrainingBudget(examples=1000).plan(16, 2, None, 0, 1)
    assert (two["steps"], two["per_replica_batch_size"], two["examples"]) == (32, 16, 1024)
    assert TrainingBudget(steps=7).plan(32, 1, None, 1024, 1)["steps"] == 7  # steps are steps
    with pytest.raises(ValueError, match="set exactly one"):
        TrainingBudget.from_custom_config({"training": {"epochs": 1, "steps": 2}})
    with pytest.raises(ValueError, match="train_epochs: must be > 0"):
        TrainingBudget.from_custom_config({"training": {"epochs": 0}})


def test_mixed_float16_uses_loss_scaling_and_float32_outputs(data, tmp_path):
    record = _run(_job(data, tmp_path, "--precision", "mixed_float16", "--steps", "5"))
    assert record["precision_policy"] == "mixed_float16" and record["loss_scaling"] is True
    assert _serves(tmp_path / "serving").dtype == np.float32


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_model_builders_keep_outputs_float32(policy):
    from pipelines.digits import model as digits_model
    from pipelines.taxi import model as taxi_model

    precision.apply_policy(policy)
    try:
        taxi = taxi_model._build_model({"payment_type": 5, "company": 7}, taxi_model.HParams())
        digits = digits_model._build_model(digits_model.HParams())
    finally:
        precision.apply_policy("float32")
    for model in (taxi, digits):
        assert model.layers[-2].compute_dtype in ("float16", "bfloat16")  # the body runs in low precision
        assert model.outputs[0].dtype == tf.float32
        scaled = isinstance(model.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
        assert scaled == (policy == "mixed_float16")  # bf16 has float32's range: no scaling


def test_backup_and_restore_resumes_a_killed_trainer(data, tmp_path):
    backup_root = tmp_path / "backup"
    cmd = _job(data, tmp_path / "out", "--strategy", "one_device", "--steps", "4000",
               "--backup-every", "25", "--backup-root", str(backup_root))
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    # CheckpointManager writes the data and index files, then atomically points the
    # `checkpoint` state file at them; restore reads that file, so it marks a whole checkpoint.
    while not list(backup_root.glob("*/chief/checkpoint")):
        assert proc.poll() is None, "the job ended before its first checkpoint"
        assert time.time() < deadline, "no checkpoint within 120 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # as a node timeout or a lost machine would
    proc.wait()
    assert not (tmp_path / "out" / "serving").exists()

    record = _run(cmd)
    assert record["resumed_from_step"] > 0
    assert record["resumed_from_step"] + record["steps_this_attempt"] == 4000
    assert not any(backup_root.iterdir())  # a finished job leaves no backup behind


def test_warm_start_copies_matching_weights(tmp_path):
    tf.keras.utils.set_random_seed(1)
    old = toy_job.build_model()
    tf.saved_model.save(old, str(tmp_path / "old"))

    tf.keras.utils.set_random_seed(2)
    new = toy_job.build_model()
    report = warm_start_from(new, str(tmp_path / "old"))
    assert report["weights_copied"] == 4 and report["weights_fresh"] == 0
    for a, b in zip(old.weights, new.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # A layer whose shape changed keeps its fresh weights; the others still copy.
    wider = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(32), tf.keras.layers.Dense(1)])
    report = warm_start_from(wider, str(tmp_path / "old"))
    assert report["weights_copied"] == 1 and report["weights_fresh"] == 3  # only the last bias fits
    with pytest.raises(FileNotFoundError, match="no SavedModel variables"):
        warm_start_from(new, str(tmp_path))


def test_input_pipeline_batches_parses_and_keeps_order_when_asked(data):
    files = dataset.list_files([os.path.join(data, "Split-train", "*")])
    spec = {"x": tf.io.FixedLenFeature([4], tf.float32), "y": tf.io.FixedLenFeature([1], tf.int64)}
    opts = dataset.InputOptions(global_batch_size=32, deterministic=True)

    def passes():
        ds = dataset.make_dataset(files, spec, lambda f: ({"x": f["x"]}, f["y"]), opts, repeat=False)
        return [x["x"].numpy() for x, _ in ds]

    first, second = passes(), passes()
    assert [b.shape for b in first] == [(32, 4)] * 16  # 512 rows, parsed per batch
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert dataset.cache_used(files, opts)
    assert not dataset.cache_used(files, dataset.InputOptions(global_batch_size=32, cache_max_bytes=1000))
    with pytest.raises(FileNotFoundError, match="no training input files match"):
        dataset.list_files(["/nonexistent/Split-train/*"])


_DETERMINISTIC_SETUP = r"""
import json, sys
import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # is_op_determinism_enabled: not public in 2.21
from trainer_toolkit import precision, training
from trainer_toolkit.settings import TrainerSettings

probed = []
precision.probe_cpu_bf16_speedup = lambda *a, **k: probed.append(1) or 2.0
session = training.setup(TrainerSettings(deterministic=sys.argv[1] == "1"))
print(json.dumps({"op_determinism": tf_config.is_op_determinism_enabled(), "probed": bool(probed),
                  "policy": session.precision_choice.policy}))
"""


def test_deterministic_training_takes_no_choice_from_a_timing():
    """`trainer.deterministic`: TF's op determinism on, and no precision from the bf16 speed
    probe (a timing, which load changes). In a child process: op determinism is global.
    (test_parallel_runs.py shows the effect: two backfills, identical AUCs.)"""
    out = subprocess.run([sys.executable, "-c", _DETERMINISTIC_SETUP, "1"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["op_determinism"] is True and not got["probed"] and got["policy"] == "float32"


_AUTOGRAPH_PROBE = """
import sys
from core import keras_env
import tf_keras
from tensorflow.python.autograph.impl import conversion
from tests.trainer_toolkit import toy_job
before = conversion.is_allowlisted(tf_keras.Model.train_step)
code = toy_job.main(["--data", sys.argv[1], "--out", sys.argv[2], "--steps", "2"])
print("EXEMPT", before, conversion.is_allowlisted(tf_keras.Model.train_step), code)
"""


def test_a_toolkit_job_leaves_tf_keras_to_graph_mode_as_tensorflow_leaves_keras(data, tmp_path):
    """AutoGraph leaves tf-keras' own code to graph mode, as it leaves `tensorflow` and
    `keras`, before and after a toolkit job's fit (TensorFlow 2.21's own rule; under TF 2.16
    core.keras_env had to add it), or a job's first fit spends seconds rewriting Keras."""
    out = subprocess.run([sys.executable, "-c", _AUTOGRAPH_PROBE, data, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "EXEMPT True True 0", out.stdout[-2000:]
