"""Trainer executor: TFX's GenericExecutor, plus the training provenance on the Model artifact.

After `run_fn` returns, the record the toolkit wrote beside the SavedModel is copied onto
the output Model's MLMD custom properties (`training_strategy`, `training_precision_policy`,
...), and so are the code version (`code_git_commit`, `code_git_dirty`, `code_code_sha256`)
and the runtime's SBOM digest (`runtime_sbom_sha256`, `runtime_versions`), where lineage queries, the run summary and governance reports read them;
the SBOM itself is copied into the SavedModel (`assets.extra/`), so every model carries the runtime that built it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from tfx.components.trainer import executor as trainer_executor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from components.evaluator import staleness
from components.trainer import code_version
from core import feature_policy, sbom
from trainer_toolkit import provenance

logger = logging.getLogger(__name__)


class Executor(trainer_executor.GenericExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        super().Do(input_dict, output_dict, exec_properties)
        model = artifact_utils.get_single_instance(output_dict["model"])
        # The newest span it learned from: the Evaluator ages the served model from it.
        trained = [a.get_int_custom_property("span") for a in input_dict.get("examples") or []
                   if a.has_custom_property("span")]
        if trained:
            model.set_int_custom_property(staleness.TRAINED_THROUGH, max(trained))
        # The code that trained it, for governance reports (read from MLMD, not passed along).
        for key, value in code_version.code_version().items():
            if isinstance(value, bool):
                model.set_int_custom_property(f"code_{key}", int(value))
            elif value is not None:
                model.set_string_custom_property(f"code_{key}", value)
        # The runtime that trained it: its SBOM's digest (written at set-up; core/sbom.py).
        runtime = sbom.describe()
        if runtime is None:
            logger.warning("no runtime SBOM at %s (set up without `make venv`?): not recorded", sbom.path())
        for key, value in sbom.mlmd_values(runtime).items():
            if isinstance(value, int):
                model.set_int_custom_property(key, value)
            else:
                model.set_string_custom_property(key, value)
        serving_dir = path_utils.serving_model_dir(model.uri)
        # And the SBOM itself, inside the SavedModel: the pushed version carries it, and the
        # next candidate's runtime is compared with it (the Evaluator lists the changes).
        if runtime is not None:
            sbom.copy_into(serving_dir, runtime["path"])
        # The feature policy it was trained under, inside the SavedModel too: the server's
        # request log applies the served version's rules (core/feature_policy.py).
        policy = (json.loads(exec_properties.get("custom_config") or "{}") or {}).get("feature_policy")
        if policy:
            target = os.path.join(serving_dir, feature_policy.MODEL_COPY)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                json.dump(policy, f, indent=2, sort_keys=True)
            if policy.get("sha256"):
                model.set_string_custom_property("feature_policy_sha256", policy["sha256"])
        record = provenance.read(serving_dir)
        if record is None:
            logger.warning("no training provenance beside the SavedModel: run_fn does not use the trainer toolkit")
            return
        for key, value in provenance.mlmd_values(record).items():
            if isinstance(value, int):
                model.set_int_custom_property(key, value)
            elif isinstance(value, float):
                model.set_float_custom_property(key, value)
            else:
                model.set_string_custom_property(key, value)
