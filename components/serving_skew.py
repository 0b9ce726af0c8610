"""ServingSkew: the requests the served model answers vs the data it was trained on.

`retrain serve` (or any server with the same `logging_config`) logs a sample of requests as
TF Serving `PredictionLog`s (serving/request_log.py). Each run, before training, this node
1. finds the model being served (the newest version under the serving folder, its
   `push_info.json`) and, through ML Metadata, the statistics of the newest span it was
   trained on (`ServedModelStatisticsStrategy`, a resolver);
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

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any, Optional

from tfx import types
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.common.resolver import ResolverStrategy
from tfx.types import standard_artifacts
from tfx.types.artifact import Artifact

from components.atomic_pusher.executor import PUSH_INFO, existing_versions
from components.span_window import span_of
from core import files, layout, mlmd, nodes

logger = logging.getLogger(__name__)

REPORT_FILE = layout.SKEW_REPORT
STATS_FILE = "serving_stats.pb"
STOPPED_DIR = os.path.basename(layout.SKEW_STOPPED_DIR)
ACTIONS = ("block", "warn", "off")
SERVING = "SERVING"  # TFDV's environment name for served data


@dataclasses.dataclass(frozen=True)
class SkewSettings:
    """A pipeline config's `serving_skew:` block."""

    action: str = "warn"
    min_examples: int = 50

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "SkewSettings":
        """Raises ValueError: an unknown key, action or a min_examples below 1."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: action, min_examples")
        settings = cls(**values)
        if settings.action not in ACTIONS:
            raise ValueError(f"action {settings.action!r} is not one of {', '.join(ACTIONS)}")
        if not isinstance(settings.min_examples, int) or settings.min_examples < 1:
            raise ValueError(f"min_examples must be an integer >= 1, got {settings.min_examples!r}")
        return settings


def served_version(serving_model_dir: str) -> Optional[tuple[int, dict]]:
    """(version, its push_info) of the version that answers the model's traffic: the one
    models.config serves (its `stable` label during a canary rollout, a pinned version after
    a rollback), else the newest under the model's serving folder; None if none was pushed
    by this pipeline."""
    from serving import model_config, versions

    order = list(reversed(existing_versions(serving_model_dir)))
    root, name = os.path.split(os.path.abspath(serving_model_dir))
    if order and os.path.exists(versions.config_path(root)):
        entry = model_config.find(model_config.load(versions.config_path(root)), name)
        chosen = versions.served_version(entry, order) if entry is not None else None
        if chosen is not None:
            order = [chosen] + [v for v in order if v != chosen]
    for version in order:
        try:
            with open(os.path.join(serving_model_dir, str(version), PUSH_INFO), encoding="utf-8") as f:
                return version, json.load(f)
        except (OSError, ValueError):
            continue  # not pushed by this pipeline: its training data is unknown
    return None


class ServedModelStatisticsStrategy(ResolverStrategy):
    """Resolves `examples` and `statistics` to the newest span the served model was trained on
    and its StatisticsGen output (both empty if nothing this pipeline pushed is served)."""

    def __init__(self, serving_model_dir: str):
        self._serving_model_dir = serving_model_dir

    def resolve_artifacts(self, store: Any, input_dict: dict[str, list[types.Artifact]]):
        nothing = {key: [] for key in input_dict}
        served = served_version(self._serving_model_dir)
        model_id = (served or (0, {}))[1].get("model_artifact_id")
        if not model_id:
            return nothing
        trainer, _ = mlmd.producer(store, int(model_id))
        if trainer is None:
            return nothing
        window = mlmd.inputs_of(store, trainer.id).get("examples", [])
        newest = max(window, key=lambda a: (mlmd.props(a).get("span") or 0, a.id), default=None)
        if newest is None:
            return nothing
        produced = set()
        for execution, node_id in mlmd.consumers(store, newest.id, key="examples"):
            if node_id == nodes.STATISTICS_GEN:
                produced.update(a.id for a in mlmd.outputs_of(store, execution.id).get("statistics", []))
        statistics = sorted((a for a in input_dict.get("statistics", []) if a.id in produced), key=lambda a: a.id)
        examples = [a for a in input_dict.get("examples", []) if a.id == newest.id]
        if not statistics or not examples:
            return nothing
        return {"statistics": statistics[-1:], "examples": examples}


class ServingSkewReport(Artifact):
    """The serving skew check's report.json (and the logged traffic's statistics)."""

    TYPE_NAME = "ServingSkewReport"


def serving_statistics(log_prefix: str, version: int, limit: int = 100_000):
    """(TFDV statistics of the examples the served version was sent, logged requests read).

    Returns (None, n) when no example was logged for that version.
    """
    from tensorflow_data_validation.statistics import stats_impl  # in memory: no Beam pipeline
    from tfx_bsl.coders import example_coder

    from components.data_gate import measures
    from serving import request_log

    examples, requests = [], 0
    for log in request_log.read(log_prefix):
        if log.log_metadata.model_spec.version.value != version:
            continue
        requests += 1
        examples.extend(request_log.logged_examples(log))
        if len(examples) >= limit:
            break
    if not examples:
        return None, requests
    batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(examples[:limit])
    return stats_impl.generate_statistics_in_memory(batch, measures.stats_options()), requests


def serving_features(schema) -> list[str]:
    """The schema's features a served request carries: TFDV's SERVING environment (a feature
    with `not_in_environment: "SERVING"`, e.g. the label, or `in_environment` without it, is not)."""
    out = []
    for f in schema.feature:
        if f.in_environment:
            present = SERVING in f.in_environment
        else:
            present = (not schema.default_environment or SERVING in schema.default_environment) \
                and SERVING not in f.not_in_environment
        if present:
            out.append(f.name)
    return sorted(out)


def evaluate_skew(serving_stats, training_stats, schema, policy, baseline: str) -> dict:
    """The pure comparison: the traffic against the schema in its SERVING environment (a type
    change, a value outside its domain, a required feature no longer sent: the data gate's
    schema checks), and every measure of every served feature against the gate's limits."""
    import tensorflow_data_validation as tfdv

    from components.data_gate import measures
    from components.data_gate.component import anomaly_entries, completeness_checks, drift_checks

    features = serving_features(schema)
    environment = SERVING if SERVING in schema.default_environment else None
    anomalies = anomaly_entries(tfdv.validate_statistics(serving_stats, schema, environment=environment),
                                "serving", "schema")
    measured = measures.measure_pair(serving_stats, training_stats, features)
    skew = drift_checks(measured, policy, {}, baseline)
    completeness = [c for c in completeness_checks(measured, policy, {}, baseline) if c["measure"] != "missing_share"]
    skewed = sorted({c["feature"] for c in skew if c["drifted"]} | {c["feature"] for c in completeness if c["failed"]}
                    | {a["feature"] for a in anomalies})
    return {"anomalies": anomalies, "skew": skew, "completeness": completeness, "skewed_features": skewed,
            "examples": measures.num_examples(serving_stats)}


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
    action: Parameter[str] = "warn",
    min_examples: Parameter[int] = 50,
    # The run's span: logs change between runs while the other inputs may not, so a run
    # never reuses an earlier run's verdict from the cache.
    span: Parameter[int] = 0,
) -> None:
    """Reports (and with action "block", stops the run on) serving skew of the served model."""
    import tensorflow_data_validation as tfdv
    from tfx.utils import io_utils

    from components.data_gate import policy as gate_policy

    result: dict[str, Any] = {"action": action, "span": span, "checked": False, "passed": True,
                              "request_log_prefix": request_log_prefix, "skewed_features": []}
    served = served_version(serving_model_dir)
    if served is None:
        result["reason"] = f"no model pushed by this pipeline is served from {serving_model_dir}"
    elif training_statistics is None:
        result["reason"] = f"no statistics found in ML Metadata for the data version {served[0]} was trained on"
    else:
        version, info = served
        result.update(served_version=version, model_artifact_id=info.get("model_artifact_id"),
                      training_span=span_of(training_examples) if training_examples is not None else None)
        stats, requests = serving_statistics(request_log_prefix, version)
        result["logged_requests"] = requests
        examples = 0 if stats is None else sum(d.num_examples for d in stats.datasets)
        if examples < min_examples:
            result["reason"] = (f"{examples} logged example(s) for version {version}, fewer than min_examples "
                                f"{min_examples}: too little traffic to judge")
        else:
            schema_proto = tfdv.load_schema_text(io_utils.get_only_uri_in_dir(schema.uri))
            training = tfdv.load_stats_binary(os.path.join(
                training_statistics.uri, "Split-train", "FeatureStats.pb"))
            limits = gate_policy.from_dict(json.loads(policy)) if policy else gate_policy.GatePolicy()
            baseline = f"training data (span {result['training_span']})"
            result.update(evaluate_skew(stats, training, schema_proto, limits, baseline), checked=True)
            result["passed"] = not result["skewed_features"] or action != "block"
            with open(os.path.join(report.uri, STATS_FILE), "wb") as f:
                f.write(stats.SerializeToString())
    folder = report.uri
    if not result["passed"]:
        # TFX removes a failed execution's outputs: the report goes beside them (as the gate's).
        folder = os.path.join(os.path.dirname(os.path.dirname(report.uri)), STOPPED_DIR,
                              f"span-{span}-{os.path.basename(report.uri)}")
    os.makedirs(folder, exist_ok=True)
    path = files.write_text(os.path.join(folder, REPORT_FILE), json.dumps(result, indent=2, sort_keys=True))
    report.set_int_custom_property("checked", int(result["checked"]))
    report.set_string_custom_property("skewed_features", ",".join(result["skewed_features"]))
    logger.info("Serving skew report: %s", path)
    if result["skewed_features"]:
        details = "; ".join([f"{a['feature']} (schema: {r['description'] or r['type']})"
                             for a in result["anomalies"] for r in a["reasons"]]
                            + [c["description"] for c in result["skew"] + result["completeness"]
                               if c.get("drifted") or c.get("failed")])
        message = f"serving skew of version {result['served_version']} vs its training data: {details}. Report: {path}"
        if not result["passed"]:
            raise ServingSkewError(message)
        logger.warning("%s (action: warn, the run goes on)", message)
    elif not result["checked"]:
        logger.info("serving skew not checked: %s", result["reason"])


class ServingSkewError(RuntimeError):
    """The served model's traffic differs from its training data beyond the limits (action: block)."""


def is_skew_stop(exc: BaseException | None) -> bool:
    """True when the node failed because the skew check blocked the run (not a crash in it)."""
    return isinstance(exc, ServingSkewError)
