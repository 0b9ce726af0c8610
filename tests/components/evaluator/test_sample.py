"""The Evaluator's seeded sample of a large eval split: about the asked size, the same
examples every time, the artifact's splits and properties kept, the rest of the splits
untouched."""

import os

import tensorflow as tf
from tfx.types import artifact_utils, standard_artifacts

from components.evaluator import executor


def _examples(root, rows: int, name: str):
    artifact = standard_artifacts.Examples()
    artifact.uri = str(root / name)
    artifact.split_names = artifact_utils.encode_split_names(["train", "eval"])
    artifact.set_string_custom_property("payload_format", "FORMAT_TF_EXAMPLE")
    for split in ("train", "eval"):
        folder = artifact_utils.get_split_uri([artifact], split)
        os.makedirs(folder)
        for shard in range(2):
            with tf.io.TFRecordWriter(os.path.join(folder, f"data_tfrecord-{shard:05d}-of-00002.gz"), "GZIP") as w:
                for i in range(shard, rows, 2):
                    w.write(tf.train.Example(features=tf.train.Features(feature={"i": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[i]))})).SerializeToString())
    return artifact


def _ids(artifact, split="eval"):
    files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([artifact], split), "*"))
    return sorted(tf.train.Example.FromString(r.numpy()).features.feature["i"].int64_list.value[0]
                  for r in tf.data.TFRecordDataset(files, "GZIP"))


def test_a_seeded_sample_of_about_the_asked_size_the_same_every_time(tmp_path):
    artifacts = [_examples(tmp_path, 3000, "a"), _examples(tmp_path, 1000, "b")]
    assert executor.count_examples(artifacts, ["eval"]) == 4000
    copies, kept = executor.sample_examples(artifacts, ["eval"], 0.1, str(tmp_path / "sample"))
    assert 400 - 4 * 19 < kept < 400 + 4 * 19  # binomial(4000, 0.1): sd 19
    assert kept == sum(len(_ids(c)) for c in copies)
    again, kept_again = executor.sample_examples(artifacts, ["eval"], 0.1, str(tmp_path / "again"))
    assert kept_again == kept and [_ids(c) for c in again] == [_ids(c) for c in copies]
    for original, copy in zip(artifacts, copies):
        assert set(_ids(copy)) <= set(_ids(original))
        assert copy.split_names == original.split_names and copy.uri != original.uri
        assert copy.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"
    assert not os.path.exists(artifact_utils.get_split_uri([copies[0]], "train"))  # only the evaluated split
