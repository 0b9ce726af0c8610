"""Canary rollouts: how well the decision works, and what the split costs on the request path.

Part A, the decision (rollout/sequential.py on rollout/live_metrics.py's AUC), over seeded
simulations of delayed labels: a binary task whose stable model has AUC 0.80 (binormal
scores, 30% positives) and a canary with the same AUC or 0.02, 0.05, 0.10 less. Labels
arrive in batches of 100 per version and the test looks after each batch, up to
max_labelled per version. Reported per degradation: the false roll-back rate (no
degradation; target at most alpha), the detection (roll-back) rate, the median labels per
version to a decision; beside it a fixed-horizon one-sided z-test with the same alpha and the
power the sequential test reached (the labels it would need, decided once), and the same
z-test looked at after every batch (what peeking does to its error rate).

Part B, the request path: requests/s and latency at c=32 through `retrain serve` on the
taxi model: off (one version, no split, no log), the split alone, the split with keyed
request logging at the pipelines' default sampling (0.1, `request_log_sampling`) and at
1.0 (every request logged), in rounds of all four in a rotated order (h2load where
installed, else Python clients). A mode's ratio is the median over rounds of its req/s over
the same round's off: this machine's speed drifts by a third between minutes, a round's
modes are a minute apart.

  .venv/bin/python benchmarks/rollout/run.py [--runs 200] [--seconds 10] [--skip-serving] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import time
from statistics import NormalDist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core import keras_env  # noqa: F401, I001  (before TensorFlow: its settings and the noise filter)

import numpy as np

from core import tasks
from rollout import live_metrics, sequential
from rollout.settings import RolloutSettings

BASE_AUC = 0.80
POSITIVES = 0.3
BATCH = 100


def _scores(rng, n: int, auc: float) -> tuple[np.ndarray, np.ndarray]:
    """Binormal scores with the given AUC: negatives N(0,1), positives N(d,1), d = sqrt(2) z(auc)."""
    d = math.sqrt(2) * NormalDist().inv_cdf(auc)
    labels = rng.random(n) < POSITIVES
    raw = rng.normal(size=n) + d * labels
    return 1 / (1 + np.exp(-raw)), labels.astype(int)


def _simulate(seed: int, drop: float, settings: RolloutSettings) -> dict:
    rng = np.random.default_rng(seed)
    stable, canary = live_metrics.Tally(tasks.BINARY), live_metrics.Tally(tasks.BINARY)
    alpha, tau, margin = settings.significance_level, settings.tau("auc"), settings.margin("auc")
    z_peek = NormalDist().inv_cdf(1 - alpha)
    peeked = None
    ci = None
    while canary.count < settings.max_labelled:
        stable.add(*_scores(rng, BATCH, BASE_AUC))
        canary.add(*_scores(rng, BATCH, BASE_AUC - drop))
        if canary.count < settings.min_labelled:
            continue
        d, v = live_metrics.difference(canary, stable, "auc")
        if peeked is None and d / math.sqrt(v) < -z_peek:
            peeked = "rollback"
        ci = sequential.interval(d, v, alpha, tau)
        action = sequential.decide(ci, margin)
        if action != sequential.CONTINUE:
            return {"action": action, "ran_out": False, "labels": canary.count, "peeked": peeked,
                    "per_example_variance": v * canary.count}
    d, v = live_metrics.difference(canary, stable, "auc")
    return {"action": sequential.run_out(ci, margin, settings.on_run_out), "ran_out": True, "labels": canary.count,
            "peeked": peeked, "per_example_variance": v * canary.count}


def taxi_settings(max_labelled: int | None) -> RolloutSettings:
    """The taxi pipeline's rollout block (what `make rollout-demo` runs with)."""
    import dataclasses

    from retrain import options

    settings = options.load_config(os.path.join(REPO, "pipelines", "taxi", "config.yaml")).rollout_settings
    return dataclasses.replace(settings, max_labelled=max_labelled) if max_labelled else settings


def decisions(runs: int, settings: RolloutSettings) -> list[dict]:
    rows = []
    for drop in (0.0, 0.02, 0.05, 0.10):
        start = time.perf_counter()
        results = [_simulate(seed, drop, settings) for seed in range(runs)]
        actions = [r["action"] for r in results]
        rollback = actions.count("rollback") / runs
        promote = actions.count("promote") / runs
        decided = [r["labels"] for r in results if not r["ran_out"]]
        variance = float(np.median([r["per_example_variance"] for r in results]))
        row = {"auc_drop": drop, "runs": runs, "rollback_rate": rollback, "promote_rate": promote,
               "run_out_rate": sum(r["ran_out"] for r in results) / runs,
               "rollback_at_run_out_rate": sum(r["ran_out"] and r["action"] == "rollback" for r in results) / runs,
               "median_labels_to_decision": float(np.median(decided)) if decided else None,
               "peeking_z_test_rollback_rate": sum(r["peeked"] is not None for r in results) / runs,
               "seconds": round(time.perf_counter() - start, 1)}
        if drop:
            power = min(max(rollback, 0.5), 0.999)
            row["fixed_horizon_power"] = power
            row["fixed_horizon_labels"] = round(sequential.fixed_horizon_n(variance, drop, settings.significance_level,
                                                                          power))
        rows.append(row)
        sys.stderr.write(f"[bench] AUC -{drop:.2f}: {json.dumps(row)}\n")
    return rows


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
    p.add_argument("--runs", type=int, default=200, help="simulations per degradation")
    p.add_argument("--max-labelled", type=int, help="canary labels before the run-out rule (default: taxi's)")
    p.add_argument("--seconds", type=float, default=10.0, help="per request-path measurement")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three modes, each round in a rotated order")
    p.add_argument("--log-rate", type=float, default=0.1,
                   help="request-log sampling rate in the 'on' mode (the 'every' mode logs every request)")
    p.add_argument("--skip-decisions", action="store_true")
    p.add_argument("--skip-serving", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    settings = taxi_settings(args.max_labelled)
    out = {"settings": settings.to_dict(), "decisions": [] if args.skip_decisions else decisions(args.runs, settings)}
    print(f"Canary decisions with taxi's rollout settings (stable AUC {BASE_AUC}, alpha {settings.significance_level}, "
          f"max_regression {settings.margin('auc')}, effect_size {settings.tau('auc')}, a look every {BATCH} labels "
          f"per version, run-out at {settings.max_labelled} by rule '{settings.on_run_out}'; {args.runs} seeded runs "
          "each). rollback counts run-outs that ended in one.")
    print(f"{'AUC drop':>9} {'rollback':>9} {'promote':>8} {'run out':>8} {'median labels':>14} "
          f"{'fixed-horizon labels':>21} {'peeking z-test rollback':>24}")
    for r in out["decisions"]:
        fixed = f"{r['fixed_horizon_labels']} (power {r['fixed_horizon_power']:.2f})" if r["auc_drop"] else "-"
        median = "-" if r["median_labels_to_decision"] is None else f"{r['median_labels_to_decision']:.0f}"
        print(f"{r['auc_drop']:>9.2f} {r['rollback_rate']:>9.3f} {r['promote_rate']:>8.3f} {r['run_out_rate']:>8.3f} "
              f"{median:>14} {fixed:>21} {r['peeking_z_test_rollback_rate']:>24.3f}")
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
