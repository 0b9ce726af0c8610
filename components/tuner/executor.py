"""Tuner executor: a search when due (trainer_toolkit/tuning.py), else the last best passed on.

Due (`tuning.due`): `retrain tune` asked for it, there is no earlier search, or the new
span is on the `every_spans` schedule. A search is TFX's (the pipeline's `tuner_fn`, then
`best_hyperparameters.txt` and the trials' scores); otherwise the `previous` artifact's
file is copied (TFX's Trainer reads the one file of that folder). Either way `tuning.json` beside the trials' results says what happened
(searched or reused, why, the trials and their scores, the budget, seconds), and the
HyperParameters artifact carries `searched`, `source_artifact_id` and `tuned_span`, which
the Trainer's provenance and the governance report read.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from typing import Any

from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from trainer_toolkit import tuning

logger = logging.getLogger(__name__)

PREVIOUS_KEY = "previous"
RECORD_FILE = "tuning.json"
_BEST_FILE = "best_hyperparameters.txt"


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict: dict[str, list], output_dict: dict[str, list], exec_properties: dict[str, Any]) -> None:
        keys = standard_component_specs
        config = json.loads(exec_properties.get(keys.CUSTOM_CONFIG_KEY) or "{}")
        settings = tuning.TuningSettings.from_dict(config.get("tuning"), "tuning")
        previous = (input_dict.get(PREVIOUS_KEY) or [None])[0]
        span = max((a.get_int_custom_property("span") for a in input_dict[keys.EXAMPLES_KEY]
                    if a.has_custom_property("span")), default=None)
        search, why = tuning.due(settings, span, previous is not None)
        best = artifact_utils.get_single_instance(output_dict[keys.BEST_HYPERPARAMETERS_KEY])
        results_uri = artifact_utils.get_single_uri(output_dict[keys.TUNER_RESULTS_KEY])
        start = time.perf_counter()
        record = {"searched": search, "why": why, "span": span, "max_trials": settings.max_trials,
                  "trial_steps": settings.trial_steps, "seed": settings.seed}
        if search:
            logger.info("Tuner: searching (%s), %d trials", why, settings.max_trials)
            tuner = tuner_executor.search(input_dict, exec_properties, self._get_tmp_dir())
            tuner_executor.write_best_hyperparameters(tuner, output_dict)
            trials = [t for t in tuner.oracle.trials.values() if t.score is not None]
            record["trials"] = [{"trial_id": t.trial_id, "val_loss": t.score, "values": t.hyperparameters.values}
                                for t in sorted(trials, key=lambda t: t.score)]
            record["best"] = tuner.get_best_hyperparameters()[0].values
            best.set_int_custom_property("source_artifact_id", 0)
            best.set_int_custom_property("tuned_span", span or 0)
        else:
            logger.info("Tuner: not searching (%s): passing on artifact %d", why, previous.id)
            shutil.copyfile(os.path.join(previous.uri, _BEST_FILE), os.path.join(best.uri, _BEST_FILE))
            with open(os.path.join(previous.uri, _BEST_FILE), encoding="utf-8") as f:
                record["best"] = json.load(f).get("values")
            io_utils.write_string_file(os.path.join(results_uri, "tuner_results.json"), "[]")
            record["previous_artifact_id"] = previous.id
            source = previous.get_int_custom_property("source_artifact_id") or previous.id
            best.set_int_custom_property("source_artifact_id", source)
            best.set_int_custom_property("tuned_span", previous.get_int_custom_property("tuned_span"))
        record["seconds"] = round(time.perf_counter() - start, 2)
        best.set_int_custom_property("searched", int(search))
        best.set_string_custom_property("why", why)
        io_utils.write_string_file(os.path.join(results_uri, RECORD_FILE), json.dumps(record, indent=2, default=str))
        logger.info("Tuner: best %s (%s, %.1f s)", record["best"], "searched" if search else "reused",
                    record["seconds"])
