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
The result keeps the person-written opt-outs of the previous policy and records the
measurements it came from, to be reviewed and committed.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import random
import tempfile
from collections.abc import Iterable

from components.data_gate import measures
from components.data_gate import policy as policy_lib

DEFAULT_MARGIN = 1.5
# No calibrated k is below what two samples of one distribution exceed once in a thousand
# (in units of sampling noise, as k is): Kolmogorov's c(0.001) = 1.95 for `ks`; one degree
# of freedom's chi-square quantile 10.83 / (8 ln 2) = 1.95 for TFDV's `jsd` (bits) on a
# two-valued feature; 0.5 x 3.29 for the `linf` of two shares. With few spans the largest
# observed value is a low quantile of the noise (6 spans: 5 pairs), and a margin on it
# alone stopped good months of a 2-valued feature (a 74-row-a-month dataset).
NULL_K = {"ks": 1.95, "jsd": 1.95, "linf": 1.65}
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
            "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "volume": {
            "min_ratio": _round(min(low / margin, 1 / MIN_VOLUME_BAND)),
            "max_ratio": _round(max(high * margin, MIN_VOLUME_BAND)),
            "observed": {"smallest_ratio": _round(low), "at": low_at, "largest_ratio": _round(high), "largest_at": high_at},
        },
        "opt_out": opt_out,
        "features": out_features,
    }


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


def span_statistics(folder: str, example_format: str, seed: int) -> tuple[object, object, object]:
    """TFDV statistics of a span folder, and of two random halves of its rows.

    CSV is decoded by TFDV's CSV decoder, whose type inference is CsvExampleGen's; an
    empty cell is then a missing value rather than an empty list, which the gate's
    missing-or-empty share counts alike.
    """
    import tensorflow_data_validation as tfdv  # heavy: only when calibrating

    options = measures.stats_options()
    with tempfile.TemporaryDirectory() as tmp:
        if example_format == "csv":
            files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".csv"))
            header, rows = None, []
            for path in files:
                with open(path, newline="", encoding="utf-8") as f:
                    reader = csv.reader(f)
                    header = next(reader)
                    rows += list(reader)
            halves = _halves(rows, seed)
            paths = []
            for i, part in enumerate(halves):
                paths.append(os.path.join(tmp, f"half{i}.csv"))
                with open(paths[-1], "w", newline="", encoding="utf-8") as f:
                    csv.writer(f).writerows([header, *part])
            full = tfdv.generate_statistics_from_csv(os.path.join(folder, "*.csv"), stats_options=options)
            parts = [tfdv.generate_statistics_from_csv(p, stats_options=options) for p in paths]
        else:
            import tensorflow as tf

            pattern = os.path.join(folder, "*.tfrecord.gz")
            records = [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), compression_type="GZIP")]
            paths = []
            for i, part in enumerate(_halves(records, seed)):
                paths.append(os.path.join(tmp, f"half{i}.tfrecord.gz"))
                with tf.io.TFRecordWriter(paths[-1], options="GZIP") as w:
                    for r in part:
                        w.write(r)
            full = tfdv.generate_statistics_from_tfrecord(pattern, stats_options=options)
            parts = [tfdv.generate_statistics_from_tfrecord(p, stats_options=options) for p in paths]
    return full, parts[0], parts[1]


def _halves(rows: list, seed: int) -> tuple[list, list]:
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    middle = len(shuffled) // 2
    return shuffled[:middle], shuffled[middle:]
