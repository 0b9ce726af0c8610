"""A span's examples as a client would send them, and their true labels, for the rollout
simulator (`retrain rollout simulate`, `make rollout-demo`): the span's rows encoded as
the pipeline ingests them, without the raw label column, and the label computed by the
pipeline's own `label_fn` (the definition Transform and the data gate use)."""

from __future__ import annotations

import tempfile

import numpy as np

from core import spans


def span_examples_and_labels(config, span: int | str, limit: int | None = None) -> tuple[list[bytes], np.ndarray]:
    """(serialized tf.Examples without the label column, their labels), at most `limit`.

    Raises:
      core.spans.SpanError: the span is not in the data folder.
    """
    import tensorflow as tf
    from tensorflow_transform.tf_metadata import schema_utils

    from components.data_gate import label as label_lib
    from components.data_gate import rows
    from runner import preflight

    span = spans.resolve_span(config.data_root, int(span), config.example_format)
    spec = schema_utils.schema_as_feature_spec(preflight.load_schema(config.schema_path)).feature_spec
    fn = label_lib.load_fn(config.label_function)
    examples: list[bytes] = []
    labels: list[np.ndarray] = []
    with tempfile.TemporaryDirectory() as tmp:
        files = rows.span_examples(spans.span_dir(config.data_root, span), config.example_format, tmp)
        for batch in rows.record_batches(files):
            records = [bytes(r) for r in batch.numpy()]
            value = np.asarray(fn(tf.io.parse_example(records, spec)))
            labels.append(value.reshape(len(records), -1)[:, 0])
            for record in records:
                example = tf.train.Example.FromString(record)
                example.features.feature.pop(config.label_key, None)
                examples.append(example.SerializeToString())
            if limit is not None and len(examples) >= limit:
                break
    out = np.concatenate(labels) if labels else np.zeros(0)
    if limit is not None:
        examples, out = examples[:limit], out[:limit]
    return examples, out
