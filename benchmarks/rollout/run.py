"""Canary rollouts: how well the decision works, and what the split costs on the request path.

Part A, the decision: benchmarks/rollout/decisions.py (whole simulated rollouts decided by
the controller's own rule with taxi's settings, a 9:1 split and prediction-dependent label
delay; every rate with a Wilson interval, means including run-outs, the inconclusive rate,
the run-out rules a policy may choose, the delay-bias and sample-ratio cases, and the
fixed-horizon z-test at the power the sequential test really had).

Part B, the request path: requests/s and latency at c=32 through `retrain serve` on the
taxi model: off (one version, no split, no log), the split alone, the split with keyed
request logging at the pipelines' default sampling (0.1, `request_log_sampling`) and at
1.0 (every request logged), in rounds of all four in a rotated order (h2load where
installed, else Python clients). A mode's ratio is the median over rounds of its req/s over
the same round's off: this machine's speed drifts by a third between minutes, a round's
modes are a minute apart.

  .venv/bin/python benchmarks/rollout/run.py [--runs 100] [--processes 2] [--seconds 10] [--skip-serving]
                                             [--skip-decisions] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core import keras_env  # noqa: F401, I001  (before TensorFlow: its settings and the noise filter)

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decisions as decision_bench  # noqa: E402  (benchmarks/rollout/decisions.py)


def _serving_bench():
    spec = importlib.util.spec_from_file_location("serving_bench", os.path.join(REPO, "benchmarks", "serving", "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def request_path(seconds: float, concurrency: int, rounds: int, log_rate: float = 0.1) -> dict:
    """Off, the split alone, the split with keyed logging at `log_rate` and at 1.0, in rounds,
    on two copies of the taxi model."""
    from serving.repository import model_config, versions

    bench = _serving_bench()
    workdir = os.path.join(REPO, "work", "bench-serving")
    base, examples = bench._model_and_examples(workdir)
    root = os.path.join(workdir, "bench-rollout")
    shutil.rmtree(root, ignore_errors=True)
    newest = max(int(v) for v in os.listdir(base) if v.isdigit())
    for v in (1, 2):
        shutil.copytree(os.path.join(base, str(newest)), os.path.join(root, "taxi", str(v)))
    import base64

    body = json.dumps({"instances": [{"b64": base64.b64encode(examples[0]).decode()}]}).encode()
    body_file = os.path.join(root, "body.json")
    open(body_file, "wb").write(body)
    off = model_config.single_model("taxi", os.path.join(root, "taxi"))
    on = model_config.single_model("taxi", os.path.join(root, "taxi"), policy="specific", versions=(1, 2),
                                   labels={"stable": 1, "canary": 2})
    split = model_config.ModelServerConfig()
    split.CopyFrom(on)
    every = model_config.ModelServerConfig()
    every.CopyFrom(on)
    model_config.set_request_log(on, "taxi", log_rate, os.path.join(root, "logs", "log"))
    model_config.set_request_log(every, "taxi", 1.0, os.path.join(root, "logs", "log"))
    configs = {"off": off, "split": split, "on": on, "every": every}
    paths = {mode: os.path.join(root, f"{mode}.config") for mode in configs}
    for mode, config in configs.items():
        model_config.write(config, paths[mode])
    h2load = bench._ensure_h2load()
    modes = tuple(configs)
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    for i in range(rounds):
        # Each round in another order, so a drift of the machine's speed (other tenants, heat)
        # does not always favour the same mode.
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            state = os.path.join(root, "taxi", versions.ROLLOUT_FILENAME)
            if mode != "off":
                json.dump({"stable": 1, "canary": 2, "canary_share": 0.1, "started_at": time.time()}, open(state, "w"))
            elif os.path.exists(state):
                os.remove(state)
            server, ports = bench._start_server("", workdir, ["--model-config-file", paths[mode],
                                                              "--request-log-max-files", "4"])
            try:
                time.sleep(2)
                if h2load:
                    header = ["-H", "x-request-id: bench-client-1"] if mode != "off" else []
                    result = _h2load_with(bench, h2load, ports, body_file, concurrency, seconds, header)
                else:
                    import http.client

                    def rest(i, mode=mode):
                        conn = http.client.HTTPConnection("127.0.0.1", ports["rest"], timeout=30)
                        headers = {"Content-Type": "application/json"}
                        n = [0]

                        def call():
                            n[0] += 1
                            if mode != "off":
                                headers["X-Request-Id"] = f"c{i}-{n[0]}"
                            conn.request("POST", "/v1/models/taxi:predict", body, headers)
                            response = conn.getresponse()
                            response.read()
                        return call
                    result = bench._load(rest, concurrency, seconds)
                results[mode].append(result)
                sys.stderr.write(f"[bench] split+logging {mode}: {result}\n")
            finally:
                bench._stop(server)
    median = {m: float(np.median([r["rps"] for r in rs])) for m, rs in results.items()}
    ratio = {m: round(float(np.median([r["rps"] / o["rps"] for r, o in zip(results[m], results["off"])])), 3)
             for m in modes if m != "off"}
    return {"client": "h2load" if h2load else "python", "concurrency": concurrency, "seconds": seconds,
            "log_rate": log_rate, "rounds": results, "median_rps": median, "ratio_vs_off": ratio}


def _h2load_with(bench, h2load, ports, body_file, concurrency, seconds, header):
    """benchmarks/serving's h2load run, with an extra header (the request key)."""
    import re
    import subprocess
    import tempfile

    url = f"http://127.0.0.1:{ports['rest']}/v1/models/taxi:predict"
    with tempfile.NamedTemporaryFile(suffix=".tsv") as log:
        out = subprocess.run([h2load, "-D", f"{seconds:g}", "-c", str(concurrency), "-m", "1", "-d", body_file,
                              "--log-file", log.name, "--h1", "-H", "content-type: application/json", *header, url],
                             capture_output=True, text=True, check=True).stdout
        rows = [line.split("\t") for line in open(log.name) if line.strip()]
    done = [r for r in rows if r[1] == "200"]
    if not re.search(r"(\d+) failed", out):
        raise SystemExit(f"h2load's summary not understood:\n{out[-2000:]}")
    latency = np.array([int(r[2]) for r in done], dtype=float) / 1000.0
    return {"rps": round(len(done) / seconds, 1), "p50_ms": round(float(np.percentile(latency, 50)), 2),
            "p99_ms": round(float(np.percentile(latency, 99)), 2), "errors": len(rows) - len(done)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100, help="simulated rollouts per cell (part A)")
    p.add_argument("--processes", type=int, default=2, help="simulation processes (part A)")
    p.add_argument("--seconds", type=float, default=10.0, help="per request-path measurement")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three modes, each round in a rotated order")
    p.add_argument("--log-rate", type=float, default=0.1,
                   help="request-log sampling rate in the 'on' mode (the 'every' mode logs every request)")
    p.add_argument("--skip-decisions", action="store_true")
    p.add_argument("--skip-serving", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    out = {}
    if not args.skip_decisions:
        out["decisions"] = decision_bench.decisions(args.runs, args.processes)
        decision_bench.report(out["decisions"])
    if not args.skip_serving:
        out["request_path"] = request_path(args.seconds, args.concurrency, args.rounds, args.log_rate)
        rp = out["request_path"]
        r = rp["ratio_vs_off"]
        print(f"\nRequest path at c={rp['concurrency']} ({rp['client']}, {rp['seconds']:g} s x {args.rounds} rounds; "
              f"ratio: median over rounds of req/s over that round's off; target >= 0.9):\n"
              f"  off                                  {rp['median_rps']['off']:6.0f} req/s\n"
              f"  split alone                          {rp['median_rps']['split']:6.0f} req/s  ratio {r['split']:.3f}\n"
              f"  split + keyed logging, sampling {rp['log_rate']:<4g} {rp['median_rps']['on']:6.0f} req/s  "
              f"ratio {r['on']:.3f}\n"
              f"  split + keyed logging, sampling 1    {rp['median_rps']['every']:6.0f} req/s  ratio {r['every']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
