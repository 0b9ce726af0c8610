"""Trainer toolkit settings: the `trainer:` block of a pipeline config (no TensorFlow import,
so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer_toolkit.precision import PRECISION_NAMES
from trainer_toolkit.strategy import STRATEGY_NAMES


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
    # Epochs/examples budgets (TrainingBudget.plan): the per-replica batch may double from
    # the model's up to this while a run would take more than batch_growth_above_steps.
    max_batch_size: int = 1024
    batch_growth_above_steps: int = 5000

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
        if self.max_batch_size < 0 or self.batch_growth_above_steps < 1:
            raise ValueError("trainer.max_batch_size must be >= 0 and batch_growth_above_steps >= 1")
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


@dataclasses.dataclass(frozen=True)
class TrainingBudget:
    """How much the Trainer trains: `epochs` passes over the training split, or `examples`
    examples, or `steps` steps (one of them), and a ceiling on the examples of one run.

    The `training` entry of the Trainer's custom_config (pipelines/config.py writes it).
    """

    epochs: float | None = None
    examples: int | None = None
    steps: int | None = None
    # Epochs of a large window stop at this many examples (0: no ceiling).
    max_examples: int = 0

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> TrainingBudget:
        """Raises ValueError naming the key."""
        values = dict((custom_config or {}).get("training") or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        budget = cls(**values)
        given = [k for k in ("epochs", "examples", "steps") if getattr(budget, k) is not None]
        if len(given) != 1:
            raise ValueError(f"train_epochs, train_examples and train_steps: set exactly one, got {given or 'none'}")
        value = getattr(budget, given[0])
        if isinstance(value, bool) or not value > 0:
            raise ValueError(f"train_{given[0]}: must be > 0, got {value!r}")
        if budget.max_examples < 0:
            raise ValueError(f"max_train_examples: must be >= 0, got {budget.max_examples}")
        return budget

    @property
    def needs_count(self) -> bool:
        """Whether the plan depends on how many training examples there are."""
        return self.epochs is not None

    def plan(self, per_replica_batch: int, replicas: int, available: int | None, max_batch_size: int,
             growth_above_steps: int) -> dict[str, Any]:
        """Steps and batch of the run.

        The per-replica batch grows from the model's, doubling while the run would take more
        than `growth_above_steps` steps and it stays within `max_batch_size` (0: never): a
        month of millions of rows trains on all of them in bounded time instead of seeing
        a fraction of one epoch through a batch sized for a few hundred rows.

        Returns:
          {"steps", "per_replica_batch_size", "examples", "epochs"} (epochs: of `available`).
        """
        if self.steps is not None:
            examples = self.steps * per_replica_batch * replicas
        elif self.examples is not None:
            examples = self.examples
        else:
            examples = int(round(self.epochs * (available or 0)))
        if self.steps is None and self.max_examples:
            examples = min(examples, self.max_examples)
        batch = per_replica_batch
        if self.steps is None:
            while (max_batch_size and batch * 2 <= max_batch_size
                   and examples / (batch * replicas) > growth_above_steps):
                batch *= 2
        steps = self.steps or max(1, -(-examples // (batch * replicas)))
        return {"steps": steps, "per_replica_batch_size": batch, "examples": steps * batch * replicas,
                "epochs": round(steps * batch * replicas / available, 3) if available else None}
