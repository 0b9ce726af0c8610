"""Beam runner profiles (pipelines/beam.py): the flags of each profile, the choice by data
size and per node, options validated per profile, and the flags on the compiled nodes."""

import dataclasses
import os

import pytest

from pipelines import beam, factory
from pipelines import config as config_lib
from tests.conftest import TAXI_CONFIG

SETUP = "/repo/setup.py"


def _flags(profile, options=None, workers=2, extra=()):
    return beam.args_for(profile, workers, options or {}, tuple(extra), SETUP)


def test_each_profile_maps_to_its_runner_flags():
    assert _flags("direct") == []  # no flag at all: TFX builds no sdist of itself
    assert _flags("direct-multiprocess") == [f"--setup_file={SETUP}", "--direct_running_mode=multi_processing",
                                             "--direct_num_workers=2"]
    portable = _flags("portable", {"job_endpoint": "localhost:8099", "environment_config": "localhost:50000"})
    assert portable == [f"--setup_file={SETUP}", "--runner=PortableRunner", "--environment_type=EXTERNAL",
                        "--sdk_worker_parallelism=2", "--job_endpoint=localhost:8099",
                        "--environment_config=localhost:50000"]
    flink = _flags("flink", {"flink_master": "flink:8081", "flink_version": "1.16"})
    assert "--runner=FlinkRunner" in flink and "--flink_master=flink:8081" in flink and "--parallelism=2" in flink
    spark = _flags("spark", {"spark_master_url": "spark://m:7077"})
    assert "--runner=SparkRunner" in spark and "--spark_master_url=spark://m:7077" in spark
    dataflow = _flags("dataflow", {"project": "p", "region": "europe-west1", "temp_location": "gs://b/tmp",
                                   "experiments": ["use_runner_v2", "no_use_multiple_sdk_containers"],
                                   "use_public_ips": False}, extra=["--labels=team=ml"])
    assert "--runner=DataflowRunner" in dataflow and "--temp_location=gs://b/tmp" in dataflow
    assert dataflow.count("--experiments=use_runner_v2") == 1 and "--experiments=no_use_multiple_sdk_containers" in dataflow
    assert not any("use_public_ips" in a for a in dataflow) and dataflow[-1] == "--labels=team=ml"


def test_flags_are_what_beam_reads():
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )

    options = PipelineOptions(_flags("portable", {"job_endpoint": "localhost:8099",
                                                  "environment_config": "localhost:50000"}))
    assert options.view_as(StandardOptions).runner == "PortableRunner"
    assert options.view_as(PortableOptions).job_endpoint == "localhost:8099"
    assert options.view_as(PortableOptions).environment_type == "EXTERNAL"
    multi = PipelineOptions(_flags("direct-multiprocess", workers=3)).view_as(DirectOptions)
    assert multi.direct_running_mode == "multi_processing" and multi.direct_num_workers == 3


def test_auto_picks_by_input_size_and_per_node_settings_win():
    settings = beam.BeamSettings.load(
        {"profile": "auto", "multiprocess_from_mb": 10,
         "nodes": {"Evaluator": {"profile": "direct"}, "Transform": {"profile": "portable", "options": {
             "job_endpoint": "localhost:8099", "environment_config": "localhost:50000"}}}}, beam.BEAM_NODES)
    small = settings.choose("StatisticsGen", 9 << 20, SETUP, cpus=2)
    large = settings.choose("StatisticsGen", 10 << 20, SETUP, cpus=2)
    assert (small.profile, small.args) == ("direct", ())
    assert large.profile == "direct-multiprocess" and "--direct_num_workers=2" in large.args
    assert "10.0 MB of input >= 10 MB" in large.reason
    assert settings.choose("Evaluator", 1 << 40, SETUP).profile == "direct"
    assert "--runner=PortableRunner" in settings.choose("Transform", 0, SETUP).args


