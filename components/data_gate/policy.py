"""The data gate's policy: which measures watch which feature, and the limit of each.

A policy is a reviewed file beside the curated schema (`schemas/<pipeline>/gate.yaml`),
written by `retrain schema calibrate` from the data's own history and committed by a
person. It holds, per feature, a calibrated constant `k` for each distance the gate
measures, the explicit opt-outs with their reasons, the completeness limits and the
volume bounds. TF-free: the CLI, the factory and the reports read it without TensorFlow.

How a limit is applied (the documented rule; `calibration.py` sets the numbers):
- A distance between the new span and the baseline span (`jsd`, `ks`, `scale`, `linf`) is
  compared with `k / n_eff ** p`, where `n_eff = n_new * n_base / (n_new + n_base)`
  counts the values each side has and `p` is how its sampling noise shrinks with the
  sample (1 for the divergence, 1/2 for differences of quantiles or shares:
  `NOISE_POWER`). So one calibrated `k` holds for a 70-row month and a 400-row month
  alike, and a big month is judged more tightly than a small one, down to a floor per
  measure (`MIN_LIMIT`).
- Completeness: the share of examples whose value is missing or empty must not exceed
  the schema's limit (`1 - presence.min_fraction`), nor rise above the baseline's share
  by more than `k_missing / sqrt(n_eff)` (rows), and never less than 5 points.
- Volume: rows of the new span / rows of the baseline span must lie within
  [`min_ratio`, `max_ratio`].
- Shares of rows or values that break a rule (outside a feature's domain, event times
  outside the span, derived fields that disagree, a label that cannot be computed): the
  count must not be significantly above the calibrated `allowed_share` of the values
  checked (`share_exceeded`: a one-sided binomial test at `share_alpha`). Calibration sets
  the allowed share so that every good month passes with the margin to spare
  (`allowed_share`); a rule good months never broke allows three values in the whole
  history (the rule of three: the 95% upper bound of a rate never seen), or one for values
  far beyond a feature's range; so two bad values stop a small month, one absurd one
  does, and a large month needs more than chance to stop.
The row-level sections (`domains`, `consistency`, `label`) are written by calibration too;
`domain_opt_out` holds a person's reasons for not checking a feature's domain.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from core import files

# The distances the gate measures; which applies depends on the feature's statistics.
# TFDV's Jensen-Shannon divergence (quantile histograms), Kolmogorov-Smirnov, scale change.
NUMERIC_MEASURES = ("jsd", "ks", "scale")
CATEGORICAL_MEASURES = ("linf",)  # TFDV's L-infinity distance of the value shares
MEASURES = NUMERIC_MEASURES + CATEGORICAL_MEASURES
# Everything with a calibrated constant: the distances and the rise of the missing share.
LIMITED = MEASURES + ("missing",)
MEASURE_NAMES = {
    "jsd": "Jensen-Shannon divergence (TFDV, quantile histograms)",
    "ks": "Kolmogorov-Smirnov distance (from TFDV's percentiles)",
    "scale": "scale change (|log| of the median ratio of nonzero quartiles)",
    "linf": "L-infinity distance of category shares (TFDV)",
    "missing": "rise of the missing-or-empty share",
}
# Used for a feature the policy does not list (a feature added to the schema after the
# last calibration): deliberately strict, and the report says the limit is a default.
DEFAULT_K = {"jsd": 5.0, "ks": 1.5, "scale": 1.5, "linf": 1.5, "missing": 1.0}
# No limit is tighter than these, however large the sample: with millions of rows every
# real month differs measurably, and a scale change of under 10% is no change of unit.
MIN_LIMIT = {"jsd": 0.01, "ks": 0.05, "scale": 0.1, "linf": 0.02, "missing": 0.05}
DEFAULT_VOLUME = (0.25, 4.0)
# No calibrated k is below what two samples of one distribution exceed once in a thousand
# (in units of sampling noise, as k is): Kolmogorov's c(0.001) = 1.95 for `ks`; one degree
# of freedom's chi-square quantile 10.83 / (8 ln 2) = 1.95 for TFDV's `jsd` (bits) on a
# two-valued feature; 0.5 x 3.29 for the `linf` of two shares.
NULL_K = {"ks": 1.95, "jsd": 1.95, "linf": 1.65}
NULL_K_KS = NULL_K["ks"]
# What `columns.new` may say (a missing column always stops).
COLUMNS_NEW = ("stop", "report")
# The level of the share tests (domains, consistency, the label's missing rows).
DEFAULT_SHARE_ALPHA = 0.01


class PolicyError(ValueError):
    """A gate policy that cannot be used; names the file and the field."""


@dataclasses.dataclass(frozen=True)
class FeatureLimits:
    """The calibrated limits of one feature."""

    k: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # "calibrated" (from gate.yaml) or "default" (the feature is not in the policy).
    source: str = "calibrated"


@dataclasses.dataclass(frozen=True)
class GatePolicy:
    """Every limit the gate applies, plus where they came from."""

    features: Mapping[str, FeatureLimits] = dataclasses.field(default_factory=dict)
    # feature -> the reason a person gave for not watching its drift.
    opt_out: Mapping[str, str] = dataclasses.field(default_factory=dict)
    min_ratio: float = DEFAULT_VOLUME[0]
    max_ratio: float = DEFAULT_VOLUME[1]
    # What the numbers came from (spans, margin, rule); shown in reports, not used.
    calibration: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    path: str = ""
    # feature -> its domain (gate.yaml's entry: kind, values or range, allowed_share, where seen).
    domains: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    # feature -> why it has no domain: a person's opt-out (domain_opt_out) ...
    domain_opt_out: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # ... or calibration's note (too many distinct values, the event time).
    no_domain: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The allowed shares of the span-consistency checks: {"event_time": {allowed_share, ...},
    # "derived": {feature: {allowed_share, ...}}}.
    consistency: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The label's calibrated limits (components/data_gate/label.py).
    label: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    share_alpha: float = DEFAULT_SHARE_ALPHA
    # What a column the source added (one not in the schema) gets: stop (the month stops as a
    # structure change) or report (left out of the examples, named in the summary, the report
    # and an alert). A missing column always stops (components/data_gate/columns.py).
    columns_new: str = "stop"

    def limits(self, feature: str) -> FeatureLimits:
        return self.features.get(feature) or FeatureLimits(k=dict(DEFAULT_K), source="default")

    def k(self, feature: str, measure: str) -> tuple[float, str]:
        """The constant for one feature and measure, and whether it was calibrated."""
        limits = self.limits(feature)
        if measure in limits.k:
            return limits.k[measure], limits.source
        return DEFAULT_K[measure], "default"

    def without(self, features: list[str] | tuple[str, ...]) -> GatePolicy:
        """The policy less every entry of the features (those a run never ingests: their limits
        would be checked against columns that are not there, and their domains list values)."""
        drop = set(features)
        if not drop:
            return self

        def keep(mapping: Mapping) -> dict:
            return {k: v for k, v in mapping.items() if k not in drop}

        return dataclasses.replace(self, features=keep(self.features), opt_out=keep(self.opt_out),
                                   domains=keep(self.domains), domain_opt_out=keep(self.domain_opt_out),
                                   no_domain=keep(self.no_domain))

    def to_json_dict(self) -> dict:
        """The policy as plain values (the DataGate's execution parameter, the reports)."""
        return {
            "features": {
                name: {"k": dict(f.k)}
                for name, f in sorted(self.features.items())
            },
            "opt_out": dict(sorted(self.opt_out.items())),
            "volume": {"min_ratio": self.min_ratio, "max_ratio": self.max_ratio},
            "columns": {"new": self.columns_new},
            "calibration": dict(self.calibration),
            # Value sets as [value, first span] pairs: JSON keys would turn integer codes into text.
            "domains": {name: {**entry, **({"values": [[v, at] for v, at in entry["values"].items()]}
                                           if "values" in entry else {})}
                        for name, entry in sorted(self.domains.items())},
            "domain_opt_out": dict(sorted(self.domain_opt_out.items())),
            "no_domain": dict(sorted(self.no_domain.items())),
            "consistency": dict(self.consistency),
            "label": dict(self.label),
            "share_alpha": self.share_alpha,
        }


# How sampling noise shrinks with the sample: a divergence (JSD, like chi-square / n) as
# 1 / n, a difference of quantiles or of shares as 1 / sqrt(n).
NOISE_POWER = {"jsd": 1.0, "ks": 0.5, "scale": 0.5, "linf": 0.5, "missing": 0.5}


def scaled(measure: str, value: float, n_eff: float) -> float:
    """A measurement in units of its sampling noise: value * n_eff ** NOISE_POWER."""
    return value * max(n_eff, 1.0) ** NOISE_POWER[measure]


def threshold(measure: str, k: float, n_eff: float) -> float:
    """The largest tolerated value for `n_eff` values: max(k / n_eff ** power, floor)."""
    return max(k / max(n_eff, 1.0) ** NOISE_POWER[measure], MIN_LIMIT[measure])


def share_exceeded(count: int, checked: int, allowed: float, alpha: float) -> tuple[bool, float]:
    """Whether `count` of `checked` values is significantly above the share `allowed`.

    One-sided binomial test: p = P(X >= count) for X ~ Binomial(checked, allowed); the
    share is exceeded when count > checked x allowed and p < alpha.

    Returns:
      (exceeded, p).
    """
    if count <= 0 or checked <= 0:
        return False, 1.0
    if allowed <= 0.0:
        return True, 0.0
    from scipy import stats

    p = float(stats.binom.sf(count - 1, checked, min(allowed, 1.0)))
    return count > checked * allowed and p < alpha, p


# A rule good spans never broke in N values allows RULE_OF_THREE / N: the one-sided 95%
# upper bound of a rate never seen in N trials. So one value beyond the range stops no
# month (good months have such outliers); two stop a small one.
RULE_OF_THREE = 3.0


def allowed_share(counts: list[tuple[int, int]], margin: float, alpha: float,
                  floor_values: float = RULE_OF_THREE, total: int | None = None) -> tuple[float, int]:
    """The share a rule may be broken in a new span, from good spans' (count, checked).

    Each good span's count is consistent with shares down to its one-sided Clopper-Pearson
    bound at `alpha` (the share at which `share_exceeded` would just stop it); the allowed
    share is the largest of those times `margin` (so every good span passes with room),
    and never less than `floor_values` values in the whole history (`total` values; by
    default the sum of the spans').

    Returns:
      (allowed share, the index of the span it came from).
    """
    from scipy import stats

    total = total if total is not None else sum(n for _, n in counts)
    bounds = [float(stats.beta.ppf(alpha, x, n - x + 1)) if x > 0 else 0.0 for x, n in counts]
    worst = max(range(len(bounds)), key=bounds.__getitem__) if bounds else 0
    share = max(margin * (bounds[worst] if bounds else 0.0), floor_values / max(total, 1))
    return float(f"{min(share, 1.0):.4g}"), worst


def _number(where: str, value: Any, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise PolicyError(f"{where}: expected a number, got {value!r}")
    if value < low:
        raise PolicyError(f"{where}: must be >= {low}, got {value}")
    return float(value)


def from_dict(values: Mapping[str, Any], path: str = "<policy>") -> GatePolicy:
    """Validates a policy mapping (gate.yaml's content or `to_json_dict()`'s output).

    Raises:
      PolicyError: naming the file and the field.
    """
    if not isinstance(values, Mapping):
        raise PolicyError(f"{path}: expected a mapping")
    known = {"features", "opt_out", "volume", "calibration", "version", "domains", "domain_opt_out", "no_domain",
             "consistency", "label", "share_alpha", "columns"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise PolicyError(f"{path}: unknown field(s) {', '.join(unknown)}")
    features = {}
    for name, entry in (values.get("features") or {}).items():
        where = f"{path}: features.{name}"
        if not isinstance(entry, Mapping):
            raise PolicyError(f"{where}: expected a mapping")
        extra = sorted(set(entry) - {"k", "observed"})
        if extra:
            raise PolicyError(f"{where}: unknown field(s) {', '.join(extra)}")
        k = {}
        for measure, value in (entry.get("k") or {}).items():
            if measure not in LIMITED:
                raise PolicyError(f"{where}.k: unknown measure {measure!r} (known: {', '.join(LIMITED)})")
            k[measure] = _number(f"{where}.k.{measure}", value)
        features[name] = FeatureLimits(k=k)
    opt_out = {}
    for name, reason in (values.get("opt_out") or {}).items():
        if not isinstance(reason, str) or not reason.strip():
            raise PolicyError(f"{path}: opt_out.{name}: a feature opts out only with a reason")
        opt_out[name] = reason.strip()
    volume = values.get("volume") or {}
    min_ratio = _number(f"{path}: volume.min_ratio", volume.get("min_ratio", DEFAULT_VOLUME[0]))
    max_ratio = _number(f"{path}: volume.max_ratio", volume.get("max_ratio", DEFAULT_VOLUME[1]))
    if not min_ratio < 1.0 < max_ratio:
        raise PolicyError(f"{path}: volume: need min_ratio < 1 < max_ratio, got {min_ratio}, {max_ratio}")
    domain_opt_out = {}
    for name, reason in (values.get("domain_opt_out") or {}).items():
        if not isinstance(reason, str) or not reason.strip():
            raise PolicyError(f"{path}: domain_opt_out.{name}: a feature opts out only with a reason")
        domain_opt_out[name] = reason.strip()
    share_alpha = _number(f"{path}: share_alpha", values.get("share_alpha", DEFAULT_SHARE_ALPHA))
    if not 0.0 < share_alpha < 0.5:
        raise PolicyError(f"{path}: share_alpha: must be within (0, 0.5), got {share_alpha}")
    columns = values.get("columns") or {}
    if not isinstance(columns, Mapping):
        raise PolicyError(f"{path}: columns: expected a mapping (new: stop | report)")
    extra = sorted(set(columns) - {"new"})
    if extra:
        raise PolicyError(f"{path}: columns: unknown field(s) {', '.join(extra)} (known: new)")
    columns_new = columns.get("new", "stop")
    if columns_new not in COLUMNS_NEW:
        raise PolicyError(f"{path}: columns.new: expected one of {', '.join(COLUMNS_NEW)}, got {columns_new!r}")
    return GatePolicy(
        columns_new=columns_new,
        features=features,
        opt_out=opt_out,
        min_ratio=min_ratio,
        max_ratio=max_ratio,
        calibration=dict(values.get("calibration") or {}),
        path=path,
        domains={name: _domain(f"{path}: domains.{name}", entry) for name, entry in (values.get("domains") or {}).items()},
        domain_opt_out=domain_opt_out,
        no_domain={str(k): str(v) for k, v in (values.get("no_domain") or {}).items()},
        consistency=_consistency(f"{path}: consistency", values.get("consistency") or {}),
        label=_label(f"{path}: label", values.get("label") or {}),
        share_alpha=share_alpha,
    )


def _share(where: str, value: Any) -> float:
    share = _number(where, value)
    if share > 1.0:
        raise PolicyError(f"{where}: a share must be within [0, 1], got {share}")
    return share


def _domain(where: str, entry: Any) -> dict:
    """A `domains:` entry: kind, values (value -> first span) or range [low, high], allowed_share."""
    if not isinstance(entry, Mapping):
        raise PolicyError(f"{where}: expected a mapping")
    extra = sorted(set(entry) - {"kind", "values", "range", "far", "seen", "allowed_share", "observed"})
    if extra:
        raise PolicyError(f"{where}: unknown field(s) {', '.join(extra)}")
    kind = entry.get("kind")
    if kind not in ("int", "float", "bytes"):
        raise PolicyError(f"{where}.kind: expected int, float or bytes, got {kind!r}")
    out = {"kind": kind, "allowed_share": _share(f"{where}.allowed_share", entry.get("allowed_share", 0.0))}
    if ("values" in entry) == ("range" in entry):
        raise PolicyError(f"{where}: expected either values or range")
    if "values" in entry:
        values = entry["values"]
        pairs = values.items() if isinstance(values, Mapping) else values
        cast = int if kind == "int" else str
        try:
            out["values"] = {cast(v): at for v, at in pairs}
        except (TypeError, ValueError) as e:
            raise PolicyError(f"{where}.values: expected value: first span (as {kind}), got {values!r}") from e
    else:
        bounds = entry["range"]
        if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
            raise PolicyError(f"{where}.range: expected [low, high], got {bounds!r}")
        low, high = (_number(f"{where}.range", b, low=-math.inf) for b in bounds)
        if low > high:
            raise PolicyError(f"{where}.range: low {low} above high {high}")
        out["range"] = [low, high]
        far = entry.get("far") or {}
        if far:
            far_bounds = far.get("range")
            if not isinstance(far_bounds, (list, tuple)) or len(far_bounds) != 2:
                raise PolicyError(f"{where}.far.range: expected [low, high], got {far_bounds!r}")
            far_low, far_high = (_number(f"{where}.far.range", b, low=-math.inf) for b in far_bounds)
            if not far_low <= low <= high <= far_high:
                raise PolicyError(f"{where}.far.range: must hold the range, got {far_bounds!r}")
            out["far"] = {**far, "range": [far_low, far_high],
                          "allowed_share": _share(f"{where}.far.allowed_share", far.get("allowed_share", 0.0))}
    for key in ("seen", "observed"):
        if key in entry:
            out[key] = dict(entry[key] or {})
    return out


def _consistency(where: str, section: Any) -> dict:
    """`consistency:`: {event_time: {allowed_share, ...}, derived: {feature: {allowed_share, ...}}}."""
    if not isinstance(section, Mapping):
        raise PolicyError(f"{where}: expected a mapping")
    extra = sorted(set(section) - {"event_time", "derived"})
    if extra:
        raise PolicyError(f"{where}: unknown field(s) {', '.join(extra)}")
    out: dict = {}
    if section.get("event_time") is not None:
        entry = dict(section["event_time"])
        entry["allowed_share"] = _share(f"{where}.event_time.allowed_share", entry.get("allowed_share", 0.0))
        out["event_time"] = entry
    derived = {}
    for name, entry in (section.get("derived") or {}).items():
        entry = dict(entry or {})
        entry["allowed_share"] = _share(f"{where}.derived.{name}.allowed_share", entry.get("allowed_share", 0.0))
        derived[name] = entry
    if derived:
        out["derived"] = derived
    return out


def _label(where: str, section: Any) -> dict:
    """`label:`: name, kind, reference_spans, k per measure, allowed_missing_share."""
    if not isinstance(section, Mapping):
        raise PolicyError(f"{where}: expected a mapping")
    if not section:
        return {}
    extra = sorted(set(section) - {"name", "kind", "reference_spans", "k", "allowed_missing_share", "observed"})
    if extra:
        raise PolicyError(f"{where}: unknown field(s) {', '.join(extra)}")
    out = dict(section)
    if out.get("kind") not in ("classes", "numeric"):
        raise PolicyError(f"{where}.kind: expected classes or numeric, got {out.get('kind')!r}")
    spans = out.get("reference_spans", 6)
    if isinstance(spans, bool) or not isinstance(spans, int) or spans < 1:
        raise PolicyError(f"{where}.reference_spans: expected an integer >= 1, got {spans!r}")
    out["reference_spans"] = spans
    out["k"] = {m: _number(f"{where}.k.{m}", v) for m, v in (out.get("k") or {}).items()}
    unknown = sorted(set(out["k"]) - {"classes", "ks", "scale"})
    if unknown:
        raise PolicyError(f"{where}.k: unknown measure(s) {', '.join(unknown)} (known: classes, ks, scale)")
    out["allowed_missing_share"] = _share(f"{where}.allowed_missing_share", out.get("allowed_missing_share", 0.0))
    return out


def load(path: str) -> GatePolicy:
    """Reads and validates `gate.yaml`.

    Raises:
      PolicyError: unreadable file or invalid content, naming the field.
    """
    return from_dict(files.read_yaml(path, PolicyError, "gate policy"), path)


def check_features(policy: GatePolicy, schema_features: list[str]) -> None:
    """Opt-outs must name schema features (a typo must not silently unwatch nothing).

    Raises:
      PolicyError: naming the unknown features.
    """
    unknown = sorted((set(policy.opt_out) | set(policy.features) | set(policy.domains) | set(policy.domain_opt_out)
                      | set(policy.consistency.get("derived") or {})) - set(schema_features))
    if unknown:
        raise PolicyError(f"{policy.path}: feature(s) not in the schema: {', '.join(unknown)}")
