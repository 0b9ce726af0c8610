"""ImportSchemaGen with features not ingested: the imported schema leaves them out (and a
sparse feature built on them), keeps everything else as it is, and refuses a name the
schema does not have."""

import os

import pytest
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import io_utils

from components.import_schema_gen import component, executor
from tests.conftest import TAXI_SCHEMA


def _run(tmp_path, not_ingested: str | None):
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / "out")
    os.makedirs(schema.uri, exist_ok=True)
    props = {standard_component_specs.SCHEMA_FILE_KEY: TAXI_SCHEMA}
    if not_ingested is not None:
        props[executor.NOT_INGESTED_KEY] = not_ingested
    executor.Executor().Do({}, {standard_component_specs.SCHEMA_KEY: [schema]}, props)
    return io_utils.SchemaReader().read(os.path.join(schema.uri, "schema.pbtxt"))


def test_the_imported_schema_leaves_out_the_features_not_ingested(tmp_path):
    full = io_utils.SchemaReader().read(TAXI_SCHEMA)
    assert _run(tmp_path / "a", None) == full  # nothing named: TFX's copy
    less = _run(tmp_path / "b", '["pickup_census_tract", "dropoff_census_tract"]')
    names = [f.name for f in less.feature]
    assert names == [f.name for f in full.feature if "census_tract" not in f.name]
    assert {f.name: f for f in less.feature}["fare"] == {f.name: f for f in full.feature}["fare"]


def test_a_sparse_feature_on_a_dropped_feature_goes_too_and_unknown_names_are_refused():
    schema = schema_pb2.Schema()
    for name in ("idx", "val", "x"):
        schema.feature.add(name=name, type=schema_pb2.INT)
    sparse = schema.sparse_feature.add(name="s")
    sparse.index_feature.add(name="idx")
    sparse.value_feature.name = "val"
    less = executor.without(schema, ["idx"])
    assert [f.name for f in less.feature] == ["val", "x"] and not less.sparse_feature
    assert len(schema.feature) == 3  # the input is not changed
    with pytest.raises(ValueError, match=r"features not ingested \['nope'\] are not in the schema"):
        executor.without(schema, ["nope"])


def test_the_component_keeps_tfxs_node_id_and_records_the_features():
    node = component.ImportSchemaGen(schema_file=TAXI_SCHEMA, not_ingested=["b", "a"])
    assert node.id == "ImportSchemaGen"
    assert node.exec_properties[component.NOT_INGESTED_KEY] == '["a", "b"]'
    assert component.NOT_INGESTED_KEY not in component.ImportSchemaGen(schema_file=TAXI_SCHEMA).exec_properties
