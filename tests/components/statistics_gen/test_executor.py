"""StatisticsGen's in-memory engine writes what TFX's Beam executor writes: the same
statistics proto per split (numbers, strings, missing and multi-valued features, a split
read in several record batches), the same split names, span and properties; what it does
not do goes to Beam."""

import logging
import os
import random

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs

from components.data_gate import measures
from components.statistics_gen import compare, executor
from components.statistics_gen.component import ENGINE_KEY, StatisticsGen

SPLITS = {"train": 1500, "eval": 300}


def _example(rng: random.Random, rare: bool) -> bytes:
    f = {}
    if rare:  # only in the last examples: no record batch before them has the column at all
        f["rare"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[rng.randint(0, 3)]))
    if rng.random() > 0.1:  # sometimes missing
        f["fare"] = tf.train.Feature(float_list=tf.train.FloatList(value=[rng.lognormvariate(2, 0.7)]))
    f["trips"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[rng.randint(0, 40)]))
    f["payment"] = tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[rng.choice([b"Cash", b"Credit Card", b"No Charge", b"Dispute"])]))
    f["tags"] = tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[rng.choice([b"a", b"b", b"c"]) for _ in range(rng.randint(0, 3))]))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    rng = random.Random(7)
    for split, rows in SPLITS.items():
        os.makedirs(root / f"Split-{split}")
        for shard in range(2):
            with tf.io.TFRecordWriter(str(root / f"Split-{split}" / f"data-{shard}.gz"), "GZIP") as w:
                for i in range(rows // 2):
                    w.write(_example(rng, rare=shard == 1 and i >= rows // 2 - 100))
    artifact = standard_artifacts.Examples()
    artifact.uri = str(root)
    artifact.split_names = artifact_utils.encode_split_names(list(SPLITS))
    artifact.span = 201612
    return artifact


def _by_feature(stats: statistics_pb2.DatasetFeatureStatisticsList) -> dict:
    [dataset] = stats.datasets
    return compare.by_feature(dataset)


def _run(tmp_path, examples, engine: str | None, options: tfdv.StatsOptions | None = None):
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / (engine or "tfx"))
    props = {standard_component_specs.STATS_OPTIONS_JSON_KEY: (options or measures.stats_options()).to_json(),
             standard_component_specs.EXCLUDE_SPLITS_KEY: "[]"}
    if engine:
        props[ENGINE_KEY] = engine
    executor.Executor().Do({standard_component_specs.EXAMPLES_KEY: [examples]},
                           {standard_component_specs.STATISTICS_KEY: [statistics]}, props)
    stats = {}
    for split in artifact_utils.decode_split_names(statistics.split_names):
        path = os.path.join(artifact_utils.get_split_uri([statistics], split), "FeatureStats.pb")
        with open(path, "rb") as f:
            stats[split] = statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read())
    return statistics, stats


def test_in_memory_statistics_are_beams(tmp_path, examples, monkeypatch):
    monkeypatch.setattr(executor, "_BATCH_ROWS", 256)  # several record batches per split, not alike
    beam_artifact, beam = _run(tmp_path, examples, "beam")
    mem_artifact, mem = _run(tmp_path, examples, "in-memory")
    assert set(mem) == set(beam) == set(SPLITS)
    for split, rows in SPLITS.items():
        assert mem[split].datasets[0].num_examples == rows
        assert _by_feature(mem[split]) == _by_feature(beam[split]), split
        assert len(_by_feature(mem[split])) == 6  # num_examples and the five features
        [rare] = [f for f in mem[split].datasets[0].features if list(f.path.step) == ["rare"]]
        assert rare.num_stats.common_stats.num_non_missing == 100
    assert mem_artifact.split_names == beam_artifact.split_names
    assert mem_artifact.span == beam_artifact.span == 201612
    for name in (executor.tfx_executor.STATS_DASHBOARD_LINK, executor.tfx_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME):
        assert mem_artifact.mlmd_artifact.custom_properties[name] == beam_artifact.mlmd_artifact.custom_properties[name]


def test_what_memory_does_not_do_runs_on_beam(tmp_path, examples, caplog):
    options = measures.stats_options()
    options.sample_rate = 0.5
    with caplog.at_level(logging.INFO, logger=executor.__name__):
        _, stats = _run(tmp_path, examples, "in-memory", options)
    assert "Statistics on Beam: the in-memory engine does not do sample_rate" in caplog.text
    assert 0 < stats["train"].datasets[0].num_examples < SPLITS["train"]  # sampled, by Beam


def test_the_component_keeps_tfxs_node_id_and_refuses_an_unknown_engine(examples):
    from tfx.types import channel_utils
    channel = channel_utils.as_channel([examples])
    gen = StatisticsGen(examples=channel, engine="in-memory")
    assert gen.id == "StatisticsGen"
    assert gen.exec_properties[ENGINE_KEY] == "in-memory"
    with pytest.raises(ValueError, match=r"StatisticsGen engine: 'fast' is not one of"):
        StatisticsGen(examples=channel, engine="fast")



def test_an_empty_split_is_profiled_by_beam(tmp_path, caplog):
    root = tmp_path / "examples"
    rng = random.Random(3)
    for split, rows in (("train", 50), ("eval", 0)):
        os.makedirs(root / f"Split-{split}")
        with tf.io.TFRecordWriter(str(root / f"Split-{split}" / "data-0.gz"), "GZIP") as w:
            for _ in range(rows):
                w.write(_example(rng, rare=False))
    examples = standard_artifacts.Examples()
    examples.uri = str(root)
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    with caplog.at_level(logging.INFO, logger=executor.__name__):
        _, stats = _run(tmp_path, examples, "in-memory")
    assert "Statistics on Beam: split(s) eval hold no example" in caplog.text
    assert stats["train"].datasets[0].num_examples == 50 and stats["eval"].datasets[0].num_examples == 0
