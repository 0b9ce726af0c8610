"""Resolver strategy: the statistics of the newest span the served model was trained on.

The ServingSkew node compares the traffic a served version answers with the data it was
trained on. Which version answers traffic is the one models.config serves (its `stable`
label during a canary rollout, a pinned version after a rollback), else the newest pushed;
its `push_info.json` names its Model artifact, ML Metadata the Trainer's window, and the
newest span of the window the StatisticsGen output to compare with.
"""

import json
import os
from typing import Any, Optional

from tfx import types
from tfx.dsl.components.common.resolver import ResolverStrategy  # = tfx.v1.dsl.experimental's

from components.atomic_pusher.executor import PUSH_INFO, existing_versions
from core import metadata_queries, nodes


def served_version(serving_model_dir: str) -> Optional[tuple[int, dict]]:
    """(version, its push_info) of the version that answers the model's traffic: the one
    models.config serves (its `stable` label during a canary rollout, a pinned version after
    a rollback), else the newest under the model's serving folder; None if none was pushed
    by this pipeline."""
    from serving.repository import model_config, versions

    order = list(reversed(existing_versions(serving_model_dir)))
    root, name = os.path.split(os.path.abspath(serving_model_dir))
    if order and os.path.exists(versions.config_path(root)):
        entry = model_config.find(model_config.load(versions.config_path(root)), name)
        chosen = versions.served_version(entry, order) if entry is not None else None
        if chosen is not None:
            order = [chosen] + [v for v in order if v != chosen]
    for version in order:
        try:
            with open(os.path.join(serving_model_dir, str(version), PUSH_INFO), encoding="utf-8") as f:
                return version, json.load(f)
        except (OSError, ValueError):
            continue  # not pushed by this pipeline: its training data is unknown
    return None


class ServedModelStatisticsStrategy(ResolverStrategy):
    """Resolves `examples` and `statistics` to the newest span the served model was trained on
    and its StatisticsGen output (both empty if nothing this pipeline pushed is served)."""

    def __init__(self, serving_model_dir: str):
        self._serving_model_dir = serving_model_dir

    def resolve_artifacts(self, store: Any, input_dict: dict[str, list[types.Artifact]]):
        nothing = {key: [] for key in input_dict}
        served = served_version(self._serving_model_dir)
        model_id = (served or (0, {}))[1].get("model_artifact_id")
        if not model_id:
            return nothing
        trainer, _ = metadata_queries.producer(store, int(model_id))
        if trainer is None:
            return nothing
        window = metadata_queries.inputs_of(store, trainer.id).get("examples", [])
        newest = max(window, key=lambda a: (metadata_queries.props(a).get("span") or 0, a.id), default=None)
        if newest is None:
            return nothing
        produced = set()
        for execution, node_id in metadata_queries.consumers(store, newest.id, key="examples"):
            if node_id == nodes.STATISTICS_GEN:
                produced.update(a.id for a in metadata_queries.outputs_of(store, execution.id).get("statistics", []))
        statistics = sorted((a for a in input_dict.get("statistics", []) if a.id in produced), key=lambda a: a.id)
        examples = [a for a in input_dict.get("examples", []) if a.id == newest.id]
        if not statistics or not examples:
            return nothing
        return {"statistics": statistics[-1:], "examples": examples}
