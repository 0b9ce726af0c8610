"""The typed pipeline config: parsed and validated once, from YAML and CLI overrides.

Every runner (the local `retrain run`, Airflow) builds the pipeline from one of these
via `pipelines.factory.create_pipeline(config)`. Errors name the offending field.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import typing
from collections.abc import Mapping
from typing import Any, Literal

import yaml

from components.data_gate.consistency import SpanConsistency
from components.data_gate.consistency import check_features as consistency_check_features
from components.evaluator.new_span import NewSpanSettings
from components.example_gen.settings import IngestSettings
from components.serving_skew.component import SkewSettings
from core import deployment, layout, nodes, tasks
from core import metadata as metadata_lib
from core import settings as settings_lib
from core.errors import BadInput
from core.settings import SettingsError
from governance import model_card
from pipelines import beam as beam_lib
from rollout.settings import RolloutSettings
from trainer_toolkit.settings import TrainerSettings

ConfidenceMethod = Literal["jackknife", "bootstrap"]
ExampleFormat = Literal["csv", "tfrecord"]
Task = Literal[tasks.BINARY, tasks.MULTICLASS, tasks.REGRESSION]
# The ExampleGen (and so its node id) that ingests each format.
EXAMPLE_GEN_IDS = {"csv": nodes.CSV_EXAMPLE_GEN, "tfrecord": nodes.IMPORT_EXAMPLE_GEN}
# The project's packaging (a dependency for Beam workers outside this process).
PROJECT_SETUP_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


class ConfigError(BadInput):
    """A config value is missing, of the wrong type or out of range; names the field."""


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything a pipeline run needs; plain values only (protos are built in the factory).

    Relative paths are resolved against `base_dir` (the config file's folder) at load time.
    """

    pipeline_name: str
    model_name: str
    data_root: str
    schema_path: str
    preprocessing_fn: str
    run_fn: str
    label_key: str
    workdir: str = "work"
    # csv: span-YYYYMM/*.csv; tfrecord: span-YYYYMM/*.tfrecord.gz of serialized tf.Examples.
    example_format: ExampleFormat = "csv"
    # Chooses the head's metrics (core/tasks.py): AUC + binary accuracy, sparse categorical
    # accuracy, or MSE + MAE + MAPE for regression.
    task: Task = "binary_classification"
    # The span this run ingests (YYYYMM); None means the latest span in data_root.
    span: int | None = None
    # How many monthly spans, ending at `span`, the model trains on.
    window_spans: int = 6
    # How long the Trainer trains: `train_epochs` passes over the window's training split,
    # or `train_examples` examples, or `train_steps` steps; one of them (none: 10 epochs).
    # Epochs stop at `max_train_examples` (0: no ceiling), so a month of millions of rows
    # trains on that many examples; the trainer toolkit grows the batch for such runs.
    train_epochs: float | None = None
    train_examples: int | None = None
    train_steps: int | None = None
    max_train_examples: int = 10_000_000
    eval_steps: int = 100
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Trainer toolkit settings (trainer_toolkit/settings.py): strategy, precision,
    # input pipeline, backup, warm start, profiling. Empty = choose for the hardware.
    trainer: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    slice_features: tuple[str, ...] = ()
    # The label as the pipeline defines it: `module.function(inputs)` of the raw inputs
    # Transform parses, one label per row, plain TensorFlow. preprocessing_fn calls it for
    # the label, and the data gate calls it on each new span to check the label's health.
    # None: `label_fn` beside preprocessing_fn (in its module).
    label_fn: str | None = None
    # Span consistency (components/data_gate/consistency.py): which feature is the event
    # time (unit, time zone), how far outside its span an event may lie, and which features
    # derive from it ({feature: hour | weekday_sun1 | month | ...}). Empty: not checked.
    span_consistency: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The data gate's calibrated limits (`retrain schema calibrate` writes it; beside the
    # schema). None: the gate's strict defaults, labelled as such in every report.
    gate_policy: str | None = None
    # Evaluator thresholds: absolute floors, and the largest drop tolerated vs the baseline.
    min_auc: float = 0.7
    min_accuracy: float = 0.6
    max_auc_decrease: float = 0.02
    # Multiclass: the largest accuracy drop tolerated vs the baseline.
    max_accuracy_decrease: float = 0.02
    # Regression: ceilings of the mean squared, absolute and absolute-percentage errors
    # (None: no ceiling; `retrain new` sets MSE/MAE to those of predicting the mean/median,
    # which a model must beat), and the largest relative rise of MSE and MAE vs the baseline
    # (0.1 = 10%), judged by its significance as drops are.
    max_mse: float | None = None
    max_mae: float | None = None
    max_mape: float | None = None
    max_mse_increase: float = 0.1
    max_mae_increase: float = 0.1
    # A candidate is refused on a drop vs the baseline only when the drop beyond the
    # tolerance is significant: the one-sided (1 - significance_level) upper confidence
    # bound of (candidate - baseline) lies below -max_*_decrease. TFMA computes the
    # intervals (jackknife or Poisson bootstrap) on the same eval examples for both models.
    significance_level: float = 0.05
    # None: jackknife for classification, Poisson bootstrap for regression (TFMA 0.47's
    # jackknife misstates regression errors: an eval MSE of 4,516 came out as 4,151 to 7,849
    # depending on the metrics beside it; the bootstrap gives 4,516).
    confidence_method: ConfidenceMethod | None = None
    # Fewer eval examples than this: the candidate is not judged (and not blessed).
    min_eval_examples: int = 50
    # More eval examples than this: both models are scored on a seeded sample of about this
    # many (the same examples in every run over the same data; TFMA computes the intervals
    # on it). TFMA scores ~1,000 examples/s on one core. 0: every eval example.
    max_eval_examples: int = 25000
    # The new span alone (components/evaluator/new_span.py): both models' key metric on the
    # newest span with intervals; a collapse of the baseline's there refuses the candidate as
    # bad data. {enabled, min_examples, significance_level, margin, min_drop}.
    new_span: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # After the push (rollout/settings.py): `direct`, or `canary` beside the stable version
    # until delayed labels decide (promote or roll back). {mode, canary_share, metric, ...}.
    rollout: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Pre-push serving check (ServingCheck): requests sent, p99 latency budget.
    enable_serving_check: bool = True
    serving_check_requests: int = 20
    serving_max_latency_ms: float = 500.0
    # A reviewer approves or rejects each candidate before it is pushed (ApprovalGate).
    require_approval: bool = False
    # Pushed versions kept under the serving dir (older ones removed unless pinned/labelled).
    keep_versions: int = 5
    # Share of the served model's requests `retrain serve` logs (TF Serving's LoggingConfig,
    # PredictionLog TFRecords under <workdir>/request_logs/<model>/); 0 turns logging off.
    request_log_sampling: float = 0.1
    # The serving skew check (ServingSkew): the logged requests of the model being served vs
    # the data it was trained on, with the data gate's calibrated limits. action: "block"
    # stops the run before training, "warn" reports only, "off" skips the node's check.
    serving_skew: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Signed versions (serving/repository/signing.py): the Pusher signs every pushed version and the
    # serving check verifies before it loads. {enabled: true, key: PEM path}; the key may
    # come from $RETRAIN_SIGNING_KEY instead (it wins), else a demo key is generated under
    # <workdir>/keys/ on first use.
    signing: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The model card of every pushed version (governance/model_card.py): overview, owners,
    # users, use_cases, limitations, tradeoffs, ethical_considerations, references.
    model_card: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # On-device exports of each pushed version (components/tflite_export/), opt-in:
    # {enabled, signature, input_key, label_key, raw_input_key, variants, max_accuracy_drop,
    # representative_examples}. Needs a signature of TFLite builtin ops (digits: `pixels`).
    tflite: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How the Beam nodes run (pipelines/beam.py): a runner profile (auto picks Beam's
    # in-memory DirectRunner for small inputs, its multi-processing one from
    # beam.multiprocess_from_mb), per node if asked, with the profile's options.
    beam: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How CsvExampleGen writes examples (components/example_gen): engine fast (every core,
    # no Beam; the same examples and splits), beam (TFX's executor) or auto.
    ingestion: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    enable_cache: bool = True
    # ML Metadata's store (core/metadata.py): "sqlite" (<workdir>/metadata/<pipeline>.sqlite)
    # or mysql://user@127.0.0.1:3306/database. RETRAIN_METADATA_URL wins; the password comes
    # only from RETRAIN_METADATA_PASSWORD or the Airflow connection `retrain_metadata`.
    metadata: str = "sqlite"
    # How Airflow runs it (core/deployment.py): schedule (data arrival or the calendar),
    # run deadline, and concurrency when the store takes concurrent writers (not SQLite).
    airflow: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Who is told about gate stops, refused candidates, failures and missed deadlines.
    alerts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How the first run of a fresh store gets the earlier spans of its window.
    backfill_window: bool = True

    @property
    def pipeline_root(self) -> str:
        return layout.pipeline_root(self.workdir, self.pipeline_name)

    @property
    def metadata_store(self) -> metadata_lib.Store:
        """Where this process reads and writes ML Metadata (the environment may override)."""
        return metadata_lib.resolve(self.metadata, layout.metadata_path(self.workdir, self.pipeline_name))

    @property
    def interval_method(self) -> str:
        """How TFMA computes confidence intervals (see `confidence_method`)."""
        if self.confidence_method:
            return self.confidence_method
        return "bootstrap" if self.task == tasks.REGRESSION else "jackknife"

    @property
    def label_function(self) -> str:
        """The dotted path of the label function (`label_fn`, or the one beside preprocessing_fn)."""
        return self.label_fn or self.preprocessing_fn.rsplit(".", 1)[0] + ".label_fn"

    @property
    def label_kind(self) -> str:
        """How the gate checks the label: class shares, or a regression target's distribution."""
        return "numeric" if self.task == tasks.REGRESSION else "classes"

    def _block(self, cls, name: str):
        """A settings block, parsed by the shared loader; its errors as ConfigError."""
        try:
            return cls.from_dict(getattr(self, name), name)
        except SettingsError as e:
            raise ConfigError(str(e)) from None

    @property
    def consistency_settings(self) -> SpanConsistency:
        return self._block(SpanConsistency, "span_consistency")

    @property
    def new_span_settings(self) -> NewSpanSettings:
        return self._block(NewSpanSettings, "new_span")

    @property
    def rollout_settings(self) -> RolloutSettings:
        settings = self._block(RolloutSettings, "rollout")
        try:
            settings.metric_for(self.task)
        except SettingsError as e:
            raise ConfigError(str(e)) from None
        return settings

    @property
    def skew_settings(self) -> SkewSettings:
        return SkewSettings.from_dict(self.serving_skew)

    @property
    def signing_enabled(self) -> bool:
        return bool(self.signing.get("enabled", True))

    @property
    def signing_key(self) -> str | None:
        """The configured private key path (relative to the config file at load), or None."""
        return self.signing.get("key") or None

    @property
    def tflite_settings(self) -> dict | None:
        """The TFLite export's settings with defaults, or None where it is off."""
        if not self.tflite.get("enabled", False):
            return None
        return {"variants": ["float", "dynamic_range", "int8"], "max_accuracy_drop": 0.02,
                "representative_examples": 200, "raw_input_key": "", **self.tflite}

    @property
    def example_gen_id(self) -> str:
        return EXAMPLE_GEN_IDS[self.example_format]

    @property
    def trainer_backup_root(self) -> str:
        """Trainer checkpoints for BackupAndRestore: outlive a killed Trainer's execution."""
        return os.path.join(self.pipeline_root, nodes.TRAINER, "backup")

    @property
    def warm_start(self) -> bool:
        return bool(self.trainer.get("warm_start", False))

    @property
    def serving_model_dir(self) -> str:
        """`<serving base>/<model name>`: the folder TF Serving's model base_path points at."""
        return os.path.join(layout.serving_root(self.workdir), self.model_name)

    @property
    def training_budget(self) -> dict:
        """The Trainer's budget (trainer_toolkit.settings.TrainingBudget's fields)."""
        given = {k: getattr(self, f"train_{k}") for k in ("epochs", "examples", "steps")
                 if getattr(self, f"train_{k}") is not None}
        return {**(given or {"epochs": DEFAULT_TRAIN_EPOCHS}), "max_examples": self.max_train_examples}

    @property
    def beam_settings(self) -> beam_lib.BeamSettings:
        return beam_lib.BeamSettings.from_dict(self.beam, beam_lib.BEAM_NODES)

    @property
    def ingest_settings(self) -> IngestSettings:
        return IngestSettings.from_dict(self.ingestion)


# With no train_epochs, train_examples or train_steps.
DEFAULT_TRAIN_EPOCHS = 10
# Fields of earlier releases, and what says the same now.
_REPLACED = {
    "beam_mode": "beam.profile (in_memory is direct, multi_processing is direct-multiprocess; pipelines/beam.py)",
    "beam_workers": "beam.workers",
}
# Relative to the config file. `workdir` stays relative to where the command runs.
_PATH_FIELDS = ("data_root", "schema_path", "gate_policy")


def _check_type(name: str, value: Any, hint: Any) -> Any:
    try:
        return settings_lib.check_type(name, value, hint)
    except settings_lib.SettingsError as e:
        raise ConfigError(str(e)) from None


def from_dict(values: Mapping[str, Any], base_dir: str = ".") -> PipelineConfig:
    """Builds and validates a config.

    Raises:
      ConfigError: unknown or missing field, wrong type, or a value out of range.
    """
    hints = typing.get_type_hints(PipelineConfig)
    fields = {f.name: f for f in dataclasses.fields(PipelineConfig)}
    for old, new in _REPLACED.items():
        if old in values:
            raise ConfigError(f"{old}: replaced by {new}")
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
    missing = sorted(
        n
        for n, f in fields.items()
        if n not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ConfigError(f"missing config field(s): {', '.join(missing)}")
    checked = {n: _check_type(n, v, hints[n]) for n, v in values.items()}
    for name in _PATH_FIELDS:
        if checked.get(name) is not None and not os.path.isabs(checked[name]):
            checked[name] = os.path.normpath(os.path.join(base_dir, checked[name]))
    key = (checked.get("signing") or {}).get("key")
    if isinstance(key, str) and not os.path.isabs(key):
        checked["signing"] = {**checked["signing"], "key": os.path.normpath(os.path.join(base_dir, key))}
    config = PipelineConfig(**checked)
    validate(config)
    return config


def validate(config: PipelineConfig) -> None:
    """Range checks that types alone cannot express.

    Raises:
      ConfigError: naming the field.
    """
    for name in ("window_spans", "eval_steps", "serving_check_requests", "keep_versions"):
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
    for name in ("min_auc", "min_accuracy"):
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ConfigError(f"{name}: must be within [0, 1], got {getattr(config, name)}")
    for name in ("max_auc_decrease", "max_accuracy_decrease", "max_mse_increase", "max_mae_increase"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name}: must be >= 0, got {getattr(config, name)}")
    for name in ("max_mse", "max_mae", "max_mape"):
        if getattr(config, name) is not None and getattr(config, name) <= 0:
            raise ConfigError(f"{name}: must be > 0 (or left out for no ceiling), got {getattr(config, name)}")
    if config.task == tasks.REGRESSION and config.confidence_method == "jackknife":
        raise ConfigError("confidence_method: jackknife misstates regression errors in TFMA 0.47"
                          " (pipelines/config.py); use bootstrap or leave it out")
    if not 0.0 < config.significance_level < 0.5:
        raise ConfigError(f"significance_level: must be within (0, 0.5), got {config.significance_level}")
    if config.min_eval_examples < 1:
        raise ConfigError(f"min_eval_examples: must be at least 1, got {config.min_eval_examples}")
    if config.max_eval_examples and config.max_eval_examples < config.min_eval_examples:
        raise ConfigError(f"max_eval_examples: must be 0 (all) or at least min_eval_examples "
                          f"({config.min_eval_examples}), got {config.max_eval_examples}")
    try:
        config.beam_settings  # noqa: B018 - validates the block
    except beam_lib.BeamConfigError as e:
        raise ConfigError(str(e)) from e
    try:
        config.ingest_settings  # noqa: B018 - validates the block
    except ValueError as e:
        raise ConfigError(f"ingestion: {e}") from e
    if not 0.0 <= config.request_log_sampling <= 1.0:
        raise ConfigError(f"request_log_sampling: must be within [0, 1], got {config.request_log_sampling}")
    try:
        config.skew_settings  # noqa: B018 - validates the block
    except (TypeError, ValueError) as e:
        raise ConfigError(f"serving_skew: {e}") from e
    try:
        model_card.check_settings(config.model_card)
    except model_card.ModelCardError as e:
        raise ConfigError(f"model_card: {e}") from e
    _check_tflite(config.tflite)
    unknown = sorted(set(config.signing) - {"enabled", "key"})
    if unknown:
        raise ConfigError(f"signing: unknown field(s) {', '.join(unknown)} (known: enabled, key)")
    if not isinstance(config.signing.get("enabled", True), bool):
        raise ConfigError(f"signing.enabled: expected true or false, got {config.signing['enabled']!r}")
    if config.signing.get("key") is not None and not isinstance(config.signing["key"], str):
        raise ConfigError(f"signing.key: expected a path, got {config.signing['key']!r}")
    try:
        TrainerSettings.from_custom_config({"trainer": config.trainer})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"trainer: {e}") from e
    for name in ("preprocessing_fn", "run_fn", "label_fn"):
        if getattr(config, name) is not None and "." not in getattr(config, name):
            raise ConfigError(f"{name}: expected a dotted path module.function")
    try:
        metadata_lib.check_config_value(config.metadata)
        config.metadata_store  # noqa: B018 - parses the URL (and RETRAIN_METADATA_URL) now
    except metadata_lib.MetadataConfigError as e:
        raise ConfigError(f"metadata: {e}") from e
    check_deployment(config)
    check_hparams(config)
    policy = load_gate_policy(config)
    check_span_consistency(config, policy)
    config.new_span_settings  # noqa: B018 - validates the block
    config.rollout_settings  # noqa: B018 - validates the block


def check_span_consistency(config: PipelineConfig, policy) -> None:
    """The `span_consistency:` block: its settings, and features the schema has.

    Raises:
      ConfigError: naming the key or the feature.
    """
    settings = config.consistency_settings
    if not settings.enabled:
        return
    try:
        consistency_check_features(settings, _schema_features(config.schema_path))
    except SettingsError as e:
        raise ConfigError(f"span_consistency: {e}") from None


_TFLITE_KEYS = {"enabled", "signature", "input_key", "label_key", "raw_input_key", "variants", "max_accuracy_drop",
                "representative_examples"}


def _check_tflite(block: Mapping[str, Any]) -> None:
    """Raises ConfigError naming the `tflite:` key that is wrong."""
    unknown = sorted(set(block) - _TFLITE_KEYS)
    if unknown:
        raise ConfigError(f"tflite: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_TFLITE_KEYS))})")
    if not block.get("enabled", False):
        return
    for key in ("signature", "input_key", "label_key"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise ConfigError(f"tflite.{key}: needed when tflite is enabled (the TFLite-runnable signature, its "
                              "input as transform_features names it, and the label)")
    variants = block.get("variants", ["float"])
    known = ("float", "dynamic_range", "int8")
    if not isinstance(variants, list) or not variants or set(variants) - set(known):
        raise ConfigError(f"tflite.variants: expected a non-empty list of {', '.join(known)}, got {variants!r}")
    drop = block.get("max_accuracy_drop", 0.02)
    # Negative: a variant must beat the SavedModel by that much, i.e. nothing is published.
    if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not -1.0 <= drop <= 1.0:
        raise ConfigError(f"tflite.max_accuracy_drop: must be within [-1, 1], got {drop!r}")
    n = block.get("representative_examples", 200)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"tflite.representative_examples: must be an integer >= 1, got {n!r}")


def check_deployment(config: PipelineConfig) -> None:
    """The `airflow:` and `alerts:` blocks (core/deployment.py): schedule, arrivals,
    deadlines, execution, concurrency; recipients and notifier.

    Raises:
      ConfigError: naming the key.
    """
    try:
        deployment.check_airflow(config.airflow)
        deployment.check_alerts(config.alerts)
    except deployment.DeploymentError as e:
        raise ConfigError(str(e)) from e


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
        raise ConfigError(f"hparams: {e}") from e


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
        gate_policy.check_features(policy, _schema_features(config.schema_path))
    except gate_policy.PolicyError as e:
        raise ConfigError(f"gate_policy: {e}") from e
    return policy


def _schema_features(schema_path: str) -> list[str]:
    """Feature names of the curated schema (tensorflow_metadata's proto: no TensorFlow)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    try:
        with open(schema_path, encoding="utf-8") as f:
            schema = text_format.Parse(f.read(), schema_pb2.Schema())
    except (OSError, text_format.ParseError) as e:
        raise ConfigError(f"schema_path: cannot read {schema_path}: {e}") from e
    return [f.name for f in schema.feature]


def load(path: str, overrides: Mapping[str, Any] | None = None) -> PipelineConfig:
    """Loads a YAML config; `overrides` (already typed values) win over the file.

    Raises:
      ConfigError: unreadable file or invalid values.
    """
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config {path} is not valid YAML: {e}") from e
    if not isinstance(values, dict):
        raise ConfigError(f"config {path} must be a mapping of field: value")
    for key, value in (overrides or {}).items():
        if value is CLEAR:
            values.pop(key, None)
        elif value is not None:
            _set_dotted(values, key, value)
    return from_dict(values, base_dir=os.path.dirname(os.path.abspath(path)))


# An override that removes a top-level key (e.g. the file's train_epochs when --train-steps is given).
CLEAR = object()


def _set_dotted(values: dict, key: str, value: Any) -> None:
    """values["a"]["b"] = value for key "a.b" (the mappings on the way are copied, not shared)."""
    *path, last = key.split(".")
    target = values
    for part in path:
        inner = target.get(part)
        if inner is None:
            inner = {}
        elif not isinstance(inner, Mapping):
            raise ConfigError(f"{key}: {part} is not a mapping in the config")
        target[part] = inner = dict(inner)
        target = inner
    target[last] = value


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (`--set beam.profile=portable`) as overrides; values read as YAML.

    Raises:
      ConfigError: an item without `=`.
    """
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. beam.profile=direct-multiprocess")
        try:
            out[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML: {e}") from e
    return out


def replace(config: PipelineConfig, **changes: Any) -> PipelineConfig:
    """`dataclasses.replace` plus validation."""
    new = dataclasses.replace(config, **changes)
    validate(new)
    return new
