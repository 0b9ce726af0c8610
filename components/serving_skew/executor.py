"""ServingSkew's work: the served version's logged traffic as TFDV statistics, judged
against its training data's statistics with the data gate's measures and limits."""


import json
import logging
import os
from typing import Any

from components.resolvers.served_statistics import served_version
from components.resolvers.span_window import span_of
from components.serving_skew.settings import ACTIONS  # noqa: F401  (block, warn, off)
from core import feature_policy, files, layout

logger = logging.getLogger(__name__)

REPORT_FILE = layout.SKEW_REPORT
STATS_FILE = "serving_stats.pb"
STOPPED_DIR = os.path.basename(layout.SKEW_STOPPED_DIR)
SERVING = "SERVING"  # TFDV's environment name for served data


def serving_statistics(log_prefix: str, version: int, limit: int = 100_000):
    """(TFDV statistics of the examples the served version was sent, logged requests read).

    Returns (None, n) when no example was logged for that version.
    """
    from tensorflow_data_validation.statistics import stats_impl  # in memory: no Beam pipeline
    from tfx_bsl.coders import example_coder

    from components.data_gate import measures
    from serving.server import request_log

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


def evaluate_skew(serving_stats, training_stats, schema, policy, baseline: str, exclude=()) -> dict:
    """The pure comparison: the traffic against the schema in its SERVING environment (a type
    change, a value outside its domain, a required feature no longer sent: the data gate's
    schema checks), and every measure of every served feature against the gate's limits.
    `exclude`: features the request logs do not keep as sent (the feature policy drops or
    hashes them): not compared."""
    import tensorflow_data_validation as tfdv

    from components.data_gate import measures
    from components.data_gate.component import anomaly_entries, completeness_checks, drift_checks

    features = [f for f in serving_features(schema) if f not in exclude]
    environment = SERVING if SERVING in schema.default_environment else None
    anomalies = [a for a in anomaly_entries(tfdv.validate_statistics(serving_stats, schema, environment=environment),
                                            "serving", "schema") if a["feature"] not in exclude]
    measured = measures.measure_pair(serving_stats, training_stats, features)
    skew = drift_checks(measured, policy, {}, baseline)
    completeness = [c for c in completeness_checks(measured, policy, {}, baseline) if c["measure"] != "missing_share"]
    skewed = sorted({c["feature"] for c in skew if c["drifted"]} | {c["feature"] for c in completeness if c["failed"]}
                    | {a["feature"] for a in anomalies})
    return {"anomalies": anomalies, "skew": skew, "completeness": completeness, "skewed_features": skewed,
            "examples": measures.num_examples(serving_stats)}


def _not_compared(rules, served: list[str]) -> dict[str, str]:
    """The features the skew check cannot compare, and why: what the served version's request
    logs do not keep as sent, and what the pipeline never stores (no training data; the
    imported schema leaves it out, so TFDV would call it a new column of the traffic)."""
    if rules is None:
        return {}
    out = {}
    for f in sorted(set(served) | set(rules.rules)):
        rule = rules.rules.get(f)
        if rule is not None and rule.ingest == "drop":
            out[f] = "never stored by the pipeline (feature policy: ingest: drop): no training data to compare"
        elif rules.log_action(f) != "keep":
            out[f] = f"{'dropped from' if rules.log_action(f) == 'drop' else 'hashed in'} request logs by the feature policy"
    return out


def check(schema, report, training_statistics, training_examples, serving_model_dir: str, request_log_prefix: str,
          policy: str, action: str, min_examples: int, span: int) -> None:
    """The node's work: the report (and with action "block", a ServingSkewError)."""
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
            # What the served version's request logs do not keep as sent (its feature policy).
            rules = feature_policy.from_model(os.path.join(serving_model_dir, str(version)))
            not_compared = _not_compared(rules, serving_features(schema_proto))
            if not_compared:
                result["not_compared"] = not_compared
            result.update(evaluate_skew(stats, training, schema_proto, limits, baseline, exclude=set(not_compared)),
                          checked=True)
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
