"""The parts of TFX's public `tfx.v1` API this project uses, taken from the modules tfx.v1
re-exports them from (tfx/v1/*/__init__.py): the same objects, without tfx.v1's import cost.

`from tfx import v1` also imports `tfx.v1.extensions` (Google Cloud AI Platform, BigQuery,
Vertex clients): 8.6 of the 22.4 s an import of tfx.v1 took on this machine, paid by every
`retrain` process, every cold Airflow task and the warm runtime's start. Code reads as it
would against tfx.v1 (`from components.tfx_v1 import tfx`, then `tfx.components.Transform`,
`tfx.dsl.Resolver`); tests/test_layers.py checks each name is tfx.v1's own object.
"""

from __future__ import annotations

import types

from tfx import components as _components
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.experimental.conditionals.conditional import Cond
from tfx.orchestration.pipeline import Pipeline
from tfx.proto import example_gen_pb2, pusher_pb2, range_config_pb2, trainer_pb2
from tfx.types import standard_artifacts
from tfx.types.channel import Channel

tfx = types.SimpleNamespace(
    components=types.SimpleNamespace(ImportSchemaGen=ImportSchemaGen, **{name: getattr(_components, name) for name in (
        "CsvExampleGen", "ImportExampleGen", "StatisticsGen", "ExampleValidator", "Transform", "Trainer", "Tuner",
        "Evaluator", "Pusher")}),
    dsl=types.SimpleNamespace(Pipeline=Pipeline, Resolver=Resolver, Channel=Channel, Cond=Cond),
    proto=types.SimpleNamespace(
        TrainArgs=trainer_pb2.TrainArgs, EvalArgs=trainer_pb2.EvalArgs, PushDestination=pusher_pb2.PushDestination,
        Input=example_gen_pb2.Input, Output=example_gen_pb2.Output, SplitConfig=example_gen_pb2.SplitConfig,
        RangeConfig=range_config_pb2.RangeConfig, StaticRange=range_config_pb2.StaticRange),
    types=types.SimpleNamespace(standard_artifacts=types.SimpleNamespace(**{name: getattr(standard_artifacts, name)
                                                                            for name in ("Examples", "ExampleStatistics",
                                                                                         "Model", "ModelBlessing",
                                                                                         "TransformCache",
                                                                                         "HyperParameters")})),
)
