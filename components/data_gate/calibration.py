"""Calibrates the data gate's limits from the data's own history (`retrain schema calibrate`).

Each span is measured against the span before it (the gate's own baseline rule), with
the same measures the gate applies (`measures.measure_pair`), and each limit is set from
the distribution of those month-to-month values:
- distances and the rise of the missing share: `k = margin * max(value * n_eff ** p)`
  over the month pairs and over two random halves of each span (sampling noise alone), the value in units of its sampling noise (`policy.NOISE_POWER`); the
  gate then allows `k / n_eff ** p` for the span it judges, never less than
  `policy.MIN_LIMIT`;
- volume: `min_ratio = smallest row ratio / margin`, `max_ratio = largest * margin`, and
  never tighter than [1 / MIN_VOLUME_BAND, MIN_VOLUME_BAND].
- row-level sections (`calibrate_rows`, from every row of every span): each feature's
  domain (`domains.learn`), the allowed shares of the span-consistency checks
  (`consistency.learn`) and the label's limits (`label.learn`).
The result keeps the person-written opt-outs of the previous policy and records the
measurements it came from, to be reviewed and committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from components.data_gate import consistency as consistency_lib
from components.data_gate import domains as domains_lib
from components.data_gate import label as label_lib
from components.data_gate import measures
from components.data_gate import policy as policy_lib

DEFAULT_MARGIN = 1.5
# No calibrated k is below the 0.1% noise quantile of its measure (policy.NULL_K). With few
# spans the largest observed value is a low quantile of the noise (6 spans: 5 pairs), and a
# margin on it alone stopped good months of a 2-valued feature (a 74-row-a-month dataset).
NULL_K = policy_lib.NULL_K
# With few month pairs the largest observed value is a low quantile of month-to-month
# noise (any measure): below this many pairs the default margin is FEW_PAIRS_MARGIN. On
# scikit-learn's datasets as 6 spans of 30-95 rows, margin 1.5 stopped good months by the
# scale measure at 1.02-1.10 times the limit.
FEW_PAIRS = 12
FEW_PAIRS_MARGIN = 2.0
# Row counts within this factor of the baseline's never stop a span.
MIN_VOLUME_BAND = 1.5
RULE = (
    "k = margin x max over month pairs and span halves of value x n_eff^p (p = 1 for jsd, 1/2 otherwise); "
    f"k never below the 0.1% noise quantile {NULL_K}; limit = max(k / n_eff^p, floor); "
    f"volume: [smallest ratio / margin, largest ratio x margin], at least [1/{MIN_VOLUME_BAND}, {MIN_VOLUME_BAND}]"
)


def measure_history(spans_and_stats: Iterable[tuple[int, object]], features: list[str]) -> list[dict]:
    """One row per (previous span, span) pair: every feature's measurements and the row ratio."""
    rows = []
    previous = None
    for span, stats in spans_and_stats:
        if previous is not None:
            base_span, base_stats = previous
            rows.append(
                {
                    "span": span,
                    "baseline_span": base_span,
                    "rows": measures.num_examples(stats),
                    "baseline_rows": measures.num_examples(base_stats),
                    "features": measures.measure_pair(stats, base_stats, features),
                }
            )
        previous = (span, stats)
    return rows


