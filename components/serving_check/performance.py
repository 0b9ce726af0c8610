"""Computing performance has not regressed: the candidate's figures against its baseline's.

ML Test Score, monitoring section ("the model has not experienced a dramatic or slow-leak
regression in training speed, serving latency, throughput, or RAM usage"). The serving
check compares the candidate with its baseline (the last blessed model, the one it would
replace) on four figures:

- `latency_p50_ms`, `latency_p99_ms`: both models served by the same check server and
  sent the same requests, one after the other, alternating which goes first, so both see
  the same machine and the same load (a p99 of a few dozen requests is close to their
  maximum: it warns by default, the median refuses);
- `saved_model_bytes`: the SavedModel on disk without `assets.extra/` (warm-up requests
  and the runtime's SBOM are not the model);
- `training_examples_per_sec`: the training throughput each model's Trainer recorded in
  its provenance (measured when each was trained, so it also moves with the machine).

A figure past its limit (`max_increase` for the first three, relative to the baseline;
`max_decrease` for the throughput, relative) refuses the candidate when the figure is in
`refuse`, and warns otherwise; a latency rise under `min_latency_rise_ms` is noise
whatever its ratio. Each reason names the figure and both values. TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from core.settings import Settings, SettingsError

LATENCY_P50 = "latency_p50_ms"
LATENCY_P99 = "latency_p99_ms"
SIZE = "saved_model_bytes"
TRAINING = "training_examples_per_sec"
HIGHER_IS_WORSE = (LATENCY_P50, LATENCY_P99, SIZE)
FIGURES = (*HIGHER_IS_WORSE, TRAINING)


@dataclasses.dataclass(frozen=True)
class PerformanceSettings(Settings):
    """The `performance:` block of a pipeline config."""

    enabled: bool = True
    # figure -> the largest rise tolerated, relative to the baseline's (1.0: double).
    max_increase: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {LATENCY_P50: 1.0, LATENCY_P99: 2.0, SIZE: 1.0})
    # figure -> the largest drop tolerated, relative to the baseline's (0.5: half as fast).
    max_decrease: Mapping[str, float] = dataclasses.field(default_factory=lambda: {TRAINING: 0.5})
    # The figures past their limit that refuse the candidate; the others warn.
    refuse: tuple[str, ...] = (LATENCY_P50,)
    # A latency rise smaller than this is noise, whatever its ratio.
    min_latency_rise_ms: float = 5.0

    def check(self) -> None:
        for key, limits, allowed in (("max_increase", self.max_increase, HIGHER_IS_WORSE),
                                     ("max_decrease", self.max_decrease, (TRAINING,))):
            for figure, limit in limits.items():
                if figure not in allowed:
                    raise SettingsError(f"{key}.{figure}: not a figure it takes; one of {list(allowed)}")
                if not limit >= 0:
                    raise SettingsError(f"{key}.{figure}: must be >= 0, got {limit}")
        for figure in self.refuse:
            if figure not in FIGURES:
                raise SettingsError(f"refuse: {figure!r} is not a figure; one of {list(FIGURES)}")
        if self.min_latency_rise_ms < 0:
            raise SettingsError(f"min_latency_rise_ms: must be >= 0, got {self.min_latency_rise_ms}")


def saved_model_bytes(saved_model_dir: str) -> int:
    """Bytes of the SavedModel's files, `assets.extra/` left out."""
    total = 0
    for root, dirs, files in os.walk(saved_model_dir):
        if os.path.relpath(root, saved_model_dir) == ".":
            dirs[:] = [d for d in dirs if d != "assets.extra"]
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def compare(candidate: Mapping[str, float | None], baseline: Mapping[str, float | None],
            settings: PerformanceSettings) -> dict:
    """Each figure of the candidate against the baseline's.

    Returns:
      {"figures": {figure: {"candidate", "baseline", "change", "limit", "action", "past_limit"}},
       "refusals": [reason], "warnings": [reason], "not_compared": {figure: why}}.
    """
    out: dict = {"figures": {}, "refusals": [], "warnings": [], "not_compared": {}}
    for figure in FIGURES:
        limit = (settings.max_increase if figure in HIGHER_IS_WORSE else settings.max_decrease).get(figure)
        cand, base = candidate.get(figure), baseline.get(figure)
        if cand is None or base is None or not base > 0:
            out["not_compared"][figure] = ("the candidate has no figure" if cand is None
                                           else "the baseline has no figure" if base is None
                                           else f"the baseline's is {base}")
            continue
        change = cand / base - 1.0
        action = "refuse" if figure in settings.refuse else "warn"
        worse = change if figure in HIGHER_IS_WORSE else -change
        past = limit is not None and worse > limit
        if past and figure in (LATENCY_P50, LATENCY_P99) and cand - base < settings.min_latency_rise_ms:
            past = False  # a few milliseconds on a fast model: noise
        out["figures"][figure] = {"candidate": cand, "baseline": base, "change": round(change, 4), "limit": limit,
                                  "action": action, "past_limit": past}
        if past:
            direction = f"+{change:.0%}" if figure in HIGHER_IS_WORSE else f"{change:.0%}"
            bound = f"{'+' if figure in HIGHER_IS_WORSE else '-'}{limit:.0%}"
            reason = (f"{figure} {_fmt(cand)} vs the baseline's {_fmt(base)} ({direction}, past the limit of {bound})")
            out["refusals" if action == "refuse" else "warnings"].append(reason)
    return out


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
