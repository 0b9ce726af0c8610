"""ServingSkew: the requests the served model answers vs the data it was trained on.

`retrain serve` (or any server with the same `logging_config`) logs a sample of requests as
TF Serving `PredictionLog`s (serving/server/request_log.py). Each run, before training, this node
1. finds the model being served (the newest version under the serving folder, its
   `push_info.json`) and, through ML Metadata, the statistics of the newest span it was
   trained on (`components/resolvers/served_statistics.py`);
2. reads that version's logged requests, turns them into tf.Examples and computes TFDV
   statistics of them (the gate's options);
3. compares the two with the data gate's measures and calibrated limits (gate.yaml: the same
   k / n_eff^power per feature and measure), for every feature of the schema's SERVING
   environment (the label is `not_in_environment: "SERVING"`): TFDV's
   Jensen-Shannon divergence and the quantile measures for numeric features, L-infinity for
   categorical ones, and the rise of the missing share.
`report.json` lists every measurement; `action: block` fails the node (and so the run, before
the Trainer) when a feature is skewed, `warn` reports it and goes on. Too little traffic
(fewer than `min_examples` logged examples) or nothing served yet is reported as not checked.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.types.artifact import Artifact

from components.serving_skew import executor
from components.serving_skew.settings import SkewSettings  # noqa: F401  (the block beside its node)


class ServingSkewReport(Artifact):
    """The serving skew check's report.json (and the logged traffic's statistics)."""

    TYPE_NAME = "ServingSkewReport"


@component
def ServingSkew(
    schema: InputArtifact[standard_artifacts.Schema],
    report: OutputArtifact[ServingSkewReport],
    training_statistics: InputArtifact[standard_artifacts.ExampleStatistics] = None,
    # The span those statistics are of (the newest the served model was trained on).
    training_examples: InputArtifact[standard_artifacts.Examples] = None,
    serving_model_dir: Parameter[str] = "",
    request_log_prefix: Parameter[str] = "",
    policy: Parameter[str] = "",
    # block: stop the run before training when a feature is skewed; warn: report only; off: skip the
    # check.
    action: Parameter[str] = "warn",
    # Fewer logged examples than this: reported as not checked.
    min_examples: Parameter[int] = 50,
    # The run's span: logs change between runs while the other inputs may not, so a run
    # never reuses an earlier run's verdict from the cache.
    span: Parameter[int] = 0,
) -> None:
    """Reports (and with action "block", stops the run on) serving skew of the served model."""
    executor.check(schema, report, training_statistics, training_examples, serving_model_dir, request_log_prefix,
                   policy, action, min_examples, span)
