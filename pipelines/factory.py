"""The one pipeline factory: `create_pipeline(config)`, shared by every runner.

Node ids are the constants of `core.nodes` (available here as `factory.nodes`), and
`NODE_STAGES` groups them into the stages orchestrators show.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os

from components.approval_gate.component import ApprovalGate
from components.atomic_pusher.component import AtomicPusher
from components.data_gate import measures as gate_measures
from components.data_gate.component import DataGate, DataGateReport
from components.evaluator import eval_config as eval_config_lib
from components.evaluator.component import Evaluator
from components.example_gen.component import CsvExampleGen, ParquetExampleGen
from components.import_schema_gen.component import ImportSchemaGen
from components.resolvers.baseline_model import LastBlessedModelStrategy
from components.resolvers.latest_hyperparameters import LatestHyperParametersStrategy
from components.resolvers.served_statistics import ServedModelStatisticsStrategy
from components.resolvers.span_window import SpanWindowStrategy
from components.resolvers.transform_cache import EarlierSpanCacheStrategy
from components.serving_check.component import ServingCheck
from components.serving_skew.component import ServingSkew
from components.statistics_gen import settings as stats_settings
from components.statistics_gen.component import StatisticsGen
from components.tflite_export.component import TFLiteExport
from components.tfx_v1 import tfx
from components.trainer.component import Trainer
from components.tuner.component import Tuner
from core import feature_policy, layout, metadata, nodes, spans, tasks
from pipelines import analyzer_cache
from pipelines import beam as beam_lib
from pipelines import config as config_lib
from pipelines.config import PROJECT_SETUP_FILE, PipelineConfig

# The stage each node belongs to: orchestrators group tasks by it (Airflow TaskGroups).
NODE_STAGES = {
    nodes.CSV_EXAMPLE_GEN: "validate_data",
    nodes.IMPORT_EXAMPLE_GEN: "validate_data",
    nodes.PARQUET_EXAMPLE_GEN: "validate_data",
    nodes.STATISTICS_GEN: "validate_data",
    nodes.SCHEMA_GEN: "validate_data",
    nodes.EXAMPLE_VALIDATOR: "validate_data",
    nodes.BASELINE_RESOLVER: "validate_data",
    nodes.DATA_GATE: "validate_data",
    nodes.SERVED_STATS_RESOLVER: "validate_data",
    nodes.SERVING_SKEW: "validate_data",
    nodes.WINDOW_RESOLVER: "train",
    nodes.TRANSFORM_CACHE_RESOLVER: "train",
    nodes.TRANSFORM: "train",
    nodes.HPARAMS_RESOLVER: "train",
    nodes.TUNER: "train",
    nodes.TRAINER: "train",
    nodes.MODEL_RESOLVER: "evaluate",
    nodes.EVALUATOR: "evaluate",
    nodes.SERVING_CHECK: "push",
    nodes.APPROVAL_GATE: "push",
    nodes.PUSHER: "push",
    nodes.TFLITE_EXPORT: "push",
}

# How far back the drift baseline may be: the newest span ingested within a year before.
_BASELINE_LOOKBACK_MONTHS = 12


def _signing_params(config: PipelineConfig) -> dict:
    """Where the Pusher and the serving check find the signing key: the configured path and
    the workdir (for $RETRAIN_SIGNING_KEY or the demo key, resolved when they run, so no
    secret is in the pipeline's properties). Empty when signing is off."""
    if not config.signing_enabled:
        return {}
    return {"signing_key": config.signing_key or "", "signing_workdir": os.path.abspath(config.workdir)}


def _approved(approval_gate):
    """The condition the push runs under when approval is required (else no condition)."""
    if approval_gate is None:
        return contextlib.nullcontext()
    return tfx.dsl.Cond(approval_gate.outputs["approval"].future()[0].custom_property("approved") == 1)


def _span_bytes(config: PipelineConfig, span: int) -> int:
    """Bytes of a span's input files (0 when the span is not there)."""
    folder = spans.span_dir(config.data_root, span)
    if not os.path.isdir(folder):
        return 0
    suffix = spans.FILE_SUFFIXES[config.example_format]
    return sum(e.stat().st_size for e in os.scandir(folder) if e.is_file() and e.name.endswith(suffix))


def _window_bytes(config: PipelineConfig) -> int:
    """Bytes of the input files of this run's training window."""
    first, last = spans.window(config.span, config.window_spans)
    return sum(_span_bytes(config, s) for s in range(first, last + 1) if 1 <= s % 100 <= 12)


def analyzer_cache_choice(config: PipelineConfig) -> analyzer_cache.CacheChoice:
    """Whether this run's Transform uses tf.Transform's analyzer cache (pipelines/analyzer_cache.py)."""
    return config.transform_settings.choose(_window_bytes(config))


def statistics_engine(config: PipelineConfig) -> stats_settings.EngineChoice:
    """How this run's StatisticsGen computes the span's statistics (components/statistics_gen)."""
    span_bytes = _span_bytes(config, config.span)
    beam = config.beam_settings.choose(nodes.STATISTICS_GEN, span_bytes, PROJECT_SETUP_FILE)
    return config.statistics_settings.choose(span_bytes, beam.profile)


def beam_choices(config: PipelineConfig) -> dict[str, beam_lib.Choice]:
    """Each Beam node's runner profile and flags for this run's span: the data a node reads
    is the span's (ExampleGen, StatisticsGen) or the training window's (Transform, Evaluator)."""
    span_bytes = _span_bytes(config, config.span)
    window_bytes = _window_bytes(config)
    reads = {config.example_gen_id: span_bytes, nodes.STATISTICS_GEN: span_bytes,
             nodes.TRANSFORM: window_bytes, nodes.EVALUATOR: window_bytes}
    settings = config.beam_settings
    choices = {node: settings.choose(node, size, PROJECT_SETUP_FILE) for node, size in reads.items()}
    # The fast ingestion engine runs no Beam (components/example_gen); the profile is what
    # TFX's executor would run on if the engine fell back to it.
    if config.example_format in ("csv", "parquet") and config.ingest_settings.engine != "beam":
        gen = choices[config.example_gen_id]
        choices[config.example_gen_id] = dataclasses.replace(
            gen, reason=f"{beam_lib.UNUSED}: the fast ingestion engine writes the examples ({gen.reason} if TFX's "
                        "executor runs instead)")
    # A small span's statistics are computed in memory by TFDV (components/statistics_gen).
    stats_engine = statistics_engine(config)
    if stats_engine.engine == "in-memory":
        stats = choices[nodes.STATISTICS_GEN]
        choices[nodes.STATISTICS_GEN] = dataclasses.replace(
            stats, reason=f"{beam_lib.UNUSED}: TFDV computes the statistics in memory ({stats_engine.reason}; "
                          f"{stats.reason} if on Beam)")
    # The Evaluator's Beam pipeline scores at most max_eval_examples (a sample of a larger
    # eval split, drawn before it in TensorFlow): that small, workers cost more than they save.
    if config.max_eval_examples and settings.for_node(nodes.EVALUATOR).profile == "auto":
        choices[nodes.EVALUATOR] = dataclasses.replace(
            settings.choose(nodes.EVALUATOR, 0, PROJECT_SETUP_FILE),
            reason=f"auto: scores at most max_eval_examples ({config.max_eval_examples:,}) examples")
    return choices


def create_pipeline(config: PipelineConfig) -> tfx.dsl.Pipeline:
    """Builds the retraining pipeline for one span, stage by stage (ingest and validate,
    train, evaluate, push), the stages orchestrators show (NODE_STAGES).

    Args:
      config: a validated config whose `span` is set (runners resolve "latest").

    Returns:
      The TFX pipeline: ingest the span, validate it, gate, transform the window of
      recent spans, train, evaluate against the last blessed model, push if blessed.

    Raises:
      ValueError: `config.span` is not set.
    """
    if config.span is None:
        raise ValueError("create_pipeline needs config.span; resolve the latest span first")
    ingest = ingest_and_validate(config)
    training = train(config, ingest)
    evaluator = evaluate(config, training)
    pushing = push(config, ingest, training, evaluator)
    components = [*ingest.components(), *training.components(), evaluator, *pushing.components()]
    # Every reader of a run (records, reports, backfill, DAG wiring) keys nodes by
    # `core.nodes`; a node whose id is not there would be invisible to them.
    # Each Beam node on the profile its data asks for (pipelines/beam.py); none at pipeline level.
    for node, choice in beam_choices(config).items():
        component = next((c for c in components if c.id == node), None)
        if component is not None and choice.args:
            component.with_beam_pipeline_args(list(choice.args))
    unknown = sorted(c.id for c in components if c.id not in NODE_STAGES)
    if unknown:
        raise ValueError(f"node ids {unknown} are not in core.nodes/NODE_STAGES")
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=components,
        enable_cache=config.enable_cache,
        # Without its password: the IR is written to the run folder; the node runner adds
        # the password from the environment (core.metadata.with_password).
        metadata_connection_config=metadata.connection_config(
            dataclasses.replace(config.metadata_store, password="")),
        beam_pipeline_args=[],
    )


