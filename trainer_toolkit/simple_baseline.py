"""The simple baseline fitted beside every candidate: is a simpler model just as good?

ML Test Score, model section ("a simpler model is not better"). On the same transformed
features the candidate trained on, the Trainer also fits a linear model with the
candidate's head (logistic regression for a binary task, softmax regression for a
multiclass one, linear regression for a regression), and scores the trivial predictor
(the training split's majority class, or its mean) for reference. The linear model is
exported beside the candidate (`SIMPLE_DIR`, a sibling of `Format-Serving`, so it is never
pushed) with the candidate's serving signature, and the Evaluator scores both models paired
on the eval examples TFMA judged (components/evaluator/simple_baseline.py).

Linear on what the candidate sees: a float feature enters as it is (flattened), an
integer or string feature one-hot after hashing into `hash_bins` buckets, so the model is
`head(w . x + b)` whatever the pipeline's features are.
"""

from __future__ import annotations

import logging
import os
import time

import tensorflow as tf

from core import tasks
from trainer_toolkit.settings import SimpleBaselineSettings

logger = logging.getLogger(__name__)

# The folder beside the candidate's serving SavedModel (`<model>/Format-Serving`).
SIMPLE_DIR = "Simple-Baseline"
# The signature the Evaluator calls (components/evaluator/simple_baseline.py; labels come
# from the candidate's transform_features): the simple model is exported with it only,
# since it is never served and each signature traces the Transform graph again.
EVALUATOR_SIGNATURES = ("serving_default",)
# The training batches the trivial predictor's class counts or mean are read from: each
# passes through the Transform graph, and a majority or a mean is settled long before.
TRIVIAL_BATCHES = 20


def path(serving_model_dir: str) -> str:
    """Where the simple model of the candidate at `serving_model_dir` is exported."""
    return os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), SIMPLE_DIR)


def build(head, input_spec, settings: SimpleBaselineSettings) -> tuple[tf.keras.Model, list[str]]:
    """The linear model on inputs shaped like `input_spec` (the dataset's features: a dict
    of TensorSpecs or one TensorSpec), compiled; and the features it had to leave out
    (sparse or ragged ones, which a linear layer cannot take as they are)."""
    specs = input_spec if isinstance(input_spec, dict) else {"inputs": input_spec}
    inputs, parts, skipped = {}, [], []
    for name, spec in sorted(specs.items()):
        if not isinstance(spec, tf.TensorSpec):
            skipped.append(name)
            continue
        shape = tuple(spec.shape[1:]) or (1,)
        inp = tf.keras.layers.Input(name=name, shape=tuple(spec.shape[1:]), dtype=spec.dtype)
        inputs[name] = inp
        x = inp if spec.shape.rank > 1 else tf.keras.layers.Reshape((1,))(inp)
        if spec.dtype.is_floating:
            parts.append(tf.keras.layers.Flatten()(x))
        else:
            if len(shape) > 1:
                x = tf.keras.layers.Reshape((-1,))(x)
            hashed = tf.keras.layers.Hashing(num_bins=settings.hash_bins)(x)
            parts.append(tf.keras.layers.CategoryEncoding(num_tokens=settings.hash_bins, output_mode="multi_hot")(hashed))
    if not inputs:
        raise ValueError(f"the simple baseline has no dense feature to fit on (left out: {skipped})")
    x = parts[0] if len(parts) == 1 else tf.keras.layers.concatenate(parts)
    model = tf.keras.Model(inputs if isinstance(input_spec, dict) else inputs["inputs"], head.output(x))
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=settings.learning_rate), **head.compile_args())
    return model, skipped


def _only(features, names: list[str]):
    """The features the simple model takes (all but the left-out ones)."""
    if not isinstance(features, dict) or not names:
        return features
    return {k: v for k, v in features.items() if k not in names}


