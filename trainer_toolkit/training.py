"""Fit and export through the toolkit: what a pipeline's `run_fn` calls.

`setup(settings)` picks and builds the strategy and precision for the hardware (before
the model exists); `train_and_export(...)` builds the model in the strategy's scope,
optionally warm-starts it, fits it with BackupAndRestore, TensorBoard and throughput
logging, checks the numbers (a NaN or infinite loss stops it, outputs on the eval split must
be finite: `trainer.check_numerics`), exports the SavedModel (chief only) and writes the
training provenance beside it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from trainer_toolkit import (
    dataset,
    export,
    hardware,
    importance,
    precision,
    provenance,
    simple_baseline,
)
from trainer_toolkit import strategy as strategy_lib
from trainer_toolkit.settings import SimpleBaselineSettings, TrainerSettings, TrainingBudget
from trainer_toolkit.warm_start import warm_start_from

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Session:
    """What `setup` chose for this process, and the strategy object."""

    settings: TrainerSettings
    hardware: hardware.Hardware
    strategy_choice: strategy_lib.StrategyChoice
    strategy: Any
    precision_choice: precision.PrecisionChoice

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def is_chief(self) -> bool:
        return self.hardware.cluster is None or self.hardware.cluster.is_chief

    def build(self, build_model: Callable[[], tf.keras.Model]) -> tf.keras.Model:
        """Builds (and compiles) the model in the strategy's scope under the precision policy.

        The policy is global in Keras, so it is set for the build only: layers made later,
        such as the Transform graph's layer in the input pipeline or the serving signature,
        stay float32 (under a mixed policy Keras would cast their float inputs, which the
        Transform graph rejects).
        """
        precision.apply_policy(self.precision_choice.policy)
        try:
            with self.strategy.scope():
                return build_model()
        finally:
            precision.apply_policy("float32")

    def global_batch_size(self, per_replica: int) -> int:
        """The batch the input pipeline yields; the strategy splits it over replicas."""
        return per_replica * self.replicas

    def input_options(self, per_replica_batch_size: int, seed: int | None) -> dataset.InputOptions:
        global_batch = self.global_batch_size(per_replica_batch_size)
        return dataset.InputOptions(
            global_batch_size=global_batch,
            shuffle_seed=seed,
            # Several batches' worth: a large batch from a small buffer is mostly one file's run.
            shuffle_buffer=max(1024, 8 * global_batch),
            deterministic=self.settings.deterministic,
            cache_max_bytes=self.settings.cache_max_bytes,
            shard_by_data=self.strategy_choice.name == "multi_worker",
        )


def setup(settings: TrainerSettings) -> Session:
    """Chooses and applies strategy and precision; call before building any model.

    Order matters: GPU memory growth before any GPU use, the multi-worker strategy before
    any other TF op, the precision probe (which runs ops) last.
    """
    if settings.gpu_memory_growth:
        hardware.enable_gpu_memory_growth()
    if settings.deterministic:
        # Same data and seed, same model: deterministic kernels (TF's op determinism), the
        # input order fixed (dataset.py), and no choice taken from a timing (the bf16 probe
        # measures a speed, which load on the machine changes).
        tf.config.experimental.enable_op_determinism()
    hw = hardware.detect()
    strategy_choice = strategy_lib.choose_strategy(settings.strategy, hw)
    strategy = strategy_lib.create_strategy(strategy_choice)
    precision_choice = precision.choose_precision(
        settings.precision, hw,
        probe_bf16_speedup=None if settings.deterministic else precision.probe_cpu_bf16_speedup,
    )
    logger.info(
        "trainer: strategy %s (%s) on %s, %d replica(s); precision %s (%s)",
        strategy_choice.name, strategy_choice.reason, list(strategy_choice.devices) or "default device",
        strategy.num_replicas_in_sync, precision_choice.policy, precision_choice.reason,
    )
    return Session(settings, hw, strategy_choice, strategy, precision_choice)


@dataclasses.dataclass(frozen=True)
class FitSpec:
    """One training job: inputs, steps and where things go."""

    train_files: list[str]
    eval_files: list[str]
    feature_spec: dict
    # Parsed raw batch -> (model inputs, label): the Transform graph plus the label split.
    transform: Callable[[dict], tuple[dict, tf.Tensor]]
    per_replica_batch_size: int
    train_steps: int
    eval_steps: int
    model_run_dir: str
    serving_model_dir: str
    seed: int | None = None
    base_model: str | None = None
    # Anything else that defines the job (hyperparameters, transform graph): a retry with
    # the same inputs resumes from the same backup, a different job never does.
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # TF Serving method names for signatures other than predict, e.g.
    # {"classification": export.CLASSIFY}: TF Serving's :classify/:regress need them.
    signature_methods: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # What the budget asked for and what it came to (TrainingBudget.plan), for the record.
    budget: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The candidate's head (heads.Head) and the `simple_baseline:` settings: with both, a
    # linear model with the same head is fitted and exported beside the candidate.
    head: Any = None
    simple_baseline: SimpleBaselineSettings | None = None
    # The `importance:` settings: with a head, each input's permutation importance and cost.
    importance: importance.ImportanceSettings | None = None
    # The Tuner's best values applied to the HParams (trainer_toolkit/tuning.apply), or None.
    tuning: dict | None = None


def backup_dir(settings: TrainerSettings, spec: FitSpec) -> str:
    """The BackupAndRestore folder: stable across retries of the same job."""
    key = json.dumps(
        {
            "train": spec.train_files, "steps": spec.train_steps,
            "batch": spec.per_replica_batch_size, "seed": spec.seed, **spec.identity,
        },
        sort_keys=True, default=str,
    )
    root = settings.backup_root or os.path.join(spec.model_run_dir, "backup")
    return os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:16])


class _BackupAndRestore(tf.keras.callbacks.BackupAndRestore):
    """Keras' callback, also on OneDeviceStrategy (one GPU): its checkpointing is the same
    as the default strategy's, but tf-keras 2.16 rejects it by type."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._supported_strategies = self._supported_strategies + (tf.distribute.OneDeviceStrategy,)


