"""Serving throughput and latency of the taxi model: REST and gRPC through `retrain serve`
vs the same SavedModel called in-process (the ceiling), at several concurrencies; then the
cost of request logging (TF Serving's LoggingConfig) at sampling rates 0, 0.1 and 1.0.

Each request carries one real tf.Example from the eval split (clients send single
examples; the server batches concurrent ones). In-process calls use the same batch size
from the same number of threads. Client and server share this machine's cores.

  .venv/bin/python benchmarks/serving/run.py [--seconds 5] [--concurrency 1,8,32]
                                             [--log-rates 0,0.1,1.0] [--log-concurrency 8]
"""

from __future__ import annotations

import argparse
import base64
import glob
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import numpy as np

from core import keras_env  # noqa: F401  (before TensorFlow)


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--log-rates", default="0,0.1,1.0", help="request log sampling rates to compare")
    p.add_argument("--log-concurrency", type=int, default=8)
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "bench-serving"))
    p.add_argument("--json")
    return p.parse_args(argv)


def _model_and_examples(workdir: str) -> tuple[str, list[bytes]]:
    base = os.path.join(workdir, "serving", "taxi")
    if not (os.path.isdir(base) and any(v.isdigit() for v in os.listdir(base))):
        sys.stderr.write(f"[bench] no pushed taxi model under {workdir}: running the pipeline once\n")
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "retrain"), "run", "--workdir", workdir],
                       check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(os.path.join(workdir, "pipeline_root", "taxi", "CsvExampleGen", "examples", "*", "Split-eval", "*")))
    from serving.check import read_examples

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

    print(f"serving benchmark: taxi version {version}, 1 example per request, {args.seconds:.0f} s per cell, "
          f"{os.cpu_count()} cores shared by client and server")
    rows = []
    server, ports = _start_server(base, args.workdir, [])
    try:
        rest, grpc_call, channel = _clients(ports, bodies, requests)
        for c in [int(x) for x in args.concurrency.split(",")]:
            for name, factory in (("in-process", in_process), ("REST", rest), ("gRPC", grpc_call)):
                _load(factory, c, 1.0)  # warm up
                r = {"transport": name, "concurrency": c, **_load(factory, c, args.seconds)}
                rows.append(r)
                print(f"  c={c:<3} {name:<10} {r['rps']:>8.1f} req/s  p50 {r['p50_ms']:>7.2f} ms  p99 {r['p99_ms']:>7.2f} ms"
                      f"  errors {r['errors']}", flush=True)
        channel.close()
    finally:
        _stop(server)
    print()
    print(f"{'concurrency':>11} {'transport':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs in-process':>14}")
    ceiling = {r["concurrency"]: r["rps"] for r in rows if r["transport"] == "in-process"}
    for r in rows:
        print(f"{r['concurrency']:>11} {r['transport']:<10} {r['rps']:>8.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['rps'] / ceiling[r['concurrency']]:>14.2f}")

    logging_rows = []
    c = args.log_concurrency
    for rate in [float(x) for x in args.log_rates.split(",")]:
        extra = []
        if rate:
            prefix = os.path.join(args.workdir, "bench-request-logs", f"rate-{rate}", "log")
            extra = ["--request-log-sampling-rate", str(rate), "--request-log-prefix", prefix]
        server, ports = _start_server(base, args.workdir, extra)
        try:
            rest, grpc_call, channel = _clients(ports, bodies, requests)
            for name, factory in (("REST", rest), ("gRPC", grpc_call)):
                _load(factory, c, 1.0)
                r = {"sampling_rate": rate, "transport": name, "concurrency": c, **_load(factory, c, args.seconds)}
                logging_rows.append(r)
            channel.close()
        finally:
            _stop(server)
    print()
    print(f"request logging at concurrency {c}:")
    print(f"{'sampling':>9} {'transport':<10} {'req/s':>8} {'p99 ms':>8} {'req/s vs off':>13} {'errors':>7}")
    off = {r["transport"]: r for r in logging_rows if r["sampling_rate"] == 0}
    for r in logging_rows:
        ref = off.get(r["transport"])
        ratio = f"{r['rps'] / ref['rps']:.2f}" if ref else "-"
        print(f"{r['sampling_rate']:>9g} {r['transport']:<10} {r['rps']:>8.1f} {r['p99_ms']:>8.2f} {ratio:>13} {r['errors']:>7}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"transports": rows, "request_logging": logging_rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