def trivial(head, train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset, train_steps: int,
            eval_steps: int | None) -> dict:
    """The trivial predictor for reference: the training split's majority class (a binary
    or multiclass task) or mean (a regression), fitted on up to `train_steps` batches
    (TRIVIAL_BATCHES at most) and scored on `eval_steps` batches of `eval_ds` (all of it when None)."""
    import numpy as np

    def labels(ds, steps):
        got = [np.asarray(y).reshape(-1) for _, y in ds.take(steps if steps else -1)]
        return np.concatenate(got) if got else np.zeros((0,))

    train_y = labels(train_ds, min(train_steps, TRIVIAL_BATCHES))
    eval_y = labels(eval_ds, eval_steps)
    if not len(train_y) or not len(eval_y):
        return {"predictor": None, "reason": "no labels read"}
    if head.task == tasks.REGRESSION:
        mean = float(train_y.mean())
        return {"predictor": "training mean", "value": round(mean, 6), "eval_examples": int(len(eval_y)),
                "mean_squared_error": round(float(((eval_y - mean) ** 2).mean()), 6),
                "mean_absolute_error": round(float(np.abs(eval_y - mean).mean()), 6)}
    classes, counts = np.unique(train_y.astype(np.int64), return_counts=True)
    majority = int(classes[counts.argmax()])
    accuracy = round(float((eval_y.astype(np.int64) == majority).mean()), 6)
    name = head.classes[majority] if 0 <= majority < len(head.classes) else str(majority)
    out = {"predictor": "majority class", "value": name, "share_in_training": round(float(counts.max() / len(train_y)), 6),
           "eval_examples": int(len(eval_y))}
    if head.task == tasks.BINARY:
        out.update(binary_accuracy=accuracy, auc=0.5)  # a constant score ranks nothing
    else:
        out["sparse_categorical_accuracy"] = accuracy
    return out


def fit_and_export(session, head, train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset, train_steps: int,
                   eval_steps: int | None, serving_model_dir: str, signatures, signature_methods: dict,
                   settings: SimpleBaselineSettings, eval_once: tf.data.Dataset | None = None) -> dict:
    """Fits the linear model for min(train_steps, settings.max_steps) steps, exports it
    beside the candidate (chief only) and scores the trivial predictor; returns its record.

    Args:
      session: the trainer toolkit's Session (strategy and precision of the candidate).
      signatures: model -> serving signatures (the pipeline's, as for the candidate).
      eval_once: one pass over the eval split (the trivial predictor is scored on it;
        default: `eval_steps` batches of `eval_ds`).
    """
    from trainer_toolkit import export

    begin = time.perf_counter()
    model, skipped = session.build(lambda: build(head, train_ds.element_spec[0], settings))
    steps = max(1, min(train_steps, settings.max_steps))
    if skipped:
        train_ds = train_ds.map(lambda x, y: (_only(x, skipped), y))
        eval_ds = eval_ds.map(lambda x, y: (_only(x, skipped), y))
    # No validation pass: the Evaluator scores it on the eval split, with intervals.
    history = model.fit(train_ds, steps_per_epoch=steps, verbose=0)
    fitted = time.perf_counter()
    target = path(serving_model_dir)
    if session.is_chief:
        # Only what the Evaluator calls (each signature traces the Transform graph again).
        all_signatures = signatures(model)
        kept = {k: v for k, v in all_signatures.items() if k in EVALUATOR_SIGNATURES} or all_signatures
        # Saved as a plain module holding the weights (and the Transform layer the signature
        # calls), not as the Keras model: Keras would trace every layer's call for its own
        # metadata, which no one reads here (3.1 -> 0.6 s on a taxi run).
        holder = tf.Module()
        holder.weights_ = list(model.weights)
        if getattr(model, "tft_layer", None) is not None:
            holder.tft_layer = model.tft_layer
        tf.saved_model.save(holder, target, signatures=kept)
        export.set_signature_methods(target, {k: v for k, v in dict(signature_methods).items() if k in kept})
    kind = {tasks.BINARY: "logistic regression", tasks.MULTICLASS: "softmax (multinomial logistic) regression",
            tasks.REGRESSION: "linear regression"}[head.task]
    record = {
        "model": f"{kind} on the transformed features (float features as they are, integer and string ones"
                 f" one-hot in {settings.hash_bins} hash buckets)",
        "steps": steps, "learning_rate": settings.learning_rate, "left_out_features": skipped,
        "final_metrics": {k: round(float(v[-1]), 5) for k, v in history.history.items()},
        "exported_to": SIMPLE_DIR, "fit_s": round(time.perf_counter() - begin, 2),
        "export_s": round(time.perf_counter() - fitted, 2),
        "trivial": trivial(head, train_ds, eval_once if eval_once is not None else eval_ds, train_steps,
                           eval_steps if eval_once is None else None),
    }
    logger.info("trainer: simple baseline (%s) fitted in %.1f s: %s", kind, record["fit_s"], record["final_metrics"])
    return record
