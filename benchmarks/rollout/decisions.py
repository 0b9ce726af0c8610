"""Canary decisions as taxi runs them: error rates, inconclusive rates and labels, with intervals.

Every figure is a rate over seeded simulations of whole rollouts (rollout/decision_sim.py),
each decided by the controller's own rule (rollout/verdict.py) at every look, with a Wilson
95% interval; means include the runs that ran out. Four parts:

  1. taxi's rollout block (pipelines/taxi/config.yaml: canary_share 0.1, so a 9:1 split;
     alpha 0.05, max_regression 0.02, effect_size 0.02, min_labelled 200, max_labelled
     20,000, max_hours 72, maturity_quantile 0.95, on_run_out inconclusive), a look every
     30 minutes (taxi's rollout_check), prediction-dependent label delay (labels of flagged
     predictions, score > 0.7, about a third, arrive with a median of 15 min, the others with
     a median of 3 h, log-normal with log-sd 1), at two traffic levels (logged requests per
     hour). Per AUC drop: roll-back, promotion and inconclusive rates; mean hours and mean
     canary labels to the outcome; a one-sided z-test at alpha looked at every look until
     max_hours (what peeking does); and the labels a fixed-horizon one-sided z-test needs for
     the power the sequential test really had (its roll-back rate, with the interval's ends);
  2. the run-out rules a policy may choose instead of `inconclusive`, on the same runs;
  3. prediction-dependent delay at one look: the rule before maturity (every arrived label
     compared) against the maturity rule, on a canary as good as stable that flags more
     (labels of flagged predictions come first) and one 0.03 worse that flags less;
  4. the sample-ratio check: 10% of the canary's request logs lost.

  .venv/bin/python benchmarks/rollout/decisions.py [--runs 100] [--processes 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from statistics import NormalDist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import numpy as np

from rollout import decision_sim, sequential
from rollout.settings import RolloutSettings

DROPS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)
TRAFFIC = (200.0, 2000.0)
DELAYS = {"delay_median_h": 3.0, "flagged_delay_median_h": 0.25, "delay_sigma": 1.0, "flag_threshold": 0.7}
RULES = ("estimate", "rollback", "promote")
# Part 3: one look 12 h into a canary on an even split, 6,000 logged requests an hour; labels of
# flagged predictions after a median of 15 min, the others' after 6 h.
BIAS_LOOK_H = 12.0
BIAS_CASES = (("as good, flags more (threshold 0.85, scores shifted +1.5)", 0.0, 0.85, 1.5),
              ("0.03 worse, flags less (threshold 0.5, scores shifted -1.5)", 0.03, 0.5, -1.5))


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a binomial rate k / n."""
    if not n:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate(k: int, n: int) -> dict:
    low, high = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}


def taxi_settings() -> RolloutSettings:
    """The taxi pipeline's rollout block (what `make rollout-demo` runs with)."""
    from retrain import options

    return options.load_config(os.path.join(REPO, "pipelines", "taxi", "config.yaml")).rollout_settings


def _chunk(args) -> list:
    world, settings, seeds, mature = args
    return [decision_sim.run(world, settings, seed, mature=mature) for seed in seeds]


def simulate(pool, world, settings, runs: int, mature: bool = True, seed0: int = 0) -> list:
    seeds = list(range(seed0, seed0 + runs))
    chunks = [seeds[i:i + 20] for i in range(0, runs, 20)]
    return [o for part in pool.map(_chunk, [(world, settings, c, mature) for c in chunks]) for o in part]


def _fixed_horizon(outcomes, drop: float, settings: RolloutSettings, power: dict) -> dict | None:
    """Canary labels a one-sided fixed-horizon z-test at alpha needs for `drop` with the power
    the sequential test had (at its point estimate and at the interval's ends)."""
    variances = [o.per_example_variance for o in outcomes if o.per_example_variance]
    if not drop or not variances:
        return None
    variance = float(np.median(variances))

    def labels(p):
        if p >= 1:
            return None  # no finite fixed horizon has power 1
        if p <= settings.significance_level:
            return 0
        return round(sequential.fixed_horizon_n(variance, drop, settings.significance_level, p))

    return {"per_example_variance": variance, "at": labels(power["rate"]), "at_low": labels(power["low"]),
            "at_high": labels(power["high"])}


