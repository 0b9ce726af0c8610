"""The pipeline's node ids: what MLMD contexts, run folders, DAG tasks and reports are keyed by.

`pipelines.factory` builds the nodes with these ids (and re-exports them); readers of a
run (`governance.record`, the runner's backfill, the Airflow DAG's approval wiring) use
the constants, never string literals.
"""

CSV_EXAMPLE_GEN = "CsvExampleGen"
IMPORT_EXAMPLE_GEN = "ImportExampleGen"
PARQUET_EXAMPLE_GEN = "ParquetExampleGen"  # FileBasedExampleGen over Parquet spans (components/example_gen)
EXAMPLE_GENS = (CSV_EXAMPLE_GEN, IMPORT_EXAMPLE_GEN, PARQUET_EXAMPLE_GEN)
STATISTICS_GEN = "StatisticsGen"
SCHEMA_GEN = "ImportSchemaGen"
EXAMPLE_VALIDATOR = "ExampleValidator"
BASELINE_RESOLVER = "baseline_resolver"
DATA_GATE = "DataGate"
SERVED_STATS_RESOLVER = "served_model_statistics_resolver"
SERVING_SKEW = "ServingSkew"
WINDOW_RESOLVER = "span_window_resolver"
TRANSFORM_CACHE_RESOLVER = "transform_cache_resolver"
TRANSFORM = "Transform"
TUNER = "Tuner"  # TFX's Tuner on the `tuning:` schedule (components/tuner), opt-in
HPARAMS_RESOLVER = "latest_hyperparameters_resolver"  # the last search's best, for the Tuner to pass on
TRAINER = "Trainer"
MODEL_RESOLVER = "latest_blessed_model_resolver"
EVALUATOR = "Evaluator"
SERVING_CHECK = "ServingCheck"
APPROVAL_GATE = "ApprovalGate"
PUSHER = "AtomicPusher"  # TFX's Pusher with an atomic executor (components/atomic_pusher)
TFLITE_EXPORT = "TFLiteExport"  # on-device variants of the pushed model (opt-in per pipeline)

# After ingestion, a backfilled span goes through validation and the gate too, so that
# only spans that passed reach the training window and serve as drift baselines.
BACKFILL_AFTER_INGEST = (STATISTICS_GEN, SCHEMA_GEN, EXAMPLE_VALIDATOR, BASELINE_RESOLVER, DATA_GATE)

# Airflow pools by resource class (a pipeline config's `airflow.pools` sizes them): the
# Beam-heavy data nodes, and the Trainer (sized to the accelerators). Other nodes
# (resolvers, the gate, checks) use Airflow's default pool.
RESOURCE_CLASSES = {
    "tfx_beam": (*EXAMPLE_GENS, STATISTICS_GEN, TRANSFORM, EVALUATOR),
    "tfx_trainer": (TRAINER, TUNER),
}


def resource_class(node_id: str) -> str | None:
    return next((name for name, ids in RESOURCE_CLASSES.items() if node_id in ids), None)
