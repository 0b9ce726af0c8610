"""How close each verdict of a test run came to flipping: the gates' margins, read from the
governance reports the runs wrote.

A test that asserts "pushed" (or "refused") on a verdict within noise of its rule passes
here and fails on a machine whose floating point rounds otherwise (training is not
bit-reproducible between processes unless `trainer.deterministic` is on). This lists, per
report, the distance of each judged check from its rule, smallest first:

- simple: the simple-baseline gate's own `margin` (the bound of the candidate's lead beyond
  min_lift, relative for an error metric); < 0 refuses;
- cmp_<metric>: the comparison with the blessed baseline, the favourable bound minus the
  tolerated change; < 0 refuses;
- fair: the smallest limit minus lower bound of a judged group's gap; < 0 refuses.

    python3 benchmarks/suite/margins.py [ROOT ...] [--top 30]

ROOT: folders searched for `governance/<run>/report.json` (default: pytest's temporary
folders, /tmp/pytest-of-<user>, where the last runs' work folders stay; run the suite with
`benchmarks/suite/run.py --keep` or a lane, then this).
"""

from __future__ import annotations

import argparse
import getpass
import glob
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from core.tasks import LOWER_IS_BETTER  # noqa: E402

# The comparison rows' metric -> the TFMA threshold's metric name (for its tolerated change).
_TFMA_NAMES = {"auc": "AUC", "binary_accuracy": "BinaryAccuracy",
               "sparse_categorical_accuracy": "SparseCategoricalAccuracy", "mean_squared_error": "MeanSquaredError"}


def _comparison(row: dict, thresholds: list[dict]) -> float | None:
    if not row.get("interval"):
        return None
    tolerance = row.get("tolerance")  # written when TFMA's point verdict failed
    if tolerance is None:
        named = [t for t in thresholds if t.get("metric") == _TFMA_NAMES.get(row["metric"])
                 and (t.get("change_threshold") or {}).get("absolute") is not None]
        if not named:
            return None
        tolerance = named[0]["change_threshold"]["absolute"]
    low, high = row["interval"]
    return tolerance - low if row["metric"] in LOWER_IS_BETTER else high - tolerance


def margins(report: dict) -> dict[str, float]:
    """{check: distance from its rule} of one governance report (negative: it refused)."""
    evaluation = report.get("evaluation") or {}
    verdict = evaluation.get("significance") or {}
    out = {}
    simple = verdict.get("simple_baseline") or {}
    if simple.get("margin") is not None:  # the judge's own (components/evaluator/simple_baseline.py)
        out["simple"] = simple["margin"]
    for row in verdict.get("comparisons") or []:
        value = _comparison(row, evaluation.get("thresholds") or [])
        if value is not None:
            out[f"cmp_{row['metric']}"] = value
    gaps = [s["limit"] - s["lower_bound"] for d in ((verdict.get("fairness") or {}).get("features") or {}).values()
            for s in d.get("slices") or [] if s.get("lower_bound") is not None and s.get("limit") is not None]
    if gaps:
        out["fair"] = min(gaps)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", default=[os.path.join(tempfile.gettempdir(), f"pytest-of-{getpass.getuser()}")])
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    rows, seen = [], set()
    for root in args.roots:
        for path in glob.glob(os.path.join(root, "**", "governance", "*", "report.json"), recursive=True):
            real = os.path.realpath(path)  # pytest's *current links repeat a folder
            if real in seen:
                continue
            seen.add(real)
            try:
                with open(real) as f:
                    report = json.load(f)
            except (OSError, ValueError):
                continue
            found = margins(report)
            if found:
                closest = min(found, key=lambda k: abs(found[k]))
                rows.append((abs(found[closest]), closest, report, found, real))
    rows.sort(key=lambda r: r[0])
    print(f"{len(rows)} judged reports; the {min(args.top, len(rows))} closest to flipping (check: margin, < 0 refused):")
    for _, closest, report, found, path in rows[:args.top]:
        span = (report.get("data") or {}).get("span")
        checks = "  ".join(f"{k} {v:+.4f}" for k, v in sorted(found.items(), key=lambda kv: abs(kv[1])))
        print(f"  {report.get('pipeline')} span {span} {report.get('outcome')}: {checks}")
        print(f"    {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
