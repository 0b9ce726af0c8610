"""The `transform:` block of a pipeline config: whether Transform reads and writes
tf.Transform's analyzer cache (components/resolvers/transform_cache.py), chosen by the
size of the training window, the way `beam.profile: auto` picks a runner.

With a cache, TFX analyzes each span of the window on its own (so each span's
accumulators can be stored and read back by the next run) and merges them: a steady run
then analyzes only the new span. Without one, the window is analyzed in one pass. On a
small window the per-span passes cost more than reading the data does (the embedded taxi
months: see docs/decisions/transform-reads-tf-transform-s-analyzer-cache.md), so `auto`
uses the cache only from `analyzer_cache_from_mb` of window input. Either way the
transform graph is the same (the merged accumulators are the one-pass ones), and the
pipeline keeps its nodes: the cache resolver finds nothing to hand on, or a Transform
without the cache ignores it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.settings import Settings, SettingsError

DEFAULT_FROM_MB = 64


@dataclasses.dataclass(frozen=True)
class CacheChoice:
    """Whether this run's Transform uses the analyzer cache, and why (for the run record)."""

    enabled: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class TransformSettings(Settings):
    """How Transform analyzes the training window."""

    # tf.Transform's analyzer cache: true (each span analyzed once, read back by later runs),
    # false (the window analyzed in one pass every run) or auto (true from analyzer_cache_from_mb).
    analyzer_cache: bool | Literal["auto"] = "auto"
    # auto's threshold: the training window's input files on disk, in MB.
    analyzer_cache_from_mb: int = DEFAULT_FROM_MB

    def check(self) -> None:
        if self.analyzer_cache_from_mb < 0:
            raise SettingsError(f"analyzer_cache_from_mb: expected an integer >= 0, got {self.analyzer_cache_from_mb!r}")

    def choose(self, window_bytes: int) -> CacheChoice:
        """The cache choice for a window of `window_bytes` of input files."""
        if self.analyzer_cache != "auto":
            return CacheChoice(bool(self.analyzer_cache), "configured")
        size = f"{window_bytes / (1 << 20):.1f} MB"
        if window_bytes >= self.analyzer_cache_from_mb << 20:
            return CacheChoice(True, f"auto: {size} of window input >= {self.analyzer_cache_from_mb} MB")
        return CacheChoice(False, f"auto: {size} of window input < {self.analyzer_cache_from_mb} MB; "
                                  "analyzed in one pass")
