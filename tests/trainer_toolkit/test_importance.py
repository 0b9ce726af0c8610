"""Permutation importance's known answers, and a pure-noise feature flagged on a trained model."""

import math

import numpy as np
import pytest
import tensorflow as tf

from core import tasks
from core.settings import SettingsError
from trainer_toolkit import heads, importance


def test_known_answers_of_the_rise_and_its_interval():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=200), rng.normal(size=200)
    y = 2 * a

    def predict(x):
        return 2 * x["a"]  # ignores b

    def loss(labels, p):
        return (p - labels) ** 2

    rows = {r["input"]: r for r in importance.permutation_importance(predict, {"a": a, "b": b}, y, loss, repeats=2,
                                                                     seed=5)}
    # b is never read: every per-example rise is 0, so the interval is [0, 0] and includes 0.
    assert rows["b"]["importance"] == 0 and rows["b"]["interval"] == [0, 0] and not rows["b"]["contributes"]
    # a: the same two permutations drawn here give the same per-example rises (inputs in name order).
    draw = np.random.default_rng(5)
    rise = sum((2 * a[draw.permutation(200)] - y) ** 2 for _ in range(2)) / 2
    assert rows["a"]["importance"] == pytest.approx(rise.mean())
    se = rise.std(ddof=1) / math.sqrt(200)
    assert rows["a"]["std_error"] == pytest.approx(se)
    assert rows["a"]["interval"] == pytest.approx([rise.mean() - 1.959964 * se, rise.mean() + 1.959964 * se], rel=1e-5)
    assert rows["a"]["contributes"]


def test_per_example_losses_of_the_three_tasks():
    assert importance.per_example_loss(tasks.BINARY, np.array([1, 0]), np.array([[0.8], [0.8]])) == pytest.approx(
        [-math.log(0.8), -math.log(0.2)])
    assert importance.per_example_loss(tasks.MULTICLASS, np.array([2]), np.array([[0.1, 0.2, 0.7]])) == pytest.approx(
        [-math.log(0.7)])
    assert importance.per_example_loss(tasks.REGRESSION, np.array([1.0, 3.0]), np.array([2.0, 1.0])) == pytest.approx(
        [1.0, 4.0])


def test_bytes_per_feature_are_the_serialized_map_entries():
    example = tf.train.Example(features=tf.train.Features(feature={
        "f": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 2.0])),
        "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x" * 300]))}))
    record = example.SerializeToString()
    sizes = importance.feature_bytes([record, record])
    # The entries are the whole Features message, which is the Example's one field.
    assert sum(sizes.values()) == pytest.approx(example.features.ByteSize())
    assert sizes["name"] > 300 > sizes["f"]
    assert importance.raw_feature("fare_xf", {"fare"}) == "fare" and importance.raw_feature("x", {"y"}) is None
    with pytest.raises(SettingsError, match="repeats: must be at least 1"):
        importance.ImportanceSettings.from_dict({"repeats": 0}, "importance")


def test_a_pure_noise_feature_is_flagged_as_not_contributing_on_a_trained_model():
    tf.keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    n = 3000
    signal, noise = rng.normal(size=(n, 1)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")
    y = (signal[:, 0] + 0.3 * rng.normal(size=n) > 0).astype("float32")
    head = heads.Head(task=tasks.BINARY, classes=("no", "yes"))
    inputs = {k: tf.keras.Input(shape=(1,), name=k) for k in ("signal_xf", "noise_xf")}
    hidden = tf.keras.layers.Dense(8, activation="relu")(tf.keras.layers.Concatenate()(list(inputs.values())))
    model = tf.keras.Model(inputs, head.output(hidden))
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), **head.compile_args())
    features = {"signal_xf": signal, "noise_xf": noise}
    model.fit(features, y, epochs=15, batch_size=128, verbose=0)
    half = n // 2
    eval_once = tf.data.Dataset.from_tensor_slices(({k: v[half:] for k, v in features.items()}, y[half:])).batch(256)
    raw = [tf.train.Example(features=tf.train.Features(feature={
        "signal": tf.train.Feature(float_list=tf.train.FloatList(value=[float(s)])),
        "noise": tf.train.Feature(float_list=tf.train.FloatList(value=[float(z)]))})).SerializeToString()
        for s, z in zip(signal[:10, 0], noise[:10, 0])]
    record = importance.measure(model, head, eval_once, raw, ["signal", "noise"],
                                importance.ImportanceSettings(max_examples=1000, repeats=3))
    rows = {r["input"]: r for r in record["inputs"]}
    assert record["examples"] == 1000
    assert rows["signal_xf"]["contributes"] and rows["signal_xf"]["importance"] > 0.2
    assert not rows["noise_xf"]["contributes"] and record["not_contributing"] == ["noise_xf"]
    assert rows["noise_xf"]["interval"][0] <= 0 <= rows["noise_xf"]["interval"][1]
    assert rows["signal_xf"]["raw_feature"] == "signal" and rows["noise_xf"]["bytes_share"] == pytest.approx(0.5, abs=0.1)
