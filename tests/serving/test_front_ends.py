"""gRPC's front-end processes (serving/server/grpc_front.py) under faults: one killed is replaced
on the same port while the model process and REST go on; the model process killed takes its
front ends with it (nothing left holding the port); a taken port is a clear error."""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import grpc
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.conftest import REPO
from tests.serving.toy_model import predict_request, rest_body
from tests.waiting import until


def _predict(target: str, x: float, timeout: float = 10) -> list[float]:
    with grpc.insecure_channel(target) as channel:
        return list(prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            predict_request(x), timeout=timeout).outputs["y"].float_val)


def _rest_predict(url: str, x: float) -> list:
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/models/toy:predict", data=rest_body(x)),
                                timeout=10) as r:
        return json.load(r)["predictions"]


def _front_ends(pid: int) -> list[int]:
    """The model process's children running serving.server.grpc_front."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(line.split()[0]) for line in out.splitlines() if "serving.server.grpc_front" in line)


def _until(check, seconds: float, what: str):
    return until(check, seconds, what, ignore=(grpc.RpcError,))


def test_a_killed_front_end_is_replaced_and_the_model_keeps_serving(start_server, toy_base):
    server = start_server("--model-name", "toy", "--model-base-path", str(toy_base), "--grpc-processes", "2")
    fronts = _front_ends(server.proc.pid)
    assert len(fronts) == 2, fronts
    assert _predict(server.grpc_target, 1.0) == [2.0]

    os.kill(fronts[0], signal.SIGKILL)
    assert _rest_predict(server.url, 3.0) == [[6.0]]  # the model process did not notice
    # New connections reach the other front end at once, and the replacement soon.
    assert _until(lambda: _predict(server.grpc_target, 4.0, timeout=2) == [8.0], 10, "gRPC answers")
    replaced = _until(lambda: (lambda now: now if len(now) == 2 and fronts[0] not in now else None)(
        _front_ends(server.proc.pid)), 30, "a second front end again")
    # Both originals gone: only the replacements answer, on the same port.
    os.kill(fronts[1], signal.SIGKILL)
    _until(lambda: fronts[1] not in _front_ends(server.proc.pid) and len(_front_ends(server.proc.pid)) == 2, 30,
           "the other original replaced")
    for x in range(8):
        assert _until(lambda x=x: _predict(server.grpc_target, float(x), timeout=2) == [2.0 * x], 10, "gRPC answers")
    log = open(server.log.name).read()
    assert f"gRPC front end {fronts[0]} exited (code -9); starting another on port {server.grpc}" in log, log[-3000:]
    assert len(set(replaced) - set(fronts)) == 1, (replaced, fronts)  # a new process, not a revived one


def test_the_front_ends_leave_with_the_model_process(start_server, toy_base):
    server = start_server("--model-name", "toy", "--model-base-path", str(toy_base))
    fronts = _front_ends(server.proc.pid)
    assert len(fronts) == 1 and _predict(server.grpc_target, 1.0) == [2.0]
    os.kill(server.proc.pid, signal.SIGKILL)  # no chance to stop them itself
    _until(lambda: not os.path.exists(f"/proc/{fronts[0]}") or "Z" in open(f"/proc/{fronts[0]}/stat").read().split()[2],
           15, "the front end exited")
    with socket.socket() as s:  # the port is free again: a new server can listen on it
        # As every server binds (gRPC too): the killed front end's accepted connection may sit
        # in TIME_WAIT on this port, which refuses a plain bind but not a listener's; a port
        # still listened on by a live front end refuses both.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", server.grpc))
        s.listen()


def test_a_taken_grpc_port_is_a_clear_error(tmp_path, toy_base):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "retrain.cli", "serve", "--model-name", "toy", "--model-base-path", str(toy_base),
             "--rest-port", "0", "--grpc-port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"gRPC cannot listen on 127.0.0.1:{port} (is the port in use?)" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("processes", ["0", "x"])
def test_grpc_processes_must_be_a_positive_number(processes):
    proc = subprocess.run([sys.executable, "-m", "serving", "--grpc-processes", processes], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--grpc-processes" in proc.stderr, proc.stderr
