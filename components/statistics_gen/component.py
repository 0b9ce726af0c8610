"""TFX's StatisticsGen with one more parameter: the engine that computes the statistics
(`in-memory` or `beam`, chosen per run by the `statistics:` block, settings.py).

Node id, inputs, output and artifact are TFX's, and the executor stays a Beam executor, so
the node's Beam profile (`with_beam_pipeline_args`) applies whenever it runs on Beam.
"""

from __future__ import annotations

import tensorflow_data_validation as tfdv
from tfx import types
from tfx.components.statistics_gen import component as tfx_component
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import json_utils

from components.statistics_gen import executor

ENGINE_KEY = executor.ENGINE_KEY


class StatisticsGenSpec(standard_component_specs.StatisticsGenSpec):
    PARAMETERS = {
        **standard_component_specs.StatisticsGenSpec.PARAMETERS,
        # in-memory or beam (absent: beam, TFX's executor).
        ENGINE_KEY: ExecutionParameter(type=str, optional=True),
    }


class StatisticsGen(tfx_component.StatisticsGen):
    """Statistics of each split of `examples`, computed by `engine`.

    Args:
      examples: the span's examples.
      stats_options: TFDV's options (as TFX's StatisticsGen takes them).
      engine: `in-memory` (TFDV over each whole split in the executor's process) or `beam`.
    """

    SPEC_CLASS = StatisticsGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, examples: types.BaseChannel, stats_options: tfdv.StatsOptions | None = None,
                 engine: str = "beam"):
        if engine not in ("in-memory", "beam"):
            raise ValueError(f"StatisticsGen engine: {engine!r} is not one of ['in-memory', 'beam']")
        spec = StatisticsGenSpec(
            examples=examples,
            stats_options_json=stats_options.to_json() if stats_options else None,
            exclude_splits=json_utils.dumps([]),
            statistics=types.Channel(type=standard_artifacts.ExampleStatistics),
            **{ENGINE_KEY: engine})
        base_beam_component.BaseBeamComponent.__init__(self, spec=spec)
