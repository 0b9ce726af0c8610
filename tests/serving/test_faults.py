"""Clients that give up: gRPC calls cancelled or past their deadline, REST connections
closed before the answer. The server must go on answering everyone else, and count those
requests as CANCELLED, not as its own errors.

Found with a load generator (h2load) that stops mid-request: a cancelled request's Future
killed the batch thread, after which every predict on REST and gRPC hung.
"""

import json
import socket
import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests.serving.toy_model import predict_request, rest_body

ROUNDS = 40
PER_ROUND = 16


def _counts(url: str) -> dict[tuple[str, str], float]:
    """retrain_serving_requests_total by (api, code)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        families = text_string_to_metric_families(r.read().decode())
    return {(s.labels["api"], s.labels["code"]): s.value for family in families for s in family.samples
            if s.name == "retrain_serving_requests_total"}


def test_clients_that_give_up_do_not_stop_the_server(start_server, toy_base):
    server = start_server("--model-name", "toy", "--model-base-path", str(toy_base))
    channel = grpc.insecure_channel(server.grpc_target)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.Predict(predict_request(1.0), timeout=30)

    # gRPC: bursts of calls cancelled at once (half of them with an output filter, whose
    # answer is derived from the batch's), and calls whose deadline is too short to meet.
    cancelled = 0
    for r in range(ROUNDS):
        calls = [stub.Predict.future(predict_request(float(r * PER_ROUND + i), ("y",) if i % 2 else ()), timeout=30)
                 for i in range(PER_ROUND)]
        cancelled += sum(call.cancel() for call in calls)
        for i in range(4):
            try:
                stub.Predict(predict_request(float(i)), timeout=0.0005)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert cancelled > 0

    # REST: the request is sent whole, then the connection closed before the reply.
    body = rest_body(3.0)
    for _ in range(ROUNDS):
        with socket.create_connection(("127.0.0.1", server.rest), timeout=30) as s:
            s.sendall(b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close

    # Everyone else is still answered, on both APIs.
    for x in (2.0, 5.0):
        out = stub.Predict(predict_request(x), timeout=10).outputs["y"]
        assert list(out.float_val) == [2 * x]  # version 2 answers y = 2x
        req = urllib.request.Request(server.url + "/v1/models/toy:predict", method="POST",
                                     data=rest_body(x))
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp) == {"predictions": [[2 * x]]}
    channel.close()

    counts = _counts(server.url)
    assert counts.get(("grpc_predict", "CANCELLED"), 0) > 0, counts
    assert not [k for k in counts if k[1] == "INTERNAL"], counts
    log = open(server.log.name).read()
    assert "InvalidStateError" not in log and "Traceback" not in log, log[-3000:]
