"""Every feature earns its place: permutation importance with an interval, beside each feature's cost.

ML Test Score, model section ("every feature is beneficial"; "the cost of each feature is
known"). After export, on a seeded sample of the eval split (at most `max_examples`
examples, which bounds the cost: `repeats` x features predictions of the sample):

- a model input's importance is the rise of the per-example loss when that input's
  values are shuffled across the sample (breaking its link to the label while keeping its
  distribution), averaged over `repeats` permutations. Per example the rise is
  loss(permuted) - loss(original), so the mean over the sample has a standard error
  (std / sqrt(n)) and a two-sided (1 - significance_level) interval; an input whose interval
  includes 0 is flagged as not shown to contribute. The loss is the task's: log loss
  (binary and multiclass), squared error (regression, in label units squared);
- its cost: the bytes its raw feature adds to each serialized tf.Example of the eval split
  (the map entry: key, tag and values), and its share of those bytes. Transform's and
  serving's time are not split per feature (the Transform graph and the model run all
  inputs together); the report says so rather than guess.

Inputs that are not dense tensors (sparse, ragged) are left out and named. The record goes
in the training provenance, so the governance report draws each input's trend over runs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping

import numpy as np

from core import tasks
from core.settings import Settings, SettingsError

logger = logging.getLogger(__name__)

TRANSFORMED_SUFFIX = "_xf"


@dataclasses.dataclass(frozen=True)
class ImportanceSettings(Settings):
    """The `trainer.importance` settings (the `importance:` block of a pipeline config)."""

    enabled: bool = True
    # The sample of the eval split it is computed on (seeded): bounds the cost.
    max_examples: int = 2000
    # Permutations per input, averaged per example.
    repeats: int = 3
    seed: int = 0
    # The interval's two-sided level: an interval that includes 0 flags the input.
    significance_level: float = 0.05

    def check(self) -> None:
        if self.max_examples < 10:
            raise SettingsError(f"max_examples: must be at least 10, got {self.max_examples}")
        if self.repeats < 1:
            raise SettingsError(f"repeats: must be at least 1, got {self.repeats}")
        if not 0.0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: must be within (0, 0.5), got {self.significance_level}")


def per_example_loss(task: str, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The task's loss of each example: log loss, or squared error for regression."""
    eps = 1e-7
    labels = np.asarray(labels)
    predictions = np.asarray(predictions, dtype=np.float64)
    if task == tasks.BINARY:
        p = np.clip(predictions.reshape(-1), eps, 1 - eps)
        y = labels.reshape(-1).astype(np.float64)
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))
    if task == tasks.MULTICLASS:
        p = np.clip(predictions.reshape(len(predictions), -1), eps, 1.0)
        y = labels.reshape(-1).astype(np.int64)
        return -np.log(p[np.arange(len(y)), y])
    return (predictions.reshape(-1) - labels.reshape(-1).astype(np.float64)) ** 2


