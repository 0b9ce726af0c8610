"""Trainer: TFX's Trainer whose executor records the training provenance on the Model."""

from tfx.dsl.components.base import executor_spec

from components.tfx_v1 import tfx
from components.trainer import executor


class Trainer(tfx.components.Trainer):
    """`tfx.components.Trainer` with `components.trainer.executor.Executor` (GenericExecutor,
    then the toolkit's provenance copied onto the Model artifact's custom properties).

    Same inputs, outputs and parameters; the node id stays `Trainer`.
    """

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
