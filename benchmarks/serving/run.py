"""Serving throughput and latency of the taxi model: REST and gRPC through `retrain serve`
vs the same SavedModel called in-process (the ceiling), at several concurrencies; then the
cost of request logging (TF Serving's LoggingConfig) at sampling rates 0, 0.1 and 1.0.

Each request carries one real tf.Example from the eval split (clients send single
examples; the server batches concurrent ones). In-process calls use the same batch size
from the same number of threads. Client and server share this machine's cores.

Two load generators, side by side in one invocation:
- `python`: http.client and grpcio stubs, one connection per client thread (what a Python
  user's code costs). On a small machine the client then takes a large share of the cores
  the server needs: grpcio's client costs ~0.3 ms of CPU per call, its server about as much.
- `h2load` (nghttp2's load generator, C; Debian's nghttp2-client, installed by
  `scripts/services.sh install` when missing and run as root): the same requests, HTTP/1.1 for REST and HTTP/2 gRPC frames for
  gRPC, each of `c` connections with one request in flight, so the figures are the server's.
  It sends one example (the first) every time, and reads gRPC's status from the server's
  /metrics (h2load sees HTTP 200 either way).

  .venv/bin/python benchmarks/serving/run.py [--seconds 5] [--concurrency 1,8,32]
                                             [--clients python,h2load]
                                             [--log-rates 0,0.1,1.0] [--log-concurrency 8]
                                             [--server-arg=--grpc-processes=2 ...]
"""

from __future__ import annotations

import argparse
import base64
import glob
import http.client
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import numpy as np

from core import keras_env  # noqa: F401  (before TensorFlow)


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--clients", default="python,h2load", help="load generators, in order (python, h2load)")
    p.add_argument("--log-rates", default="0,0.1,1.0", help="request log sampling rates to compare")
    p.add_argument("--log-concurrency", type=int, default=8)
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "bench-serving"))
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="passed to `retrain serve` (repeatable), e.g. --server-arg=--grpc-processes=2")
    p.add_argument("--json")
    return p.parse_args(argv)


def _model_and_examples(workdir: str) -> tuple[str, list[bytes]]:
    base = os.path.join(workdir, "serving", "taxi")
    if not (os.path.isdir(base) and any(v.isdigit() for v in os.listdir(base))):
        sys.stderr.write(f"[bench] no pushed taxi model under {workdir}: running the pipeline once\n")
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "retrain"), "run", "--workdir", workdir],
                       check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(workdir, "pipeline_root", "taxi", "CsvExampleGen", "examples", "*", "Split-eval", "*")))
    from components.serving_check.executor import read_examples

    return base, read_examples(files, 256)


def _load(fn, concurrency: int, seconds: float) -> dict:
    """Runs fn() from `concurrency` threads for `seconds`; requests/s and latency percentiles."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0]
    stop = time.perf_counter() + seconds

    def worker(i):
        call = fn(i)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                call()
            except Exception:  # noqa: BLE001  counted, reported
                errors[0] += 1
            latencies[i].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    flat = np.array([x for lat in latencies for x in lat]) * 1000
    return {"rps": round(len(flat) / wall, 1), "p50_ms": round(float(np.percentile(flat, 50)), 2),
            "p99_ms": round(float(np.percentile(flat, 99)), 2), "errors": errors[0]}


def _ensure_h2load() -> str | None:
    """h2load's path; installs Debian's nghttp2-client once when missing (scripts/services.sh,
    as root)."""
    if not shutil.which("h2load"):
        installed = subprocess.run([os.path.join(REPO, "scripts", "services.sh"), "install", "nghttp2-client", "h2load"])
        if installed.returncode != 0:
            sys.stderr.write("[bench] no h2load: python clients only\n")
    return shutil.which("h2load")


def _server_outcomes(rest_port: int, api_name: str) -> dict[str, float]:
    """The server's request counts by outcome for one API (retrain_serving_requests_total)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{rest_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "retrain_serving_requests_total" and sample.labels["api"] == api_name:
                counts[sample.labels["code"]] = counts.get(sample.labels["code"], 0.0) + sample.value
    return counts


