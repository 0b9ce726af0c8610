"""The gate as it was at another commit, on span folders another run wrote (benchmarks/gates/run.py).

Run with that commit's tree first on PYTHONPATH (a git worktree): it uses only what the
gate had then (its config and shipped policy, its preflight checks, its statistics, its
`evaluate_gate`), so "before" in the benchmark is that code on the same data.

    PYTHONPATH=/tmp/worktree python benchmarks/gates/before.py cases.json out.json
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from core import keras_env  # noqa: F401  (before TensorFlow; `core` is the worktree's, on PYTHONPATH)


def main(cases_path: str, out_path: str) -> None:
    import tensorflow_data_validation as tfdv

    from components.data_gate import calibration, measures
    from components.data_gate import policy as gate_policy
    from components.data_gate.component import evaluate_gate
    from pipelines import config as config_lib
    from runner import preflight

    with open(cases_path) as f:
        job = json.load(f)
    config = config_lib.load(job["config"], {"data_root": job["data_root"]})
    shipped = config_lib.load_gate_policy(config)
    schema = preflight.load_schema(config.schema_path)
    features = [f.name for f in schema.feature]
    stats: dict = {}

    def month(span: int):
        """A real month's statistics and its halves (calibration's way then)."""
        if span not in stats:
            stats[span] = calibration.span_statistics(os.path.join(job["data_root"], f"span-{span}"),
                                                      config.example_format, span)
        return stats[span]

    def statistics(folder: str):
        """A corrupted span's statistics, as the gate's benchmark computed them then."""
        return tfdv.generate_statistics_from_csv(os.path.join(folder, "*.csv"), stats_options=measures.stats_options())

    out = {"code": job["label"], "cases": [], "held_out": []}
    started = time.monotonic()
    for case in job["cases"]:
        row = {"id": case["id"], "bad_input": False, "crash": None, "blocking": [], "anomalies": []}
        try:
            preflight.check_span_files(case["folder"], config.schema_path, config.example_format)
            if not case.get("structure"):
                current = month(case["span"])[0] if case["id"].startswith("good-") else statistics(case["folder"])
                anomalies = {"train": tfdv.validate_statistics(current, schema)}
                base = month(case["baseline_span"])[0]
                r = evaluate_gate(current, schema, anomalies, base, shipped, case["baseline_span"])
                row["blocking"] = r["blocking_features"]
                row["anomalies"] = [(a["feature"], a["kind"]) for a in r["anomalies"]]
        except preflight.InputError:
            row["bad_input"] = True
        except Exception as e:  # what the old code did with the case: the benchmark reports it
            row["crash"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()
        out["cases"].append(row)
    for held in job.get("held_out", []):
        chosen = held["calibrate_on"]
        history = calibration.measure_history([(s, month(s)[0]) for s in chosen], features)
        noise = calibration.measure_noise([(s, *month(s)[1:]) for s in chosen], features)
        policy = gate_policy.from_dict(calibration.calibrate(history, features, shipped, noise=noise))
        stops = []
        for base, span in held["pairs"]:
            current = month(span)[0]
            r = evaluate_gate(current, schema, {"train": tfdv.validate_statistics(current, schema)}, month(base)[0],
                              policy, base)
            if not r["passed"]:
                stops.append({"span": span, "features": r["blocking_features"]})
        out["held_out"].append({"calibrated_on": f"{chosen[0]}..{chosen[-1]}", "pairs": len(held["pairs"]),
                                "stops": stops})
    out["seconds"] = round(time.monotonic() - started, 1)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
