"""On-device exports: a pushed SavedModel's TFLite-runnable signature converted without
quantization, with dynamic-range and with full-integer quantization, each scored on the
same evaluation examples as the SavedModel, and published beside the served version only
when its accuracy drop is within a bound.

The TFLite model runs one signature whose ops are TFLite builtins: for the digits model,
`pixels` (transformed pixels -> class probabilities). The Transform graph that turns raw
examples into those pixels (tf.Example parsing, image decoding, z-scoring) is not
convertible, so it stays in TensorFlow: the evaluation applies the SavedModel's own
`transform_features` signature, and the z-score statistics a device needs are written
beside the models (`preprocessing.json`). A model whose serving signatures parse
tf.Examples and apply string lookups (the taxi model) has no such signature and cannot be
exported this way.

Published as `<serving root>/<model>-tflite/<version>/{float,dynamic_range,int8}.tflite`
(the pushed SavedModel's version number; TF Serving's watcher never looks there), with
`export.json` (sizes, accuracies, bound, decisions) and, where signing is on, a signature
over the folder (serving/repository/signing.py), renamed into place whole.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import time

import numpy as np

from core import files

logger = logging.getLogger(__name__)

VARIANTS = ("float", "dynamic_range", "int8")
EXPORT_FILE = "export.json"
PREPROCESSING_FILE = "preprocessing.json"


class ExportError(ValueError):
    """The model cannot be exported as asked (no such signature, not TFLite-convertible)."""


def folder(serving_model_dir: str) -> str:
    """Where a model's TFLite exports are published: `<serving root>/<model>-tflite`."""
    return os.path.normpath(serving_model_dir) + "-tflite"


def transformed_examples(model, example_files: list[str], input_key: str, label_key: str,
                         limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of serialized tf.Examples through the loaded SavedModel's
    `transform_features` signature: what the TFLite signature takes."""
    import tensorflow as tf

    transform = model.signatures["transform_features"]
    dataset = tf.data.TFRecordDataset(example_files, compression_type="GZIP").batch(256)
    xs, ys, n = [], [], 0
    for batch in dataset:
        out = transform(examples=batch)
        xs.append(out[input_key].numpy())
        ys.append(out[label_key].numpy().reshape(-1))
        n += len(ys[-1])
        if limit and n >= limit:
            break
    if not xs:
        raise ExportError(f"no examples in {example_files}")
    x, y = np.concatenate(xs), np.concatenate(ys)
    return (x[:limit], y[:limit]) if limit else (x, y)


def convert(saved_model_dir: str, signature: str, variant: str, representative: np.ndarray | None = None) -> bytes:
    """One TFLite flatbuffer of `signature`.

    Raises:
      ExportError: no such signature, or ops TFLite's builtins cannot run.
    """
    import tensorflow as tf

    try:
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, signature_keys=[signature])
    except (ValueError, KeyError) as e:
        raise ExportError(f"signature {signature!r}: {e}") from e
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if variant == "dynamic_range":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif variant == "int8":
        if representative is None or not len(representative):
            raise ExportError("int8 needs a representative dataset")
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([representative[i : i + 1]] for i in range(len(representative)))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    elif variant != "float":
        raise ExportError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    try:
        return converter.convert()
    except Exception as e:  # noqa: BLE001  the converter's errors name the unsupported ops
        raise ExportError(f"signature {signature!r} is not TFLite-convertible ({variant}): "
                          f"{_converter_problem(str(e))}") from e


def _converter_problem(text: str) -> str:
    """The converter's first diagnostic (TF 2.21's MLIR converter ends its message with a
    dump of the graph, so the last line names nothing), and the dtype when it is bf16."""
    errors = [line.split("error: ", 1)[1] for line in text.splitlines() if "error: " in line]
    problem = next((e for e in errors if "failed while converting" not in e), None)
    problem = problem or (text.strip().splitlines() or ["(no message)"])[-1]
    if "bf16" in text or "bfloat16" in text:
        problem += " (on bf16 tensors: the model computes in bfloat16, which TFLite does not convert)"
    return problem[:500]


class Runner:
    """A TFLite model's one signature over numpy batches (int8 inputs/outputs quantized and
    dequantized with the model's own scale and zero point)."""

    def __init__(self, flatbuffer: bytes):
        import tensorflow as tf

        self._interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=1)
        self._in = self._interpreter.get_input_details()[0]
        self._out = self._interpreter.get_output_details()[0]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        inp = self._in
        if inp["dtype"] == np.int8:
            scale, zero = inp["quantization"]
            x = np.clip(np.round(x / scale + zero), -128, 127).astype(np.int8)
        self._interpreter.resize_tensor_input(inp["index"], x.shape)
        self._interpreter.allocate_tensors()
        self._interpreter.set_tensor(inp["index"], x.astype(inp["dtype"]))
        self._interpreter.invoke()
        y = self._interpreter.get_tensor(self._out["index"])
        if self._out["dtype"] == np.int8:
            scale, zero = self._out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        return y


