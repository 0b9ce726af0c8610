"""Fixtures: a toy model base path, and a server over it: `retrain serve` as a subprocess
(`start_server`, where the process is under test: signals, front ends, logs) or in this
process (`serve_in_process`, where only what it answers is: versions, labels, request logs).

Set SERVING_BASE_URL (and SERVING_GRPC_TARGET) to run the conformance tests against another
server, e.g. TensorFlow Serving serving `python -m tests.serving.toy_model DIR 1 2` as model
`toy`; tests that need to change what is served then skip.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.serving import toy_model


class Server:
    def __init__(self, args, tmp_path):
        self.port_file = str(tmp_path / f"ports-{time.monotonic_ns()}.json")
        self.log = open(tmp_path / "server.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retrain.cli", "serve", "--rest-port", "0", "--grpc-port", "0",
             "--port-file", self.port_file, *args],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.time() + 120
        while not os.path.exists(self.port_file):
            assert self.proc.poll() is None, f"server exited: {open(tmp_path / 'server.log').read()[-3000:]}"
            assert time.time() < deadline, "server did not start in 120 s"
            time.sleep(0.1)
        ports = json.load(open(self.port_file))
        self.rest, self.grpc = ports["rest"], ports["grpc"]
        self.url = f"http://127.0.0.1:{self.rest}"
        self.grpc_target = f"127.0.0.1:{self.grpc}"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


class InProcessServer:
    """The server `retrain serve ARGS` starts, built from the same options in this process:
    the same REST and gRPC sockets (and gRPC front-end processes), without an interpreter's
    start and TensorFlow's import per test."""

    def __init__(self, args):
        from serving.server import main

        options = main.parser().parse_args(["--rest-port", "0", "--grpc-port", "0", *args])
        config, config_path = main.model_config_from_args(options)
        self.server = main.build_server(options, config, config_path)
        self.server.start()
        self.rest, self.grpc = self.server.rest_port, self.server.grpc_port
        self.url = f"http://127.0.0.1:{self.rest}"
        self.grpc_target = f"127.0.0.1:{self.grpc}"
        self._stopped = False

    def stop(self):
        if not self._stopped:
            self._stopped = True
            self.server.stop()


@pytest.fixture
def serve_in_process():
    servers = []

    def start(*args):
        servers.append(InProcessServer(list(args)))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def start_server(tmp_path):
    servers = []

    def start(*args):
        servers.append(Server(list(args), tmp_path))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def toy_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("toy")
    toy_model.save(str(base / "1"), 1)
    toy_model.save(str(base / "2"), 2)
    return base