@pytest.mark.parametrize("block, message", [
    ({"profile": "portable"}, "beam.options: profile portable needs job_endpoint"),
    ({"profile": "portable", "options": {"job_endpoint": "localhost:8099"}},
     "environment_config: an EXTERNAL environment needs the worker pool"),
    ({"profile": "portable", "options": {"job_endpoint": "nowhere", "environment_config": "localhost:5"}},
     "job_endpoint: expected host:port"),
    ({"profile": "flink", "options": {"flink_master": "f:8081", "flink_job_server_jar": "/no/such.jar"}},
     "flink_job_server_jar: /no/such.jar is not a file"),
    ({"profile": "spark", "options": {"spark_master_url": "http://m"}}, "spark_master_url: expected spark://"),
    ({"profile": "dataflow", "options": {"project": "p", "region": "r"}}, "needs temp_location"),
    ({"profile": "dataflow", "options": {"project": "p", "region": "r", "temp_location": "/tmp"}},
     "temp_location: Dataflow needs a gs:// path"),
    ({"profile": "direct", "options": {"job_endpoint": "x:1"}}, "job_endpoint not known for profile direct"),
    ({"profile": "auto", "options": {"flink_master": "x:1"}}, "profile auto picks direct or direct-multiprocess"),
    ({"workers": -1}, "beam.workers: expected an integer >= 0"),
    ({"extra_args": ["runner=X"]}, "extra_args: expected a list of --flag"),
    ({"nodes": {"Evaluator": {"speed": 2}}}, r"beam.nodes.Evaluator: unknown key\(s\) speed"),
    ({"nodes": {"Evaluator": {"profile": "portable"}}}, "beam.nodes.Evaluator.options: profile portable needs"),
    ({"runner": "flink"}, r"beam: unknown key\(s\) runner"),
])
def test_bad_blocks_name_the_key(block, message):
    with pytest.raises(beam.BeamConfigError, match=message):
        beam.BeamSettings.load(block, beam.BEAM_NODES)


def test_the_compiled_pipeline_carries_each_nodes_flags(tmp_path):
    """A span big enough for direct-multiprocess on its own nodes; the small window of the
    rest stays in memory; no pipeline-level flags."""
    data = tmp_path / "data"
    for span, size in ((201611, 100), (201612, 3 << 20)):
        os.makedirs(data / f"span-{span}")
        (data / f"span-{span}" / "data.csv").write_bytes(b"x" * size)
    config = dataclasses.replace(config_lib.load(TAXI_CONFIG, {"beam.multiprocess_from_mb": 2,
                                                               "beam.nodes": {"Evaluator": {"profile": "direct"}}}),
                                 data_root=str(data), span=201612, window_spans=1)
    # auto: the Evaluator scores at most max_eval_examples, in memory; with every eval example, by size.
    plain = dataclasses.replace(config, beam={"profile": "auto", "multiprocess_from_mb": 2})
    assert factory.beam_choices(plain)["Evaluator"].profile == "direct"
    assert "at most max_eval_examples (25,000)" in factory.beam_choices(plain)["Evaluator"].reason
    every = dataclasses.replace(plain, max_eval_examples=0)
    assert factory.beam_choices(every)["Evaluator"].profile == "direct-multiprocess"
    pipeline = factory.create_pipeline(config)
    args = {c.id: list(getattr(c.executor_spec, "beam_pipeline_args", [])) for c in pipeline.components}
    assert "--direct_running_mode=multi_processing" in args["StatisticsGen"]
    assert "--direct_running_mode=multi_processing" in args["Transform"]  # window = this one span
    assert args["Evaluator"] == [] and pipeline.beam_pipeline_args == []
    choices = factory.beam_choices(config)
    assert choices["StatisticsGen"].reason.startswith("auto: 3.0 MB")
    assert choices["CsvExampleGen"].reason.startswith("unused: the fast ingestion engine writes the examples")
    beam_ingest = factory.beam_choices(dataclasses.replace(config, ingestion={"engine": "beam"}))
    assert beam_ingest["CsvExampleGen"].reason.startswith("auto: 3.0 MB")
    small = factory.beam_choices(dataclasses.replace(config, span=201611))
    assert {c.profile for c in small.values()} == {"direct"}
