"""The `ingestion:` block of a pipeline config: how the executors of CsvExampleGen and
ParquetExampleGen write examples (TensorFlow-free, so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses

from core.settings import Settings, SettingsError

ENGINES = ("auto", "fast", "beam")


@dataclasses.dataclass(frozen=True)
class IngestSettings(Settings):
    """engine: fast (this project's parallel encoder, the same examples and splits as
    CsvExampleGen's Beam pipeline), beam (TFX's own executor, on the node's Beam profile),
    or auto (fast for CSV and Parquet on a local filesystem, beam otherwise); workers: processes for the
    fast engine (0: one per core); compression_level: gzip level of the shards (1-9)."""

    # fast, beam or auto (fast for CSV and Parquet on a local filesystem).
    engine: str = "auto"
    # Processes for the fast engine (0: one per core).
    workers: int = 0
    # gzip level of the written shards (1-9).
    compression_level: int = 1

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise SettingsError(f"engine: {self.engine!r} is not one of {list(ENGINES)}")
        for name, low, high in (("workers", 0, 256), ("compression_level", 1, 9)):
            value = getattr(self, name)
            if not low <= value <= high:
                raise SettingsError(f"{name}: expected an integer within [{low}, {high}], got {value!r}")
