"""AtomicPusher: TFX's Pusher with an executor whose pushes are atomic."""

from tfx.components import Pusher  # = tfx.v1.components.Pusher, without tfx.v1's GCP imports
from tfx.dsl.components.base import executor_spec

from components.atomic_pusher import executor


class AtomicPusher(Pusher):
    """Same inputs, outputs and id ("Pusher") as the stock component."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