def accuracy(predict, x: np.ndarray, y: np.ndarray, batch: int = 256) -> float:
    scores = np.concatenate([predict(x[i : i + batch]) for i in range(0, len(x), batch)])
    return float(np.mean(np.argmax(scores, axis=-1) == y))


def zscore_statistics(raw: np.ndarray, transformed: np.ndarray) -> dict:
    """The mean and standard deviation that map raw pixels to transformed ones (fitted:
    transformed = (raw - mean) / std), for a device to apply before the model."""
    a, b = np.polyfit(raw.reshape(-1).astype(np.float64), transformed.reshape(-1).astype(np.float64), 1)
    return {"mean": float(-b / a), "std": float(1.0 / a), "applies_to": "pixels / 255 (decoded image, [0, 1])"}


def export(saved_model_dir: str, signature: str, eval_x: np.ndarray, eval_y: np.ndarray,
           representative: np.ndarray, variants: tuple[str, ...], max_accuracy_drop: float, out_dir: str,
           model=None) -> dict:
    """Converts, scores and writes every variant to `out_dir`; returns the export record:
    the SavedModel's accuracy and, per variant, size, accuracy, drop, whether it passes.
    `model`: the SavedModel already loaded, if the caller has it."""
    import tensorflow as tf

    os.makedirs(out_dir, exist_ok=True)
    reference = (model or tf.saved_model.load(saved_model_dir)).signatures[signature]
    output = next(iter(reference.structured_outputs))
    saved_accuracy = accuracy(lambda x: reference(tf.constant(x))[output].numpy(), eval_x, eval_y)
    record = {"signature": signature, "eval_examples": int(len(eval_y)), "representative_examples": int(len(representative)),
              "saved_model": {"accuracy": round(saved_accuracy, 5), "size_bytes": _tree_size(saved_model_dir)},
              "max_accuracy_drop": max_accuracy_drop, "variants": {}}
    for variant in variants:
        start = time.perf_counter()
        flatbuffer = convert(saved_model_dir, signature, variant, representative)
        seconds = time.perf_counter() - start
        path = os.path.join(out_dir, f"{variant}.tflite")
        with open(path, "wb") as f:
            f.write(flatbuffer)
        acc = accuracy(Runner(flatbuffer), eval_x, eval_y)
        drop = saved_accuracy - acc
        record["variants"][variant] = {
            "file": os.path.basename(path), "size_bytes": len(flatbuffer), "accuracy": round(acc, 5),
            "accuracy_drop": round(drop, 5), "passed": drop <= max_accuracy_drop, "convert_seconds": round(seconds, 2),
        }
    return record


def _tree_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)


def publish(out_dir: str, record: dict, target: str, sign_with=None) -> str | None:
    """Copies the passing variants, preprocessing.json and export.json to `target` (whole,
    signed where a key is given, then renamed into place); None where none passed. The
    folder holds the latest export of that version: a re-export replaces it, and one where
    no variant passes takes it away (renamed aside, then deleted)."""
    passing = [v for v, r in record["variants"].items() if r["passed"]]
    old = target + f".old-{os.getpid()}"
    if not passing:
        if os.path.exists(target):
            os.rename(target, old)
            shutil.rmtree(old, ignore_errors=True)
        return None
    staging = target + f".staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    for variant in passing:
        shutil.copy(os.path.join(out_dir, record["variants"][variant]["file"]), staging)
    for name in (PREPROCESSING_FILE,):
        if os.path.exists(os.path.join(out_dir, name)):
            shutil.copy(os.path.join(out_dir, name), staging)
    with open(os.path.join(staging, EXPORT_FILE), "w", encoding="utf-8") as f:
        json.dump({**record, "published": passing}, f, indent=2, sort_keys=True)
    if sign_with is not None:
        from serving.repository import signing

        signing.sign_version(staging, sign_with)
    return files.replace_dir(staging, target, aside=old)


