"""What the data gate measures, read from TFDV statistics: one module for the gate and calibration.

Every number here comes from a `DatasetFeatureStatisticsList` as StatisticsGen writes it
(or `tfdv.generate_statistics_from_*` for calibration), so the gate's measurements and
the history its limits were calibrated on are computed the same way:
- `missing_share`: examples whose value is missing or empty (CsvExampleGen encodes an
  empty CSV cell as a present feature with no values, which TFDV counts as present).
- `jsd` (numeric): TFDV's own Jensen-Shannon divergence on the quantile histograms (the
  standard histogram's equal-width buckets over [min, max] swing with one outlier).
- `ks` (numeric): the Kolmogorov-Smirnov distance between the two distributions, read
  off the percentiles: rank-based, so robust to outliers and to features of whole values.
- `scale` (numeric): |log| of the median ratio of the quartiles of the nonzero values: a
  change of unit multiplies them all by one factor, even when most values are zero.
- `linf` (categorical): TFDV's L-infinity distance between the category shares.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

_QUANTILES = statistics_pb2.Histogram.QUANTILES
# StatisticsGen and calibration both compute percentiles (TFDV's default is deciles): the
# scale and shift measures read quantiles of the nonzero part, which deciles resolve badly.
QUANTILE_BUCKETS = 100


def stats_options():
    """The TFDV options every statistics the gate compares are computed with."""
    import tensorflow_data_validation as tfdv

    return tfdv.StatsOptions(num_quantiles_histogram_buckets=QUANTILE_BUCKETS)


class StatsTally:
    """TFDV statistics of Arrow record batches added one at a time, in bounded memory.

    TFDV's in-memory generators with `stats_options()`: the statistics StatisticsGen's Beam
    pipeline computes from the same examples (the gate's measures agree to 4 digits on the
    taxi months), without a Beam pipeline per call (calibration: 17 s -> under 1 s a span).
    """

    def __init__(self):
        from tensorflow_data_validation.statistics import stats_impl

        self._impl = stats_impl
        self.generators = stats_impl.get_generators(stats_options(), in_memory=True)
        self.accumulators = [g.create_accumulator() for g in self.generators]

    def add(self, batch) -> None:
        if batch.num_rows:
            self.accumulators = [g.add_input(a, batch) for g, a in zip(self.generators, self.accumulators)]

    def result(self) -> statistics_pb2.DatasetFeatureStatisticsList:
        return self._impl.extract_statistics_output(self.accumulators, self.generators)


# Above any value the two distances can take: TFDV reports the measurement, we judge it.
_NEVER = 1.0 + 1e-9


@dataclasses.dataclass(frozen=True)
class FeatureView:
    """The parts of one feature's statistics the gate uses."""

    name: str
    kind: str  # "numeric", "categorical" or "other" (raw bytes)
    num_examples: int
    # Examples with at least one value (missing and empty lists excluded).
    with_values: float
    # Numeric features with values: the quantile histogram's edges (q0..q100) and zeros.
    quantiles: tuple[float, ...] = ()
    num_values: int = 0
    num_zeros: int = 0

    @property
    def missing_share(self) -> float:
        if self.num_examples <= 0:
            return 0.0
        return max(0.0, 1.0 - self.with_values / self.num_examples)

    def quantile(self, levels) -> np.ndarray:
        """The quantile function at `levels` (0..1), interpolated between TFDV's quantiles."""
        grid = np.linspace(0.0, 1.0, len(self.quantiles))
        return np.interp(levels, grid, self.quantiles)


def _with_values(common: statistics_pb2.CommonStatistics) -> float:
    """Examples whose feature holds at least one value.

    Exact for features with at most one value per example (tot_num_values); otherwise
    estimated from TFDV's quantiles of values per example.
    """
    present = common.num_non_missing
    if present == 0:
        return 0.0
    if common.max_num_values <= 1:
        return float(min(common.tot_num_values, present))
    if common.min_num_values >= 1:
        return float(present)
    buckets = common.num_values_histogram.buckets
    if not buckets:
        return float(present)
    empty = sum(b.sample_count for b in buckets if b.high_value <= 0)
    total = sum(b.sample_count for b in buckets) or 1.0
    return float(present) * (1.0 - empty / total)


def _quantile_edges(num_stats: statistics_pb2.NumericStatistics) -> tuple[float, ...]:
    for h in num_stats.histograms:
        if h.type == _QUANTILES and h.buckets:
            return tuple(float(b.low_value) for b in h.buckets) + (float(h.buckets[-1].high_value),)
    return ()


def feature_views(stats: statistics_pb2.DatasetFeatureStatisticsList) -> dict[str, FeatureView]:
    """One view per top-level feature of the first dataset (one split's statistics)."""
    if not stats.datasets:
        return {}
    dataset = stats.datasets[0]
    views = {}
    for f in dataset.features:
        name = ".".join(f.path.step) if f.HasField("path") else f.name
        which = f.WhichOneof("stats")
        extra = {}
        if which == "num_stats":
            common, kind = f.num_stats.common_stats, "numeric"
            if common.tot_num_values:
                extra = {"quantiles": _quantile_edges(f.num_stats), "num_values": int(common.tot_num_values),
                         "num_zeros": int(f.num_stats.num_zeros)}
        elif which == "string_stats":
            common, kind = f.string_stats.common_stats, "categorical"
        elif which == "bytes_stats":
            common, kind = f.bytes_stats.common_stats, "other"
        else:
            continue
        views[name] = FeatureView(name, kind, int(dataset.num_examples), _with_values(common), **extra)
    return views


def num_examples(stats: statistics_pb2.DatasetFeatureStatisticsList) -> int:
    return int(stats.datasets[0].num_examples) if stats.datasets else 0


