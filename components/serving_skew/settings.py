"""The `serving_skew:` block (TF-free: configs validate where TFX is absent)."""

from __future__ import annotations

import dataclasses

from core.settings import Settings, SettingsError

# What a skewed feature does (the executor reads the same names).
ACTIONS = ("block", "warn", "off")


@dataclasses.dataclass(frozen=True)
class SkewSettings(Settings):
    """The `serving_skew:` block: what a skewed feature does (`block` stops the run before
    training, `warn` reports only, `off` skips the check) and the fewest logged examples
    worth checking."""

    # block: stop the run before training when a feature is skewed; warn: report only; off: skip the
    # check.
    action: str = "warn"
    # Fewer logged examples than this: reported as not checked.
    min_examples: int = 50

    def check(self) -> None:
        if self.action not in ACTIONS:
            raise SettingsError(f"action: {self.action!r} is not one of {', '.join(ACTIONS)}")
        if self.min_examples < 1:
            raise SettingsError(f"min_examples: must be an integer >= 1, got {self.min_examples!r}")