class Progress(tf.keras.callbacks.Callback):
    """Logs progress every N steps and measures steady-state throughput.

    The first step of this attempt (tracing, warm-up) is excluded from examples/s.
    """

    def __init__(self, total_steps: int, global_batch: int, every: int):
        super().__init__()
        self.total, self.batch, self.every = total_steps, global_batch, every
        self.first_step: int | None = None
        self.steps_run = 0
        # (step, loss) about 50 times per run: the training curve in governance reports.
        self.curve: list[tuple[int, float]] = []
        self._curve_every = max(1, total_steps // 50)
        self._t_first_end = None
        self._t_last = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_step is None:
            self.first_step = int(batch)

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps_run += 1
        if self._t_first_end is None:
            self._t_first_end = now
        self._t_last = now
        step = int(batch) + 1
        if logs and "loss" in logs and (step % self._curve_every == 0 or step == self.total):
            self.curve.append((step, round(float(logs["loss"]), 5)))
        if step % self.every == 0 or step == self.total:
            loss = float(logs["loss"]) if logs and "loss" in logs else float("nan")
            rate = self.examples_per_sec()
            logger.info(
                "trainer: step %d/%d loss %.4f%s", step, self.total, loss,
                f", {rate:.0f} examples/s" if rate else "",
            )

    def examples_per_sec(self) -> float | None:
        if self.steps_run < 2:
            return None
        return (self.steps_run - 1) * self.batch / (self._t_last - self._t_first_end)


class NumericalInstabilityError(RuntimeError):
    """Training diverged: a NaN or infinite loss, or a model whose outputs are not finite."""


class StopOnNonFiniteLoss(tf.keras.callbacks.Callback):
    """Keras' TerminateOnNaN, but failing: TerminateOnNaN only ends `fit` early, after which the
    diverged weights would be exported as if training had finished. This raises instead,
    naming the step and the loss, so the Trainer fails and nothing downstream runs."""

    def __init__(self, total_steps: int, learning_rate: float | None = None):
        super().__init__()
        self.total, self.learning_rate = total_steps, learning_rate

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            rate = f" (learning rate {self.learning_rate:g})" if self.learning_rate is not None else ""
            raise NumericalInstabilityError(
                f"trainer: the training loss became {float(loss)} at step {int(batch) + 1} of {self.total}{rate}; "
                "training diverged and no model was exported. Lower the learning rate, look for extreme "
                "feature values, or set trainer.check_numerics: false to export anyway")


def check_outputs(model, dataset_: tf.data.Dataset, steps: int | None) -> int:
    """Runs `model` on up to `steps` batches of (inputs, label) and checks every float output
    is finite; returns the number of examples checked.

    Raises:
      NumericalInstabilityError: naming the output, how many values are NaN or infinite, and
        the first batch where they appear.
    """
    checked = 0
    for step, (inputs, _) in enumerate(dataset_.take(steps) if steps else dataset_):
        outputs = model(inputs, training=False)
        named = outputs.items() if isinstance(outputs, Mapping) else [("output", outputs)]
        for name, value in named:
            value = tf.convert_to_tensor(value)
            if not value.dtype.is_floating:
                continue
            bad = int(tf.reduce_sum(tf.cast(~tf.math.is_finite(value), tf.int64)))
            if bad:
                raise NumericalInstabilityError(
                    f"trainer: the trained model's {name!r} is NaN or infinite for {bad} of "
                    f"{int(tf.size(value))} values in eval batch {step + 1}; not exported. The model "
                    "diverged or overflows on real inputs (look at the learning rate and at extreme "
                    "feature values), or set trainer.check_numerics: false to export anyway")
        checked += int(tf.shape(tf.nest.flatten(inputs)[0])[0])
    return checked


def _learning_rate(model) -> float | None:
    try:
        return float(tf.keras.backend.get_value(model.optimizer.learning_rate))
    except (AttributeError, TypeError, ValueError):
        return None  # a schedule, or no optimizer


def _callbacks(session: Session, spec: FitSpec, progress: Progress, model=None) -> list:
    settings = session.settings
    callbacks = []
    if settings.check_numerics:
        callbacks.append(StopOnNonFiniteLoss(spec.train_steps, _learning_rate(model) if model is not None else None))
    if settings.backup_every_steps:
        callbacks.append(_BackupAndRestore(backup_dir(settings, spec), save_freq=settings.backup_every_steps))
    # One TensorBoard writer per job: workers other than the chief would overwrite its files.
    if settings.tensorboard and session.is_chief:
        callbacks.append(
            tf.keras.callbacks.TensorBoard(
                log_dir=spec.model_run_dir,
                profile_batch=tuple(settings.profile_steps) if settings.profile_steps else 0,
            )
        )
    callbacks.append(progress)
    return callbacks


def _export(session: Session, model, spec: FitSpec, signatures: Callable) -> None:
    """Chief writes the SavedModel; other workers must take part in the save (it is a
    collective under multi-worker) but write to a scratch folder that is then removed."""
    target = spec.serving_model_dir if session.is_chief else tempfile.mkdtemp(prefix="worker-export-")
    tf.saved_model.save(model, target, signatures=signatures(model))
    export.set_signature_methods(target, dict(spec.signature_methods))
    if not session.is_chief:
        shutil.rmtree(target, ignore_errors=True)


def train_and_export(
    session: Session,
    build_model: Callable[[], tf.keras.Model],
    spec: FitSpec,
    signatures: Callable[[tf.keras.Model], dict],
) -> dict:
    """Builds, (warm-starts,) fits and exports the model; returns the training provenance.

    Raises:
      FileNotFoundError: no input files, or warm start without a readable base model.
    """
    settings = session.settings
    options = session.input_options(spec.per_replica_batch_size, spec.seed)
    train_files = dataset.list_files(spec.train_files)
    eval_files = dataset.list_files(spec.eval_files)
    train_ds = dataset.make_dataset(train_files, spec.feature_spec, spec.transform, options)
    eval_ds = dataset.make_dataset(eval_files, spec.feature_spec, spec.transform, options)
    model = session.build(build_model)
    warm = None
    if settings.warm_start and spec.base_model:
        warm = warm_start_from(model, spec.base_model)
    elif settings.warm_start:
        logger.info("trainer: warm start enabled but no blessed model yet; training from scratch")
    progress = Progress(spec.train_steps, options.global_batch_size, settings.log_every_steps)
    start = time.perf_counter()
    history = model.fit(
        train_ds,
        steps_per_epoch=spec.train_steps,
        validation_data=eval_ds,
        validation_steps=spec.eval_steps,
        callbacks=_callbacks(session, spec, progress, model),
        verbose=0,
    )
    wall = time.perf_counter() - start
    if settings.backup_every_steps and session.is_chief:
        # Keras deleted the checkpoints of the finished job; drop its empty folder too.
        shutil.rmtree(backup_dir(settings, spec), ignore_errors=True)
    numerics = None
    if settings.check_numerics:
        begin = time.perf_counter()
        checked = check_outputs(model, eval_ds, spec.eval_steps)
        numerics = {"loss_finite_every_step": True, "eval_outputs_checked": checked,
                    "eval_outputs_finite": True, "check_s": round(time.perf_counter() - begin, 2)}
        logger.info("trainer: outputs finite on %d eval examples (%.1f s)", checked, numerics["check_s"])
    _export(session, model, spec, signatures)
    simple = _simple_baseline(session, spec, train_ds, eval_ds, signatures)
    importances = _importance(session, spec, model)

    record = {
        "strategy": session.strategy_choice.name,
        "strategy_reason": session.strategy_choice.reason,
        "replicas": session.replicas,
        "workers": session.hardware.cluster.num_workers if session.hardware.cluster else 1,
        "devices": list(session.strategy_choice.devices) or ["default"],
        "gpus": [g.name for g in session.hardware.gpus],
        "precision_policy": session.precision_choice.policy,
        "precision_reason": session.precision_choice.reason,
        "loss_scaling": isinstance(model.optimizer, tf.keras.mixed_precision.LossScaleOptimizer),
        "per_replica_batch_size": spec.per_replica_batch_size,
        "global_batch_size": options.global_batch_size,
        "train_steps": spec.train_steps,
        "budget": dict(spec.budget),
        "train_examples": spec.train_steps * options.global_batch_size,
        "steps_this_attempt": progress.steps_run,
        "resumed_from_step": progress.first_step or 0,
        "examples_per_sec": round(progress.examples_per_sec() or 0.0, 1),
        "train_wall_s": round(wall, 2),
        "input_files": len(train_files),
        "input_cached": dataset.cache_used(train_files, options),
        "deterministic": settings.deterministic,
        "warm_start": warm,
        "final_metrics": {k: round(float(v[-1]), 5) for k, v in history.history.items()},
        "loss_curve": progress.curve,
        "numerics": numerics,
        "simple_baseline": simple,
        "importance": importances,
        "hparams": spec.identity.get("hparams"),
        "tuning": spec.tuning,
        "tensorflow": tf.__version__,
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
    }
    if session.is_chief:
        provenance.write(spec.serving_model_dir, record)
    logger.info("trainer: %s", json.dumps(record, sort_keys=True))
    return record


def _simple_baseline(session: Session, spec: FitSpec, train_ds, eval_ds, signatures: Callable) -> dict | None:
    """The simple baseline's record (fitted and exported beside the candidate), the opt-out
    and its reason, or None where the pipeline's run_fn passes no head."""
    settings = spec.simple_baseline
    if settings is None or spec.head is None:
        if settings is not None and settings.enabled:
            logger.warning("trainer: no head passed to the toolkit: no simple baseline is fitted")
        return None
    if not settings.enabled:
        return {"opted_out": settings.reason}
    eval_once = dataset.make_dataset(dataset.list_files(spec.eval_files), spec.feature_spec, spec.transform,
                                     session.input_options(spec.per_replica_batch_size, spec.seed), repeat=False)
    return simple_baseline.fit_and_export(session, spec.head, train_ds, eval_ds, spec.train_steps, spec.eval_steps,
                                          spec.serving_model_dir, signatures, dict(spec.signature_methods), settings,
                                          eval_once=eval_once)


def _importance(session: Session, spec: FitSpec, model) -> dict | None:
    """Each model input's permutation importance and cost (trainer_toolkit/importance.py) on
    a sample of the eval split, or None where it is off or the run_fn passes no head."""
    settings = spec.importance
    if settings is None or not settings.enabled or spec.head is None or not session.is_chief:
        return None
    files = dataset.list_files(spec.eval_files)
    compression = "GZIP" if all(f.endswith(".gz") for f in files) else ""
    raw = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=compression).take(settings.max_examples)]
    options = session.input_options(spec.per_replica_batch_size, spec.seed)
    eval_once = dataset.make_dataset(files, spec.feature_spec, spec.transform, options, repeat=False)
    return importance.measure(model, spec.head, eval_once, raw, list(spec.feature_spec), settings)


