"""Benchmark: how often the gates stop good data, and how often they catch bad data, before vs after.

Part A, the data gate (in-process, the embedded taxi months, each span against the month
before it), judged as the pipeline judges a span (`runner/gate_offline.py`:
statistics, ExampleValidator's anomalies, the row-level checks) and, in the same run, by the
gate as it was at `--before` (a git worktree of that commit runs `before.py` on the same
folders):
  - false stops over the good months (every consecutive pair), with the shipped policy
    (calibrated on all months: in-sample) and held out (calibrated on 2013-14, judged on
    2015-16, and the other way round);
  - the catch rate per class over the corrupted corpus (`tests/corpus.py`) built from
    large (~400-row) and small (~70-row) months; a case is caught when the gate names one
    of the corruption's features with the check it belongs to (bytes: bad input, exit 2);
  - "round 1": ExampleValidator anomalies plus the hand-set comparators of
    `schema_before.pbtxt`, on the same data;
  - the time the row-level checks take per span.
Part B, the whole pipeline (`retrain run`, local runner, shipped taxi config) over N
consecutive good months in one workdir: data-gate stops, the Evaluator's refusals (the
significance verdict, and the new-span check), and the nodes' times.
Part C, what a model check catches that no data check can: a large month whose
payment_type is detached from its trips, after a good month, before and after.
Part D, the time the new checks add to a steady run: the same months through `retrain
run`, before and after.

    .venv/bin/python benchmarks/gates/run.py [--months 24] [--before fd0d123] [--skip-pipeline] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core import keras_env  # noqa: F401  (before TensorFlow)

SOURCES = {"large": (201402, 201505, 201508), "small": (201603, 201609, 201612)}
HELD_OUT = (((201301, 201412), (201501, 201612)), ((201501, 201612), (201301, 201412)))
# The classes part A judges, and the check each must be named by ("bytes": bad input).
GATE_CLASSES = ("scale", "missing", "category", "volume", "structure", "domain", "time", "derived", "label", "bytes")


@contextlib.contextmanager
def worktree(ref: str):
    """A git worktree of `ref` (removed afterwards)."""
    path = tempfile.mkdtemp(prefix="gates-before-")
    subprocess.run(["git", "worktree", "add", "--detach", "-f", path, ref], cwd=REPO, check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", path], cwd=REPO, capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


def _before(tree: str, job: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cases, out = os.path.join(tmp, "cases.json"), os.path.join(tmp, "out.json")
        with open(cases, "w") as f:
            json.dump(job, f)
        proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "gates", "before.py"), cases, out],
                              cwd=tree, env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"the gate at {job['label']} failed: {proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def _caught(corruption, result) -> bool:
    """The gate named one of the corruption's features, with the check it belongs to."""
    return any(a["feature"] in corruption.features and (corruption.check is None or a["kind"] == corruption.check)
               for a in result["anomalies"])


