"""The `tflite:` block of a pipeline config: on-device exports of each pushed version
(TensorFlow-free, so configs validate where TF is absent)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.settings import Settings, SettingsError

Variant = Literal["float", "dynamic_range", "int8"]


@dataclasses.dataclass(frozen=True)
class TFLiteSettings(Settings):
    """Opt-in TFLite variants, each scored beside the SavedModel on the eval split and
    published beside the version only within `max_accuracy_drop`. Needs a signature of
    TFLite builtin ops (digits: `pixels`)."""

    # Export TFLite variants of each pushed version.
    enabled: bool = False
    # The TFLite-runnable signature of the SavedModel, its input as transform_features
    # names it, and the label (needed when enabled).
    signature: str = ""
    input_key: str = ""
    label_key: str = ""
    # The raw feature the signature's input comes from, where it differs from input_key.
    raw_input_key: str = ""
    # float (no quantization), dynamic_range (int8 weights) and int8 (full integer, from
    # representative examples).
    variants: tuple[Variant, ...] = ("float", "dynamic_range", "int8")
    # The largest accuracy drop vs the SavedModel a published variant may have; negative:
    # a variant must beat the SavedModel by that much.
    max_accuracy_drop: float = 0.02
    # Examples the int8 converter calibrates on.
    representative_examples: int = 200

    def check(self) -> None:
        if self.enabled:
            for key in ("signature", "input_key", "label_key"):
                if not getattr(self, key):
                    raise SettingsError(f"{key}: needed when tflite is enabled (the TFLite-runnable signature, its "
                                        "input as transform_features names it, and the label)")
        if not self.variants:
            raise SettingsError("variants: expected a non-empty list of float, dynamic_range, int8")
        if not -1.0 <= self.max_accuracy_drop <= 1.0:
            raise SettingsError(f"max_accuracy_drop: must be within [-1, 1], got {self.max_accuracy_drop!r}")
        if self.representative_examples < 1:
            raise SettingsError(f"representative_examples: must be an integer >= 1, got {self.representative_examples!r}")