def part_taxi(pool, runs: int, settings: RolloutSettings) -> list[dict]:
    rows = []
    margin = settings.margin("auc")
    for traffic in TRAFFIC:
        for drop in DROPS:
            start = time.perf_counter()
            world = decision_sim.World(auc_drop=drop, requests_per_hour=traffic, **DELAYS)
            out = simulate(pool, world, settings, runs)
            actions = [o.action for o in out]
            row = {"requests_per_hour": traffic, "auc_drop": drop, "runs": runs,
                   "rollback": rate(actions.count("rollback"), runs),
                   "promote": rate(actions.count("promote"), runs),
                   "inconclusive": rate(actions.count("inconclusive"), runs),
                   "mean_hours": float(np.mean([o.hours for o in out])),
                   "mean_canary_labels": float(np.mean([o.canary_labels for o in out])),
                   "peeking_z_test_rollback": rate(sum(o.peeked for o in out), runs),
                   "srm_blocked_runs": rate(sum(o.srm_blocks > 0 for o in out), runs),
                   "run_out_rules": {rule: {a: rate(sum(o.under(rule, margin) == a for o in out), runs)
                                            for a in ("rollback", "promote", "inconclusive")} for rule in RULES}}
            row["fixed_horizon"] = _fixed_horizon(out, drop, settings, row["rollback"])
            row["seconds"] = round(time.perf_counter() - start, 1)
            rows.append(row)
            sys.stderr.write(f"[bench] {traffic:g}/h AUC -{drop:.2f}: rollback {row['rollback']['rate']:.3f} "
                             f"promote {row['promote']['rate']:.3f} inconclusive {row['inconclusive']['rate']:.3f} "
                             f"({row['seconds']} s)\n")
    return rows


def part_bias(pool, runs: int, settings: RolloutSettings) -> list[dict]:
    """One look at BIAS_LOOK_H, then whole rollouts (a look every 2 h until max_hours)."""
    even = dataclasses.replace(settings, canary_share=0.5)
    rows = []
    for name, drop, threshold, shift in BIAS_CASES:
        for when, rollout, rate_h, every in (("one look at 12 h", dataclasses.replace(even, max_hours=BIAS_LOOK_H),
                                              6000.0, BIAS_LOOK_H),
                                             ("whole rollout", even, 2000.0, 2.0)):
            world = decision_sim.World(auc_drop=drop, requests_per_hour=rate_h, delay_median_h=6.0,
                                       flagged_delay_median_h=0.25, flag_threshold=threshold, canary_shift=shift,
                                       look_every_h=every)
            for mature in (False, True):
                out = simulate(pool, world, rollout, runs, mature=mature)
                actions = [o.action for o in out]
                rows.append({"case": name, "auc_drop": drop, "when": when, "requests_per_hour": rate_h,
                             "rule": "maturity" if mature else "every arrived label",
                             "rollback": rate(actions.count("rollback"), runs),
                             "promote": rate(actions.count("promote"), runs),
                             "inconclusive": rate(actions.count("inconclusive"), runs),
                             "mean_hours": float(np.mean([o.hours for o in out])),
                             "mean_canary_labels": float(np.mean([o.canary_labels for o in out]))})
    return rows


def part_srm(pool, runs: int, settings: RolloutSettings) -> dict:
    world = decision_sim.World(auc_drop=0.0, requests_per_hour=TRAFFIC[-1], canary_log_loss=0.1, **DELAYS)
    out = simulate(pool, world, settings, runs, seed0=10_000)
    return {"canary_log_loss": 0.1, "requests_per_hour": TRAFFIC[-1],
            "blocked_runs": rate(sum(o.srm_blocks > 0 for o in out), runs),
            "decided_anyway": rate(sum(o.action in ("promote", "rollback") for o in out), runs)}


def _r(x: dict, digits: int = 3) -> str:
    return f"{x['rate']:.{digits}f} [{x['low']:.{digits}f}, {x['high']:.{digits}f}]"


