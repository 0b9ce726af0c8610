"""Domains learned from history: each feature's value set or range, and how often good months leave it.

Quantile-based distances are robust to outliers by design, so they are blind to a few
absurd values or to a code no month ever had. A domain is the complement:
- a **value set** for strings and integer codes (at most MAX_SET_VALUES distinct values in
  the history, and for integers dense in their range: hours, weekdays, areas, classes),
  with the span each value was first seen in;
- a **range** for other numbers: the history's [min, max] widened by RANGE_MARGIN of its
  width on each side, never across zero when every value had one sign; with the spans the
  min and the max were seen in; and a **far range**, widened by FAR_MARGIN widths: good
  months do hold single values beyond the range (a $700 fare in a 71-row month), but hardly
  ever beyond the far range, so there one absurd value is enough to stop a small month;
- the **allowed share** of values outside it: how often a good month leaves the domain of
  the other months (leave one span out), as the share each month's count is consistent
  with, times the calibration margin, and never less than one value in the whole history
  (`policy.allowed_share`).
`retrain schema calibrate` learns them (`learn`); the gate counts each new span's values
outside them (`Tally`) and stops the span when that share is significantly above the
allowed one (`policy.share_exceeded`), naming the values and their counts. TF-free.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from components.data_gate import policy as policy_lib

# A feature with at most this many distinct values in the history gets a value set.
MAX_SET_VALUES = 200
# Distinct values counted per span and feature before it counts as many-valued.
TRACKED = 2 * MAX_SET_VALUES
# The smallest and the largest values kept per span and feature (for the range's leave-one-out).
EXTREMES = 1000
# A range is widened by this share of its width on each side; the far range by FAR_MARGIN.
RANGE_MARGIN = 0.5
FAR_MARGIN = 5.0
# An integer feature is a code (a value set) when its distinct values fill at least this
# share of [min, max]: hours, weekdays, areas; not seconds or amounts.
CODE_DENSITY = 0.5
# A value set's growth is measured after the first 1/BURN_IN_SHARE of the spans (at least one).
BURN_IN_SHARE = 8
# Values outside the calibrated set accepted from passed spans, kept per feature (beyond it
# the set is open: the gate's report says so).
MAX_ACCEPTED = 1000
# Out-of-domain values shown per feature (the most frequent).
EXAMPLES = 5
KINDS = ("int", "float", "bytes")


class FeatureTally:
    """What calibration keeps of one feature in one span: its value count, the counts of its
    distinct values (until TRACKED), and its EXTREMES smallest and largest values."""

    def __init__(self, kind: str):
        self.kind = kind
        self.count = 0
        self.counts: collections.Counter | None = collections.Counter()
        self.low = np.array([])
        self.high = np.array([])

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        self.count += len(values)
        if self.counts is not None:
            distinct, n = np.unique(values, return_counts=True)
            self.counts.update(dict(zip(_plain(distinct, self.kind), n.tolist())))
            if len(self.counts) > TRACKED:
                self.counts = None
        if self.kind != "bytes":
            numbers = values.astype(np.float64)
            self.low = np.sort(np.concatenate([self.low, np.partition(numbers, min(EXTREMES, len(numbers)) - 1)[:EXTREMES]]))[:EXTREMES]
            top = np.partition(numbers, max(len(numbers) - EXTREMES, 0))[-EXTREMES:]
            self.high = np.sort(np.concatenate([self.high, top]))[-EXTREMES:]

    @property
    def minimum(self) -> float:
        return float(self.low[0]) if len(self.low) else float("nan")

    @property
    def maximum(self) -> float:
        return float(self.high[-1]) if len(self.high) else float("nan")


def _plain(values: np.ndarray, kind: str) -> list:
    """numpy values as YAML-safe Python values (bytes as text)."""
    if kind == "bytes":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.tolist()]
    if kind == "int":
        return [int(v) for v in values.tolist()]
    return [float(v) for v in values.tolist()]


def widen(low: float, high: float, margin: float = RANGE_MARGIN) -> tuple[float, float]:
    """[low, high] widened by `margin` of its width each side, keeping a one-signed range's sign."""
    width = high - low
    lo, hi = low - margin * width, high + margin * width
    if low >= 0:
        lo = max(lo, 0.0)
    if high <= 0:
        hi = min(hi, 0.0)
    return lo, hi


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def learn(history: list[tuple[int, Mapping[str, FeatureTally]]], features: Iterable[str], margin: float,
          skip: Mapping[str, str], alpha: float) -> tuple[dict, dict, list[dict]]:
    """Each feature's domain from the spans' tallies.

    Args:
      history: (span, feature -> FeatureTally) in span order.
      features: the schema's features.
      margin: the calibration margin on the leave-one-out share.
      skip: feature -> why it gets no domain (opted out, the event time).
      alpha: the level of the gate's share test (`policy.allowed_share`).

    Returns:
      (domains: feature -> gate.yaml entry, none: feature -> why it has no domain,
       evidence: one row per (span, feature, check): a span's share outside the other spans'
       domain (domain, domain_far), or of values no earlier span had (domain_growth)).
    """
    domains, none, evidence = {}, dict(skip), []
    spans = [s for s, _ in history]
    for name in features:
        if name in skip:
            continue
        tallies = [(s, t[name]) for s, t in history if name in t and t[name].count]
        if not tallies:
            none[name] = "no values in the history"
            continue
        kind = tallies[0][1].kind
        total = sum(t.count for _, t in tallies)
        counted = all(t.counts is not None for _, t in tallies)
        union = collections.Counter()
        for _, t in tallies:
            if counted:
                union.update(t.counts)
        as_set = counted and len(union) <= MAX_SET_VALUES and kind != "float"
        if as_set and kind == "int":
            width = max(union) - min(union) + 1
            as_set = len(union) >= CODE_DENSITY * width
        if kind == "bytes" and not as_set:
            none[name] = (f"{len(union)} distinct values" if counted else f"more than {TRACKED} distinct values") + \
                f" in the history: too many for a value set (at most {MAX_SET_VALUES}), and text or bytes have no range"
            continue
        shares = []
        if as_set:
            spans_with = collections.Counter()
            first: dict = {}
            for s, t in tallies:
                spans_with.update(t.counts.keys())
                for v in t.counts:
                    first.setdefault(v, s)
            for s, t in tallies:
                only_here = sum(n for v, n in t.counts.items() if spans_with[v] == 1)
                shares.append((only_here / t.count, s, only_here, t.count, "domain"))
            # A set can also grow (new companies): each span against the spans before it, after
            # a burn-in, bounds the share of new values the gate will meet, as leaving one out does.
            seen: set = set()
            for i, (s, t) in enumerate(tallies):
                if i >= max(1, len(tallies) // BURN_IN_SHARE):
                    new = sum(n for v, n in t.counts.items() if v not in seen)
                    shares.append((new / t.count, s, new, t.count, "domain_growth"))
                seen |= set(t.counts)
            entry = {"kind": kind, "values": {v: first[v] for v in sorted(union, key=lambda v: (str(type(v)), v))}}
        else:
            mins = sorted((t.minimum, s) for s, t in tallies)
            maxs = sorted(((t.maximum, s) for s, t in tallies), reverse=True)
            far_shares = []
            for s, t in tallies:
                others_min = next(v for v, at in mins if at != s) if len(tallies) > 1 else t.minimum
                others_max = next(v for v, at in maxs if at != s) if len(tallies) > 1 else t.maximum
                for out, band in ((shares, RANGE_MARGIN), (far_shares, FAR_MARGIN)):
                    lo, hi = widen(others_min, others_max, band)
                    outside = int(np.sum(t.low < lo) + np.sum(t.high > hi))
                    out.append((outside / t.count, s, outside, t.count, "domain" if band == RANGE_MARGIN else "domain_far"))
            lo, hi = widen(mins[0][0], maxs[0][0])
            far_lo, far_hi = widen(mins[0][0], maxs[0][0], FAR_MARGIN)
            # Nothing good months had is 5 widths beyond the range: one value in the history.
            far_allowed, j = policy_lib.allowed_share([(c, n) for _, _, c, n, _ in far_shares], margin, alpha,
                                                      floor_values=1.0, total=total)
            entry = {"kind": kind, "range": [_round(lo), _round(hi)],
                     "far": {"range": [_round(far_lo), _round(far_hi)], "allowed_share": far_allowed,
                             "observed": {"max_share": _round(far_shares[j][0]), "count": far_shares[j][2],
                                          "of": far_shares[j][3], "at": far_shares[j][1]}},
                     "seen": {"min": _round(mins[0][0]), "min_at": mins[0][1],
                              "max": _round(maxs[0][0]), "max_at": maxs[0][1], "margin": RANGE_MARGIN,
                              "far_margin": FAR_MARGIN}}
        entry["allowed_share"], i = policy_lib.allowed_share([(c, n) for _, _, c, n, _ in shares], margin, alpha,
                                                             total=total)
        entry["observed"] = {"max_share": _round(shares[i][0]), "count": shares[i][2], "of": shares[i][3],
                             "at": shares[i][1], "by": shares[i][4], "values": total,
                             "spans": f"{spans[0]}..{spans[-1]}"}
        domains[name] = entry
        evidence += [{"span": s, "feature": name, "check": check, "share": _round(share), "count": count,
                      "values": n} for share, s, count, n, check in shares + (far_shares if not as_set else [])]
    return domains, none, evidence


@dataclasses.dataclass(frozen=True)
class Domain:
    """One feature's domain as the gate applies it."""

    feature: str
    kind: str
    allowed_share: float
    values: frozenset | None = None
    low: float | None = None
    high: float | None = None
    seen: Mapping = dataclasses.field(default_factory=dict)
    observed: Mapping = dataclasses.field(default_factory=dict)
    # The far range and its allowed share (ranges only).
    far_low: float | None = None
    far_high: float | None = None
    far_allowed_share: float = 0.0
    # Values outside the calibrated set that spans which passed the gate since have had
    # (a new cab company is new once): carried in each passed report, at most MAX_ACCEPTED.
    accepted: frozenset = frozenset()

    def with_accepted(self, values) -> Domain:
        """The domain with the values passed spans brought since calibration."""
        if self.values is None or not values:
            return self
        cast = int if self.kind == "int" else str
        return dataclasses.replace(self, accepted=frozenset(cast(v) for v in values) - self.values)

    @classmethod
    def from_entry(cls, feature: str, entry: Mapping) -> Domain:
        """From gate.yaml's entry (validated by the policy's loader)."""
        kind = entry["kind"]
        values = None
        if "values" in entry:
            cast = int if kind == "int" else str
            values = frozenset(cast(v) for v in entry["values"])
        low, high = entry.get("range") or (None, None)
        far = entry.get("far") or {}
        far_low, far_high = far.get("range") or (low, high)
        return cls(feature, kind, float(entry["allowed_share"]), values, low, high, dict(entry.get("seen") or {}),
                   dict(entry.get("observed") or {}), far_low, far_high, float(far.get("allowed_share", 0.0)))

    def describe(self) -> str:
        if self.values is not None:
            shown = sorted(self.values, key=str)
            text = ", ".join(map(str, shown[:6])) + (f", ... ({len(shown)} values)" if len(shown) > 6 else "")
            since = f", and {len(self.accepted)} accepted from spans that passed since" if self.accepted else ""
            return f"its {len(shown)} values seen in spans {self.observed.get('spans', '?')} ({text}){since}"
        where = (f"; seen {self.seen['min']:g} at {self.seen['min_at']} .. {self.seen['max']:g} at {self.seen['max_at']}"
                 if self.seen else "")
        return f"its range [{self.low:g}, {self.high:g}]{where}"


class Tally:
    """Counts one feature's values outside its domain over a span, a batch at a time."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self.checked = 0
        self.outside = 0
        self.far_outside = 0
        self.examples: collections.Counter = collections.Counter()
        if domain.values is not None:
            import pyarrow as pa

            allowed = sorted(domain.values | domain.accepted, key=str)
            self._set = pa.array([v.encode("utf-8") for v in allowed] if domain.kind == "bytes" else allowed,
                                 pa.binary() if domain.kind == "bytes" else pa.int64())

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        if self.domain.values is not None:
            import pyarrow as pa
            import pyarrow.compute as pc

            array = pa.array(values, pa.binary() if self.domain.kind == "bytes" else pa.int64())
            out = ~np.asarray(pc.is_in(array, value_set=self._set).to_numpy(zero_copy_only=False), bool)
        else:
            numbers = values.astype(np.float64)
            with np.errstate(invalid="ignore"):
                out = ~((numbers >= self.domain.low) & (numbers <= self.domain.high))
                self.far_outside += int(np.sum(~((numbers >= self.domain.far_low) & (numbers <= self.domain.far_high))))
        self.checked += len(values)
        bad = values[out]
        self.outside += len(bad)
        if len(bad):
            distinct, n = np.unique(bad[:10_000], return_counts=True)
            self.examples.update(dict(zip(_plain(distinct, self.domain.kind), n.tolist())))

    def to_dict(self) -> dict:
        out = {"checked": self.checked, "outside": self.outside, "far_outside": self.far_outside,
               "share": self.outside / self.checked if self.checked else 0.0,
               "examples": [[v, n] for v, n in self.examples.most_common(EXAMPLES)]}
        if self.domain.values is not None:  # what the span would add to the set if it passes
            out["new_values"] = sorted(self.examples, key=str)[:MAX_ACCEPTED + 1]
        return out


def judge(domain: Domain, counted: Mapping, alpha: float) -> dict:
    """One feature's domain check from its `Tally.to_dict()`: stops when the share of values
    outside the domain is significantly above the allowed share."""
    outside, checked = counted["outside"], counted["checked"]
    failed, p = policy_lib.share_exceeded(outside, checked, domain.allowed_share, alpha)
    what = ("never seen in the history" + (" nor in the spans that passed since" if domain.accepted else "")
            if domain.values is not None else "outside " + domain.describe())
    share, allowed, band = counted["share"], domain.allowed_share, "range"
    if domain.values is None:
        far = counted.get("far_outside", 0)
        far_failed, far_p = policy_lib.share_exceeded(far, checked, domain.far_allowed_share, alpha)
        if far_failed and not failed:  # a few values, but far beyond anything good months had
            failed, p, outside, allowed, band = True, far_p, far, domain.far_allowed_share, "far range"
            share = far / checked if checked else 0.0
            what = (f"far outside its range, beyond [{domain.far_low:g}, {domain.far_high:g}]"
                    f" ({domain.seen.get('far_margin', FAR_MARGIN):g} widths beyond"
                    f" {domain.seen.get('min', domain.low):g} .. {domain.seen.get('max', domain.high):g} seen)")
    shown = ", ".join(f"{v!r} (x{n})" for v, n in counted["examples"])
    return {
        "feature": domain.feature, "check": "domain", "domain": "values" if domain.values is not None else band,
        "checked": checked, "outside": outside, "share": round(share, 6),
        "allowed_share": allowed, "p_value": p, "failed": failed, "examples": counted["examples"],
        "description": f"{domain.feature}: {outside} of {checked} values ({share:.2%}) {what}"
                       + (f" ({domain.describe()})" if domain.values is not None else "")
                       + f" {'exceeds' if failed else 'within'} the allowed share {allowed:.3%}"
                       f" (p = {p:.2g})" + (f": {shown}" if shown else ""),
    }
