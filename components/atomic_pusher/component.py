"""AtomicPusher: TFX's Pusher with an executor whose pushes are atomic."""

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from components.atomic_pusher import executor


class AtomicPusher(tfx.components.Pusher):
    """Same inputs, outputs and id ("Pusher") as the stock component."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