def _fields(stage) -> list:
    """A stage's nodes in field order (the objects themselves: dataclasses.astuple copies)."""
    return [getattr(stage, f.name) for f in dataclasses.fields(stage)]


@dataclasses.dataclass(frozen=True)
class IngestStage:
    """The new span in, checked: ExampleGen, statistics, schema, validation, the data gate
    (and the serving skew check of the served model's traffic, unless it is off)."""

    example_gen: object
    statistics_gen: object
    schema_importer: object
    example_validator: object
    baseline_resolver: object
    data_gate: object
    served_stats_resolver: object | None
    serving_skew: object | None

    def components(self) -> list:
        return [c for c in _fields(self) if c is not None]


def ingest_and_validate(config: PipelineConfig) -> IngestStage:
    """The ingest-and-validate stage for `config.span`."""
    span = config.span

    # Ingest exactly one span, the way a scheduled run receives new data: CSV, Parquet (as
    # warehouses and lakes export months), or TFRecords of tf.Examples for data CSV cannot
    # hold (encoded images).
    # CSV and Parquet go through the fast ingestion engines by default (components/example_gen:
    # the same examples, splits and properties as the Beam path, on every core).
    if config.example_format in ("csv", "parquet"):
        # Under the gate policy's columns.new: report, a column the source added is left out
        # (the preflight let the run start; components/data_gate/columns.py).
        schema_columns = (config_lib.schema_features(config.schema_path)
                          if config_lib.load_gate_policy(config).columns_new == "report" else None)
        example_gen_class = functools.partial(CsvExampleGen if config.example_format == "csv" else ParquetExampleGen,
                                              ingest=config.ingest_settings,
                                              not_ingested=config.not_ingested, schema_columns=schema_columns)
    else:
        example_gen_class = tfx.components.ImportExampleGen
    example_gen = example_gen_class(
        input_base=config.data_root,
        input_config=tfx.proto.Input(
            splits=[
                tfx.proto.Input.Split(name="single_split", pattern=spans.span_glob(config.example_format))
            ]
        ),
        output_config=tfx.proto.Output(
            split_config=tfx.proto.SplitConfig(
                splits=[
                    tfx.proto.SplitConfig.Split(name="train", hash_buckets=3),
                    tfx.proto.SplitConfig.Split(name="eval", hash_buckets=1),
                ]
            )
        ),
        range_config=tfx.proto.RangeConfig(
            static_range=tfx.proto.StaticRange(start_span_number=span, end_span_number=span)
        ),
    )

    # Statistics of the new span: input to validation, the gate's checks and reports; with
    # percentiles, which the gate's scale and distribution measures read.
    # The calibrated limits (gate.yaml), read once: the data gate and the serving skew check apply them.
    # A feature the pipeline never stores (the feature policy's `ingest: drop`) is left out
    # of the examples (above), the imported schema and the gate's limits and domains (below).
    not_ingested = config.not_ingested
    gate_policy_json = json.dumps(config_lib.load_gate_policy(config).without(not_ingested).to_json_dict(),
                                  sort_keys=True)

    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"], stats_options=gate_measures.stats_options(),
                                   engine=statistics_engine(config).engine)

    # The curated schema is imported, never re-inferred (`retrain schema infer` bootstraps it).
    schema_importer = ImportSchemaGen(schema_file=config.schema_path, not_ingested=not_ingested)

    # Schema anomalies of the new span.
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"],
        schema=schema_importer.outputs["schema"],
    )

    # The last earlier span that passed the gate: its statistics are the drift baseline.
    baseline_resolver = tfx.dsl.Resolver(
        strategy_class=SpanWindowStrategy,
        config={
            "start_span": spans.shift_span(span, -_BASELINE_LOOKBACK_MONTHS),
            "end_span": spans.shift_span(span, -1),
            "max_spans": 1,
            "pipeline_name": config.pipeline_name,
        },
        report=tfx.dsl.Channel(
            type=DataGateReport, producer_component_id=nodes.DATA_GATE, output_key="report"
        ),
    ).with_id(nodes.BASELINE_RESOLVER)

    # Stops the run before Transform/Trainer on schema anomalies, incompleteness, a volume
    # change, drift of any watched feature beyond its calibrated limit (gate.yaml), or, over
    # every row: values outside a feature's domain, event times outside the span or derived
    # fields that disagree with them, and a label (as label_fn computes it) gone wrong.
    data_gate = DataGate(
        examples=example_gen.outputs["examples"],
        statistics=statistics_gen.outputs["statistics"],
        schema=schema_importer.outputs["schema"],
        anomalies=example_validator.outputs["anomalies"],
        baseline=baseline_resolver.outputs["report"],
        policy=gate_policy_json,
        span_consistency=json.dumps(config.consistency_settings.to_dict(), sort_keys=True)
        if config.consistency_settings.enabled else "",
        label=json.dumps({"fn": config.label_function, "name": config.label_key, "kind": config.label_kind,
                          "explicit": config.label_fn is not None}, sort_keys=True),
    )

    # The served model's traffic (its sampled request logs) vs the data it was trained on,
    # with the gate's limits; with `serving_skew.action: block`, a skewed feature stops the
    # run before training, as the gate does.
    skew = config.skew_settings
    served_stats_resolver = serving_skew = None
    if skew.action != "off":
        served_stats_resolver = tfx.dsl.Resolver(
            strategy_class=ServedModelStatisticsStrategy,
            config={"serving_model_dir": config.serving_model_dir},
            statistics=tfx.dsl.Channel(
                type=tfx.types.standard_artifacts.ExampleStatistics,
                producer_component_id=nodes.STATISTICS_GEN,
                output_key="statistics",
            ),
            examples=tfx.dsl.Channel(
                type=tfx.types.standard_artifacts.Examples,
                producer_component_id=example_gen.id,
                output_key="examples",
            ),
        ).with_id(nodes.SERVED_STATS_RESOLVER)
        serving_skew = ServingSkew(
            schema=schema_importer.outputs["schema"],
            training_statistics=served_stats_resolver.outputs["statistics"],
            training_examples=served_stats_resolver.outputs["examples"],
            serving_model_dir=config.serving_model_dir,
            request_log_prefix=layout.request_log_prefix(config.workdir, config.model_name),
            policy=gate_policy_json,
            action=skew.action,
            min_examples=skew.min_examples,
            span=span,
        ).with_id(nodes.SERVING_SKEW)

    return IngestStage(example_gen, statistics_gen, schema_importer, example_validator, baseline_resolver, data_gate,
                       served_stats_resolver, serving_skew)


