"""The `ingestion:` block of a pipeline config: how CsvExampleGen's executor writes examples
(TensorFlow-free, so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

ENGINES = ("auto", "fast", "beam")


@dataclasses.dataclass(frozen=True)
class IngestSettings:
    """engine: fast (this project's parallel encoder, the same examples and splits as
    CsvExampleGen's Beam pipeline), beam (TFX's own executor, on the node's Beam profile),
    or auto (fast for CSV on a local filesystem, beam otherwise); workers: processes for the
    fast engine (0: one per core); compression_level: gzip level of the shards (1-9)."""

    engine: str = "auto"
    workers: int = 0
    compression_level: int = 1

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> IngestSettings:
        """Raises ValueError naming the key."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        settings = cls(**values)
        if settings.engine not in ENGINES:
            raise ValueError(f"engine: {settings.engine!r} is not one of {list(ENGINES)}")
        for name, low, high in (("workers", 0, 256), ("compression_level", 1, 9)):
            value = getattr(settings, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name}: expected an integer within [{low}, {high}], got {value!r}")
        return settings

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