def decisions(runs: int, processes: int) -> dict:
    settings = taxi_settings()
    with ProcessPoolExecutor(max_workers=processes) as pool:
        taxi = part_taxi(pool, runs, settings)
        bias = part_bias(pool, runs, settings)
        mismatch = part_srm(pool, runs, settings)
    return {"settings": settings.to_dict(), "delays": DELAYS, "taxi": taxi, "delay_bias": bias, "srm": mismatch}


def report(out: dict) -> None:
    s = out["settings"]
    print(f"1. Canary decisions with taxi's rollout settings: canary_share {s['canary_share']} (9:1), alpha "
          f"{s['significance_level']}, max_regression {s['max_regression']}, min_labelled {s['min_labelled']}, "
          f"max_labelled {s['max_labelled']}, max_hours {s['max_hours']:g}, maturity_quantile "
          f"{s['maturity_quantile']}, on_run_out {s['on_run_out']}; a look every 30 min; label delay: flagged "
          "(score > 0.7) median 15 min, others 3 h, log-normal. Rates over "
          f"{out['taxi'][0]['runs']} seeded runs each, Wilson 95% intervals; means include run-outs.")
    head = (f"{'logged/h':>8} {'AUC drop':>8} {'rollback':>21} {'promote':>21} {'inconclusive':>21} {'hours':>6} "
            f"{'canary labels':>13} {'peeking z-test rollback':>23} {'fixed-horizon labels at that power':>34}")
    print(head)
    for r in out["taxi"]:
        fixed = r["fixed_horizon"]
        if fixed is None or fixed["at"] == 0:
            fh = "-"  # no drop, or a roll-back rate no higher than alpha: no power to match
        elif fixed["at"] is None:  # every run rolled back: the power is only known to be at least the low end
            fh = f">= {fixed['at_low']:,}"
        else:
            high = "inf" if fixed["at_high"] is None else f"{fixed['at_high']:,}"
            fh = f"{fixed['at']:,} [{fixed['at_low']:,}, {high}]"
        print(f"{r['requests_per_hour']:>8g} {r['auc_drop']:>8.2f} {_r(r['rollback']):>21} {_r(r['promote']):>21} "
              f"{_r(r['inconclusive']):>21} {r['mean_hours']:>6.1f} {r['mean_canary_labels']:>13,.0f} "
              f"{_r(r['peeking_z_test_rollback']):>23} {fh:>34}")
    print("\n2. The run-out rules a policy may choose instead (same runs): roll-back / promotion rate")
    print(f"{'logged/h':>8} {'AUC drop':>8} " + " ".join(f"{rule:>45}" for rule in RULES))
    for r in out["taxi"]:
        cells = [f"{_r(r['run_out_rules'][rule]['rollback'])} / {_r(r['run_out_rules'][rule]['promote'])}"
                 for rule in RULES]
        print(f"{r['requests_per_hour']:>8g} {r['auc_drop']:>8.2f} " + " ".join(f"{c:>45}" for c in cells))
    print("\n3. Prediction-dependent delay (even split; flagged labels median 15 min, others 6 h): one look 12 h in "
          "at 6,000 logged requests/h, and whole rollouts at 2,000/h with a look every 2 h")
    for r in out["delay_bias"]:
        print(f"  {r['case']:<60} {r['when']:<16} {r['rule']:<20} rollback {_r(r['rollback'])}  promote "
              f"{_r(r['promote'])}  inconclusive {_r(r['inconclusive'])}  hours {r['mean_hours']:.1f}  canary labels "
              f"{r['mean_canary_labels']:,.0f}")
    m = out["srm"]
    no_loss = next(r for r in out["taxi"] if r["auc_drop"] == 0 and r["requests_per_hour"] == m["requests_per_hour"])
    print(f"\n4. Sample-ratio check at {m['requests_per_hour']:g} logged requests/h: runs with a blocked look, no loss "
          f"{_r(no_loss['srm_blocked_runs'])}; 10% of canary logs lost {_r(m['blocked_runs'])} (decided anyway "
          f"{_r(m['decided_anyway'])})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100, help="seeded runs per cell (docs/rollout.md quotes --runs 200)")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args(argv)
    start = time.perf_counter()
    out = decisions(args.runs, args.processes)
    out["seconds"] = round(time.perf_counter() - start, 1)
    report(out)
    print(f"\n({out['seconds']} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
