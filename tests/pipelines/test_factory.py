"""create_pipeline(config): exactly the expected components, edges and settings."""

import json

import pytest

from pipelines import config as config_lib
from pipelines.factory import create_pipeline
from runner import node_runner
from tests.conftest import TAXI_CONFIG

EXPECTED_UPSTREAM = {
    "CsvExampleGen": set(),
    "StatisticsGen": {"CsvExampleGen"},
    "ImportSchemaGen": set(),
    "ExampleValidator": {"StatisticsGen", "ImportSchemaGen"},
    "baseline_resolver": set(),
    "DataGate": {"CsvExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "baseline_resolver"},
    "served_model_statistics_resolver": set(),
    "ServingSkew": {"ImportSchemaGen", "served_model_statistics_resolver"},
    "span_window_resolver": {"DataGate"},
    "transform_cache_resolver": set(),
    "Transform": {"span_window_resolver", "transform_cache_resolver", "ImportSchemaGen"},
    "Trainer": {"span_window_resolver", "Transform", "ImportSchemaGen"},
    "latest_blessed_model_resolver": set(),
    "Evaluator": {"span_window_resolver", "Trainer", "latest_blessed_model_resolver"},
    "ServingCheck": {"CsvExampleGen", "Trainer", "Evaluator", "latest_blessed_model_resolver"},
    "AtomicPusher": {"Trainer", "Evaluator", "ServingCheck"},
}


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path_factory.mktemp("w")), "span": 201612})
    return node_runner.compile_pipeline(create_pipeline(c))


def test_components_and_edges(ir):
    upstream = {n.pipeline_node.node_info.id: set(n.pipeline_node.upstream_nodes) for n in ir.nodes}
    assert upstream == EXPECTED_UPSTREAM


def test_nodes_are_in_topological_order(ir):
    seen = set()
    for node in ir.nodes:
        assert set(node.pipeline_node.upstream_nodes) <= seen
        seen.add(node.pipeline_node.node_info.id)


def test_example_gen_ingests_exactly_the_span(ir):
    [gen] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "CsvExampleGen"]
    range_config = json.loads(gen.parameters.parameters["range_config"].field_value.string_value)
    assert range_config == {"static_range": {"start_span_number": 201612, "end_span_number": 201612}}


def test_serving_check_and_pusher_are_conditional_on_the_blessing(ir):
    for node_id in ("ServingCheck", "AtomicPusher"):
        [node] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == node_id]
        assert node.inputs.conditionals, f"{node_id} must be skipped, not run, when not blessed"


def test_serving_check_can_be_disabled(tmp_path):
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612, "enable_serving_check": False})
    upstream = _upstream(c)
    assert "ServingCheck" not in upstream and upstream["AtomicPusher"] == {"Trainer", "Evaluator"}


@pytest.mark.parametrize("action", ["block", "off"])
def test_serving_skew_blocks_training_or_is_left_out(tmp_path, action):
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612, "serving_skew": {"action": action}})
    upstream = _upstream(c)
    if action == "block":
        assert "ServingSkew" in upstream["Trainer"]
    else:
        assert "ServingSkew" not in upstream and "served_model_statistics_resolver" not in upstream


def test_span_is_required():
    c = config_lib.load(TAXI_CONFIG)
    with pytest.raises(ValueError, match="needs config.span"):
        create_pipeline(c)


def _upstream(config) -> dict:
    ir = node_runner.compile_pipeline(create_pipeline(config))
    return {n.pipeline_node.node_info.id: set(n.pipeline_node.upstream_nodes) for n in ir.nodes}


def test_digits_uses_the_same_graph_with_tfrecord_ingestion(tmp_path):
    from tests.conftest import DIGITS_CONFIG

    c = config_lib.load(DIGITS_CONFIG, {"workdir": str(tmp_path), "span": 201606})
    rename = lambda n: {"CsvExampleGen": "ImportExampleGen"}.get(n, n)
    expected = {rename(k): {rename(u) for u in v} for k, v in EXPECTED_UPSTREAM.items()}
    # Plus the on-device export its config turns on: after the push, reading the window.
    expected["TFLiteExport"] = {"Trainer", "span_window_resolver", "Evaluator", "AtomicPusher"}  # Evaluator: the Cond
    assert _upstream(c) == expected


