"""The diabetes model's settings (TensorFlow-free: the config loader checks `hparams:` with it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer_toolkit.settings import hparams_from_custom_config


@dataclasses.dataclass(frozen=True)
class HParams:
    """Model settings; overridable from the pipeline config (`hparams:`, Trainer custom_config)."""

    hidden_units: tuple[int, ...] = (32,)
    learning_rate: float = 0.003
    batch_size: int = 32
    # Seeds weight init and shuffling: the same window and settings give the same model.
    seed: int = 42

    @classmethod
    def from_custom_config(cls, custom_config: dict[str, Any] | None) -> HParams:
        return hparams_from_custom_config(cls, custom_config, "diabetes")


# What TFX's Tuner may search (trainer_toolkit/tuning.py; `tuning:` in the config, `retrain tune`).
SEARCH_SPACE = {
    "hidden_units": [[64, 32], [128, 64], [32]],
    "learning_rate": {"min": 0.0003, "max": 0.03, "log": True},
}
