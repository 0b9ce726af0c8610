"""The pipeline config's schema: `PipelineConfig`, its top-level keys and what derives from them.

Each key is a field with its type, default and a comment (docs/reference/config.md is
generated from them). A settings block (`trainer:`, `rollout:`, ...) is a plain mapping
here and is parsed on demand by `PipelineConfig.block(name)` into its settings class
(pipelines/config/blocks.py); validation parses every block once at load.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal

from components.data_gate.consistency import SpanConsistency
from components.evaluator.fairness import FairnessSettings
from components.evaluator.new_span import NewSpanSettings
from components.evaluator.staleness import StalenessSettings
from components.example_gen.settings import IngestSettings
from components.serving_check.performance import PerformanceSettings
from components.serving_skew.settings import SkewSettings
from components.statistics_gen.settings import StatisticsSettings
from components.tflite_export.settings import TFLiteSettings
from core import layout, nodes, project, tasks
from core import metadata as metadata_lib
from core.errors import BadInput
from core.settings import SettingsError
from governance.model_card import ModelCardSettings
from governance.scorecard import ScorecardSettings
from pipelines import beam as beam_lib
from pipelines.analyzer_cache import TransformSettings
from pipelines.config.blocks import BLOCKS
from rollout.settings import RolloutSettings
from serving.repository.signing import SigningSettings
from trainer_toolkit.importance import ImportanceSettings
from trainer_toolkit.settings import SimpleBaselineSettings, TrainerSettings
from trainer_toolkit.tuning import TuningSettings

ConfidenceMethod = Literal["jackknife", "bootstrap"]
ExampleFormat = Literal["csv", "parquet", "tfrecord"]
Task = Literal[tasks.BINARY, tasks.MULTICLASS, tasks.REGRESSION]
# The ExampleGen (and so its node id) that ingests each format.
EXAMPLE_GEN_IDS = {"csv": nodes.CSV_EXAMPLE_GEN, "parquet": nodes.PARQUET_EXAMPLE_GEN, "tfrecord": nodes.IMPORT_EXAMPLE_GEN}
# The project's packaging (a dependency for Beam workers outside this process).
PROJECT_SETUP_FILE = project.SETUP_FILE
# With no train_epochs, train_examples or train_steps.
DEFAULT_TRAIN_EPOCHS = 10


class ConfigError(BadInput):
    """A config value is missing, of the wrong type or out of range; names the field."""


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything a pipeline run needs; plain values only (protos are built in the factory).

    Relative paths are resolved against `base_dir` (the config file's folder) at load time.
    """

    # The pipeline's name: its MLMD context, pipeline root and DAG id (`<name>_retrain`).
    pipeline_name: str
    # The served model's name (TF Serving's model name, `<serving base>/<model_name>`).
    model_name: str
    # The folder of monthly spans (`span-YYYYMM/`), relative to the config file.
    data_root: str
    # The curated TFDV schema (schemas/), relative to the config file.
    schema_path: str
    # Transform's preprocessing function, `module.function`.
    preprocessing_fn: str
    # The Trainer's run function (tfx.v1.components.FnArgs), `module.function`.
    run_fn: str
    # The raw feature (or Transform output) the model predicts.
    label_key: str
    # Where runs write (metadata, pipeline root, run folders, serving, logs); relative to where the
    # command runs.
    workdir: str = "work"
    # csv: span-YYYYMM/*.csv; parquet: span-YYYYMM/*.parquet (column types as the set-up guide
    # says); tfrecord: span-YYYYMM/*.tfrecord.gz of serialized tf.Examples.
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
    # The feature policy (core/feature_policy.py; beside the schema): per feature its pii
    # class, whether a model may use it (a forbidden one named by the pipeline's code refuses
    # the config) and what request logs keep of it (keep, hash, drop). None: no policy, and
    # request logs keep every feature, said so in every report.
    feature_policy: str | None = None
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
    # A simpler model is not better (trainer_toolkit/simple_baseline.py): a linear model on
    # the same transformed features, fitted beside the candidate and scored paired with it on
    # the eval examples TFMA judged; a candidate significantly worse than it is refused. {enabled, reason, require,
    # min_lift, significance_level, learning_rate, max_steps, hash_bins}.
    simple_baseline: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How stale the served model is (components/evaluator/staleness.py): its quality on the
    # new span against the spans it trained on, and its age; a drop past max_drop or an age
    # past max_age_spans raises a `stale` alert. {enabled, max_drop, max_age_spans, min_examples}.
    staleness: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How long request logs and feedback files are kept (core/retention.py): older ones are
    # deleted by the server and the rollout's decision task, each deletion logged. {max_age_days}.
    retention: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Quality across groups (components/evaluator/fairness.py): per slice of each feature in
    # `slices`, Fairness Indicators' rates (binary) or the key metric, and the gap to the
    # overall value; a gap significantly beyond max_gap refuses the candidate, naming the
    # slice. {slices, max_gap, threshold, min_slice_examples, significance_level, enabled}.
    fairness: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Every feature earns its place (trainer_toolkit/importance.py): each model input's
    # permutation importance with an interval on a seeded sample of the eval split, and the
    # bytes its raw feature adds per example; inputs whose interval includes 0 are flagged.
    # {enabled, max_examples, repeats, seed, significance_level}.
    importance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Computing performance has not regressed (components/serving_check/performance.py): the
    # serving check serves the baseline beside the candidate and compares latency p50/p99,
    # SavedModel size and training examples/s; past a limit a figure in `refuse` refuses the
    # candidate, the others warn. {enabled, max_increase, max_decrease, refuse, min_latency_rise_ms}.
    performance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Tuning (trainer_toolkit/tuning.py, components/tuner): TFX's Tuner searches the model's
    # SEARCH_SPACE (its hparams.py) on a schedule or on demand (`retrain tune`); later
    # Trainers use the best values. {enabled, every_spans, force, max_trials, trial_steps, seed}.
    tuning: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The Tuner's entry point (dotted path; default: run_fn's module's `tuner_fn`).
    tuner_fn: str | None = None
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
    # The ML Test Score's own thresholds (governance/scorecard.py, ScorecardSettings):
    # {max_feature_bytes (Data 3's budget; none: that test scores 0), min_versions and
    # confidence (Model 2's correlation), privacy_scan (Data 5)}.
    scorecard: Mapping[str, Any] = dataclasses.field(default_factory=dict)
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
    # How Transform analyzes the window (pipelines/analyzer_cache.py): tf.Transform's analyzer
    # cache used (true), not (false), or auto (used from analyzer_cache_from_mb of window input).
    transform: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How StatisticsGen computes a span's statistics (components/statistics_gen): engine
    # in-memory (TFDV in the executor's process), beam (TFX's executor) or auto (in memory
    # below in_memory_below_mb of span input where the node would run on Beam's DirectRunner).
    statistics: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # TFX's execution cache: a node whose inputs and settings are unchanged reuses its outputs.
    enable_cache: bool = True
    # ML Metadata's store (core/metadata.py): "sqlite" (<workdir>/metadata/<pipeline>.sqlite)
    # or mysql://user@127.0.0.1:3306/database. RETRAIN_METADATA_URL wins; the password comes
    # only from RETRAIN_METADATA_PASSWORD or the Airflow connection `retrain_metadata`.
    metadata: str = "sqlite"
    # How Airflow runs it (core/airflow_settings.py, AirflowSettings): schedule (data arrival or the calendar),
    # run deadline, and concurrency when the store takes concurrent writers (not SQLite).
    airflow: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # Who is told about gate stops, refused candidates, failures and missed deadlines.
    alerts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # How the first run of a fresh store gets the earlier spans of its window.
    backfill_window: bool = True

    def block(self, name: str):
        """The settings block `name` (a key of pipelines/config/blocks.py's BLOCKS), parsed by
        the shared loader (core/settings.py); its errors as ConfigError naming the key."""
        try:
            return BLOCKS[name].from_dict(getattr(self, name), name)
        except SettingsError as e:
            raise ConfigError(str(e)) from None

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

    @property
    def consistency_settings(self) -> SpanConsistency:
        return self.block("span_consistency")

    @property
    def new_span_settings(self) -> NewSpanSettings:
        return self.block("new_span")

    @property
    def staleness_settings(self) -> StalenessSettings:
        return self.block("staleness")

    @property
    def retention_settings(self):
        return self.block("retention")

    @property
    def fairness_settings(self) -> FairnessSettings:
        return self.block("fairness")

    @property
    def importance_settings(self) -> ImportanceSettings:
        return self.block("importance")

    @property
    def performance_settings(self) -> PerformanceSettings:
        return self.block("performance")

    @property
    def tuning_settings(self) -> TuningSettings:
        return self.block("tuning")

    @property
    def feature_policy_settings(self):
        """The feature policy (core/feature_policy.py), or None where the config names none."""
        from core import feature_policy

        if self.feature_policy is None:
            return None
        try:
            return feature_policy.load(self.feature_policy)
        except feature_policy.PolicyError as e:
            raise ConfigError(f"feature_policy: {e}") from e

    @property
    def not_ingested(self) -> list[str]:
        """The features the pipeline never stores (the feature policy's `ingest: drop`)."""
        policy = self.feature_policy_settings
        return policy.not_ingested if policy is not None else []

    @property
    def simple_baseline_settings(self) -> SimpleBaselineSettings:
        return self.block("simple_baseline")

    @property
    def rollout_settings(self) -> RolloutSettings:
        settings = self.block("rollout")
        try:
            settings.metric_for(self.task)
        except SettingsError as e:
            raise ConfigError(str(e)) from None
        return settings

    @property
    def skew_settings(self) -> SkewSettings:
        return self.block("serving_skew")

    @property
    def trainer_settings(self) -> TrainerSettings:
        return self.block("trainer")

    @property
    def signing_settings(self) -> SigningSettings:
        return self.block("signing")

    @property
    def signing_enabled(self) -> bool:
        return self.signing_settings.enabled

    @property
    def signing_key(self) -> str | None:
        """The configured private key path (relative to the config file at load), or None."""
        return self.signing_settings.key or None

    @property
    def tflite_settings(self) -> TFLiteSettings | None:
        """The TFLite export's settings, or None where it is off."""
        settings = self.block("tflite")
        return settings if settings.enabled else None

    @property
    def model_card_settings(self) -> ModelCardSettings:
        return self.block("model_card")

    @property
    def scorecard_settings(self) -> ScorecardSettings:
        return self.block("scorecard")

    @property
    def example_gen_id(self) -> str:
        return EXAMPLE_GEN_IDS[self.example_format]

    @property
    def trainer_backup_root(self) -> str:
        """Trainer checkpoints for BackupAndRestore: outlive a killed Trainer's execution."""
        return os.path.join(self.pipeline_root, nodes.TRAINER, "backup")

    @property
    def warm_start(self) -> bool:
        return self.trainer_settings.warm_start

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
        return beam_lib.BeamSettings.load(self.beam, beam_lib.BEAM_NODES)

    @property
    def ingest_settings(self) -> IngestSettings:
        return self.block("ingestion")

    @property
    def transform_settings(self) -> TransformSettings:
        return self.block("transform")

    @property
    def statistics_settings(self) -> StatisticsSettings:
        return self.block("statistics")
