"""Evaluator executor: TFX's, then the significance verdict decides the blessing.

TFX's executor runs TFMA (metrics with confidence intervals, candidate and baseline on
the same eval examples) and blesses on TFMA's point-estimate validation. This executor
then rewrites the blessing from `significance.judge`: TFMA's floors still refuse, a drop
vs the baseline refuses only when significant, and a too small eval split is not judged.
The verdict is written to `<evaluation>/significance.json` and onto the blessing.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from tfx.components.evaluator import constants
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from components.evaluator import significance

logger = logging.getLogger(__name__)


class Executor(evaluator_executor.Executor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        super().Do(input_dict, output_dict, exec_properties)
        settings = json.loads(exec_properties.get("significance") or "{}")
        evaluation = artifact_utils.get_single_uri(output_dict[standard_component_specs.EVALUATION_KEY])
        blessings = output_dict.get(standard_component_specs.BLESSING_KEY) or []
        if not blessings or not blessings[0].has_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY):
            return  # no thresholds configured: nothing was judged
        blessing = blessings[0]
        metrics, failures = significance.read_tfma(evaluation)
        verdict = significance.judge(
            metrics, failures, settings.get("level", 0.05), settings.get("min_examples", 1)
        )
        verdict["tfma_validation_ok"] = not failures
        io_utils.write_string_file(
            os.path.join(evaluation, significance.VERDICT_FILE), json.dumps(verdict, indent=2, sort_keys=True)
        )
        for name in (constants.BLESSED_FILE_NAME, constants.NOT_BLESSED_FILE_NAME):
            path = os.path.join(blessing.uri, name)
            if os.path.exists(path):
                os.remove(path)
        blessed = verdict["blessed"]
        io_utils.write_string_file(
            os.path.join(blessing.uri, constants.BLESSED_FILE_NAME if blessed else constants.NOT_BLESSED_FILE_NAME), ""
        )
        blessing.set_int_custom_property(
            constants.ARTIFACT_PROPERTY_BLESSED_KEY, constants.BLESSED_VALUE if blessed else constants.NOT_BLESSED_VALUE
        )
        blessing.set_string_custom_property("verdict", "; ".join(verdict["reasons"]) or "blessed")
        logger.info("Significance verdict: blessed=%s %s", blessed, "; ".join(verdict["reasons"]))
