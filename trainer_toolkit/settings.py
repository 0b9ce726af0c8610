"""Trainer toolkit settings: the `trainer:` block of a pipeline config (no TensorFlow import,
so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from core.settings import Settings, SettingsError, build
from trainer_toolkit.precision import PRECISION_NAMES
from trainer_toolkit.strategy import STRATEGY_NAMES


@dataclasses.dataclass(frozen=True)
class TrainerSettings(Settings):
    """Toolkit settings: the `trainer:` block of a pipeline config (all optional)."""

    # tf.distribute strategy: auto (mirrored over GPUs, one device otherwise), default, one_device,
    # mirrored, multi_worker (TF_CONFIG).
    strategy: str = "auto"
    # auto (mixed_float16 on GPUs of compute capability 7.0 or newer, float32 otherwise), float32,
    # mixed_float16, mixed_bfloat16.
    precision: str = "auto"
    # Let TensorFlow grow GPU memory as needed instead of taking it all at start.
    gpu_memory_growth: bool = True
    # Deterministic ops and seeded input order (slower; for reproducing a run).
    deterministic: bool = False
    # The input pipeline caches the window in memory when it is smaller than this.
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
    # Numerical stability: stop the Trainer when the training loss becomes NaN or infinite,
    # and refuse to export a model whose outputs on the eval split are not all finite. Either
    # fails the Trainer with the step or output named, so nothing downstream is pushed.
    check_numerics: bool = True

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> TrainerSettings:
        """Reads `custom_config["trainer"]`.

        Raises:
          SettingsError: unknown keys or values, naming them (`trainer.<key>`).
        """
        return cls.from_dict((custom_config or {}).get("trainer"), "trainer")

    def check(self) -> None:
        if self.strategy not in STRATEGY_NAMES:
            raise SettingsError(f"strategy: {self.strategy!r} is not one of {list(STRATEGY_NAMES)}")
        if self.precision not in PRECISION_NAMES:
            raise SettingsError(f"precision: {self.precision!r} is not one of {list(PRECISION_NAMES)}")
        if self.backup_every_steps < 0 or self.log_every_steps < 1:
            raise SettingsError("backup_every_steps must be >= 0 and log_every_steps >= 1")
        if self.max_batch_size < 0 or self.batch_growth_above_steps < 1:
            raise SettingsError("max_batch_size must be >= 0 and batch_growth_above_steps >= 1")
        if self.profile_steps and (len(self.profile_steps) != 2 or self.profile_steps[0] > self.profile_steps[1]):
            raise SettingsError(f"profile_steps: expected [first, last], got {list(self.profile_steps)}")


def hparams_from_custom_config(cls, custom_config: Mapping[str, Any] | None, model: str):
    """A model's frozen HParams dataclass from `custom_config["hparams"]`, read by the same
    loader as every settings block (unknown keys and wrong types refused; lists become
    tuples where the field is a tuple).

    Raises:
      SettingsError: naming the key (`hparams.<key>`) and, for unknown keys, the known ones.
    """
    try:
        return build(cls, (custom_config or {}).get("hparams"), "hparams")
    except SettingsError as e:
        raise SettingsError(f"{e} (the {model} model's HParams)") from None


@dataclasses.dataclass(frozen=True)
class TrainingBudget(Settings):
    """How much the Trainer trains: `epochs` passes over the training split, or `examples`
    examples, or `steps` steps (one of them), and a ceiling on the examples of one run.

    The `training` entry of the Trainer's custom_config (pipelines/factory.py writes it from the config).
    """

    epochs: float | None = None
    examples: int | None = None
    steps: int | None = None
    # Epochs of a large window stop at this many examples (0: no ceiling).
    max_examples: int = 0

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> TrainingBudget:
        """Reads `custom_config["training"]`. Raises SettingsError naming the key."""
        return cls.from_dict((custom_config or {}).get("training"))

    def check(self) -> None:
        given = [k for k in ("epochs", "examples", "steps") if getattr(self, k) is not None]
        if len(given) != 1:
            raise SettingsError(f"train_epochs, train_examples and train_steps: set exactly one, got {given or 'none'}")
        value = getattr(self, given[0])
        if not value > 0:
            raise SettingsError(f"train_{given[0]}: must be > 0, got {value!r}")
        if self.max_examples < 0:
            raise SettingsError(f"max_train_examples: must be >= 0, got {self.max_examples}")

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


@dataclasses.dataclass(frozen=True)
class SimpleBaselineSettings(Settings):
    """The `simple_baseline:` block: a linear model fitted beside every candidate on the same
    transformed features, and scored by the Evaluator in the same pass (a simpler model must
    not be better: trainer_toolkit/simple_baseline.py, components/evaluator/simple_baseline.py)."""

    enabled: bool = True
    # Required when enabled is false: why this pipeline is not compared with a simple model
    # (shown in every governance report).
    reason: str | None = None
    # not_worse: refuse a candidate whose key metric is significantly worse than the simple
    # model's (by more than min_lift); better: refuse unless it is significantly better by
    # at least min_lift (the simple model's quality plus min_lift lies below the
    # candidate's lower bound).
    require: Literal["not_worse", "better"] = "not_worse"
    # The margin of the rule, in the key metric's units (AUC, accuracy; for an error metric
    # relative to the simple model's error: 0.05 = 5%). Not 0 by default: not_worse is a
    # non-inferiority test, which needs a margin; at 0, two near-perfect models that order
    # one pair of examples differently are "significantly" apart (a generated breast-cancer
    # pipeline: both AUC 0.9979 over 137 examples, where one pair is 0.0002 AUC).
    min_lift: float = 0.01
    # One-sided level of the comparison's bound; None: the config's significance_level.
    significance_level: float | None = None
    learning_rate: float = 0.01
    # Steps the linear model trains for: the candidate's, at most this.
    max_steps: int = 1000
    # Integer and string features enter one-hot after hashing into this many buckets.
    hash_bins: int = 1000

    def check(self) -> None:
        if not self.enabled and not (self.reason or "").strip():
            raise SettingsError("reason: say why the candidate is not compared with a simple model (enabled: false)")
        if self.min_lift < 0:
            raise SettingsError(f"min_lift: must be >= 0, got {self.min_lift}")
        if self.significance_level is not None and not 0.0 < self.significance_level < 0.5:
            raise SettingsError(f"significance_level: must be within (0, 0.5), got {self.significance_level}")
        if not self.learning_rate > 0 or self.max_steps < 1 or self.hash_bins < 2:
            raise SettingsError("learning_rate must be > 0, max_steps >= 1 and hash_bins >= 2")