@dataclasses.dataclass(frozen=True)
class TrainStage:
    """The window, its transform graph (with the analyzer cache), the baseline model and
    the Trainer."""

    window_resolver: object
    cache_resolver: object
    transform: object
    trainer: object
    model_resolver: object
    # With `tuning.enabled`: the last search's best hyperparameters and the Tuner.
    hparams_resolver: object | None = None
    tuner: object | None = None

    def components(self) -> list:
        return [c for c in _fields(self) if c is not None]


def train(config: PipelineConfig, ingest: IngestStage) -> TrainStage:
    """The train stage: after the gate, on the window of recent spans."""
    span = config.span

    # The training window: the newest ingestion of each span of the last `window_spans`
    # months that passed the gate (this span included: the gate ran first).
    first, last = spans.window(span, config.window_spans)
    window_resolver = tfx.dsl.Resolver(
        strategy_class=SpanWindowStrategy,
        config={"start_span": first, "end_span": last, "require_key": "reports", "pipeline_name": config.pipeline_name},
        examples=tfx.dsl.Channel(
            type=tfx.types.standard_artifacts.Examples,
            producer_component_id=ingest.example_gen.id,
            output_key="examples",
        ),
        reports=tfx.dsl.Channel(
            type=DataGateReport, producer_component_id=nodes.DATA_GATE, output_key="report"
        ),
    ).with_id(nodes.WINDOW_RESOLVER)
    window_resolver.add_upstream_node(ingest.data_gate)

    # tf.Transform's analyzer cache of the last run of an earlier span
    # (components/resolvers/transform_cache.py): each span's analyzer results, so a run analyzes only
    # the spans it has not seen and reads the rest of the window from the cache.
    cache_resolver = tfx.dsl.Resolver(
        strategy_class=EarlierSpanCacheStrategy,
        config={"span": span},
        cache=tfx.dsl.Channel(
            type=tfx.types.standard_artifacts.TransformCache,
            producer_component_id=nodes.TRANSFORM,
            output_key="updated_analyzer_cache",
        ),
    ).with_id(nodes.TRANSFORM_CACHE_RESOLVER)

    # Analyzes the window (vocabularies, means, buckets) into a transform graph, which the
    # trainer applies on the fly and embeds in the serving model. Not materialized: writing
    # transformed copies of every span of the window cost more than applying the graph per
    # batch. StatisticsGen already profiles the raw data, so Transform's own stats are off.
    # With the analyzer cache only where the window is large enough for it to pay
    # (pipelines/analyzer_cache.py); without it, the resolver above stays upstream, unread, so
    # every run has the same nodes and edges (a DAG compiled once orders every run's tasks).
    cache = {"analyzer_cache": cache_resolver.outputs["cache"]} if analyzer_cache_choice(config).enabled \
        else {"disable_analyzer_cache": True}
    transform = tfx.components.Transform(
        examples=window_resolver.outputs["examples"],
        schema=ingest.schema_importer.outputs["schema"],
        preprocessing_fn=config.preprocessing_fn,
        materialize=False,
        disable_statistics=True,
        **cache,
    )
    transform.add_upstream_node(cache_resolver)

    # The last blessed model is the baseline the candidate must not fall behind (and, with
    # `trainer.warm_start`, the weights the candidate starts from): the newest blessing, not
    # the newest model, so parallel runs judge as sequential ones; a rolled-back canary is
    # passed over (components/resolvers/baseline_model.py).
    model_resolver = tfx.dsl.Resolver(
        strategy_class=LastBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id(nodes.MODEL_RESOLVER)

    # Tuning (opt-in, `tuning:`): TFX's Tuner searches the pipeline's SEARCH_SPACE on its
    # schedule, and between searches passes on the last best (components/tuner); the
    # Trainer trains with them.
    hparams_resolver = tuner = None
    tuning = config.tuning_settings
    if tuning.enabled or tuning.force:
        hparams_resolver = tfx.dsl.Resolver(
            strategy_class=LatestHyperParametersStrategy,
            hyperparameters=tfx.dsl.Channel(type=tfx.types.standard_artifacts.HyperParameters,
                                            producer_component_id=nodes.TUNER, output_key="best_hyperparameters"),
        ).with_id(nodes.HPARAMS_RESOLVER)
        tuner = Tuner(
            tuner_fn=config.tuner_fn or config.run_fn.rsplit(".", 1)[0] + ".tuner_fn",
            examples=window_resolver.outputs["examples"],
            transform_graph=transform.outputs["transform_graph"],
            schema=ingest.schema_importer.outputs["schema"],
            previous=hparams_resolver.outputs["hyperparameters"],
            train_args=tfx.proto.TrainArgs(num_steps=tuning.trial_steps or 200),
            eval_args=tfx.proto.EvalArgs(num_steps=config.eval_steps),
            custom_config={"tuning": tuning.to_dict(), "hparams": dict(config.hparams)},
        ).with_id(nodes.TUNER)

    # Trains on the raw window through the transform graph, with the trainer toolkit's
    # strategy, precision and fault tolerance; its executor records them on the Model.
    trainer = Trainer(
        hyperparameters=tuner.outputs["best_hyperparameters"] if tuner is not None else None,
        run_fn=config.run_fn,
        examples=window_resolver.outputs["examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=ingest.schema_importer.outputs["schema"],
        base_model=model_resolver.outputs["model"] if config.warm_start else None,
        # Epochs or examples become steps in the Trainer, which counts the window's
        # examples (TrainingBudget); a step budget is TFX's own num_steps as well.
        train_args=tfx.proto.TrainArgs(num_steps=config.train_steps) if config.train_steps else tfx.proto.TrainArgs(),
        eval_args=tfx.proto.EvalArgs(num_steps=config.eval_steps),
        custom_config={
            "training": config.training_budget,
            "hparams": dict(config.hparams),
            "trainer": {"backup_root": config.trainer_backup_root, **config.trainer},
            "simple_baseline": config.simple_baseline_settings.to_dict(),
            "importance": config.importance_settings.to_dict(),
            # Carried inside the SavedModel: the served version's request logs follow it.
            "feature_policy": (feature_policy.to_dict(config.feature_policy_settings)
                               if config.feature_policy is not None else None),
        },
    )

    if ingest.serving_skew is not None and config.skew_settings.action == "block":
        trainer.add_upstream_node(ingest.serving_skew)

    return TrainStage(window_resolver, cache_resolver, transform, trainer, model_resolver, hparams_resolver, tuner)


def evaluate(config: PipelineConfig, training: TrainStage):
    """The Evaluator: the candidate against the baseline, by the TFMA config beside it
    (components/evaluator/eval_config.py)."""
    # Candidate vs baseline on the eval splits of the window (the new span included): records
    # hash to the same split in every run, so neither model has trained on them, and both
    # are scored on the same examples (a seeded sample of them above max_eval_examples). A
    # drop vs the baseline refuses only when significant; so does a collapse of the
    # baseline's quality on the new span alone (bad data, not a worse model).
    evaluator = Evaluator(
        examples=training.window_resolver.outputs["examples"],
        model=training.trainer.outputs["model"],
        baseline_model=training.model_resolver.outputs["model"],
        eval_config=eval_config_lib.eval_config(
            task=config.task, label_key=config.label_key, slice_features=config.slice_features,
            interval_method=config.interval_method, slice_by_span=config.new_span_settings.enabled,
            thresholds={k: getattr(config, k) for k in eval_config_lib.THRESHOLD_KEYS},
            fairness=config.fairness_settings),
        significance_level=config.significance_level,
        min_eval_examples=config.min_eval_examples,
        max_eval_examples=config.max_eval_examples,
        key_metric=tasks.KEY_METRICS[config.task][0],
        new_span=config.new_span_settings.to_dict(),
        simple_baseline=config.simple_baseline_settings.to_dict(),
        staleness=config.staleness_settings.to_dict(),
        fairness=config.fairness_settings.to_dict(),
        fairness_groups=eval_config_lib.fairness_groups(config.slice_features, config.fairness_settings),
        task=config.task,
    )

    return evaluator


@dataclasses.dataclass(frozen=True)
class PushStage:
    """What runs only for a blessed candidate: the serving check, a reviewer's approval
    (opt-in), the atomic push and the TFLite variants (opt-in)."""

    serving_check: object | None
    approval_gate: object | None
    pusher: object
    tflite_export: object | None

    def components(self) -> list:
        return [c for c in _fields(self) if c is not None]


def push(config: PipelineConfig, ingest: IngestStage, training: TrainStage, evaluator) -> PushStage:
    """The push stage, under the condition that the Evaluator blessed the candidate."""
    # Only a blessed model goes on: otherwise both nodes below are skipped, not run.
    with tfx.dsl.Cond(evaluator.outputs["blessing"].future()[0].custom_property("blessed") == 1):
        # The candidate must load in a separate model server and answer real requests
        # correctly within the latency budget; writes the warm-up requests the Pusher ships.
        serving_check = None
        if config.enable_serving_check:
            serving_check = ServingCheck(
                model=training.trainer.outputs["model"],
                examples=ingest.example_gen.outputs["examples"],
                model_name=config.model_name,
                num_requests=config.serving_check_requests,
                max_latency_ms=config.serving_max_latency_ms,
                # The model it would replace, served beside it: computing performance compared.
                baseline=training.model_resolver.outputs["model"],
                performance=json.dumps(config.performance_settings.to_dict()),
                **_signing_params(config),
            )
        approval_gate = None
        if config.require_approval:
            # A reviewer's decision (Airflow's approval prompt or `retrain approve`),
            # recorded in MLMD; the push below happens only if it is "approve".
            approval_gate = ApprovalGate(model=training.trainer.outputs["model"], pipeline_root=config.pipeline_root)
            if serving_check is not None:
                approval_gate.add_upstream_node(serving_check)
        with _approved(approval_gate):
            # Atomic push (TF Serving never sees half a version), with warm-up requests; keeps
            # the newest `keep_versions` versions for rollback. Not pushed unless infra-blessed.
            pusher = AtomicPusher(
                model=training.trainer.outputs["model"],
                model_blessing=evaluator.outputs["blessing"],
                infra_blessing=serving_check.outputs["blessing"] if serving_check else None,
                push_destination=tfx.proto.PushDestination(
                    filesystem=tfx.proto.PushDestination.Filesystem(
                        base_directory=config.serving_model_dir
                    )
                ),
                custom_config={"keep_versions": config.keep_versions, **_signing_params(config),
                               "rollout": {"mode": config.rollout_settings.mode,
                                           "canary_share": config.rollout_settings.canary_share}},
            )
            if approval_gate is not None:
                pusher.add_upstream_node(approval_gate)
            # On-device variants of what was pushed, each scored beside the SavedModel and
            # published beside the version only within the accuracy bound (opt-in).
            tflite_export = None
            lite = config.tflite_settings
            if lite is not None:
                tflite_export = TFLiteExport(
                    model=training.trainer.outputs["model"],
                    examples=training.window_resolver.outputs["examples"],
                    pushed_model=pusher.outputs["pushed_model"],
                    signature=lite.signature,
                    input_key=lite.input_key,
                    label_key=lite.label_key,
                    raw_input_key=lite.raw_input_key,
                    variants=",".join(lite.variants),
                    max_accuracy_drop=lite.max_accuracy_drop,
                    representative_examples=lite.representative_examples,
                    **_signing_params(config),
                ).with_id(nodes.TFLITE_EXPORT)

    return PushStage(serving_check, approval_gate, pusher, tflite_export)