def ks_distance(current: FeatureView, baseline: FeatureView) -> float | None:
    """Kolmogorov-Smirnov distance (largest gap between the two CDFs), from the quantiles.

    Rank-based: a shift of location or scale moves it, one outlier does not, and a
    feature of whole values (hours, days) is compared at its values, ties included.
    """
    if len(current.quantiles) < 3 or len(baseline.quantiles) < 3:
        return None
    cur, base = np.asarray(current.quantiles), np.asarray(baseline.quantiles)
    grid = np.union1d(cur, base)
    gap = 0.0
    for side in ("left", "right"):  # the CDF just below and at each value
        f_cur = np.searchsorted(cur, grid, side=side) / len(cur)
        f_base = np.searchsorted(base, grid, side=side) / len(base)
        gap = max(gap, float(np.max(np.abs(f_cur - f_base))))
    return gap


# Quartiles of the nonzero values, where a scale change is read.
_MAGNITUDE_LEVELS = np.array([0.25, 0.5, 0.75])
_MIN_NONZERO = 5


def _magnitude_quartiles(view: FeatureView) -> np.ndarray | None:
    """Quartiles of |value| over the nonzero values, for a feature of one sign."""
    nonzero = view.num_values - view.num_zeros
    if len(view.quantiles) < 3 or nonzero < _MIN_NONZERO:
        return None
    zeros = view.num_zeros / view.num_values
    if view.quantiles[0] >= 0:  # nonnegative: the nonzero values are the top of the distribution
        return view.quantile(zeros + (1.0 - zeros) * _MAGNITUDE_LEVELS)
    if view.quantiles[-1] <= 0:  # nonpositive: mirrored
        return -view.quantile((1.0 - zeros) * (1.0 - _MAGNITUDE_LEVELS))
    return None


def log_scale_change(current: FeatureView, baseline: FeatureView) -> float | None:
    """|median log ratio| of the quartiles of the nonzero magnitudes, new vs baseline.

    A change of unit multiplies every nonzero value by one factor, so this reads
    |log(factor)| whatever the distribution's shape and however many values are zero
    (trips without a tip); a change in the share of zeros does not move it. Features
    whose values take both signs have no scale of this kind (None).
    """
    cur, base = _magnitude_quartiles(current), _magnitude_quartiles(baseline)
    if cur is None or base is None or np.any(cur <= 0) or np.any(base <= 0):
        return None
    return float(abs(np.median(np.log(cur / base))))


def tfdv_distances(
    current: statistics_pb2.DatasetFeatureStatisticsList,
    baseline: statistics_pb2.DatasetFeatureStatisticsList,
    kinds: dict[str, str],
) -> dict[str, float]:
    """TFDV's own drift measurements: JSD (quantile histograms) or L-infinity per feature."""
    import tensorflow_data_validation as tfdv  # heavy: only where the gate runs

    schema = schema_pb2.Schema()
    for name, kind in sorted(kinds.items()):
        feature = schema.feature.add(name=name)
        if kind == "numeric":
            feature.type = schema_pb2.FLOAT
            jsd = feature.drift_comparator.jensen_shannon_divergence
            jsd.threshold = _NEVER
            jsd.source.type = schema_pb2.HistogramSelection.QUANTILES
        else:
            feature.type = schema_pb2.BYTES
            feature.drift_comparator.infinity_norm.threshold = _NEVER
    anomalies = tfdv.validate_statistics(current, schema, previous_statistics=baseline)
    out = {}
    for info in anomalies.drift_skew_info:
        for m in info.drift_measurements:
            out[".".join(info.path.step)] = float(m.value)
    return out


def _n_eff(n_new: float, n_base: float) -> float:
    """n_new * n_base / (n_new + n_base): the sample size a two-sample comparison sees."""
    return n_new * n_base / (n_new + n_base) if n_new > 0 and n_base > 0 else 0.0


def measure_pair(
    current: statistics_pb2.DatasetFeatureStatisticsList,
    baseline: statistics_pb2.DatasetFeatureStatisticsList,
    features: list[str],
) -> dict[str, dict]:
    """Every distance between two spans, per feature.

    Returns:
      feature -> {"kind", "n_eff", "missing_share", "baseline_missing_share", and each
      applicable measure's value}; a feature with no values on either side has no
      distances (its missing share says why).
    """
    cur_views, base_views = feature_views(current), feature_views(baseline)
    rows_n_eff = _n_eff(num_examples(current), num_examples(baseline))
    comparable = {}
    result = {}
    for name in features:
        cur, base = cur_views.get(name), base_views.get(name)
        entry = {
            "kind": (cur or base).kind if (cur or base) else "absent",
            "missing_share": cur.missing_share if cur else 1.0,
            "baseline_missing_share": base.missing_share if base else 1.0,
            "n_eff": 0.0,
            "rows_n_eff": rows_n_eff,
        }
        if cur and base and cur.kind == base.kind and cur.with_values and base.with_values:
            entry["n_eff"] = _n_eff(cur.with_values, base.with_values)
            if cur.kind in ("numeric", "categorical"):
                comparable[name] = cur.kind
            if cur.kind == "numeric":
                entry["ks"] = ks_distance(cur, base)
                entry["scale"] = log_scale_change(cur, base)
        result[name] = entry
    if comparable:
        measured = tfdv_distances(current, baseline, comparable)
        for name, kind in comparable.items():
            key = "jsd" if kind == "numeric" else "linf"
            if name in measured:
                result[name][key] = measured[name]
    for entry in result.values():
        for key in ("ks", "scale"):
            if entry.get(key) is None:
                entry.pop(key, None)
    return result