def plan_training(session: Session, fn_args, batch_size: int) -> dict:
    """Steps and batch from the budget in `custom_config["training"]` (TFX's train_steps when
    there is none), counting the training examples when the budget is in epochs."""
    config = fn_args.custom_config or {}
    budget = (TrainingBudget.from_custom_config(config) if config.get("training")
              else TrainingBudget(steps=fn_args.train_steps))
    available = None
    if budget.needs_count:
        start = time.perf_counter()
        available = dataset.count_records(dataset.list_files(fn_args.train_files))
        logger.info("trainer: %d training examples (counted in %.1f s)", available, time.perf_counter() - start)
    settings = session.settings
    plan = budget.plan(batch_size, session.replicas, available, settings.max_batch_size,
                       settings.batch_growth_above_steps)
    plan = {"asked": {k: v for k, v in dataclasses.asdict(budget).items() if v}, "available_examples": available,
            "model_batch_size": batch_size, **plan}
    logger.info("trainer: %s", json.dumps(plan, sort_keys=True))
    return plan


def train_from_fn_args(
    fn_args,
    hparams,
    build_model: Callable[[Any], tf.keras.Model],
    transform: Callable[[Any], Callable],
    signatures: Callable[[tf.keras.Model, Any], dict],
    signature_methods: Mapping[str, str] | None = None,
    head=None,
    tuned: dict | None = None,
) -> dict:
    """The whole of a pipeline's `run_fn`: settings from `custom_config`, setup, the Transform
    output, seeded fit and export. Returns the training provenance.

    Args:
      fn_args: TFX Trainer's FnArgs.
      hparams: the model's settings; needs `batch_size` (per replica) and `seed`.
      build_model: Transform output -> compiled model (called in the strategy's scope).
      transform: Transform output -> (parsed raw batch -> (inputs, label)).
      signatures: (model, Transform output) -> serving signatures.
      signature_methods: TF Serving method names of non-predict signatures (default: the head's).
      head: the model's heads.Head; with it, the `simple_baseline:` linear model is fitted
        and exported beside the candidate (trainer_toolkit/simple_baseline.py).
      tuned: what `tuning.apply` changed in `hparams` from the Tuner's best (provenance).
    """
    import tensorflow_transform as tft

    session = setup(TrainerSettings.from_custom_config(fn_args.custom_config))
    tft_output = tft.TFTransformOutput(fn_args.transform_output)
    tf.keras.utils.set_random_seed(hparams.seed)
    plan = plan_training(session, fn_args, hparams.batch_size)
    return train_and_export(
        session,
        build_model=lambda: build_model(tft_output),
        spec=FitSpec(
            train_files=fn_args.train_files,
            eval_files=fn_args.eval_files,
            feature_spec=tft_output.raw_feature_spec(),
            transform=transform(tft_output),
            per_replica_batch_size=plan["per_replica_batch_size"],
            train_steps=plan["steps"],
            budget=plan,
            eval_steps=fn_args.eval_steps,
            model_run_dir=fn_args.model_run_dir,
            serving_model_dir=fn_args.serving_model_dir,
            seed=hparams.seed,
            base_model=fn_args.base_model,
            identity={"transform": fn_args.transform_output, "hparams": dataclasses.asdict(hparams)},
            signature_methods=dict(signature_methods or (head.signature_methods if head else {})),
            head=head,
            simple_baseline=SimpleBaselineSettings.from_dict((fn_args.custom_config or {}).get("simple_baseline"),
                                                             "simple_baseline"),
            importance=importance.ImportanceSettings.from_dict((fn_args.custom_config or {}).get("importance"),
                                                               "importance"),
            tuning=tuned,
        ),
        signatures=lambda model: signatures(model, tft_output),
    )
