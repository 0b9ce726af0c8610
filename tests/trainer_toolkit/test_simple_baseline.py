"""The simple baseline the toolkit fits beside every candidate: a linear model with the
candidate's head on whatever features it has, and the trivial predictor's known answers."""

import numpy as np
import pytest
import tensorflow as tf

from core import tasks
from core.settings import SettingsError
from trainer_toolkit import heads, simple_baseline, training
from trainer_toolkit.settings import SimpleBaselineSettings, TrainerSettings

SETTINGS = SimpleBaselineSettings(learning_rate=0.05, hash_bins=64)


def _data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 1)).astype("float32")
    c = rng.integers(0, 5, size=(n, 1)).astype("int64")
    pixels = rng.normal(size=(n, 8)).astype("float32")
    return x, c, pixels


def _ds(features, label, batch=64):
    return tf.data.Dataset.from_tensor_slices((features, label)).batch(batch).repeat()


def test_logistic_regression_on_float_and_hashed_integer_features_learns_a_linear_rule():
    x, c, _ = _data()
    y = ((2 * x[:, 0] + (c[:, 0] == 3) * 3 - 0.5) > 0).astype("float32")
    ds = _ds({"x": x, "c": c}, y)
    head = heads.Head(tasks.BINARY, classes=("0", "1"))
    model, skipped = simple_baseline.build(head, ds.element_spec[0], SETTINGS)
    assert skipped == []
    model.fit(ds, steps_per_epoch=200, verbose=0)
    p = model.predict({"x": x, "c": c}, verbose=0)
    assert p.shape == (len(x), 1) and p.dtype == np.float32
    assert ((p[:, 0] > 0.5) == (y > 0.5)).mean() > 0.9
    # Linear: the model is one Dense layer on the concatenated features, nothing hidden.
    assert [type(l).__name__ for l in model.layers if l.weights] == ["Dense"]


def test_softmax_regression_on_a_single_tensor_input_and_linear_regression_with_the_heads_scale():
    _, _, pixels = _data()
    y = pixels[:, :3].argmax(axis=1).astype("int64")
    head = heads.Head(tasks.MULTICLASS, classes=("a", "b", "c"))
    model, _ = simple_baseline.build(head, _ds(pixels, y).element_spec[0], SETTINGS)
    model.fit(_ds(pixels, y), steps_per_epoch=300, verbose=0)
    probs = model.predict(pixels, verbose=0)
    assert probs.shape == (len(pixels), 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert (probs.argmax(axis=1) == y).mean() > 0.8

    x, _, _ = _data()
    target = (30.0 * x[:, 0] + 100.0).astype("float32")
    head = heads.Head(tasks.REGRESSION, label_mean=100.0, label_std=30.0)
    model, _ = simple_baseline.build(head, _ds({"x": x}, target).element_spec[0], SETTINGS)
    model.fit(_ds({"x": x}, target), steps_per_epoch=300, verbose=0)
    error = np.abs(model.predict({"x": x}, verbose=0)[:, 0] - target).mean()
    assert error < 3.0, error  # of a label with standard deviation 30


def test_a_feature_a_linear_layer_cannot_take_is_left_out_and_named():
    spec = {"x": tf.TensorSpec([None, 1], tf.float32), "tags": tf.SparseTensorSpec([None, None], tf.string)}
    model, skipped = simple_baseline.build(heads.Head(tasks.BINARY, classes=("0", "1")), spec, SETTINGS)
    assert skipped == ["tags"] and list(model.input) == ["x"]
    with pytest.raises(ValueError, match="no dense feature"):
        simple_baseline.build(heads.Head(tasks.BINARY, classes=("0", "1")), {"tags": spec["tags"]}, SETTINGS)


def test_the_trivial_predictor_known_answers():
    feats = np.zeros((8, 1), "float32")
    train = tf.data.Dataset.from_tensor_slices((feats, np.array([0, 0, 0, 1, 0, 0, 1, 0], "float32"))).batch(4)
    evals = tf.data.Dataset.from_tensor_slices((feats[:4], np.array([0, 1, 1, 0], "float32"))).batch(4)
    out = simple_baseline.trivial(heads.Head(tasks.BINARY, classes=("no", "yes")), train, evals, 10, None)
    assert out == {"predictor": "majority class", "value": "no", "share_in_training": 0.75, "eval_examples": 4,
                   "binary_accuracy": 0.5, "auc": 0.5}
    train = tf.data.Dataset.from_tensor_slices((feats[:4], np.array([1.0, 2.0, 3.0, 6.0], "float32"))).batch(2)
    evals = tf.data.Dataset.from_tensor_slices((feats[:2], np.array([2.0, 4.0], "float32"))).batch(2)
    out = simple_baseline.trivial(heads.Head(tasks.REGRESSION), train, evals, 10, None)
    assert out["predictor"] == "training mean" and out["value"] == 3.0
    assert out["mean_squared_error"] == 1.0 and out["mean_absolute_error"] == 1.0


def test_fit_and_export_writes_the_model_beside_the_candidate_never_inside(tmp_path):
    x, c, _ = _data(256)
    y = (x[:, 0] > 0).astype("float32")
    ds = _ds({"x": x, "c": c}, y)
    session = training.setup(TrainerSettings(strategy="default", precision="float32", backup_every_steps=0))
    serving = tmp_path / "model" / "Format-Serving"
    head = heads.Head(tasks.BINARY, classes=("0", "1"))

    def signatures(model):
        spec = {"x": tf.TensorSpec([None, 1], tf.float32, "x"), "c": tf.TensorSpec([None, 1], tf.int64, "c")}
        return {"serving_default": tf.function(lambda f: {"outputs": model(f)}).get_concrete_function(spec)}

    record = simple_baseline.fit_and_export(session, head, ds, ds, 50, 2, str(serving), signatures, {},
                                            SimpleBaselineSettings(max_steps=30))
    assert record["steps"] == 30 and record["exported_to"] == simple_baseline.SIMPLE_DIR
    assert record["model"].startswith("logistic regression") and record["trivial"]["predictor"] == "majority class"
    exported = tmp_path / "model" / simple_baseline.SIMPLE_DIR
    assert (exported / "saved_model.pb").exists() and not serving.exists()
    loaded = tf.saved_model.load(str(exported))
    out = loaded.signatures["serving_default"](x=tf.constant(x[:3]), c=tf.constant(c[:3]))["outputs"]
    assert out.shape == (3, 1)


def test_opting_out_needs_a_reason():
    with pytest.raises(SettingsError, match="reason"):
        SimpleBaselineSettings.from_dict({"enabled": False}, "simple_baseline")
    assert SimpleBaselineSettings.from_dict({"enabled": False, "reason": "a rule-based model is the baseline"},
                                            "simple_baseline").reason
    with pytest.raises(SettingsError, match="simple_baseline.require"):
        SimpleBaselineSettings.from_dict({"require": "much_better"}, "simple_baseline")
