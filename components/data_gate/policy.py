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
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import yaml

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

    def limits(self, feature: str) -> FeatureLimits:
        return self.features.get(feature) or FeatureLimits(k=dict(DEFAULT_K), source="default")

    def k(self, feature: str, measure: str) -> tuple[float, str]:
        """The constant for one feature and measure, and whether it was calibrated."""
        limits = self.limits(feature)
        if measure in limits.k:
            return limits.k[measure], limits.source
        return DEFAULT_K[measure], "default"

    def to_json_dict(self) -> dict:
        """The policy as plain values (the DataGate's execution parameter, the reports)."""
        return {
            "features": {
                name: {"k": dict(f.k)}
                for name, f in sorted(self.features.items())
            },
            "opt_out": dict(sorted(self.opt_out.items())),
            "volume": {"min_ratio": self.min_ratio, "max_ratio": self.max_ratio},
            "calibration": dict(self.calibration),
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
    known = {"features", "opt_out", "volume", "calibration", "version"}
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
    return GatePolicy(
        features=features,
        opt_out=opt_out,
        min_ratio=min_ratio,
        max_ratio=max_ratio,
        calibration=dict(values.get("calibration") or {}),
        path=path,
    )


def load(path: str) -> GatePolicy:
    """Reads and validates `gate.yaml`.

    Raises:
      PolicyError: unreadable file or invalid content, naming the field.
    """
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    except OSError as e:
        raise PolicyError(f"cannot read gate policy {path}: {e}") from e
    except yaml.YAMLError as e:
        raise PolicyError(f"gate policy {path} is not valid YAML: {e}") from e
    return from_dict(values, path)


def check_features(policy: GatePolicy, schema_features: list[str]) -> None:
    """Opt-outs must name schema features (a typo must not silently unwatch nothing).

    Raises:
      PolicyError: naming the unknown features.
    """
    unknown = sorted((set(policy.opt_out) | set(policy.features)) - set(schema_features))
    if unknown:
        raise PolicyError(f"{policy.path}: feature(s) not in the schema: {', '.join(unknown)}")