def part_a(args, tree: str | None) -> dict:
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from components.data_gate import calibration
    from components.data_gate import policy as gate_policy
    from core import spans
    from pipelines import config as config_lib
    from runner import gate_offline as offline
    from runner import preflight
    from tests import corpus
    from tests.conftest import TAXI_CONFIG, TAXI_DATA

    config = config_lib.load(TAXI_CONFIG)
    shipped = config_lib.load_gate_policy(config)
    schema = preflight.load_schema(config.schema_path)
    with open(os.path.join(os.path.dirname(__file__), "schema_before.pbtxt")) as f:
        schema_before = text_format.Parse(f.read(), schema_pb2.Schema())
    features = [f.name for f in schema.feature]
    consistency = config.consistency_settings
    label = (config.label_function, config.label_kind)
    months = spans.list_spans(TAXI_DATA)
    started = time.monotonic()
    scans = {}
    for i, s in enumerate(months, 1):
        sys.stderr.write(f"\r[{i:>2}/{len(months)}] statistics and rows of span {s}")
        scans[s] = calibration.span_scan(spans.span_dir(TAXI_DATA, s), "csv", schema, s, learn=True,
                                         consistency=(consistency, s), label=label)
    sys.stderr.write(f"\rstatistics and rows of {len(months)} spans in {time.monotonic() - started:.0f} s\n")
    stats = {s: tuple(t.result() for t in scan.statistics) for s, scan in scans.items()}
    judge = offline.Judge.for_config(config)
    pairs = list(zip(months, months[1:]))

    def stops(j, chosen_pairs):
        out = []
        for base, span in chosen_pairs:
            r = j.judge(spans.span_dir(TAXI_DATA, span), span, base)
            if not r["passed"]:
                out.append({"span": span, "features": r["blocking_features"],
                            "why": [a["reasons"][0]["description"][:200] for a in r["anomalies"]]})
        return out

    result: dict = {"pairs": len(pairs)}
    timed = time.monotonic()
    result["false_stops_after_in_sample"] = stops(judge, pairs)
    result["judge_seconds_per_span"] = round((time.monotonic() - timed) / len(pairs), 3)
    result["false_stops_round1"] = [
        {"span": s, "features": sorted(f)} for b, s in pairs
        if (f := set(tfdv.validate_statistics(stats[s][0], schema_before, previous_statistics=stats[b][0]).anomaly_info))]
    held = []
    for train, test in HELD_OUT:
        chosen = [s for s in months if train[0] <= s <= train[1]]
        history = calibration.measure_history([(s, stats[s][0]) for s in chosen], features)
        noise = calibration.measure_noise([(s, *stats[s][1:]) for s in chosen], features)
        values = calibration.calibrate(history, features, shipped, noise=noise)
        sections, _ = calibration.calibrate_rows([(s, scans[s]) for s in chosen], features,
                                                 values["calibration"]["margin"], shipped, consistency,
                                                 config.label_key, config.window_spans)
        values.update(sections)
        held_judge = offline.Judge.for_config(config, gate_policy.from_dict(values))
        test_pairs = [(b, s) for b, s in pairs if test[0] <= s <= test[1]]
        held.append({"calibrated_on": f"{train[0]}..{train[1]}", "judged": f"{test[0]}..{test[1]}",
                     "pairs": len(test_pairs), "stops": stops(held_judge, test_pairs),
                     "before_job": {"calibrate_on": chosen, "pairs": test_pairs}})
    result["false_stops_after_held_out"] = [{k: v for k, v in h.items() if k != "before_job"} for h in held]

    gate_corpus = [c for c in corpus.CORRUPTIONS if c.kind in GATE_CLASSES]
    root = tempfile.mkdtemp(prefix="gates-corpus-")
    cases, cached = [], {}
    try:
        for size, sources in SOURCES.items():
            for source in sources:
                for c in gate_corpus:
                    out = os.path.join(root, f"{c.name}-{source}")
                    path = corpus.write_corrupted(TAXI_DATA, source, c, out, source)
                    cases.append({"id": f"{c.name}-{source}", "folder": os.path.dirname(path), "span": source,
                                  "baseline_span": months[months.index(source) - 1], "size": size, "corruption": c,
                                  "structure": c.kind in ("structure", "bytes")})
        good = [{"id": f"good-{s}", "folder": spans.span_dir(TAXI_DATA, s), "span": s, "baseline_span": b}
                for b, s in pairs]
        before = None
        if tree:
            job = {"label": args.before, "config": os.path.join(tree, "pipelines", "taxi", "config.yaml"),
                   "data_root": TAXI_DATA, "cases": [{k: v for k, v in c.items() if k != "corruption"}
                                                     for c in cases + good],
                   "held_out": [h["before_job"] for h in held]}
            sys.stderr.write(f"the gate at {args.before} on {len(job['cases'])} spans\n")
            before = _before(tree, job)
            by_id = {r["id"]: r for r in before["cases"]}
            result["false_stops_before_in_sample"] = [{"span": g["span"], "features": by_id[g["id"]]["blocking"]}
                                                      for g in good if by_id[g["id"]]["blocking"]]
            result["false_stops_before_held_out"] = before["held_out"]
        caught = collections.defaultdict(collections.Counter)
        timed = time.monotonic()
        for i, case in enumerate(cases, 1):
            sys.stderr.write(f"\r[{i:>3}/{len(cases)}] {case['id']:<40}")
            c = case["corruption"]
            key = (c.kind, c.name, case["size"])
            caught[key]["total"] += 1
            if case["structure"]:
                try:
                    preflight.check_span_files(case["folder"], config.schema_path)
                except preflight.InputError:
                    caught[key]["after"] += 1
            else:
                r = judge.judge(case["folder"], case["span"], case["baseline_span"])
                caught[key]["after"] += _caught(c, r)
                current = stats_of(case, cached)
                round1 = set(tfdv.validate_statistics(current, schema_before,
                                                      previous_statistics=stats[case["baseline_span"]][0]).anomaly_info)
                caught[key]["round1"] += c.feature in round1 or (c.feature == "<rows>" and bool(round1))
            if before:
                b = by_id[case["id"]]
                caught[key]["before"] += b["bad_input"] if case["structure"] else c.feature in b["blocking"] or (
                    c.feature == "<rows>" and bool(b["blocking"]))
                caught[key]["before_crashed"] += bool(b["crash"])
        sys.stderr.write(f"\rcorpus of {len(cases)} spans judged in {time.monotonic() - timed:.0f} s{' ' * 30}\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["catch"] = [{"class": k[0], "corruption": k[1], "months": k[2], **v} for k, v in sorted(caught.items())]
    return result


def stats_of(case, cached):
    """The statistics of a corrupted span (as StatisticsGen computes them)."""
    from components.data_gate import calibration

    if case["id"] not in cached:
        cached[case["id"]] = calibration.span_statistics(case["folder"], "csv", case["span"])[0]
    return cached[case["id"]]


def _cli(tree: str | None, args: list[str], timeout: int = 1800) -> tuple[int, dict, str]:
    """`retrain ARGS` with this checkout's code, or a worktree's (`tree`)."""
    cwd = tree or REPO
    env = {**os.environ, **({"PYTHONPATH": tree} if tree else {})}
    proc = subprocess.run([sys.executable, "-m", "retrain.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    summary = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, summary, proc.stderr


def _node_seconds(summary: dict, node: str):
    return ((summary.get("nodes") or {}).get(node) or {}).get("seconds")


def part_b(months: int) -> dict:
    from core import spans
    from tests.conftest import TAXI_DATA

    chosen = spans.list_spans(TAXI_DATA)[-months:]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for i, span in enumerate(chosen, 1):
            started = time.monotonic()
            code, summary, _ = _cli(None, ["run", "--json", "--span", str(span), "--workdir", work])
            verdict = (summary.get("evaluation") or {}).get("significance") or {}
            check = verdict.get("new_span") or {}
            row = {
                "span": span, "exit": code, "outcome": summary.get("outcome"),
                "gate_passed": (summary.get("data_gate") or {}).get("passed"),
                "blocking": (summary.get("data_gate") or {}).get("blocking_features"),
                "row_checks": len((summary.get("data_gate") or {}).get("row_checks") or []),
                "blessed_new": verdict.get("blessed"),
                "refused_old": None if not verdict else not verdict.get("tfma_validation_ok"),
                "new_span_judged": check.get("judged"), "new_span_collapsed": check.get("collapsed"),
                "new_span_z": check.get("z") and round(check["z"], 2), "new_span_examples": check.get("examples"),
                "eval_examples": verdict.get("example_count"),
                "auc_change": next((c["difference"] for c in verdict.get("comparisons", []) if c["metric"] == "auc"), None),
                "data_gate_s": _node_seconds(summary, "DataGate"), "evaluator_s": _node_seconds(summary, "Evaluator"),
                "seconds": round(time.monotonic() - started, 1),
            }
            rows.append(row)
            sys.stderr.write(f"[{i:>2}/{len(chosen)}] {json.dumps(row)}\n")
    return {"runs": rows}


def part_c(tree: str | None) -> dict:
    """A month whose payment_type is detached from its trips, after a good month: pushed or refused?"""
    from core import spans
    from tests import corpus
    from tests.conftest import TAXI_DATA

    out = {}
    for label, code_tree in (("after", None), ("before", tree)):
        if label == "before" and not tree:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            data, work = os.path.join(tmp, "data"), os.path.join(tmp, "work")
            for s in (201502, 201503, 201504):
                shutil.copytree(spans.span_dir(TAXI_DATA, s), spans.span_dir(data, s))
            common = ["run", "--json", "--workdir", work, "--data-root", data, "--window", "3"]
            first = _cli(code_tree, [*common, "--span", "201504"])
            corpus.write_corrupted(TAXI_DATA, 201505, corpus.BY_NAME["payment_type_shuffled"], data, 201505)
            code, summary, _ = _cli(code_tree, [*common, "--span", "201505"])
            verdict = (summary.get("evaluation") or {}).get("significance") or {}
            out[label] = {"first_outcome": first[1].get("outcome"), "exit": code, "outcome": summary.get("outcome"),
                          "gate_passed": (summary.get("data_gate") or {}).get("passed"),
                          "reasons": verdict.get("reasons"), "new_span": verdict.get("new_span")}
        sys.stderr.write(f"join corruption, {label}: {out[label]['outcome']}\n")
    return out


def part_d(tree: str | None) -> dict:
    """The same three small months through `retrain run`, before and after: the nodes' times."""
    out = {}
    for label, code_tree in (("before", tree), ("after", None)):
        if label == "before" and not tree:
            continue
        runs = []
        with tempfile.TemporaryDirectory() as work:
            for span in (201610, 201611, 201612):
                started = time.monotonic()
                code, summary, _ = _cli(code_tree, ["run", "--json", "--span", str(span), "--workdir", work])
                runs.append({"span": span, "exit": code, "outcome": summary.get("outcome"),
                             "wall_s": round(time.monotonic() - started, 1),
                             "data_gate_s": _node_seconds(summary, "DataGate"),
                             "evaluator_s": _node_seconds(summary, "Evaluator")})
                sys.stderr.write(f"steady run, {label}: {json.dumps(runs[-1])}\n")
        out[label] = runs
    return out


def _rate(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "n/a"


def report(a: dict | None, b: dict | None, c: dict | None, d: dict | None) -> str:
    lines = []
    if a:
        lines.append(f"Data gate over the good months (each span vs the month before; {a['pairs']} pairs)")
        lines.append(f"  false stops  round 1 {_rate(len(a['false_stops_round1']), a['pairs'])}"
                     + (f"   before {_rate(len(a['false_stops_before_in_sample']), a['pairs'])}"
                        if "false_stops_before_in_sample" in a else "")
                     + f"   after (shipped, in-sample) {_rate(len(a['false_stops_after_in_sample']), a['pairs'])}"
                     f" {[(s['span'], s['features']) for s in a['false_stops_after_in_sample']]}")
        for i, h in enumerate(a["false_stops_after_held_out"]):
            old = (a.get("false_stops_before_held_out") or [None] * 2)[i]
            lines.append(f"  held out: calibrated on {h['calibrated_on']}, judged on {h['judged']}:"
                         + (f" before {_rate(len(old['stops']), old['pairs'])}" if old else "")
                         + f" after {_rate(len(h['stops']), h['pairs'])} {[(s['span'], s['features']) for s in h['stops']]}")
        lines.append(f"  row-level checks and the judge: {a['judge_seconds_per_span'] * 1000:.0f} ms a span (offline)")
        lines.append("")
        lines.append(f"{'class':<10} {'corruption':<28} {'months':<7} {'round 1':>9} {'before':>9} {'after':>9}")
        by_class = collections.defaultdict(collections.Counter)
        for row in a["catch"]:
            crashed = f" ({row['before_crashed']} crashed)" if row.get("before_crashed") else ""
            lines.append(f"{row['class']:<10} {row['corruption']:<28} {row['months']:<7} "
                         f"{row.get('round1', 0):>5}/{row['total']:<3} {row.get('before', 0):>5}/{row['total']:<3} "
                         f"{row['after']:>5}/{row['total']:<3}{crashed}")
            for k in ("round1", "before", "after", "total"):
                by_class[row["class"]][k] += row.get(k, 0)
        lines.append("catch rate per class (round 1 = anomalies + hand-set comparators; before = the gate at --before):")
        for cls, n in sorted(by_class.items()):
            lines.append(f"  {cls:<10} round 1 {_rate(n['round1'], n['total']):<14} before {_rate(n['before'], n['total']):<14}"
                         f" after {_rate(n['after'], n['total'])}")
    if b:
        runs = b["runs"]
        judged = [r for r in runs if r["blessed_new"] is not None]
        lines.append("")
        lines.append(f"Pipeline over {len(runs)} consecutive good months (retrain run, shipped config, one workdir)")
        lines.append(f"  data gate stops: {_rate(sum(r['gate_passed'] is False for r in runs), len(runs))}"
                     f" {[(r['span'], r['blocking']) for r in runs if r['gate_passed'] is False]}")
        lines.append(f"  Evaluator refusals  before (point estimate, 0.02 AUC): {_rate(sum(bool(r['refused_old']) for r in judged), len(judged))}"
                     f"   after (significance and the new span): {_rate(sum(r['blessed_new'] is False for r in judged), len(judged))}")
        lines.append(f"  new span: judged {sum(bool(r['new_span_judged']) for r in runs)}/{len(runs)}, collapsed"
                     f" {sum(bool(r['new_span_collapsed']) for r in runs)}; z {[r['new_span_z'] for r in runs]}")
        lines.append(f"  outcomes: {collections.Counter(r['outcome'] for r in runs)}")
        lines.append(f"  AUC changes vs baseline: {[r['auc_change'] and round(r['auc_change'], 3) for r in runs]}")
        gate_s = [r["data_gate_s"] for r in runs if r["data_gate_s"] is not None]
        lines.append(f"  DataGate node: median {sorted(gate_s)[len(gate_s) // 2] if gate_s else 'n/a'} s")
    if c:
        lines.append("")
        lines.append("A month whose payment_type is detached from its trips (201505 after a pushed 201504):")
        for label, r in c.items():
            lines.append(f"  {label:<7} gate {'passed' if r['gate_passed'] else 'stopped'}, outcome {r['outcome']}"
                         + (f": {r['reasons'][-1][:220]}" if r.get("reasons") else ""))
    if d:
        lines.append("")
        lines.append("Steady runs (201610 backfills its window; 201611 and 201612 are steady), node seconds:")
        for label, runs in d.items():
            lines.append(f"  {label:<7} " + "; ".join(f"{r['span']} wall {r['wall_s']} s, DataGate {r['data_gate_s']} s,"
                                                     f" Evaluator {r['evaluator_s']} s" for r in runs))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--months", type=int, default=24, help="good months through the whole pipeline (part B)")
    p.add_argument("--before", default="fd0d123", help="the commit whose gate is 'before' (a worktree runs it)")
    p.add_argument("--no-before", action="store_true", help="judge with this checkout only")
    p.add_argument("--skip-pipeline", action="store_true", help="part A only")
    p.add_argument("--skip-gate", action="store_true", help="parts B-D only")
    p.add_argument("--json", help="also write the raw figures here")
    args = p.parse_args()
    with (contextlib.nullcontext(None) if args.no_before else worktree(args.before)) as tree:
        a = None if args.skip_gate else part_a(args, tree)
        if a:
            print(report(a, None, None, None), flush=True)
        b = c = d = None
        if not args.skip_pipeline:
            c, d = part_c(tree), part_d(tree)
            print(report(None, None, c, d), flush=True)
            b = part_b(args.months)
            print(report(None, b, None, None), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gate": a, "pipeline": b, "join": c, "steady": d}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
