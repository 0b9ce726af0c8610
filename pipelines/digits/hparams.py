"""The digits model's settings (TensorFlow-free: the config loader checks `hparams:` with it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pipelines.digits import features
from trainer_toolkit.settings import hparams_from_custom_config

ARCHITECTURES = ("resnet_small", "resnet50")


@dataclasses.dataclass(frozen=True)
class HParams:
    """Model settings; overridable from the pipeline config (`hparams:`, Trainer custom_config)."""

    architecture: str = "resnet_small"
    # Side of the square image the network sees (the 8x8 input is resized to it).
    image_size: int = features.RAW_IMAGE_SIZE
    # resnet_small: filters of each stage; each stage is one residual block.
    widths: tuple[int, ...] = (32, 64)
    learning_rate: float = 0.003
    batch_size: int = 32
    seed: int = 42

    @classmethod
    def from_custom_config(cls, custom_config: dict[str, Any] | None) -> HParams:
        hparams = hparams_from_custom_config(cls, custom_config, "digits")
        if hparams.architecture not in ARCHITECTURES:
            raise ValueError(f"digits hparams.architecture: {hparams.architecture!r} is not one of {ARCHITECTURES}")
        return hparams


# What TFX's Tuner may search (trainer_toolkit/tuning.py; `tuning:` in the config, `retrain tune`).
SEARCH_SPACE = {
    "widths": [[32, 64], [16, 32], [32, 64, 128]],
    "learning_rate": {"min": 0.0003, "max": 0.03, "log": True},
}