def test_parquet_spans_use_the_same_graph_with_parquet_example_gen(tmp_path):
    # FileBasedExampleGen with the Parquet executor, its node id (the Airflow task id and the
    # MLMD node) ParquetExampleGen, reading span-YYYYMM/*.parquet with the ingestion settings.
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612, "example_format": "parquet"})
    rename = lambda n: {"CsvExampleGen": "ParquetExampleGen"}.get(n, n)
    assert _upstream(c) == {rename(k): {rename(u) for u in v} for k, v in EXPECTED_UPSTREAM.items()}
    ir = node_runner.compile_pipeline(create_pipeline(c))
    [gen] = [n for n in ir.nodes if n.pipeline_node.node_info.id == "ParquetExampleGen"]
    parameters = gen.pipeline_node.parameters.parameters
    assert json.loads(parameters["input_config"].field_value.string_value)["splits"][0]["pattern"] == (
        "span-{SPAN}/*.parquet")
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    deployment = pipeline_pb2.IntermediateDeploymentConfig()
    ir.deployment_config.Unpack(deployment)
    spec = executable_spec_pb2.BeamExecutableSpec()
    deployment.executor_specs["ParquetExampleGen"].Unpack(spec)
    assert spec.python_executor_spec.class_path == "components.example_gen.parquet_executor.Executor"
    assert c.example_gen_id == "ParquetExampleGen"


def test_warm_start_feeds_the_last_blessed_model_to_the_trainer(tmp_path):
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612})
    c = config_lib.replace(c, trainer={"warm_start": True})
    upstream = _upstream(c)
    assert upstream["Trainer"] == EXPECTED_UPSTREAM["Trainer"] | {"latest_blessed_model_resolver"}


def test_trainer_gets_toolkit_settings_and_executor(ir):
    [trainer] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "Trainer"]
    custom = json.loads(trainer.parameters.parameters["custom_config"].field_value.string_value)
    assert custom["trainer"]["backup_root"].endswith("pipeline_root/taxi/Trainer/backup")
    deployment = ir.deployment_config
    assert b"components.trainer.executor" in deployment.value


@pytest.mark.parametrize("setting, cached", [
    ({}, False),  # auto: the embedded months are far below analyzer_cache_from_mb
    ({"analyzer_cache_from_mb": 0}, True),  # auto, every window large enough
    ({"analyzer_cache": True}, True),
    ({"analyzer_cache": False}, False),
])
def test_transform_reads_the_analyzer_cache_only_where_chosen_and_keeps_its_edges(tmp_path, setting, cached):
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612, "transform": setting})
    ir = node_runner.compile_pipeline(create_pipeline(c))
    [transform] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "Transform"]
    assert ("analyzer_cache" in transform.inputs.inputs) == cached
    assert ("updated_analyzer_cache" in transform.outputs.outputs) == cached
    # The same nodes and edges either way: a DAG compiled once orders every run's tasks.
    assert {n.pipeline_node.node_info.id: set(n.pipeline_node.upstream_nodes) for n in ir.nodes} == EXPECTED_UPSTREAM


def test_a_bad_transform_setting_names_the_key(tmp_path):
    with pytest.raises(config_lib.ConfigError, match=r"transform.analyzer_cache: expected true or false, got 'on'"):
        config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "transform": {"analyzer_cache": "on"}})


@pytest.mark.parametrize("setting, engine, reason", [
    ({}, "in-memory", "unused: TFDV computes the statistics in memory (auto: 0.0 MB of span input < 32 MB"),
    ({"in_memory_below_mb": 0}, "beam", "auto: 0.0 MB of input < 256 MB"),  # auto, every span too large
    ({"engine": "beam"}, "beam", "auto: 0.0 MB of input < 256 MB"),
    ({"engine": "in-memory"}, "in-memory", "unused: TFDV computes the statistics in memory (configured"),
])
def test_statistics_gen_computes_in_memory_where_chosen_and_says_so(tmp_path, setting, engine, reason):
    from pipelines.factory import beam_choices
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612, "statistics": setting})
    ir = node_runner.compile_pipeline(create_pipeline(c))
    [stats] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "StatisticsGen"]
    assert stats.parameters.parameters["engine"].field_value.string_value == engine
    assert beam_choices(c)["StatisticsGen"].reason.startswith(reason)
    assert {n.pipeline_node.node_info.id: set(n.pipeline_node.upstream_nodes) for n in ir.nodes} == EXPECTED_UPSTREAM


def test_statistics_gen_on_another_beam_runner_stays_on_beam(tmp_path):
    from pipelines.factory import statistics_engine
    c = config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "span": 201612,
                                      "beam": {"nodes": {"StatisticsGen": {"profile": "direct-multiprocess"}}}})
    assert statistics_engine(c).engine == "beam"
    assert statistics_engine(c).reason == "auto: the node's Beam profile is direct-multiprocess"


@pytest.mark.parametrize("setting, error", [
    ({"engine": "fast"}, r"statistics.engine: 'fast' is not one of \['auto', 'in-memory', 'beam'\]"),
    ({"in_memory_below_mb": -1}, r"statistics.in_memory_below_mb: expected an integer >= 0, got -1"),
    ({"engin": "beam"}, r"statistics.*engin"),
])
def test_a_bad_statistics_setting_names_the_key(tmp_path, setting, error):
    with pytest.raises(config_lib.ConfigError, match=error):
        config_lib.load(TAXI_CONFIG, {"workdir": str(tmp_path), "statistics": setting})
