"""The `statistics:` block of a pipeline config: how StatisticsGen computes a span's
statistics (TensorFlow-free, so configs validate where TF is absent).

TFDV computes the same statistics two ways: a Beam pipeline (`tfdv.GenerateStatistics`,
what TFX's executor runs) or in one process, a record batch at a time (the generators of
`stats_impl.generate_statistics_in_memory`). On a small span the Beam pipeline's set-up is
nearly all of the node's time (1.9 s per split of a 73-row month against 0.7 s in memory,
the same statistics proto); from some size one core is not enough and the approximate
quantiles start to differ from Beam's (docs/decisions/statistics-in-memory-for-small-spans.md),
and Beam's runners scale it out.
"""

from __future__ import annotations

import dataclasses

from core.settings import Settings, SettingsError

ENGINES = ("auto", "in-memory", "beam")
# The decoded record batch of a gzip'ed span takes several times its bytes on disk.
DEFAULT_IN_MEMORY_BELOW_MB = 32


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    """The engine of one run's StatisticsGen, and why (in the run's summary and report)."""

    engine: str  # in-memory or beam
    reason: str


@dataclasses.dataclass(frozen=True)
class StatisticsSettings(Settings):
    """engine: in-memory (TFDV over the whole split in this process), beam (TFX's executor,
    on the node's Beam profile) or auto (in-memory below `in_memory_below_mb` of span input
    where the node's Beam profile would be the in-process DirectRunner, beam otherwise)."""

    # auto, in-memory or beam.
    engine: str = "auto"
    # auto's threshold: the span's input files on disk, in MB.
    in_memory_below_mb: int = DEFAULT_IN_MEMORY_BELOW_MB

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise SettingsError(f"engine: {self.engine!r} is not one of {list(ENGINES)}")
        if self.in_memory_below_mb < 0:
            raise SettingsError(f"in_memory_below_mb: expected an integer >= 0, got {self.in_memory_below_mb!r}")

    def choose(self, span_bytes: int, beam_profile: str) -> EngineChoice:
        """The engine for a span of `span_bytes` whose StatisticsGen would run on `beam_profile`."""
        if self.engine != "auto":
            return EngineChoice(self.engine, "configured")
        mb = f"{span_bytes / (1 << 20):.1f} MB"
        if beam_profile != "direct":
            return EngineChoice("beam", f"auto: the node's Beam profile is {beam_profile}")
        if span_bytes >= self.in_memory_below_mb << 20:
            return EngineChoice("beam", f"auto: {mb} of span input >= {self.in_memory_below_mb} MB")
        return EngineChoice("in-memory", f"auto: {mb} of span input < {self.in_memory_below_mb} MB")
