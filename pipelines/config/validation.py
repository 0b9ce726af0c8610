"""Validation of a pipeline config: the rules types alone cannot express.

`validate(config)` runs at every load and `replace`: ranges of top-level keys, every
settings block parsed by its class (pipelines/config/blocks.py), rules across keys, and
checks against other files (the model's HParams, the gate policy against the schema).
Every error is a ConfigError naming the key.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping

from components.data_gate.consistency import check_features as consistency_check_features
from core import metadata as metadata_lib
from core import tasks
from core.settings import SettingsError
from pipelines import beam as beam_lib
from pipelines.config.blocks import BLOCKS
from pipelines.config.schema import ConfigError, PipelineConfig

_AT_LEAST_ONE = ("window_spans", "eval_steps", "serving_check_requests", "keep_versions", "min_eval_examples")
_SHARES = ("min_auc", "min_accuracy", "request_log_sampling")
_TOLERANCES = ("max_auc_decrease", "max_accuracy_decrease", "max_mse_increase", "max_mae_increase")
_CEILINGS = ("max_mse", "max_mae", "max_mape")


def validate(config: PipelineConfig) -> None:
    """Range checks of top-level keys, every settings block, and rules across keys and files.

    Raises:
      ConfigError: naming the field.
    """
    _check_ranges(config)
    for name in BLOCKS:
        config.block(name)
    config.rollout_settings  # noqa: B018 - the rollout metric must suit the task
    try:
        config.beam_settings  # noqa: B018 - validates the block
    except beam_lib.BeamConfigError as e:
        raise ConfigError(str(e)) from e
    for name in ("preprocessing_fn", "run_fn", "label_fn"):
        if getattr(config, name) is not None and "." not in getattr(config, name):
            raise ConfigError(f"{name}: expected a dotted path module.function")
    try:
        metadata_lib.check_config_value(config.metadata)
        config.metadata_store  # noqa: B018 - parses the URL (and RETRAIN_METADATA_URL) now
    except metadata_lib.MetadataConfigError as e:
        raise ConfigError(f"metadata: {e}") from e
    check_hparams(config)
    policy = load_gate_policy(config)
    check_span_consistency(config, policy)
    check_fairness(config)
    check_tuning(config)
    load_feature_policy(config)


def check_tuning(config: PipelineConfig) -> None:
    """With `tuning.enabled`, the model's hparams.py declares a SEARCH_SPACE of HParams fields.

    Raises:
      ConfigError: naming the module or the field.
    """
    settings = config.tuning_settings
    if not (settings.enabled or settings.force):
        return
    cls = hparams_class(config)
    module = importlib.import_module(cls.__module__) if cls is not None else None
    space = getattr(module, "SEARCH_SPACE", None)
    if not space:
        where = cls.__module__ if cls is not None else config.run_fn.rsplit(".", 2)[0] + ".hparams"
        raise ConfigError(f"tuning: {where} declares no SEARCH_SPACE (HParams field -> values to try)")
    from trainer_toolkit.tuning import check_space

    try:
        check_space(space, cls)
    except SettingsError as e:
        raise ConfigError(f"tuning: {cls.__module__}.{e}") from None


def check_fairness(config: PipelineConfig) -> None:
    """The `fairness:` block's slices must be the schema's features, its gaps the task's metrics.

    Raises:
      ConfigError: naming the key and the feature or metric.
    """
    settings = config.fairness_settings
    if not settings.active:
        return
    try:
        settings.gates(config.task)
    except SettingsError as e:
        raise ConfigError(f"fairness.{e}") from None
    known = schema_features(config.schema_path)
    for i, feature in enumerate(settings.slices):
        if feature not in known:
            raise ConfigError(f"fairness.slices[{i}]: {feature!r} is not a feature of the schema {config.schema_path}")


def _check_ranges(config: PipelineConfig) -> None:
    for name in _AT_LEAST_ONE:
        if getattr(config, name) < 1:
            raise ConfigError(f"{name}: must be at least 1, got {getattr(config, name)}")
    budget = [f"train_{k}" for k in ("epochs", "examples", "steps") if getattr(config, f"train_{k}") is not None]
    if len(budget) > 1:
        raise ConfigError(f"{' and '.join(budget)}: set one of train_epochs, train_examples, train_steps")
    for name in budget:
        if not getattr(config, name) > 0:
            raise ConfigError(f"{name}: must be > 0, got {getattr(config, name)}")
    if config.max_train_examples < 0:
        raise ConfigError(f"max_train_examples: must be >= 0 (0: no ceiling), got {config.max_train_examples}")
    for name in _SHARES:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ConfigError(f"{name}: must be within [0, 1], got {getattr(config, name)}")
    for name in _TOLERANCES:
        if getattr(config, name) < 0:
            raise ConfigError(f"{name}: must be >= 0, got {getattr(config, name)}")
    for name in _CEILINGS:
        if getattr(config, name) is not None and getattr(config, name) <= 0:
            raise ConfigError(f"{name}: must be > 0 (or left out for no ceiling), got {getattr(config, name)}")
    if config.task == tasks.REGRESSION and config.confidence_method == "jackknife":
        raise ConfigError("confidence_method: jackknife misstates regression errors in TFMA 0.47"
                          " (pipelines/config/schema.py); use bootstrap or leave it out")
    if not 0.0 < config.significance_level < 0.5:
        raise ConfigError(f"significance_level: must be within (0, 0.5), got {config.significance_level}")
    if config.max_eval_examples and config.max_eval_examples < config.min_eval_examples:
        raise ConfigError(f"max_eval_examples: must be 0 (all) or at least min_eval_examples "
                          f"({config.min_eval_examples}), got {config.max_eval_examples}")


def check_span_consistency(config: PipelineConfig, policy) -> None:
    """The `span_consistency:` block's features must be the schema's.

    Raises:
      ConfigError: naming the key or the feature.
    """
    settings = config.consistency_settings
    if not settings.enabled:
        return
    try:
        consistency_check_features(settings, schema_features(config.schema_path))
    except SettingsError as e:
        raise ConfigError(f"span_consistency: {e}") from None


def hparams_class(config: PipelineConfig):
    """The model's `HParams` dataclass: `HParams` in `hparams.py` beside the module of
    `run_fn` (TensorFlow-free, so a config is checked without loading the model), or None."""
    package = config.run_fn.rsplit(".", 2)[0]
    name = f"{package}.hparams"
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:
        return None
    return getattr(importlib.import_module(name), "HParams", None)


def check_hparams(config: PipelineConfig):
    """Builds the model's HParams from `hparams:` now, so a typo fails at load, not in the Trainer.

    Raises:
      ConfigError: naming the key and the known ones.
    """
    cls = hparams_class(config)
    if cls is None:
        return None
    try:
        return cls.from_custom_config({"hparams": dict(config.hparams)})
    except (TypeError, ValueError) as e:
        message = str(e)
        raise ConfigError(message if message.startswith("hparams") else f"hparams: {message}") from e


def load_gate_policy(config: PipelineConfig):
    """The data gate's policy (calibrated limits and opt-outs), checked against the schema.

    Raises:
      ConfigError: naming the policy file and the field.
    """
    from components.data_gate import policy as gate_policy

    if config.gate_policy is None:
        return gate_policy.GatePolicy()
    try:
        policy = gate_policy.load(config.gate_policy)
        gate_policy.check_features(policy, schema_features(config.schema_path))
    except gate_policy.PolicyError as e:
        raise ConfigError(f"gate_policy: {e}") from e
    return policy


def load_feature_policy(config: PipelineConfig):
    """The feature policy (core/feature_policy.py), checked against the schema and against
    the pipeline's code: a feature forbidden in the model that the code names refuses the
    config, naming the feature and where it is used. None where the config names no policy.

    Raises:
      ConfigError: naming the policy file, the feature and the file and line that uses it.
    """
    from core import feature_policy

    if config.feature_policy is None:
        return None
    try:
        policy = feature_policy.load(config.feature_policy)
        feature_policy.check_features(policy, schema_features(config.schema_path))
    except feature_policy.PolicyError as e:
        raise ConfigError(f"feature_policy: {e}") from e
    # A slice's name is a feature value, printed in every report: no identifying feature.
    identifying = {f for f, r in policy.rules.items() if r.pii in ("pseudonymous", "personal")}
    sliced = [f for f in (*config.slice_features, *config.fairness_settings.slices) if f in identifying]
    if sliced:
        raise ConfigError(f"feature_policy: {', '.join(sorted(set(sliced)))} ({policy.rules[sliced[0]].pii}) cannot be"
                          " a slice or a fairness group: each slice is named by a value, and reports print it")
    check_not_ingested(config, policy.not_ingested)
    if policy.forbidden:
        uses = forbidden_uses(config, policy.forbidden)
        if uses:
            feature, places = next(iter(uses.items()))
            raise ConfigError(
                f"feature_policy: feature {feature!r} is forbidden in the model ({policy.forbidden[feature]}) but the"
                f" pipeline's code uses it: {', '.join(places)}"
                + (f"; also forbidden and used: {', '.join(list(uses)[1:])}" if len(uses) > 1 else ""))
    return policy


def check_not_ingested(config: PipelineConfig, not_ingested: list[str]) -> None:
    """A feature the pipeline never stores (`ingest: drop`) can be no slice, fairness group or
    span-consistency feature (each reads it from the examples), and is left out by
    CsvExampleGen and ParquetExampleGen only (TFRecords are ingested as they are).

    Raises:
      ConfigError: naming the feature and the key that needs it.
    """
    if not not_ingested:
        return
    consistency = config.consistency_settings
    needed = {"slice_features": config.slice_features, "fairness.slices": config.fairness_settings.slices,
              "span_consistency": consistency.features if consistency.enabled else ()}
    for key, features in needed.items():
        hit = sorted(set(features) & set(not_ingested))
        if hit:
            raise ConfigError(f"feature_policy: {', '.join(hit)} is not ingested (ingest: drop) but {key} reads it"
                              f" from the examples: leave it out of {key} or set ingest: keep")
    if config.example_format not in ("csv", "parquet"):
        raise ConfigError(f"feature_policy: ingest: drop ({', '.join(not_ingested)}) is applied when CSV or Parquet is"
                          f" ingested; this pipeline reads {config.example_format} examples: leave the features"
                          " out upstream, or set ingest: keep")


def _code_files(config: PipelineConfig) -> list[str]:
    """The Python files of the packages holding the pipeline's code (preprocessing_fn,
    run_fn, label_fn): the pipeline's own package (features.py, preprocessing.py, model.py)."""
    folders = []
    for dotted in (config.preprocessing_fn, config.run_fn, config.label_fn):
        if not dotted:
            continue
        try:
            spec = importlib.util.find_spec(dotted.rsplit(".", 1)[0])
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and os.path.dirname(spec.origin) not in folders:
            folders.append(os.path.dirname(spec.origin))
    return sorted(os.path.join(d, n) for d in folders for n in os.listdir(d) if n.endswith(".py"))


def forbidden_uses(config: PipelineConfig, forbidden: Mapping[str, str]) -> dict[str, list[str]]:
    """Where the pipeline's code names each forbidden feature: the string literals (not
    docstrings) of its package's files equal to the feature's name, as `file:line`."""
    import ast

    found: dict[str, list[str]] = {}
    for path in _code_files(config):
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
        except (OSError, SyntaxError, UnicodeDecodeError) as e:
            raise ConfigError(f"feature_policy: cannot read the pipeline's code {path} to check it: {e}") from e
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in forbidden
                    and id(node) not in docstrings):
                found.setdefault(node.value, []).append(f"{os.path.relpath(path)}:{node.lineno}")
    return found


def schema_features(schema_path: str) -> list[str]:
    """Feature names of the curated schema (tensorflow_metadata's proto: no TensorFlow)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    try:
        with open(schema_path, encoding="utf-8") as f:
            schema = text_format.Parse(f.read(), schema_pb2.Schema())
    except (OSError, text_format.ParseError) as e:
        raise ConfigError(f"schema_path: cannot read {schema_path}: {e}") from e
    return [f.name for f in schema.feature]
