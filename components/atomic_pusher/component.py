"""AtomicPusher: TFX's Pusher with an executor whose pushes are atomic."""

from tfx.components import Pusher  # = tfx.v1.components.Pusher, without tfx.v1's GCP imports
from tfx.dsl.components.base import executor_spec

from components.atomic_pusher import executor


class AtomicPusher(Pusher):
    """Same inputs and outputs as the stock component; its node id is `core.nodes.PUSHER`."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
