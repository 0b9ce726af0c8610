"""The local model server: the model manager and REST in one process, gRPC in front-end
processes it starts (serving/server/grpc_service.py).

`python -m serving` and `retrain serve` run it; the pre-push check and the tests start it as a subprocess. Ports
0 pick free ones; `--port-file` receives the chosen ports once the first poll has loaded
what it could, so a caller knows when to send requests.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading

from core import files
from serving.errors import InvalidArgument
from serving.repository import model_config
from serving.server import grpc_service
from serving.server.batching import BatchOptions
from serving.server.manager import ModelManager
from serving.server.metrics import Metrics
from serving.server.request_log import LogLimits
from serving.server.rest import DEFAULT_MAX_BODY_BYTES, RestServer

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    rest_port: int = 8501
    grpc_port: int = 8500
    poll_seconds: float = 1.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    batch: BatchOptions = BatchOptions()
    port_file: str | None = None
    log_limits: LogLimits = LogLimits()
    # --require-signed: versions load only if signed by one of these public keys.
    trusted_keys: tuple[str, ...] = ()
    # TF Serving's --tensorflow_{intra,inter}_op_parallelism; 0 lets TensorFlow pick (one per core).
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    # gRPC front-end processes (serving/server/grpc_front.py); more than one share the port.
    grpc_processes: int = 1


def configure_tensorflow(options: ServerOptions) -> tuple[int, int]:
    """Sets TensorFlow's thread pools before anything runs on them; returns (intra, inter)
    as set (0: TensorFlow's own choice).

    Raises:
      InvalidArgument: TensorFlow already ran something in this process (pools are fixed then).
    """
    import tensorflow as tf

    wanted = (options.intra_op_threads, options.inter_op_threads)
    current = (tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads())
    if current != wanted:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(wanted[0])
            tf.config.threading.set_inter_op_parallelism_threads(wanted[1])
        except RuntimeError as e:
            raise InvalidArgument(f"cannot set TensorFlow's thread pools to {wanted[0]}/{wanted[1]} now: {e}") from e
    return wanted


class LocalModelServer:
    def __init__(self, config: model_config.ModelServerConfig, options: ServerOptions, config_path: str | None = None):
        self.options = options
        self.tensorflow_threads = configure_tensorflow(options)
        self.metrics = Metrics()
        self.manager = ModelManager(config, config_path, options.poll_seconds, options.batch, self.metrics,
                                    options.log_limits, options.trusted_keys)
        self.rest = RestServer((options.host, options.rest_port), self.manager, self.metrics, options.max_body_bytes)
        self.grpc = grpc_service.GrpcServer(self.manager, self.metrics, options.host, options.grpc_port,
                                            options.max_body_bytes, options.grpc_processes)
        self.rest_port = self.rest.server_address[1]
        self._rest_thread = threading.Thread(target=self.rest.serve_forever, name="rest", daemon=True)

    @property
    def grpc_port(self) -> int:
        """The gRPC port (the chosen one once started, when 0 was asked for)."""
        return self.grpc.port

    def start(self) -> None:
        self.manager.start()  # first poll: loads what is there before ports are announced
        self.grpc.start()
        self._rest_thread.start()
        logger.info("serving %s: REST on %s:%d, gRPC on %s:%d (front-end processes %s); "
                    "TensorFlow threads: intra-op %d, inter-op %d", self.manager.model_names(), self.options.host,
                    self.rest_port, self.options.host, self.grpc_port, self.grpc.pids, *self.tensorflow_threads)
        if self.options.port_file:
            files.write_text(self.options.port_file,
                             json.dumps({"rest": self.rest_port, "grpc": self.grpc_port, "pid": os.getpid()}))

    def stop(self) -> None:
        self.rest.shutdown()
        self.grpc.stop(grace=2)
        self.manager.stop()  # after the last request: closes the request logs

    def wait(self) -> None:
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
        self.stop()
