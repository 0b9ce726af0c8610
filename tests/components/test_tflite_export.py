"""TFLite exports (components/tflite_export/executor.py) on a small image-like model: three variants converted,
each scored beside the SavedModel; the bound decides what is published; a signature that
parses tf.Examples is refused with the reason."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from components.tflite_export import executor as tflite
from serving.repository import signing


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """8x8x1 'images' of two classes told apart by their brightness, a small Keras model
    trained on them, saved with a `pixels` signature and an example-parsing one."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 600)
    x = (rng.normal(0, 0.3, (600, 8, 8, 1)) + (y * 1.0 - 0.5)[:, None, None, None]).astype(np.float32)
    tf.keras.utils.set_random_seed(0)
    net = tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Conv2D(4, 3, activation="relu"),
                               tf.keras.layers.Flatten(), tf.keras.layers.Dense(2, activation="softmax")])
    net.compile("adam", "sparse_categorical_crossentropy")
    net.fit(x[:400], y[:400], epochs=5, verbose=0)

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="pixels")])
    def pixels(image):
        return {"probabilities": net(image)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def examples(serialized):
        parsed = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([64], tf.float32)})
        return {"probabilities": net(tf.reshape(parsed["x"], [-1, 8, 8, 1]))}

    path = str(tmp_path_factory.mktemp("saved") / "model")
    tf.saved_model.save(net, path, signatures={"pixels": pixels, "serving_default": examples})
    return {"path": path, "eval_x": x[400:], "eval_y": y[400:], "train_x": x[:100]}


def test_three_variants_scored_beside_the_saved_model_and_published_within_the_bound(model, tmp_path):
    out = tmp_path / "export"
    record = tflite.export(model["path"], "pixels", model["eval_x"], model["eval_y"], model["train_x"],
                           tflite.VARIANTS, 0.05, str(out))
    saved = record["saved_model"]
    assert saved["accuracy"] > 0.9 and record["eval_examples"] == 200 and record["representative_examples"] == 100
    sizes = {v: r["size_bytes"] for v, r in record["variants"].items()}
    assert set(sizes) == set(tflite.VARIANTS) and sizes["int8"] < sizes["float"]
    for variant, r in record["variants"].items():
        assert os.path.getsize(out / r["file"]) == r["size_bytes"]
        assert r["accuracy"] == pytest.approx(saved["accuracy"], abs=0.05), variant
        assert r["passed"] == (r["accuracy_drop"] <= 0.05)
    assert record["variants"]["float"]["accuracy"] == saved["accuracy"]  # no quantization: the same answers
    key = signing.generate_key(str(tmp_path / "k.pem"))
    target = tmp_path / "serving" / "toy-tflite" / "7"
    published = tflite.publish(str(out), record, str(target), sign_with=key)
    assert published == str(target)
    assert sorted(os.listdir(target)) == sorted([f"{v}.tflite" for v in tflite.VARIANTS if record["variants"][v]["passed"]]
                                                + [tflite.EXPORT_FILE, "assets.extra"])
    assert signing.verify_version(published, [signing.public_key_path(key.path)])["files"] >= 2
    with open(target / tflite.EXPORT_FILE) as f:
        assert json.load(f)["published"] == [v for v in tflite.VARIANTS if record["variants"][v]["passed"]]


def test_an_impossible_bound_publishes_nothing_and_takes_an_earlier_export_away(model, tmp_path):
    out = tmp_path / "export"
    target = tmp_path / "toy-tflite" / "7"
    ok = tflite.export(model["path"], "pixels", model["eval_x"], model["eval_y"], model["train_x"], ("float",), 0.5, str(out))
    assert tflite.publish(str(out), ok, str(target)) and os.path.exists(target / "float.tflite")
    strict = tflite.export(model["path"], "pixels", model["eval_x"], model["eval_y"], model["train_x"], ("float",), -1.0,
                           str(out))
    assert not strict["variants"]["float"]["passed"]
    assert tflite.publish(str(out), strict, str(target)) is None
    assert not os.path.exists(target) and os.listdir(tmp_path / "toy-tflite") == []


def test_a_signature_that_parses_examples_is_not_exportable(model):
    with pytest.raises(tflite.ExportError, match="not TFLite-convertible"):
        tflite.convert(model["path"], "serving_default", "float")
    with pytest.raises(tflite.ExportError, match="'nope'"):
        tflite.convert(model["path"], "nope", "float")


def test_int8_runs_with_the_models_own_quantization(model):
    runner = tflite.Runner(tflite.convert(model["path"], "pixels", "int8", model["train_x"]))
    scores = runner(model["eval_x"][:5])
    assert scores.shape == (5, 2) and scores.dtype == np.float32 and np.allclose(scores.sum(axis=1), 1.0, atol=0.05)


def test_zscore_statistics_are_recovered_from_raw_and_transformed_values():
    raw = np.random.default_rng(1).random((10, 8, 8, 1))
    stats = tflite.zscore_statistics(raw, (raw - 0.31) / 0.27)
    assert stats["mean"] == pytest.approx(0.31) and stats["std"] == pytest.approx(0.27)


def test_a_model_trained_under_mixed_precision_converts_through_its_float32_twin(tmp_path):
    """mixed_bfloat16 (auto on a bf16-capable CPU) computes in bf16, which TFLite cannot
    convert; the on-device signature is traced from the float32 twin and answers as the
    trained model does."""
    from pipelines.digits import model as digits_model
    from pipelines.digits.hparams import HParams
    from trainer_toolkit import export, precision

    precision.apply_policy("mixed_bfloat16")
    try:
        net = digits_model._build_model(HParams())
    finally:
        precision.apply_policy("float32")
    assert net.layers[2].compute_dtype == "bfloat16"
    # As the Trainer's signatures do: the Transform layer tracked on the model (no config).
    net.tft_layer = tf.keras.layers.Lambda(lambda t: t)
    net.tft_layer.get_config = lambda: (_ for _ in ()).throw(NotImplementedError("get_config"))
    x = np.random.default_rng(0).normal(0, 1, (16, 8, 8, 1)).astype(np.float32)

    def saved_with(model, name):
        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="pixels")])
        def pixels(image):
            return {"probabilities": model(image)}

        path = str(tmp_path / name)
        tf.saved_model.save(model, path, signatures={"pixels": pixels})
        return path

    with pytest.raises(tflite.ExportError, match="bf16"):
        tflite.convert(saved_with(net, "mixed"), "pixels", "float", None)
    twin = export.float32_twin(net)
    assert all(layer.compute_dtype == "float32" for layer in twin.layers)

    # As the Trainer exports it: the trained model is what is saved, the signature is the twin's.
    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="pixels")])
    def pixels(image):
        return {"probabilities": twin(image)}

    path = str(tmp_path / "exported")
    tf.saved_model.save(net, path, signatures={"pixels": pixels})
    flat = tflite.convert(path, "pixels", "float", None)
    interpreter = tf.lite.Interpreter(model_content=flat)
    runner = interpreter.get_signature_runner("pixels")
    lite = runner(pixels=x)["probabilities"]
    np.testing.assert_allclose(lite, net(x).numpy().astype(np.float32), atol=0.02)
    assert export.float32_twin(twin) is twin
