"""The governance report of one pipeline run (one candidate model), built from MLMD lineage
and the artifacts it points to: JSON for machines (`report.json`), HTML for people
(`report.html`, see `html.py`).

Written to `<pipeline_root>/governance/<run id>/` for every run (pushed, not blessed,
stopped by the data gate, failed), and copied to `assets.extra/governance/` of the pushed
SavedModel so it travels with the model.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import re
import shutil
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from governance import lineage
from governance.lineage import props

REPORT_DIR = "governance"
SCHEMA_VERSION = 1


def report_dir(pipeline_root: str, run_id: str) -> str:
    return os.path.join(pipeline_root, REPORT_DIR, re.sub(r"[^A-Za-z0-9._-]", "_", run_id))


def _time(ms: int) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds") if ms else None


def _read_stats(uri: str, split: str):
    return _read_stats_file(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"))


def _read_stats_file(path: str):
    if not os.path.exists(path):
        return None
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with open(path, "rb") as f:
        stats.ParseFromString(f.read())
    return stats.datasets[0]


def feature_summary(dataset) -> list[dict]:
    """Per feature: type, missing fraction, numeric moments and histogram, or top values."""
    out = []
    n = dataset.num_examples or 1
    for feature in dataset.features:
        name = feature.path.step[0] if feature.path.step else feature.name
        entry: dict[str, Any] = {"name": name}
        if feature.HasField("num_stats"):
            s = feature.num_stats
            entry.update(
                kind="numeric", missing=round(s.common_stats.num_missing / n, 4), mean=round(s.mean, 4),
                std=round(s.std_dev, 4), min=s.min, max=s.max, zeros=s.num_zeros,
                histogram=[
                    {"low": b.low_value, "high": b.high_value, "count": b.sample_count}
                    for h in s.histograms if h.type == h.STANDARD for b in h.buckets
                ],
            )
        elif feature.HasField("string_stats") and all(v.value.startswith("__BYTES_VALUE__") for v in feature.string_stats.top_values):
            # Binary values (encoded images): TFDV keeps no meaningful top values.
            entry.update(kind="bytes", missing=round(feature.string_stats.common_stats.num_missing / n, 4),
                         unique=feature.string_stats.unique)
        elif feature.HasField("string_stats"):
            s = feature.string_stats
            entry.update(
                kind="categorical", missing=round(s.common_stats.num_missing / n, 4), unique=s.unique,
                top=[{"value": v.value, "count": v.frequency} for v in s.top_values[:10]],
            )
        elif feature.HasField("bytes_stats"):
            s = feature.bytes_stats
            entry.update(kind="bytes", missing=round(s.common_stats.num_missing / n, 4),
                         avg_bytes=round(s.avg_num_bytes, 1), unique=s.unique)
        out.append(entry)
    return out


def _rows(stats_uri: str) -> dict[str, int]:
    rows = {}
    for entry in sorted(os.listdir(stats_uri)):
        ds = _read_stats(stats_uri, entry[len("Split-"):]) if entry.startswith("Split-") else None
        if ds is not None:
            rows[entry[len("Split-"):]] = int(ds.num_examples)
    return rows


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _json_prop(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _evaluation(evaluation_uri: str, eval_config_json: str | None) -> dict:
    import tensorflow_model_analysis as tfma

    overall: dict[str, dict] = {}
    slices: dict[str, dict] = {}
    for record in tfma.load_metrics(evaluation_uri):
        keys = record.slice_key.single_slice_keys
        slice_name = "overall" if not keys else ", ".join(
            f"{k.column}={getattr(k, k.WhichOneof('kind'))}" for k in keys)
        for kv in record.metric_keys_and_values:
            if not kv.value.HasField("double_value"):
                continue
            model = kv.key.model_name or "candidate"
            name = kv.key.name
            role = f"{model}_diff" if kv.key.is_diff else model
            target = overall if not keys else slices.setdefault(slice_name, {})
            target.setdefault(name, {})[role] = round(kv.value.double_value.value, 5)
    validation = tfma.load_validation_result(evaluation_uri)
    failures = [
        {"slice": str(v.slice_key) or "overall", "metric": f.metric_key.name,
         "value": round(f.metric_value.double_value.value, 5),
         "threshold": str(f.metric_threshold).replace("\n", " ").strip()}
        for v in validation.metric_validations_per_slice for f in v.failures
    ]
    thresholds = []
    if eval_config_json:
        config = json.loads(eval_config_json)
        for spec in config.get("metrics_specs", []):
            for metric in spec.get("metrics", []):
                for pst in metric.get("per_slice_thresholds", []):
                    t = pst.get("threshold", {})
                    failed = [f for f in failures if f["metric"].lower() == metric["class_name"].lower()
                              or f["metric"].replace("_", "") == metric["class_name"].lower()]
                    thresholds.append({
                        "metric": metric["class_name"], "slice": "overall",
                        "value_threshold": t.get("value_threshold"), "change_threshold": t.get("change_threshold"),
                        "passed": not failed,
                    })
    return {
        "overall": overall,
        "slices": dict(sorted(slices.items())),
        "validation_ok": validation.validation_ok,
        "failures": failures,
        "thresholds": thresholds,
        "significance": read_significance(evaluation_uri),
        "path": evaluation_uri,
    }


def read_significance(evaluation_uri: str) -> dict | None:
    """The Evaluator's verdict (`components/evaluator`): intervals, verdicts, reasons."""
    from components.evaluator.significance import VERDICT_FILE

    path = os.path.join(evaluation_uri, VERDICT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _quarantine(store, pipeline: str, span, gate: dict | None) -> list[dict]:
    """Quarantine decisions (`retrain quarantine`) on this span and on the spans it was
    compared with or may train on: the last 24 months up to it."""
    from governance import quarantine
    from retrain import spans as span_lib

    if span is None:
        return []
    first = span_lib.shift_span(int(span), -24)
    return [d for d in quarantine.decisions(store, pipeline) if first <= int(d["span"]) <= int(span)]


def build(store, pipeline: str, pipeline_root: str, run_id: str) -> dict:
    """The report of a run, from MLMD and artifacts.

    Raises:
      LookupError: MLMD has no run with this id.
    """
    nodes = lineage.run_nodes(store, pipeline, run_id)
    if not nodes:
        raise LookupError(f"MLMD has no run {run_id!r} of pipeline {pipeline!r}")
    gen = next((n for k, n in nodes.items() if k.endswith("ExampleGen")), None)
    r: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "pipeline": pipeline,
        "run_id": run_id,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "nodes": {k: {"state": n.state, "execution_id": n.execution.id,
                      "started": _time(n.execution.create_time_since_epoch)} for k, n in nodes.items()},
    }

    examples = gen.output("examples") if gen else None
    r["data"] = {"span": props(examples).get("span") if examples else None,
                 "examples_uri": examples.uri if examples else None, "rows": None}
    stats = nodes.get("StatisticsGen")
    stats_artifact = stats.output("statistics") if stats else None
    if stats_artifact:
        r["data"]["rows"] = _rows(stats_artifact.uri)
        current = _read_stats(stats_artifact.uri, "train")
        r["data"]["features"] = feature_summary(current) if current else []
        r["data"]["statistics_uri"] = stats_artifact.uri

    schema_node = nodes.get("ImportSchemaGen")
    schema = schema_node.output("schema") if schema_node else None
    if schema:
        path = os.path.join(schema.uri, "schema.pbtxt")
        r["schema"] = {
            "source": schema_node.exec_properties().get("schema_file"),
            "path": path, "sha256": _sha256(path) if os.path.exists(path) else None,
        }

    gate = nodes.get("DataGate")
    r["data_gate"] = None
    if gate:
        report = gate.output("report")
        path = os.path.join(report.uri, "report.json") if report else None
        if not path or not os.path.exists(path):
            stopped = glob.glob(os.path.join(pipeline_root, "DataGate", "stopped", f"span-*-{gate.execution.id}", "report.json"))
            path = stopped[0] if stopped else None
        if path:
            with open(path, encoding="utf-8") as f:
                r["data_gate"] = {**json.load(f), "report": path}
            baseline = (gate.inputs.get("baseline") or [None])[0]
            if baseline is not None:
                base = _read_stats_file(os.path.join(baseline.uri, "FeatureStats.pb"))
                r["data"]["baseline_span"] = props(baseline).get("span")
                r["data"]["baseline_features"] = feature_summary(base) if base else []

    r["quarantine"] = _quarantine(store, pipeline, r["data"].get("span"), r["data_gate"])

    transform = nodes.get("Transform")
    if transform:
        window = sorted(transform.inputs.get("examples", []), key=lambda a: props(a).get("span", 0))
        r["data"]["window"] = [{"span": props(a).get("span"), "artifact_id": a.id, "uri": a.uri} for a in window]
        p = transform.exec_properties()
        r["transform"] = {k: _json_prop(p.get(k)) for k in ("preprocessing_fn", "force_tf_compat_v1", "disable_statistics", "materialize", "custom_config") if k in p}
        graph = transform.output("transform_graph")
        r["transform"]["transform_graph"] = graph.uri if graph else None

    trainer = nodes.get("Trainer")
    model = trainer.output("model") if trainer else None
    r["model"] = None
    if trainer:
        p = trainer.exec_properties()
        r["trainer"] = {k: _json_prop(p.get(k)) for k in ("run_fn", "train_args", "eval_args", "custom_config") if k in p}
    if model:
        mp = props(model)
        r["model"] = {"artifact_id": model.id, "uri": model.uri, "created": _time(model.create_time_since_epoch)}
        r["code"] = {k[len("code_"):]: mp[k] for k in mp if k.startswith("code_")}
        if "git_dirty" in r["code"]:
            r["code"]["git_dirty"] = bool(r["code"]["git_dirty"])
        r["training"] = {k[len("training_"):]: _json_prop(mp[k]) for k in sorted(mp) if k.startswith("training_")}
        record = os.path.join(model.uri, "Format-Serving", "assets.extra", "training_provenance.json")
        if os.path.exists(record):
            with open(record, encoding="utf-8") as f:
                full = json.load(f)
            r["training"]["loss_curve"] = full.get("loss_curve", [])
            r["training"]["final_metrics"] = full.get("final_metrics", {})

    # The model the Evaluator compared against (its input; the resolver node records no output events).
    resolver = nodes.get("latest_blessed_model_resolver")
    evaluator_inputs = nodes["Evaluator"].inputs if "Evaluator" in nodes else {}
    baseline_model = (evaluator_inputs.get("baseline_model") or [None])[0] or (
        resolver.output("model") if resolver else None)
    r["baseline_model"] = {"artifact_id": baseline_model.id, "uri": baseline_model.uri} if baseline_model else None

    evaluator = nodes.get("Evaluator")
    r["evaluation"], r["blessed"] = None, None
    if evaluator and evaluator.output("evaluation"):
        r["evaluation"] = _evaluation(evaluator.output("evaluation").uri, evaluator.exec_properties().get("eval_config"))
    if evaluator and evaluator.output("blessing"):
        r["blessed"] = bool(props(evaluator.output("blessing")).get("blessed"))

    check = nodes.get("ServingCheck")
    r["serving_check"] = None
    if check and check.output("blessing"):
        path = os.path.join(check.output("blessing").uri, "serving_check.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                r["serving_check"] = {**json.load(f), "report": path}

    approval = nodes.get("ApprovalGate")
    r["approval"] = None
    if approval and approval.output("approval"):
        r["approval"] = {k: v for k, v in props(approval.output("approval")).items()
                         if k in ("decision", "reviewer", "comment", "decided_at", "source")}

    pusher = next((n for k, n in nodes.items() if k.endswith("Pusher")), None)
    pushed = pusher.output("pushed_model") if pusher else None
    pp = props(pushed) if pushed else {}
    if pp.get("pushed"):
        r["push"] = {"pushed": True, "version": pp.get("pushed_version"), "path": pp.get("pushed_destination"),
                     "time": _time(pushed.create_time_since_epoch), "already_serving": bool(pp.get("already_pushed"))}
    else:
        r["push"] = {"pushed": False, "reason": _why_not_pushed(r, nodes)}
    r["outcome"] = _outcome(r, nodes)
    return r


def _why_not_pushed(r: dict, nodes: dict) -> str:
    failed = [k for k, n in nodes.items() if not n.ok and n.state != "CANCELED"]
    gate = r.get("data_gate")
    if gate and not gate.get("passed"):
        return "stopped by the data gate: " + ", ".join(gate.get("blocking_features") or [])
    if failed:
        return f"node {failed[0]} did not finish ({nodes[failed[0]].state})"
    if r.get("blessed") is False:
        verdict = (r.get("evaluation") or {}).get("significance") or {}
        if verdict.get("reasons"):
            return "not blessed by the Evaluator: " + "; ".join(verdict["reasons"])
        fails = (r.get("evaluation") or {}).get("failures") or []
        return "not blessed by the Evaluator" + (": " + "; ".join(f"{f['metric']} on {f['slice']} = {f['value']}" for f in fails) if fails else "")
    if r.get("serving_check") and not r["serving_check"].get("passed"):
        return "failed the serving check: " + "; ".join(r["serving_check"].get("reasons") or [])
    if r.get("approval") and r["approval"].get("decision") != "approve":
        return f"rejected by {r['approval'].get('reviewer')}: {r['approval'].get('comment') or 'no comment'}"
    if "Trainer" not in nodes:
        return "the run did not reach training"
    return "the pipeline did not push (see the node states)"


def _outcome(r: dict, nodes: dict) -> str:
    if r["push"]["pushed"]:
        return "pushed"
    gate = r.get("data_gate")
    if gate and not gate.get("passed"):
        return "stopped_by_data_gate"
    if r.get("blessed") is False:
        return "not_blessed"
    if r.get("serving_check") and not r["serving_check"].get("passed"):
        return "failed_serving_check"
    if r.get("approval") and r["approval"].get("decision") != "approve":
        return "rejected"
    return "not_pushed"


def write(store, pipeline: str, pipeline_root: str, run_id: str) -> dict:
    """Builds the report, writes report.json and report.html, copies them beside the pushed
    SavedModel; returns {"json": path, "html": path, "report": dict}."""
    from governance import html

    report = build(store, pipeline, pipeline_root, run_id)
    folder = report_dir(pipeline_root, run_id)
    os.makedirs(folder, exist_ok=True)
    paths = {"json": os.path.join(folder, "report.json"), "html": os.path.join(folder, "report.html")}
    _atomic_write(paths["json"], json.dumps(report, indent=2, sort_keys=True, default=str))
    _atomic_write(paths["html"], html.render(report))
    push = report["push"]
    if push.get("pushed") and push.get("path") and os.path.isdir(push["path"]):
        # The report travels with the model; written whole, then renamed into place.
        target = os.path.join(push["path"], "assets.extra", REPORT_DIR)
        staging = target + f".tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        for p in paths.values():
            shutil.copy(p, staging)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
        paths["with_model"] = target
    return {**paths, "report": report}


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
