"""The embedded digits data: scikit-learn's 1,797 handwritten 8x8 digits as monthly spans
of tf.Examples holding PNG bytes. The repo ships them; `python -m pipelines.digits.data OUT`
writes them again (tests check the two are equal)."""

from __future__ import annotations

import os

from core import spans
from pipelines.digits import features

FIRST_SPAN = 201601
NUM_SPANS = 6


def write_spans(out_root: str, first_span: int = FIRST_SPAN, num_spans: int = NUM_SPANS) -> dict[int, int]:
    """Writes `span-YYYYMM/data.tfrecord.gz` folders (atomically; never over existing ones).

    Images are shuffled with a fixed seed and dealt round-robin, so every span has every
    class. Returns rows per span.

    Raises:
      spans.SpanError: a span folder already exists.
    """
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits  # ships with scikit-learn: no download

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    targets = [spans.shift_span(first_span, i) for i in range(num_spans)]
    clashes = [s for s in targets if os.path.exists(spans.span_dir(out_root, s))]
    if clashes:
        raise spans.SpanError(f"span folders already exist under {out_root!r}: {clashes}")
    counts = {}
    for i, span in enumerate(targets):
        final = spans.span_dir(out_root, span)
        tmp = final + ".tmp"
        os.makedirs(tmp, exist_ok=True)
        rows = order[i::num_spans]
        with tf.io.TFRecordWriter(os.path.join(tmp, "data.tfrecord.gz"), options="GZIP") as w:
            for row in rows:
                # Pixel values 0..16 -> 0..255 grayscale.
                pixels = np.round(digits.images[row] * 255.0 / 16.0).astype(np.uint8)[..., None]
                png = tf.io.encode_png(pixels).numpy()
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                features.IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
                                features.LABEL_KEY: tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[int(digits.target[row])])
                                ),
                            }
                        )
                    ).SerializeToString()
                )
        os.rename(tmp, final)
        counts[span] = len(rows)
    return counts


if __name__ == "__main__":
    import sys

    from core import keras_env  # noqa: F401  (before TensorFlow)

    if len(sys.argv) != 2:
        sys.exit("usage: python -m pipelines.digits.data OUT_ROOT")
    for span, rows in write_spans(sys.argv[1]).items():
        print(f"span {span}: {rows} images")