def measure_noise(halves: Iterable[tuple[int, object, object]], features: list[str]) -> list[dict]:
    """The same measurements between two random halves of each span: pure sampling noise.

    A month pair shows how much months differ; the halves of one month show how much two
    samples differ by chance alone, at the data's own resolution (a feature of whole
    days moves its deciles in steps). Both bound the limits.
    """
    return [
        {"span": span, "baseline_span": span, "rows": measures.num_examples(a),
         "baseline_rows": measures.num_examples(b), "features": measures.measure_pair(a, b, features)}
        for span, a, b in halves
    ]


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def calibrate(
    history: list[dict],
    features: list[str],
    previous: policy_lib.GatePolicy | None = None,
    margin: float | None = None,
    noise: list[dict] | None = None,
) -> dict:
    """The policy (as gate.yaml's mapping) that the measured history implies.

    Args:
      history: `measure_history`'s month pairs.
      features: the schema's features.
      previous: the policy in force, whose opt-outs (a person's decisions) are kept.
      margin: how far beyond the largest observed value the limit lies (default:
        DEFAULT_MARGIN, or FEW_PAIRS_MARGIN with fewer than FEW_PAIRS month pairs).
      noise: `measure_noise`'s split halves; their values bound the limits too.

    Raises:
      ValueError: fewer than two spans, or a margin below 1.
    """
    if not history:
        raise ValueError("calibration needs at least two spans (one month-to-month pair)")
    if margin is None:
        margin = FEW_PAIRS_MARGIN if len(history) < FEW_PAIRS else DEFAULT_MARGIN
    if margin < 1.0:
        raise ValueError(f"margin must be >= 1, got {margin}")
    opt_out = dict(previous.opt_out) if previous else {}
    out_features = {}
    for name in features:
        if name in opt_out:
            continue
        observed = {}
        for row in [*history, *(noise or [])]:
            entry = row["features"].get(name, {})
            values = {m: entry[m] for m in policy_lib.MEASURES if m in entry}
            if "missing_share" in entry:
                values["missing"] = max(entry["missing_share"] - entry["baseline_missing_share"], 0.0)
            for measure, value in values.items():
                n_eff = entry["rows_n_eff"] if measure == "missing" else entry["n_eff"]
                z = policy_lib.scaled(measure, value, n_eff)
                best = observed.get(measure)
                if best is None or z > best["max_scaled"]:
                    at = row["span"] if row["baseline_span"] != row["span"] else f"{row['span']} halves"
                    observed[measure] = {"max_scaled": z, "value": value, "n_eff": n_eff, "at": at}
        out_features[name] = {
            "k": {m: _round(max(margin * best["max_scaled"], NULL_K.get(m, 0.0))) for m, best in observed.items()},
            "observed": {
                m: {key: (_round(v) if isinstance(v, float) else v) for key, v in best.items()}
                for m, best in observed.items()
            },
        }
    ratios = [(row["rows"] / max(row["baseline_rows"], 1), row["span"]) for row in history]
    low, low_at = min(ratios)
    high, high_at = max(ratios)
    return {
        "version": 1,
        "calibration": {
            "spans": f"{history[0]['baseline_span']}..{history[-1]['span']}",
            "pairs": len(history),
            "split_halves": len(noise or []),
            "margin": margin,
            "rule": RULE,
            "rows_rule": ROWS_RULE,
            "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "volume": {
            "min_ratio": _round(min(low / margin, 1 / MIN_VOLUME_BAND)),
            "max_ratio": _round(max(high * margin, MIN_VOLUME_BAND)),
            "observed": {"smallest_ratio": _round(low), "at": low_at, "largest_ratio": _round(high), "largest_at": high_at},
        },
        "opt_out": opt_out,
        # A person's choice, kept across recalibrations (stop unless they chose report).
        "columns": {"new": previous.columns_new if previous else "stop"},
        "features": out_features,
    }


ROWS_RULE = (
    "domains: a value set for text and integer codes (at most "
    f"{domains_lib.MAX_SET_VALUES} values, integers filling {domains_lib.CODE_DENSITY:.0%} of their range), else "
    f"[min, max] widened by {domains_lib.RANGE_MARGIN} of its width each side (keeping a one-signed range's sign); "
    "allowed_share = margin x the largest share a span's count outside the other spans' domain is consistent "
    "with (one-sided Clopper-Pearson bound at share_alpha), at least 1 / values; "
    "consistency and the label's missing rows: the same rule on each span's count; "
    "label: k = margin x the largest value of a span against the reference_spans spans before it "
    f"(class z at least {label_lib.NULL_Z}); a share is exceeded when significantly above its allowed share "
    "(one-sided binomial test at share_alpha)"
)


