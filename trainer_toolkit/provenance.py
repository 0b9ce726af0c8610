"""Training provenance: what the trainer used and measured, kept with the SavedModel.

The record is written to `<SavedModel>/assets.extra/training_provenance.json` (so it
travels with every pushed copy) and copied onto the Model artifact's MLMD custom
properties by `components.trainer.executor`.
"""

from __future__ import annotations

import json
import os

FILENAME = "training_provenance.json"
# The MLMD custom properties set on the Model artifact (scalar fields of the record).
MLMD_PROPERTIES = (
    "strategy", "replicas", "workers", "devices", "gpus", "precision_policy", "loss_scaling",
    "global_batch_size", "train_steps", "resumed_from_step", "examples_per_sec", "train_wall_s",
    "input_cached", "warm_start", "train_examples", "budget",
)
MLMD_PREFIX = "training_"


def path(serving_model_dir: str) -> str:
    return os.path.join(serving_model_dir, "assets.extra", FILENAME)


def write(serving_model_dir: str, record: dict) -> str:
    target = path(serving_model_dir)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    return target


def read(serving_model_dir: str) -> dict | None:
    """The record, or None for a model not trained through the toolkit."""
    try:
        with open(path(serving_model_dir), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def mlmd_values(record: dict) -> dict[str, str | int | float]:
    """MLMD-typed custom property values: lists joined, bools as 0/1, dicts as JSON."""
    values = {}
    for key in MLMD_PROPERTIES:
        value = record.get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        values[MLMD_PREFIX + key] = value
    return values
