"""create_pipeline(config): exactly the expected components, edges and settings."""

import json

import pytest

from pipelines import config as config_lib
from pipelines.factory import create_pipeline
from retrain import node_runner
from tests.conftest import TAXI_CONFIG

EXPECTED_UPSTREAM = {
    "CsvExampleGen": set(),
    "StatisticsGen": {"CsvExampleGen"},
    "ImportSchemaGen": set(),
    "ExampleValidator": {"StatisticsGen", "ImportSchemaGen"},
    "baseline_resolver": set(),
    "DataGate": {"CsvExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "baseline_resolver"},
    "span_window_resolver": {"DataGate"},
    "Transform": {"span_window_resolver", "ImportSchemaGen"},
    "Trainer": {"span_window_resolver", "Transform", "ImportSchemaGen"},
    "latest_blessed_model_resolver": set(),
    "Evaluator": {"span_window_resolver", "Trainer", "latest_blessed_model_resolver"},
    "AtomicPusher": {"Trainer", "Evaluator"},
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


def test_pusher_is_conditional_on_the_blessing(ir):
    [pusher] = [n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "AtomicPusher"]
    assert pusher.inputs.conditionals, "Pusher must be skipped, not run, when not blessed"


def test_span_is_required():
    c = config_lib.load(TAXI_CONFIG)
    with pytest.raises(ValueError, match="needs config.span"):
        create_pipeline(c)
