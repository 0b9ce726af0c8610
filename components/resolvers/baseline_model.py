"""Resolver strategy: the Evaluator's baseline, the model blessed last and not rolled back.

TFX's LatestBlessedModelStrategy takes the blessed model with the highest artifact id,
that is the one *trained* last. Runs of several months at once (parallel backfills, see
`runner/span_ledger.py`) train in any order: only their Evaluators wait for the earlier
months, so a March model can be created after a May one, and June would be judged
against March while May was blessed after it. The order that matches running the months
one after another is the order of the blessings: each Evaluator blesses only after every
earlier month's run has finished, so the newest blessing is the last model that passed.

A blessed model whose canary was rolled back (`retrain rollout`, a RolloutDecision in
MLMD naming it as the canary) is passed over: live traffic showed it worse than the
stable version, so the next candidate is held to the stable version, not to it.
"""

from typing import Any

from tfx import types
from tfx.dsl.components.common.resolver import ResolverStrategy  # = tfx.v1.dsl.experimental's

from core import metadata_queries

MODEL, BLESSING = "model", "model_blessing"
# The ModelBlessing properties the Evaluator writes (TFX's own names).
_BLESSED, _CURRENT_MODEL_ID = "blessed", "current_model_id"


def select(models: list[types.Artifact], blessings: list[types.Artifact],
           rolled_back: set[int] = frozenset()) -> dict[str, list[types.Artifact]]:
    """The model of the newest positive blessing (by the blessing's id), skipping
    `rolled_back` model ids; both lists empty when there is none."""
    by_id = {m.id: m for m in models}
    positive = [b for b in blessings
                if b.has_custom_property(_BLESSED) and b.get_int_custom_property(_BLESSED) == 1
                and b.has_custom_property(_CURRENT_MODEL_ID)]
    for blessing in sorted(positive, key=lambda b: b.id, reverse=True):
        model_id = blessing.get_int_custom_property(_CURRENT_MODEL_ID)
        if model_id in by_id and model_id not in rolled_back:
            return {MODEL: [by_id[model_id]], BLESSING: [blessing]}
    return {MODEL: [], BLESSING: []}


class LastBlessedModelStrategy(ResolverStrategy):
    """Resolves `model` and `model_blessing` to the last blessed model that was not rolled
    back, or to nothing (the first model of a pipeline has no baseline)."""

    def resolve_artifacts(self, store: Any, input_dict: dict[str, list[types.Artifact]]):
        models, blessings = input_dict.get(MODEL, []), input_dict.get(BLESSING, [])
        if not models or not blessings:
            return {MODEL: [], BLESSING: []}
        return select(models, blessings, metadata_queries.rolled_back_model_ids(store))
