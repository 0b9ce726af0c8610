"""The embedded digits spans: generated from scikit-learn's images, never overwriting."""

import pytest

from core import spans
from pipelines.digits import data
from runner import preflight
from tests.conftest import DIGITS_DATA, REPO


def test_shipped_spans_are_what_the_generator_writes(tmp_path):
    counts = data.write_spans(str(tmp_path))
    assert sum(counts.values()) == 1797  # every image, none lost
    assert spans.list_spans(str(tmp_path)) == spans.list_spans(DIGITS_DATA)
    for span in counts:
        shipped = spans.first_example(spans.span_dir(DIGITS_DATA, span))
        fresh = spans.first_example(spans.span_dir(str(tmp_path), span))
        assert shipped == fresh


def test_generator_never_overwrites(tmp_path):
    data.write_spans(str(tmp_path))
    with pytest.raises(spans.SpanError, match="already exist"):
        data.write_spans(str(tmp_path))


def test_preflight_names_missing_and_unexpected_features(tmp_path):
    import tensorflow as tf

    folder = tmp_path / "span-201601"
    folder.mkdir()
    with tf.io.TFRecordWriter(str(folder / "data.tfrecord.gz"), options="GZIP") as w:
        w.write(tf.train.Example(features=tf.train.Features(feature={
            "pixels": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
        })).SerializeToString())
    schema = f"{REPO}/schemas/digits/schema.pbtxt"
    with pytest.raises(preflight.InputError, match="missing feature.s. image; feature.s. not in the schema pixels"):
        preflight.check_run_inputs(str(tmp_path), 201601, schema, "tfrecord")


@pytest.mark.parametrize(
    "content, message",
    [(None, "holds no .tfrecord.gz file"), (b"not gzip at all", "cannot read"), (b"", "cannot read|holds no records")],
)
def test_preflight_rejects_unreadable_span_files(tmp_path, content, message):
    folder = tmp_path / "span-201601"
    folder.mkdir()
    if content is not None:
        (folder / "data.tfrecord.gz").write_bytes(content)
    with pytest.raises(preflight.InputError, match=message):
        preflight.check_run_inputs(str(tmp_path), None, f"{REPO}/schemas/digits/schema.pbtxt", "tfrecord")
