"""Tuning: a KerasTuner search over a pipeline's hyperparameters, for TFX's Tuner component.

ML Test Score, model section ("hyperparameters have been tuned"). A pipeline's `hparams.py`
declares `SEARCH_SPACE`: HParams field -> a list of values to choose from, or
`{min, max[, log]}` for a float range, `{min, max[, step]}` for an int range. `tuner_fn`
(what a pipeline's `tuner_fn` returns through `make_tuner_fn`) is the Tuner component's
entry point: a KerasTuner random search (`RandomSearchOracle`, seeded) with `max_trials`
trials, each the model built with one draw of the space and trained `trial_steps` steps on
the window through the Transform graph, scored by its validation loss.

The trials are trained by the toolkit's own loop (`Trainer.run_trial`), not by
KerasTuner's `fit` wrapper: KerasTuner 1.4 takes Keras 3 (installed beside tf-keras) for its
callbacks, while the models are tf-keras (core/keras_env.py). The Tuner writes the best
values as KerasTuner's HyperParameters config (TFX's `best_hyperparameters.txt`); the
Trainer's `run_fn` reads them from `fn_args.hyperparameters` with `apply`, which records
what changed for the provenance.

`batch_size` and `seed` are not tunable (the input pipeline and the comparison between
runs depend on them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from core.settings import Settings, SettingsError

logger = logging.getLogger(__name__)

NOT_TUNABLE = ("batch_size", "seed")


@dataclasses.dataclass(frozen=True)
class TuningSettings(Settings):
    """The `tuning:` block of a pipeline config."""

    # The Tuner node is in the pipeline (and so in its DAG).
    enabled: bool = False
    # Search when the new span's month number (year * 12 + month) is a multiple of this;
    # between searches the Tuner passes on the last best hyperparameters. 0: only on
    # demand (`retrain tune`) or when there are none yet.
    every_spans: int = 0
    # Search this run whatever the schedule (`retrain tune` sets it).
    force: bool = False
    max_trials: int = 6
    # Training steps of each trial (None: the Trainer's step budget, at most 200).
    trial_steps: int | None = None
    seed: int = 0

    def check(self) -> None:
        if self.every_spans < 0:
            raise SettingsError(f"every_spans: must be >= 0 (0: on demand), got {self.every_spans}")
        if self.max_trials < 1:
            raise SettingsError(f"max_trials: must be at least 1, got {self.max_trials}")
        if self.trial_steps is not None and self.trial_steps < 1:
            raise SettingsError(f"trial_steps: must be at least 1, got {self.trial_steps}")


def due(settings: TuningSettings, span: int | None, has_previous: bool) -> tuple[bool, str]:
    """Whether this run searches, and why."""
    if settings.force:
        return True, "asked for (retrain tune)"
    if not has_previous:
        return True, "no tuned hyperparameters yet"
    if settings.every_spans and span is not None:
        index = (span // 100) * 12 + span % 100
        if index % settings.every_spans == 0:
            return True, f"span {span} is on the schedule (every {settings.every_spans} spans)"
        return False, f"span {span} is not on the schedule (every {settings.every_spans} spans)"
    return False, "on demand only (tuning.every_spans: 0): the last search's values are reused"


def check_space(space: Mapping[str, Any], hparams_cls) -> None:
    """The search space names HParams fields, each with a non-empty list or a range.

    Raises:
      SettingsError: naming the field.
    """
    fields = {f.name for f in dataclasses.fields(hparams_cls)}
    for name, spec in space.items():
        where = f"SEARCH_SPACE.{name}"
        if name not in fields:
            raise SettingsError(f"{where}: not a field of {hparams_cls.__name__} ({', '.join(sorted(fields))})")
        if name in NOT_TUNABLE:
            raise SettingsError(f"{where}: not tunable ({', '.join(NOT_TUNABLE)} are fixed for a pipeline)")
        if isinstance(spec, Mapping):
            if not {"min", "max"} <= set(spec) or not spec["min"] < spec["max"]:
                raise SettingsError(f"{where}: a range needs min < max, got {dict(spec)}")
        elif not isinstance(spec, (list, tuple)) or not spec:
            raise SettingsError(f"{where}: expected a non-empty list of values or {{min, max}}, got {spec!r}")


def _define(hp, space: Mapping[str, Any]) -> None:
    for name, spec in space.items():
        if isinstance(spec, Mapping):
            if isinstance(spec["min"], int) and isinstance(spec["max"], int) and not spec.get("log"):
                hp.Int(name, spec["min"], spec["max"], step=spec.get("step", 1))
            else:
                hp.Float(name, float(spec["min"]), float(spec["max"]), sampling="log" if spec.get("log") else "linear")
        else:
            # KerasTuner's choices are scalars: a list value (hidden_units) is chosen by its JSON.
            hp.Choice(name, [json.dumps(v) if isinstance(v, (list, tuple)) else v for v in spec])


def decode(values: Mapping[str, Any], hparams) -> dict[str, Any]:
    """KerasTuner values -> HParams field values (JSON choices back to tuples)."""
    out = {}
    for name, value in values.items():
        if not hasattr(hparams, name):
            continue
        if isinstance(value, str) and isinstance(getattr(hparams, name), (list, tuple)):
            value = tuple(json.loads(value))
        out[name] = value
    return out


def apply(hparams, best_config: Mapping[str, Any] | None):
    """`hparams` with the Tuner's best values (`fn_args.hyperparameters`: KerasTuner's
    HyperParameters config), and the provenance record (None when there are none)."""
    if not best_config:
        return hparams, None
    values = decode(best_config.get("values") or {}, hparams)
    changed = {k: [_plain(getattr(hparams, k)), _plain(v)] for k, v in values.items() if getattr(hparams, k) != v}
    tuned = dataclasses.replace(hparams, **values)
    logger.info("trainer: tuned hyperparameters %s (changed: %s)", values, changed or "none")
    return tuned, {"source": "Tuner (best_hyperparameters)", "values": {k: _plain(v) for k, v in values.items()},
                   "changed": changed}


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def make_tuner_fn(hparams_cls, search_space: Mapping[str, Any], build_model: Callable, transform: Callable,
                  head) -> Callable:
    """A pipeline's `tuner_fn(fn_args) -> TunerFnResult` for TFX's Tuner component.

    Args:
      build_model: (Transform output, HParams) -> compiled model.
      transform: Transform output -> (parsed raw batch -> (inputs, label)).
      head: the model's heads.Head (unused by the search; kept for symmetry with the Trainer).
    """

    def tuner_fn(fn_args):
        return _tuner(fn_args, hparams_cls, search_space, build_model, transform)

    return tuner_fn


def _tuner(fn_args, hparams_cls, search_space, build_model, transform):
    import keras_tuner as kt
    import tensorflow as tf
    import tensorflow_transform as tft
    from tfx.components.tuner.component import TunerFnResult

    from trainer_toolkit import dataset
    from trainer_toolkit.settings import hparams_from_custom_config

    config = fn_args.custom_config or {}
    settings = TuningSettings.from_dict(config.get("tuning"), "tuning")
    check_space(search_space, hparams_cls)
    base = hparams_from_custom_config(hparams_cls, config, hparams_cls.__module__)
    tft_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    steps = settings.trial_steps or min(200, int(fn_args.train_steps or 200))
    options = dataset.InputOptions(global_batch_size=base.batch_size, shuffle_seed=base.seed)
    parse = transform(tft_output)
    train_ds = dataset.make_dataset(dataset.list_files(fn_args.train_files), tft_output.raw_feature_spec(), parse,
                                    options)
    eval_ds = dataset.make_dataset(dataset.list_files(fn_args.eval_files), tft_output.raw_feature_spec(), parse,
                                   options)
    eval_steps = max(1, int(fn_args.eval_steps or 10))

    class _Search(kt.Tuner):
        """Each trial trained by tf-keras' own fit, scored by its validation loss."""

        def run_trial(self, trial, *args, **kwargs):
            values = decode(trial.hyperparameters.values, base)
            tf.keras.utils.set_random_seed(base.seed)
            model = build_model(tft_output, dataclasses.replace(base, **values))
            start = time.perf_counter()
            model.fit(train_ds, steps_per_epoch=steps, epochs=1, verbose=0)
            loss = model.evaluate(eval_ds, steps=eval_steps, verbose=0, return_dict=True)["loss"]
            logger.info("tuner: trial %s %s: val_loss %.5f (%d steps, %.1f s)", trial.trial_id, values, loss, steps,
                        time.perf_counter() - start)
            return {"val_loss": float(loss)}

        def save_model(self, trial_id, model, step=0):
            pass  # the Trainer trains the winner; trials keep their scores only

    hp = kt.HyperParameters()
    _define(hp, search_space)
    oracle = kt.oracles.RandomSearchOracle(objective=kt.Objective("val_loss", "min"), max_trials=settings.max_trials,
                                           seed=settings.seed, hyperparameters=hp, tune_new_entries=False)
    tuner = _Search(oracle=oracle, hypermodel=lambda hp: None, directory=fn_args.working_dir,
                    project_name="search", overwrite=True)
    return TunerFnResult(tuner=tuner, fit_kwargs={})