def _h2load(h2load: str, ports: dict, transport: str, body_file: str, concurrency: int, seconds: float) -> dict:
    """One h2load run: requests/s and latency percentiles from its per-request log; errors are
    h2load's failures plus the requests the server answered with anything but OK."""
    if transport == "REST":
        url, api_name = f"http://127.0.0.1:{ports['rest']}/v1/models/taxi:predict", "predict"
        extra = ["--h1", "-H", "content-type: application/json"]
    else:
        url, api_name = f"http://127.0.0.1:{ports['grpc']}/tensorflow.serving.PredictionService/Predict", "grpc_predict"
        extra = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    with tempfile.NamedTemporaryFile(suffix=".tsv") as log:
        before = _server_outcomes(ports["rest"], api_name)
        out = subprocess.run([h2load, "-D", f"{seconds:g}", "-c", str(concurrency), "-m", "1", "-d", body_file,
                              "--log-file", log.name, *extra, url], capture_output=True, text=True, check=True).stdout
        after = _server_outcomes(ports["rest"], api_name)
        rows = [line.split("\t") for line in open(log.name) if line.strip()]
    done = [r for r in rows if r[1] == "200"]
    counts = re.search(r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    if not counts:
        raise SystemExit(f"h2load's summary not understood:\n{out[-2000:]}")
    failed = max(len(rows) - len(done), sum(int(x) for x in counts.groups()))
    # CANCELLED: the requests in flight when h2load stops (it resets its streams), not errors.
    not_ok = sum(v - before.get(k, 0.0) for k, v in after.items() if k not in ("OK", "CANCELLED"))
    latency = np.array([int(r[2]) for r in done], dtype=float) / 1000.0
    return {"rps": round(len(done) / seconds, 1), "p50_ms": round(float(np.percentile(latency, 50)), 2),
            "p99_ms": round(float(np.percentile(latency, 99)), 2), "errors": int(failed + not_ok)}


def _start_server(base: str, workdir: str, extra: list[str]) -> tuple[subprocess.Popen, dict]:
    port_file = os.path.join(workdir, "bench-ports.json")
    if os.path.exists(port_file):
        os.remove(port_file)
    server = subprocess.Popen(
        [sys.executable, "-m", "retrain.cli", "serve", "--model-name", "taxi", "--model-base-path", base,
         "--rest-port", "0", "--grpc-port", "0", "--port-file", port_file, *extra],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    while not os.path.exists(port_file):
        if server.poll() is not None:
            raise SystemExit("retrain serve exited before serving")
        time.sleep(0.2)
    time.sleep(0.2)  # the file is written atomically; give the server a moment past it
    return server, json.load(open(port_file))


def _stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


def _clients(ports: dict, bodies: list[bytes], requests: list):
    """(REST factory, gRPC factory, gRPC channel) for the server on `ports`."""
    import grpc

    # One connection per client thread, as REST's clients have (and as gRPC's performance
    # guide advises for concurrent streams from one process).
    channels: list = []

    def rest(i):
        conn = http.client.HTTPConnection("127.0.0.1", ports["rest"], timeout=30)
        n = [i]

        def call():
            n[0] = (n[0] + 1) % len(bodies)
            conn.request("POST", "/v1/models/taxi:predict", bodies[n[0]], {"Content-Type": "application/json"})
            resp = conn.getresponse()
            payload = resp.read()
            if resp.status != 200:
                raise RuntimeError(payload)
        return call

    def grpc_call(i):
        # Like the REST client: the request is encoded once, the reply read as bytes (a failed
        # RPC raises). Parsing either side's reply is the client's business, not the server's.
        channels.append(grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}", options=[("grpc.use_local_subchannel_pool", 1)]))
        predict = channels[-1].unary_unary("/tensorflow.serving.PredictionService/Predict")
        n = [i]

        def call():
            n[0] = (n[0] + 1) % len(requests)
            predict(requests[n[0]], timeout=30)
        return call

    class _Channels:
        def close(self):
            for c in channels:
                c.close()

    return rest, grpc_call, _Channels()


def main(argv=None) -> int:
    args = _args(argv)
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    base, examples = _model_and_examples(args.workdir)
    version = max(int(v) for v in os.listdir(base) if v.isdigit())
    fn = tf.saved_model.load(os.path.join(base, str(version))).signatures["serving_default"]
    bodies = [json.dumps({"instances": [{"b64": base64.b64encode(e).decode()}]}).encode() for e in examples]
    requests = []
    for e in examples:
        r = predict_pb2.PredictRequest()
        r.model_spec.name = "taxi"
        r.inputs["examples"].CopyFrom(tf.make_tensor_proto([e]))
        requests.append(r.SerializeToString())
    tensors = [tf.constant([e]) for e in examples]

    def in_process(i):
        n = [i]

        def call():
            n[0] = (n[0] + 1) % len(tensors)
            fn(examples=tensors[n[0]])["outputs"].numpy()
        return call

    clients = [x for x in args.clients.split(",") if x]
    unknown = set(clients) - {"python", "h2load"}
    if unknown:
        raise SystemExit(f"--clients: unknown {sorted(unknown)}; use python and/or h2load")
    h2load = _ensure_h2load() if "h2load" in clients else None
    if "h2load" in clients and not h2load:
        clients.remove("h2load")
    scratch = tempfile.mkdtemp(prefix="bench-serving-")
    body_files = {"REST": os.path.join(scratch, "predict.json"), "gRPC": os.path.join(scratch, "predict.grpc")}
    with open(body_files["REST"], "wb") as f:
        f.write(bodies[0])
    with open(body_files["gRPC"], "wb") as f:  # gRPC's length-prefixed message, uncompressed
        f.write(b"\0" + struct.pack(">I", len(requests[0])) + requests[0])

    def measure(client: str, transport: str, ports: dict, python_clients, c: int) -> dict:
        """A 1 s warm-up, then the measured run."""
        if client == "python":
            factory = python_clients[0] if transport == "REST" else python_clients[1]
            _load(factory, c, 1.0)
            return _load(factory, c, args.seconds)
        _h2load(h2load, ports, transport, body_files[transport], c, 1.0)
        return _h2load(h2load, ports, transport, body_files[transport], c, args.seconds)

    print(f"serving benchmark: taxi version {version}, 1 example per request, {args.seconds:.0f} s per cell, "
          f"{os.cpu_count()} cores shared by client and server; load generators: {', '.join(clients)}")
    rows = []
    server, ports = _start_server(base, args.workdir, args.server_arg)
    try:
        python_clients = _clients(ports, bodies, requests)
        for c in [int(x) for x in args.concurrency.split(",")]:
            _load(in_process, c, 1.0)  # warm up
            cells = [("-", "in-process")] + [(client, t) for client in clients for t in ("REST", "gRPC")]
            for client, name in cells:
                result = _load(in_process, c, args.seconds) if name == "in-process" else measure(client, name, ports, python_clients, c)
                r = {"client": client, "transport": name, "concurrency": c, **result}
                rows.append(r)
                print(f"  c={c:<3} {client:<7} {name:<10} {r['rps']:>8.1f} req/s  p50 {r['p50_ms']:>7.2f} ms"
                      f"  p99 {r['p99_ms']:>7.2f} ms  errors {r['errors']}", flush=True)
        python_clients[2].close()
    finally:
        _stop(server)
    print()
    print(f"{'concurrency':>11} {'client':<7} {'transport':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'vs in-process':>14} {'errors':>7}")
    ceiling = {r["concurrency"]: r["rps"] for r in rows if r["transport"] == "in-process"}
    for r in rows:
        print(f"{r['concurrency']:>11} {r['client']:<7} {r['transport']:<10} {r['rps']:>8.1f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['rps'] / ceiling[r['concurrency']]:>14.2f} {r['errors']:>7}")

    logging_rows = []
    c = args.log_concurrency
    for rate in [float(x) for x in args.log_rates.split(",")]:
        extra = []
        if rate:
            prefix = os.path.join(args.workdir, "bench-request-logs", f"rate-{rate}", "log")
            extra = ["--request-log-sampling-rate", str(rate), "--request-log-prefix", prefix]
        server, ports = _start_server(base, args.workdir, args.server_arg + extra)
        try:
            python_clients = _clients(ports, bodies, requests)
            for client in clients:
                for name in ("REST", "gRPC"):
                    r = {"sampling_rate": rate, "client": client, "transport": name, "concurrency": c,
                         **measure(client, name, ports, python_clients, c)}
                    logging_rows.append(r)
            python_clients[2].close()
        finally:
            _stop(server)
    shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(f"request logging at concurrency {c}:")
    print(f"{'sampling':>9} {'client':<7} {'transport':<10} {'req/s':>8} {'p99 ms':>8} {'req/s vs off':>13} {'errors':>7}")
    off = {(r["client"], r["transport"]): r for r in logging_rows if r["sampling_rate"] == 0}
    for r in logging_rows:
        ref = off.get((r["client"], r["transport"]))
        ratio = f"{r['rps'] / ref['rps']:.2f}" if ref else "-"
        print(f"{r['sampling_rate']:>9g} {r['client']:<7} {r['transport']:<10} {r['rps']:>8.1f} {r['p99_ms']:>8.2f} "
              f"{ratio:>13} {r['errors']:>7}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"transports": rows, "request_logging": logging_rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
