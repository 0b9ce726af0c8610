"""Trainer toolkit settings: the `trainer:` block of a pipeline config (no TensorFlow import,
so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from components.trainer.precision import PRECISION_NAMES
from components.trainer.strategy import STRATEGY_NAMES


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """Toolkit settings: the `trainer:` block of a pipeline config (all optional)."""

    strategy: str = "auto"
    precision: str = "auto"
    gpu_memory_growth: bool = True
    deterministic: bool = False
    cache_max_bytes: int = 2 << 30
    # BackupAndRestore checkpoint interval in steps; 0 turns fault tolerance off.
    backup_every_steps: int = 100
    # Where backups live across retries (the factory points it under the pipeline root).
    backup_root: str | None = None
    warm_start: bool = False
    tensorboard: bool = True
    # [first, last] step to trace with the TensorBoard profiler; empty = no profiling.
    profile_steps: tuple[int, ...] = ()
    log_every_steps: int = 100

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> TrainerSettings:
        """Reads `custom_config["trainer"]`.

        Raises:
          ValueError: unknown keys or values, naming them.
        """
        given = dict((custom_config or {}).get("trainer") or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown trainer setting(s) {unknown}; known: {sorted(known)}")
        if "profile_steps" in given:
            given["profile_steps"] = tuple(given["profile_steps"] or ())
        settings = cls(**given)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.strategy not in STRATEGY_NAMES:
            raise ValueError(f"trainer.strategy: {self.strategy!r} is not one of {list(STRATEGY_NAMES)}")
        if self.precision not in PRECISION_NAMES:
            raise ValueError(f"trainer.precision: {self.precision!r} is not one of {list(PRECISION_NAMES)}")
        if self.backup_every_steps < 0 or self.log_every_steps < 1:
            raise ValueError("trainer.backup_every_steps must be >= 0 and log_every_steps >= 1")
        if self.profile_steps and (len(self.profile_steps) != 2 or self.profile_steps[0] > self.profile_steps[1]):
            raise ValueError(f"trainer.profile_steps: expected [first, last], got {list(self.profile_steps)}")


def hparams_from_custom_config(cls, custom_config: Mapping[str, Any] | None, model: str):
    """A model's frozen HParams dataclass from `custom_config["hparams"]`; lists become
    tuples where the field's default is a tuple.

    Raises:
      ValueError: unknown keys, naming the model and the known ones.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    given = dict((custom_config or {}).get("hparams") or {})
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ValueError(f"unknown {model} hparams: {unknown}; known: {sorted(fields)}")
    for name, value in given.items():
        if isinstance(fields[name].default, tuple) and isinstance(value, list):
            given[name] = tuple(value)
    return cls(**given)
