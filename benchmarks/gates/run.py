"""Benchmark: how often the gates stop good data, and how often they catch bad data, before vs after.

Part A, the data gate (in-process, TFDV statistics with the pipeline's options from the
embedded CSVs, each span against the month before it):
  - false stops over the good months (every consecutive pair), with the shipped policy
    (calibrated on all months: in-sample) and held out (calibrated on 2013-14, judged on
    2015-16, and the other way round);
  - the catch rate per class over the corrupted corpus (`tests/corpus.py`) built from
    large (~400-row) and small (~70-row) months;
  - "before": the gate as it was (ExampleValidator anomalies plus the hand-set
    comparators of `schema_before.pbtxt`, header-only input checks), on the same data.
Part B, the whole pipeline (`retrain run`, local runner, shipped taxi config) over N
consecutive good months in one workdir: data-gate stops, and the Evaluator's refusals
with the new verdict (significance) and the old one (TFMA's point estimate vs an
absolute 0.02 AUC drop), both read from the same runs.

    .venv/bin/python benchmarks/gates/run.py [--months 24] [--skip-pipeline] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core import keras_env  # noqa: F401  (before TensorFlow)

SOURCES = {"large": (201402, 201505, 201508), "small": (201603, 201609, 201612)}


def _gate_before(stats, baseline, schema_before) -> set[str]:
    """The blocking features of the gate as it was: anomalies + hand-set comparators."""
    import tensorflow_data_validation as tfdv

    anomalies = tfdv.validate_statistics(stats, schema_before, previous_statistics=baseline)
    return set(anomalies.anomaly_info)


def _input_checks_before(path: str) -> bool:
    """The old pre-run checks: the header and the first two rows."""
    from core import spans

    try:
        spans.check_span_csv(os.path.dirname(path))
    except spans.SpanError:
        return True
    return False


def part_a(args) -> dict:
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from components.data_gate import calibration
    from components.data_gate import policy as gate_policy
    from components.data_gate.component import evaluate_gate
    from core import spans
    from pipelines import config as config_lib
    from runner import preflight
    from tests import corpus
    from tests.conftest import TAXI_CONFIG, TAXI_DATA

    config = config_lib.load(TAXI_CONFIG)
    shipped = config_lib.load_gate_policy(config)
    schema = preflight.load_schema(config.schema_path)
    with open(os.path.join(os.path.dirname(__file__), "schema_before.pbtxt")) as f:
        schema_before = text_format.Parse(f.read(), schema_pb2.Schema())
    features = [f.name for f in schema.feature]
    months = spans.list_spans(TAXI_DATA)
    started = time.monotonic()
    stats, halves = {}, {}
    for i, s in enumerate(months, 1):
        sys.stderr.write(f"\r[{i:>2}/{len(months)}] statistics of span {s}")
        full, a, b = calibration.span_statistics(spans.span_dir(TAXI_DATA, s), "csv", s)
        stats[s], halves[s] = full, (a, b)
    sys.stderr.write(f"\rstatistics of {len(months)} spans in {time.monotonic() - started:.0f} s\n")

    def stops(policy, pairs):
        out = []
        for base, span in pairs:
            r = evaluate_gate(stats[span], schema, {}, stats[base], policy, base)
            if not r["passed"]:
                out.append({"span": span, "features": r["blocking_features"]})
        return out

    pairs = list(zip(months, months[1:]))
    result: dict = {"pairs": len(pairs)}
    result["false_stops_after_in_sample"] = stops(shipped, pairs)
    before = [{"span": s, "features": sorted(f)} for b, s in pairs if (f := _gate_before(stats[s], stats[b], schema_before))]
    result["false_stops_before"] = before
    held = []
    for train, test in (((201301, 201412), (201501, 201612)), ((201501, 201612), (201301, 201412))):
        chosen = [s for s in months if train[0] <= s <= train[1]]
        history = calibration.measure_history([(s, stats[s]) for s in chosen], features)
        noise = calibration.measure_noise([(s, *halves[s]) for s in chosen], features)
        policy = gate_policy.from_dict(calibration.calibrate(history, features, shipped, noise=noise))
        test_pairs = [(b, s) for b, s in pairs if test[0] <= s <= test[1]]
        held.append({"calibrated_on": f"{train[0]}..{train[1]}", "judged": f"{test[0]}..{test[1]}",
                     "pairs": len(test_pairs), "stops": stops(policy, test_pairs)})
    result["false_stops_after_held_out"] = held

    caught = collections.defaultdict(lambda: collections.Counter())
    with tempfile.TemporaryDirectory() as tmp:
        for size, sources in SOURCES.items():
            for source in sources:
                base = months[months.index(source) - 1]
                for c in corpus.CORRUPTIONS:
                    path = corpus.write_corrupted(TAXI_DATA, source, c, tmp, source)
                    key = (c.kind, c.name, size)
                    caught[key]["total"] += 1
                    if c.kind == "structure":
                        try:
                            preflight.check_span_files(os.path.dirname(path), config.schema_path)
                        except preflight.InputError:
                            caught[key]["after"] += 1
                        caught[key]["before"] += _input_checks_before(path)
                        continue
                    current = tfdv.generate_statistics_from_csv(path, stats_options=shipped_options())
                    r = evaluate_gate(current, schema, {}, stats[base], shipped, base)
                    caught[key]["after"] += c.feature in r["blocking_features"]
                    caught[key]["before"] += c.feature in _gate_before(current, stats[base], schema_before) or (
                        c.feature == "<rows>" and bool(_gate_before(current, stats[base], schema_before)))
    result["catch"] = [{"class": k[0], "corruption": k[1], "months": k[2], **v} for k, v in sorted(caught.items())]
    return result


def shipped_options():
    from components.data_gate import measures

    return measures.stats_options()


def part_b(months: int) -> dict:
    from core import spans
    from tests.conftest import TAXI_DATA

    chosen = spans.list_spans(TAXI_DATA)[-months:]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for i, span in enumerate(chosen, 1):
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "retrain.cli", "run", "--json", "--span", str(span), "--workdir", work],
                cwd=REPO, capture_output=True, text=True, timeout=1800,
            )
            summary = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
            verdict = (summary.get("evaluation") or {}).get("significance") or {}
            row = {
                "span": span, "exit": proc.returncode, "outcome": summary.get("outcome"),
                "gate_passed": (summary.get("data_gate") or {}).get("passed"),
                "blocking": (summary.get("data_gate") or {}).get("blocking_features"),
                "blessed_new": verdict.get("blessed"),
                "refused_old": None if not verdict else not verdict.get("tfma_validation_ok"),
                "eval_examples": verdict.get("example_count"),
                "auc_change": next((c["difference"] for c in verdict.get("comparisons", []) if c["metric"] == "auc"), None),
                "seconds": round(time.monotonic() - started, 1),
            }
            rows.append(row)
            sys.stderr.write(f"[{i:>2}/{len(chosen)}] {json.dumps(row)}\n")
    return {"runs": rows}


def _rate(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "n/a"


def report(a: dict | None, b: dict | None) -> str:
    lines = []
    if a:
        lines.append("Data gate over the good months (each span vs the month before; 47 pairs)")
        lines.append(f"  false stops  before {_rate(len(a['false_stops_before']), a['pairs'])}"
                     f"   after (shipped, in-sample) {_rate(len(a['false_stops_after_in_sample']), a['pairs'])}")
        for h in a["false_stops_after_held_out"]:
            lines.append(f"  after, calibrated on {h['calibrated_on']} judged on {h['judged']}: "
                         f"{_rate(len(h['stops']), h['pairs'])} {[(s['span'], s['features']) for s in h['stops']]}")
        lines.append("  before stopped: " + ", ".join(f"{s['span']} ({'/'.join(s['features'])})" for s in a["false_stops_before"]))
        lines.append("")
        lines.append(f"{'class':<10} {'corruption':<28} {'months':<7} {'before':>8} {'after':>8}")
        by_class = collections.defaultdict(lambda: collections.Counter())
        for row in a["catch"]:
            lines.append(f"{row['class']:<10} {row['corruption']:<28} {row['months']:<7} "
                         f"{row['before']:>4}/{row['total']:<3} {row['after']:>4}/{row['total']:<3}")
            for k in ("before", "after", "total"):
                by_class[row["class"]][k] += row[k]
        lines.append("catch rate per class:")
        for cls, c in sorted(by_class.items()):
            lines.append(f"  {cls:<10} before {_rate(c['before'], c['total']):<14} after {_rate(c['after'], c['total'])}")
    if b:
        runs = b["runs"]
        judged = [r for r in runs if r["blessed_new"] is not None]
        lines.append("")
        lines.append(f"Pipeline over {len(runs)} consecutive good months (retrain run, shipped config, one workdir)")
        lines.append(f"  data gate stops: {_rate(sum(r['gate_passed'] is False for r in runs), len(runs))}"
                     f" {[(r['span'], r['blocking']) for r in runs if r['gate_passed'] is False]}")
        lines.append(f"  Evaluator refusals  before (point estimate, 0.02 AUC): {_rate(sum(bool(r['refused_old']) for r in judged), len(judged))}"
                     f"   after (significance): {_rate(sum(r['blessed_new'] is False for r in judged), len(judged))}")
        lines.append(f"  outcomes: {collections.Counter(r['outcome'] for r in runs)}")
        lines.append(f"  AUC changes vs baseline: {[r['auc_change'] and round(r['auc_change'], 3) for r in runs]}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--months", type=int, default=24, help="good months through the whole pipeline (part B)")
    p.add_argument("--skip-pipeline", action="store_true", help="part A only (about 6 minutes)")
    p.add_argument("--skip-gate", action="store_true", help="part B only")
    p.add_argument("--json", help="also write the raw figures here")
    args = p.parse_args()
    a = None if args.skip_gate else part_a(args)
    if a:
        print(report(a, None), flush=True)
    b = None if args.skip_pipeline else part_b(args.months)
    if b:
        print(report(None, b), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gate": a, "pipeline": b}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
