"""Tuner: TFX's Tuner that searches on a schedule and passes the last search on between."""

from __future__ import annotations

from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter

from components.tfx_v1 import tfx
from components.tuner import executor

PREVIOUS_KEY = executor.PREVIOUS_KEY


class TunerSpec(standard_component_specs.TunerSpec):
    """TFX's TunerSpec plus `previous`: the last best hyperparameters (a Resolver's output)."""

    INPUTS = {**standard_component_specs.TunerSpec.INPUTS,
              PREVIOUS_KEY: ChannelParameter(type=standard_artifacts.HyperParameters, optional=True)}


class Tuner(tfx.components.Tuner):
    """`tfx.components.Tuner` with `components.tuner.executor.Executor`: a KerasTuner search
    when the `tuning:` schedule says so (custom_config["tuning"]), else the `previous` best
    hyperparameters passed on unchanged. Node id `Tuner`."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, *, previous=None, **kwargs):
        super().__init__(**kwargs)
        old = self.spec
        self.spec = TunerSpec(**old.inputs, **old.outputs, **old.exec_properties,
                              **({PREVIOUS_KEY: previous} if previous is not None else {}))