def calibrate_rows(
    scans: list[tuple[int, object]],
    features: list[str],
    margin: float,
    previous: policy_lib.GatePolicy | None = None,
    consistency: consistency_lib.SpanConsistency | None = None,
    label_name: str | None = None,
    reference_spans: int = 6,
) -> tuple[dict, list[dict]]:
    """The row-level sections of gate.yaml from each span's `rows.SpanScan` (learn mode).

    Args:
      scans: (span, SpanScan) in span order.
      margin: how far beyond the worst good month each allowance lies.
      previous: the policy in force: its domain opt-outs (a person's) are kept.
      consistency: the pipeline's span consistency (its event time gets no domain).
      label_name: the label's name, when the scans computed it.
      reference_spans: how many spans before a span its label is compared with.

    Returns:
      (sections: domains, no_domain, domain_opt_out, consistency, label, share_alpha;
       evidence rows per span and check).
    """
    opted = dict(previous.domain_opt_out) if previous else {}
    skip = dict(opted)
    if consistency and consistency.enabled:
        skip[consistency.event_time.feature] = (
            "the event time: its legal values are the span's period, which span_consistency checks")
    alpha = previous.share_alpha if previous else policy_lib.DEFAULT_SHARE_ALPHA
    found, none, evidence = domains_lib.learn([(s, scan.learned) for s, scan in scans], features, margin, skip, alpha)
    sections: dict = {
        "share_alpha": alpha,
        "domain_opt_out": opted,
        "no_domain": {k: v for k, v in none.items() if k not in opted},
        "domains": found,
        "consistency": {},
        "label": {},
    }
    if consistency and consistency.enabled:
        sections["consistency"], rows = consistency_lib.learn([(s, scan.consistency.to_dict()) for s, scan in scans],
                                                              margin, alpha)
        evidence += rows
    if label_name and all(scan.label is not None for _, scan in scans):
        sections["label"], rows = label_lib.learn([(s, scan.label.facts()) for s, scan in scans], reference_spans,
                                                  margin, label_name, alpha)
        evidence += rows
    return sections, evidence


def pair_table(history: list[dict]) -> list[dict]:
    """The raw measurements, one row per (pair, feature): the evidence behind the policy."""
    table = []
    for row in history:
        for name, entry in sorted(row["features"].items()):
            table.append(
                {
                    "span": row["span"],
                    "baseline_span": row["baseline_span"],
                    "feature": name,
                    "n_eff": _round(entry["n_eff"]),
                    "rows_n_eff": _round(entry["rows_n_eff"]),
                    "missing_share": _round(entry["missing_share"]),
                    "baseline_missing_share": _round(entry["baseline_missing_share"]),
                    **{m: _round(entry[m]) for m in policy_lib.MEASURES if m in entry},
                    "rows": row["rows"],
                    "baseline_rows": row["baseline_rows"],
                }
            )
    return table


def span_statistics(folder: str, example_format: str, seed: int, schema=None) -> tuple[object, object, object]:
    """TFDV statistics of a span folder, and of two random halves of its rows.

    Computed from the span's tf.Examples as CsvExampleGen's engine writes them, decoded as
    StatisticsGen decodes them (`measures.StatsTally`), so calibration measures what the
    gate will measure. `span_scan` gives these and the row-level tallies in one pass.
    """
    scan = span_scan(folder, example_format, schema, seed)
    return tuple(t.result() for t in scan.statistics)


def span_scan(folder: str, example_format: str, schema, seed: int, **scan_args):
    """One pass over a span's rows: its statistics and halves (`scan.statistics`) and the
    row-level tallies asked for (`rows.SpanScan`'s arguments)."""
    from components.data_gate import rows

    return rows.scan_span(folder, example_format, schema, statistics_seed=seed, **scan_args)
