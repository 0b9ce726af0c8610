"""DataGate: stops a run before Transform/Trainer when the new span is not fit to train on.

It blocks on (a) the schema anomalies ExampleValidator found in the new span and (b)
drift of the new span against the last earlier span that passed the gate, measured with
the comparators and thresholds the curated schema sets (`drift_comparator` with
`jensen_shannon_divergence` or `infinity_norm`). `report.json` is written whether it
passes or not; a failing gate then raises, which fails the node so nothing downstream
runs and no report artifact is published. Published reports therefore mean "passed",
and carry the span's statistics for the next span's drift check.
"""

import json
import logging
import os

import tensorflow_data_validation as tfdv
from tensorflow_data_validation.utils import anomalies_util
from tensorflow_metadata.proto.v0 import anomalies_pb2
# The modules behind tfx.v1.dsl.components and tfx.v1.types, imported directly: `tfx.v1`
# also imports its Google Cloud extensions (7.6 s on this machine), which every node task
# that loads this executor would pay.
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.artifact import Artifact
from tfx.utils import io_utils

REPORT_FILE = "report.json"
BASELINE_STATS_FILE = "FeatureStats.pb"
STOPPED_DIR = "stopped"


class DataGateReport(Artifact):
    """The gate's decision and the evidence behind it."""

    TYPE_NAME = "DataGateReport"


def is_gate_stop(exc: BaseException | None) -> bool:
    """True when a node failed because the gate refused the data (not a crash in the gate)."""
    return isinstance(exc, DataGateError)


class DataGateError(RuntimeError):
    """The new span failed the data gate; the message names the features."""

    def __init__(self, message: str, report_path: str, blocking_features: list[str]):
        super().__init__(message)
        self.report_path = report_path
        self.blocking_features = blocking_features


def _split_uri(artifact, split: str) -> str:
    return artifact_utils.get_split_uri([artifact], split)


def _anomaly_entries(anomalies: anomalies_pb2.Anomalies, split: str, kind: str) -> list[dict]:
    entries = []
    for feature, info in sorted(anomalies.anomaly_info.items()):
        reasons = [
            {"type": anomalies_pb2.AnomalyInfo.Type.Name(r.type), "description": r.description}
            for r in info.reason
        ]
        entries.append({"feature": feature, "split": split, "kind": kind, "reasons": reasons})
    if anomalies.HasField("dataset_anomaly_info"):
        entries.append(
            {
                "feature": "<dataset>",
                "split": split,
                "kind": kind,
                "reasons": [
                    {"type": anomalies_pb2.AnomalyInfo.Type.Name(r.type), "description": r.description}
                    for r in anomalies.dataset_anomaly_info.reason
                ],
            }
        )
    return entries


def _drift_measurements(anomalies: anomalies_pb2.Anomalies) -> list[dict]:
    out = []
    for info in anomalies.drift_skew_info:
        for m in info.drift_measurements:
            out.append(
                {
                    "feature": ".".join(info.path.step),
                    "measure": type(m).Type.Name(m.type),
                    "value": round(m.value, 6),
                    "threshold": m.threshold,
                    "drifted": m.value > m.threshold,
                }
            )
    return out


def _is_drift_reason(reason) -> bool:
    return anomalies_pb2.AnomalyInfo.Type.Name(reason.type).startswith("COMPARATOR_")


def evaluate_gate(
    statistics,
    schema,
    anomalies_by_split: dict[str, anomalies_pb2.Anomalies],
    baseline_statistics,
) -> dict:
    """Pure decision: returns the report dict (no I/O).

    Args:
      statistics: DatasetFeatureStatisticsList of the new span (one split).
      schema: the curated Schema proto, with drift comparators.
      anomalies_by_split: ExampleValidator's anomalies per split of the new span.
      baseline_statistics: statistics of the previous span (same split), or None.
    """
    blocking = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        blocking += _anomaly_entries(anomalies, split, "schema")
    drift = []
    if baseline_statistics is not None:
        drift_anomalies = tfdv.validate_statistics(
            statistics, schema, previous_statistics=baseline_statistics
        )
        drift = _drift_measurements(drift_anomalies)
        # Keep only the comparator (drift) reasons: schema anomalies come from ExampleValidator.
        only_drift = anomalies_pb2.Anomalies()
        only_drift.CopyFrom(drift_anomalies)
        only_drift.ClearField("dataset_anomaly_info")
        for feature in list(only_drift.anomaly_info):
            info = only_drift.anomaly_info[feature]
            kept = [r for r in info.reason if _is_drift_reason(r)]
            if not kept:
                del only_drift.anomaly_info[feature]
                continue
            del info.reason[:]
            info.reason.extend(kept)
        blocking += _anomaly_entries(only_drift, "drift", "drift")
    features = sorted({e["feature"] for e in blocking})
    return {
        "passed": not blocking,
        "blocking_features": features,
        "anomalies": blocking,
        "drift": drift,
        "drift_checked": baseline_statistics is not None,
    }


@component
def DataGate(
    examples: InputArtifact[standard_artifacts.Examples],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    report: OutputArtifact[DataGateReport],
    # The report of the last earlier span that passed the gate; None on the first span.
    baseline: InputArtifact[DataGateReport] = None,
    drift_split: Parameter[str] = "train",
) -> None:
    """Passes the new span on, or fails the run naming the features that stopped it."""
    schema_proto = tfdv.load_schema_text(io_utils.get_only_uri_in_dir(schema.uri))
    current = tfdv.load_stats_binary(os.path.join(_split_uri(statistics, drift_split), "FeatureStats.pb"))
    baseline_stats = None
    if baseline is not None:
        baseline_stats = tfdv.load_stats_binary(os.path.join(baseline.uri, BASELINE_STATS_FILE))
    by_split = {}
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        path = os.path.join(_split_uri(anomalies, split), "SchemaDiff.pb")
        by_split[split] = anomalies_util.load_anomalies_binary(path) if os.path.exists(path) else anomalies_pb2.Anomalies()
    result = evaluate_gate(current, schema_proto, by_split, baseline_stats)
    span = examples.get_int_custom_property("span")
    result["span"] = span
    result["baseline_span"] = baseline.get_int_custom_property("span") if baseline else None
    result["drift_split"] = drift_split
    if result["passed"]:
        folder = report.uri
    else:
        # TFX removes a failed execution's output folders, so a stopped span's report goes
        # beside them: <pipeline_root>/DataGate/stopped/span-<span>-<execution>/.
        folder = os.path.join(
            os.path.dirname(os.path.dirname(report.uri)),
            STOPPED_DIR,
            f"span-{span}-{os.path.basename(report.uri)}",
        )
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    # Kept with the report: the next span's drift baseline, if this span passes.
    with open(os.path.join(folder, BASELINE_STATS_FILE), "wb") as f:
        f.write(current.SerializeToString())
    report.set_int_custom_property("passed", int(result["passed"]))
    report.set_string_custom_property("blocking_features", ",".join(result["blocking_features"]))
    report.set_int_custom_property("span", span)
    logging.info("Data gate report: %s", path)
    if not result["passed"]:
        details = "; ".join(
            f"{e['feature']} ({e['kind']}, {e['split']}: "
            + ", ".join(r["type"] for r in e["reasons"])
            + ")"
            for e in result["anomalies"]
        )
        raise DataGateError(
            f"span {span} stopped by the data gate: {details}. Report: {path}",
            report_path=path,
            blocking_features=result["blocking_features"],
        )
