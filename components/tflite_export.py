"""TFLiteExport: on-device variants of the pushed model (no quantization, dynamic-range,
full-integer), each scored on the window's eval examples beside the SavedModel and
published next to the served version only within an accuracy-drop bound.

A Python-function component after the Pusher: it reads the PushedModel (nothing pushed:
nothing exported), converts the configured TFLite-runnable signature, and records per
variant size and accuracy on its output artifact in ML Metadata, where governance reports
read them. A variant over the bound is recorded and not published; the SavedModel's push is
never affected. The work is in `serving/tflite.py`.
"""

import glob
import json
import logging
import os

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types.artifact import Artifact
from tfx.types.standard_artifacts import Examples, Model, PushedModel

from serving import signing, tflite

logger = logging.getLogger(__name__)
RECORD_FILE = "tflite_export.json"


class TFLiteExports(Artifact):
    """The converted variants, their sizes and accuracies, and what was published."""

    TYPE_NAME = "TFLiteExports"


def _split_files(examples: list, split: str) -> list[str]:
    return sorted(f for e in examples for f in glob.glob(os.path.join(e.uri, f"Split-{split}", "*")))


@component
def TFLiteExport(
    model: InputArtifact[Model],
    examples: InputArtifact[list[Examples]],
    pushed_model: InputArtifact[PushedModel],
    exports: OutputArtifact[TFLiteExports],
    signature: Parameter[str],
    input_key: Parameter[str],
    label_key: Parameter[str],
    raw_input_key: Parameter[str] = "",
    variants: Parameter[str] = "float,dynamic_range,int8",
    max_accuracy_drop: Parameter[float] = 0.02,
    representative_examples: Parameter[int] = 200,
    signing_key: Parameter[str] = "",
    signing_workdir: Parameter[str] = "",
) -> None:
    """Converts, scores and publishes the TFLite variants of the pushed model."""
    version = pushed_model.get_string_custom_property("pushed_version")
    destination = pushed_model.get_string_custom_property("pushed_destination")
    if not pushed_model.get_int_custom_property("pushed") or not version:
        exports.set_int_custom_property("exported", 0)
        logger.info("nothing was pushed: no TFLite export")
        return
    import tensorflow as tf

    saved_model = os.path.join(model.uri, "Format-Serving")
    loaded = tf.saved_model.load(saved_model)  # once: its transform, its reference signature
    eval_x, eval_y = tflite.transformed_examples(loaded, _split_files(examples, "eval"), input_key, label_key)
    representative, _ = tflite.transformed_examples(loaded, _split_files(examples, "train"), input_key, label_key,
                                                    limit=representative_examples)
    record = tflite.export(saved_model, signature, eval_x, eval_y, representative,
                           tuple(v.strip() for v in variants.split(",") if v.strip()), max_accuracy_drop, exports.uri,
                           model=loaded)
    if raw_input_key:
        with open(os.path.join(exports.uri, tflite.PREPROCESSING_FILE), "w", encoding="utf-8") as f:
            json.dump({"input": signature, **_zscore(loaded, examples, raw_input_key, input_key)}, f, indent=2)
    key = signing.resolve_key(signing_key or None, signing_workdir) if signing_workdir else None
    target = os.path.join(tflite.folder(os.path.dirname(destination)), version)
    published = tflite.publish(exports.uri, record, target, sign_with=key)
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
    import numpy as np
    import tensorflow as tf

    files = _split_files(examples, "eval")
    batch = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP").batch(16)))
    transformed = loaded.signatures["transform_features"](examples=batch)[input_key].numpy()
    parsed = tf.io.parse_example(batch, {raw_input_key: tf.io.FixedLenFeature([], tf.string)})[raw_input_key]
    raw = np.stack([tf.io.decode_image(b, expand_animations=False).numpy() for b in parsed]).astype(np.float32) / 255.0
    return tflite.zscore_statistics(raw, transformed)
