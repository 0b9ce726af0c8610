"""Resolver strategy: the Tuner's last best hyperparameters, or nothing before the first search.

TFX's LatestArtifactStrategy returns None (an input resolution error) when the channel is
empty, which the first run of a pipeline with tuning always meets; this returns an empty
list instead, and the Tuner then searches (components/tuner/executor.py).
"""

from typing import Any

from tfx import types
from tfx.dsl.components.common.resolver import ResolverStrategy  # = tfx.v1.dsl.experimental's

HYPERPARAMETERS = "hyperparameters"


class LatestHyperParametersStrategy(ResolverStrategy):
    """Resolves `hyperparameters` to the newest HyperParameters artifact (by id), or to []."""

    def resolve_artifacts(self, store: Any, input_dict: dict[str, list[types.Artifact]]):
        found = sorted(input_dict.get(HYPERPARAMETERS, []), key=lambda a: a.id)
        return {HYPERPARAMETERS: found[-1:]}
