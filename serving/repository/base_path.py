"""A model's base path as TF Serving reads it: numeric version folders of complete SavedModels.

TensorFlow-free, so rollback, retention, models.config and the registry list versions
without loading TensorFlow.
"""

from __future__ import annotations

import os
import re

_NUMERIC = re.compile(r"^\d+$")


def is_complete_saved_model(path: str) -> bool:
    """A graph file, and a variables index if there is a variables folder."""
    has_graph = any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt"))
    variables = os.path.join(path, "variables")
    return has_graph and (not os.path.isdir(variables) or os.path.isfile(os.path.join(variables, "variables.index")))


def discover(base_path: str) -> dict[int, str]:
    """Numeric version folders holding a complete SavedModel (staging folders are not numeric)."""
    if not os.path.isdir(base_path):
        return {}
    found = {}
    for name in os.listdir(base_path):
        path = os.path.join(base_path, name)
        if _NUMERIC.match(name) and os.path.isdir(path) and is_complete_saved_model(path):
            found[int(name)] = path
    return found