RECORD_FILE = "tflite_export.json"


def _split_files(examples: list, split: str) -> list[str]:
    return sorted(f for e in examples for f in glob.glob(os.path.join(e.uri, f"Split-{split}", "*")))


def run(model, examples: list, pushed_model, exports, signature: str, input_key: str, label_key: str,
        raw_input_key: str, variants: str, max_accuracy_drop: float, representative_examples: int,
        signing_key: str, signing_workdir: str) -> None:
    """The node's work: converts, scores and publishes the variants, records them on `exports`."""
    from serving.repository import signing

    version = pushed_model.get_string_custom_property("pushed_version")
    destination = pushed_model.get_string_custom_property("pushed_destination")
    if not pushed_model.get_int_custom_property("pushed") or not version:
        exports.set_int_custom_property("exported", 0)
        logger.info("nothing was pushed: no TFLite export")
        return
    import tensorflow as tf

    saved_model = os.path.join(model.uri, "Format-Serving")
    loaded = tf.saved_model.load(saved_model)  # once: its transform, its reference signature
    eval_x, eval_y = transformed_examples(loaded, _split_files(examples, "eval"), input_key, label_key)
    representative, _ = transformed_examples(loaded, _split_files(examples, "train"), input_key, label_key,
                                             limit=representative_examples)
    record = export(saved_model, signature, eval_x, eval_y, representative,
                    tuple(v.strip() for v in variants.split(",") if v.strip()), max_accuracy_drop, exports.uri,
                    model=loaded)
    if raw_input_key:
        with open(os.path.join(exports.uri, PREPROCESSING_FILE), "w", encoding="utf-8") as f:
            json.dump({"input": signature, **_zscore(loaded, examples, raw_input_key, input_key)}, f, indent=2)
    key = signing.resolve_key(signing_key or None, signing_workdir) if signing_workdir else None
    target = os.path.join(folder(os.path.dirname(destination)), version)
    published = publish(exports.uri, record, target, sign_with=key)
    record.update(version=version, published_path=published,
                  published=[v for v, r in record["variants"].items() if r["passed"]])
    with open(os.path.join(exports.uri, RECORD_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    exports.set_int_custom_property("exported", 1)
    exports.set_string_custom_property("published_path", published or "")
    exports.set_string_custom_property("version", version)
    for variant, r in record["variants"].items():
        exports.set_int_custom_property(f"{variant}_size_bytes", r["size_bytes"])
        exports.set_float_custom_property(f"{variant}_accuracy", r["accuracy"])
        exports.set_int_custom_property(f"{variant}_published", int(r["passed"]))
    for variant, r in record["variants"].items():
        logger.info("TFLite %s: %d bytes, accuracy %.4f (SavedModel %.4f, drop %.4f, bound %.4f): %s", variant,
                    r["size_bytes"], r["accuracy"], record["saved_model"]["accuracy"], r["accuracy_drop"],
                    max_accuracy_drop, "published" if r["passed"] else "NOT published")


def _zscore(loaded, examples: list, raw_input_key: str, input_key: str) -> dict:
    """The statistics a device applies to decoded pixels before the model (fitted from the
    SavedModel's own transform on a few eval examples)."""
    import tensorflow as tf

    paths = _split_files(examples, "eval")
    batch = next(iter(tf.data.TFRecordDataset(paths, compression_type="GZIP").batch(16)))
    transformed = loaded.signatures["transform_features"](examples=batch)[input_key].numpy()
    parsed = tf.io.parse_example(batch, {raw_input_key: tf.io.FixedLenFeature([], tf.string)})[raw_input_key]
    raw = np.stack([tf.io.decode_image(b, expand_animations=False).numpy() for b in parsed]).astype(np.float32) / 255.0
    return zscore_statistics(raw, transformed)