def permutation_importance(predict: Callable[[dict], np.ndarray], inputs: Mapping[str, np.ndarray],
                           labels: np.ndarray, loss: Callable[[np.ndarray, np.ndarray], np.ndarray],
                           repeats: int = 3, seed: int = 0, level: float = 0.05) -> list[dict]:
    """Each input's importance (mean per-example loss rise when it is shuffled) with its
    standard error and interval, most important first.

    Args:
      predict: inputs (dict of arrays, one row per example) -> predictions.
      inputs: the sample's model inputs, each with the same first dimension.
      labels: the sample's labels.
      loss: (labels, predictions) -> per-example loss.
    """
    from scipy import stats

    rng = np.random.default_rng(seed)
    n = len(labels)
    base = loss(labels, predict(dict(inputs)))
    z = float(stats.norm.ppf(1.0 - level / 2))
    out = []
    # The `repeats` permuted copies of the sample in one call per input (the others tiled
    # beside them): a prediction call has a fixed cost that 3 x 16 calls made most of it.
    tiled = {k: np.concatenate([v] * repeats) for k, v in inputs.items()}
    tiled_labels = np.concatenate([labels] * repeats)
    for name in sorted(inputs):
        permuted = np.concatenate([inputs[name][rng.permutation(n)] for _ in range(repeats)])
        rises = loss(tiled_labels, predict({**tiled, name: permuted})) - np.tile(base, repeats)
        rise = rises.reshape(repeats, n).mean(axis=0)
        value = float(rise.mean())
        se = float(rise.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        interval = [value - z * se, value + z * se]
        out.append({"input": name, "importance": value, "std_error": se, "interval": interval,
                    "contributes": bool(interval[0] > 0), "examples": n})
    return sorted(out, key=lambda r: -r["importance"])


def feature_bytes(serialized: list[bytes]) -> dict[str, float]:
    """Mean bytes each feature adds to a serialized tf.Example (its map entry)."""
    from tensorflow.core.example import example_pb2

    total: dict[str, int] = {}
    for record in serialized:
        example = example_pb2.Example.FromString(record)
        for name, feature in example.features.feature.items():
            body = feature.ByteSize()
            key = len(name.encode())
            # The map entry: key (tag, length, bytes), value (tag, length, body), and the entry's own tag and length.
            entry = 1 + _varint(key) + key + 1 + _varint(body) + body
            total[name] = total.get(name, 0) + 1 + _varint(entry) + entry
    return {name: b / max(1, len(serialized)) for name, b in total.items()}


def _varint(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def raw_feature(input_name: str, raw_names) -> str | None:
    """The raw feature a model input comes from: itself, or its name without `_xf`."""
    if input_name in raw_names:
        return input_name
    if input_name.endswith(TRANSFORMED_SUFFIX) and input_name[: -len(TRANSFORMED_SUFFIX)] in raw_names:
        return input_name[: -len(TRANSFORMED_SUFFIX)]
    return None


def _sample(eval_once, max_examples: int) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """Up to max_examples (inputs, labels) from one pass; the inputs that are not dense."""
    import tensorflow as tf

    parts: dict[str, list] = {}
    labels, skipped, n = [], set(), 0
    for features, label in eval_once:
        for name, value in features.items():
            if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
                skipped.add(name)
                continue
            parts.setdefault(name, []).append(value.numpy())
        labels.append(np.asarray(label))
        n += len(labels[-1])
        if n >= max_examples:
            break
    if not labels:
        return {}, np.array([]), sorted(skipped)
    inputs = {k: np.concatenate(v)[:max_examples] for k, v in parts.items() if k not in skipped}
    return inputs, np.concatenate(labels)[:max_examples], sorted(skipped)


def _predictor(model, batch_size: int = 8192) -> Callable[[dict], np.ndarray]:
    """The model's predictions of a dict of arrays, a batch at a time through one traced
    function (Keras' `predict` builds its loop anew on every call: ~0.1 s each)."""
    import tensorflow as tf

    call = tf.function(lambda x: model(x, training=False), reduce_retracing=True)

    def predict(batch: dict) -> np.ndarray:
        n = len(next(iter(batch.values())))
        parts = [np.asarray(call({k: tf.constant(v[i:i + batch_size]) for k, v in batch.items()}))
                 for i in range(0, n, batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0,))

    return predict


def measure(model, head, eval_once, raw_records: list[bytes], raw_names, settings: ImportanceSettings) -> dict:
    """The record the Trainer keeps: each model input's importance and cost.

    Args:
      model: the fitted Keras model (inputs: the transformed features).
      head: its trainer_toolkit.heads.Head (the task's loss).
      eval_once: one pass of the eval split as (inputs, label) batches.
      raw_records: serialized raw eval tf.Examples (for the bytes per feature).
      raw_names: the raw feature names.
    """
    start = time.perf_counter()
    inputs, labels, skipped = _sample(eval_once, settings.max_examples)
    if not len(labels):
        return {"computed": False, "reason": "no eval examples"}
    # Shuffling one input of a fixed sample: the order of the sample is the seeded draw.
    order = np.random.default_rng(settings.seed).permutation(len(labels))
    inputs = {k: v[order] for k, v in inputs.items()}
    labels = labels[order]

    predict = _predictor(model)

    rows = permutation_importance(predict, inputs, labels, lambda y, p: per_example_loss(head.task, y, p),
                                  settings.repeats, settings.seed, settings.significance_level)
    sizes = feature_bytes(raw_records)
    total = sum(sizes.values()) or 1.0
    for row in rows:
        raw = raw_feature(row["input"], raw_names)
        row["raw_feature"] = raw
        row["bytes_per_example"] = round(sizes[raw], 1) if raw in sizes else None
        row["bytes_share"] = round(sizes[raw] / total, 4) if raw in sizes else None
    flagged = [r["input"] for r in rows if not r["contributes"]]
    record = {
        "computed": True, "loss": "squared error" if head.task == tasks.REGRESSION else "log loss",
        "examples": int(len(labels)), "repeats": settings.repeats, "seed": settings.seed,
        "confidence": 1.0 - settings.significance_level, "inputs": rows, "not_contributing": flagged,
        "left_out_inputs": skipped, "bytes_per_example": round(total, 1),
        "time_share": "not split per feature: the Transform graph and the model run all inputs together",
        "seconds": round(time.perf_counter() - start, 2),
    }
    logger.info("trainer: permutation importance of %d inputs on %d eval examples in %.1f s; not shown to"
                " contribute: %s", len(rows), len(labels), record["seconds"], ", ".join(flagged) or "none")
    return record
