"""Runs written straight into a temporary SQLite ML Metadata, the way TFX records them:
a `pipeline_run` context, one `node` context per node, executions, artifacts and events.

Lets the run record, the summary, the report and the registry be tested in-process, in
milliseconds, for every outcome, without running a pipeline.
"""

from __future__ import annotations

import json
import os

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb

from core import nodes as N

STATES = {"COMPLETE": pb.Execution.COMPLETE, "CACHED": pb.Execution.CACHED, "FAILED": pb.Execution.FAILED,
          "CANCELED": pb.Execution.CANCELED, "RUNNING": pb.Execution.RUNNING}


def open_store(path: str) -> metadata_store.MetadataStore:
    config = pb.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = pb.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return metadata_store.MetadataStore(config)


def _value(v) -> pb.Value:
    out = pb.Value()
    if isinstance(v, bool) or isinstance(v, int):
        out.int_value = int(v)
    elif isinstance(v, float):
        out.double_value = v
    else:
        out.string_value = str(v)
    return out


class FakeRun:
    """One pipeline run; `node()` adds an execution with its input and output artifacts."""

    def __init__(self, store, root: str, pipeline: str = "taxi", run_id: str = "run-1"):
        self.store, self.root, self.pipeline, self.run_id = store, root, pipeline, run_id
        run_type = store.put_context_type(pb.ContextType(name="pipeline_run"))
        self.node_type = store.put_context_type(pb.ContextType(name="node"))
        existing = store.get_context_by_type_and_name("pipeline_run", run_id)
        self.run_ctx = existing or pb.Context(type_id=run_type, name=run_id)
        if existing is None:
            [self.run_ctx.id] = store.put_contexts([self.run_ctx])

    def artifact(self, type_name: str, key: str, props: dict | None = None, files: dict | None = None) -> pb.Artifact:
        type_id = self.store.put_artifact_type(pb.ArtifactType(name=type_name))
        uri = os.path.join(self.root, type_name, key, os.urandom(4).hex())
        os.makedirs(uri, exist_ok=True)
        for name, content in (files or {}).items():
            with open(os.path.join(uri, name), "w", encoding="utf-8") as f:
                f.write(content if isinstance(content, str) else json.dumps(content))
        a = pb.Artifact(type_id=type_id, uri=uri, state=pb.Artifact.LIVE)
        for k, v in (props or {}).items():
            a.custom_properties[k].CopyFrom(_value(v))
        [a.id] = self.store.put_artifacts([a])
        return a

    def node(self, node_id: str, state: str = "COMPLETE", inputs: dict | None = None,
             outputs: dict | None = None, exec_props: dict | None = None) -> pb.Execution:
        type_id = self.store.put_execution_type(pb.ExecutionType(name=f"fake.{node_id}"))
        execution = pb.Execution(type_id=type_id, last_known_state=STATES[state])
        for k, v in (exec_props or {}).items():
            execution.custom_properties[k].CopyFrom(_value(v))
        node_ctx = self.store.get_context_by_type_and_name("node", f"{self.pipeline}.{node_id}")
        if node_ctx is None:
            node_ctx = pb.Context(type_id=self.node_type, name=f"{self.pipeline}.{node_id}")
            [node_ctx.id] = self.store.put_contexts([node_ctx])
        pairs = []
        for kind, arts in ((pb.Event.INPUT, inputs or {}), (pb.Event.OUTPUT, outputs or {})):
            for key, artifact_list in arts.items():
                for a in artifact_list:
                    event = pb.Event(type=kind)
                    event.path.steps.add().key = key
                    pairs.append((a, event))
        execution.id, _, _ = self.store.put_execution(execution, pairs, [self.run_ctx, node_ctx],
                                                      reuse_context_if_already_exist=True)
        return execution


def gate_report(passed: bool, span: int = 201612, blocking=()) -> dict:
    return {"passed": passed, "blocking_features": list(blocking), "baseline_span": span - 1, "span": span,
            "anomalies": [{"feature": f, "kind": "drift", "split": "drift",
                           "reasons": [{"type": "SCALE", "description": f"{f}: scale 7.1 exceeds 1.3"}]}
                          for f in blocking],
            "drift": [], "completeness": [], "volume": None, "opt_out": {}}


def skew_report(action: str, skewed=()) -> dict:
    check = {"feature": "trip_miles", "measure": "jsd", "value": 0.31, "threshold": 0.05, "drifted": bool(skewed),
             "description": "trip_miles: Jensen-Shannon divergence 0.31 vs training data (span 201611) exceeds"}
    return {"action": action, "checked": True, "passed": not (skewed and action == "block"),
            "skewed_features": list(skewed), "served_version": 1700000000, "training_span": 201611,
            "logged_requests": 120, "examples": 120, "skew": [check], "completeness": [],
            "anomalies": [{"feature": "payment_type", "split": "serving", "kind": "schema", "reasons": [
                {"type": "ENUM_TYPE_UNEXPECTED_STRING_VALUES", "description": "Unexpected string values: Bitcoin"}]}],
            "request_log_prefix": "/w/request_logs/taxi/log"}


def write_run(store, root: str, scenario: str, run_id: str = "run-1", span: int = 201612) -> FakeRun:
    """A run that ends as `scenario`: pushed, not_blessed, failed_serving_check, rejected,
    awaiting_approval, stopped_by_data_gate, stopped_by_serving_skew, trainer_crashed."""
    run = FakeRun(store, root, run_id=run_id)
    examples = run.artifact("Examples", "examples", {"span": span})
    run.node(N.CSV_EXAMPLE_GEN, outputs={"examples": [examples]})
    stats = run.artifact("ExampleStatistics", "statistics")
    run.node(N.STATISTICS_GEN, inputs={"examples": [examples]}, outputs={"statistics": [stats]})
    if scenario == "stopped_by_data_gate":
        gate = run.node(N.DATA_GATE, "FAILED", inputs={"examples": [examples]})
        folder = os.path.join(root, "DataGate", "stopped", f"span-{span}-{gate.id}")
        os.makedirs(folder)
        with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
            json.dump(gate_report(False, span, ["trip_miles"]), f)
        return run
    report = run.artifact("DataGateReport", "report", {"span": span, "passed": 1},
                          files={"report.json": gate_report(True, span)})
    run.node(N.DATA_GATE, inputs={"examples": [examples]}, outputs={"report": [report]})
    if scenario == "stopped_by_serving_skew":
        skew = run.node(N.SERVING_SKEW, "FAILED")
        folder = os.path.join(root, "ServingSkew", "stopped", f"span-{span}-{skew.id}")
        os.makedirs(folder)
        with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
            json.dump(skew_report("block", ["trip_miles"]), f)
        return run
    # Other runs: traffic skewed, but the config only warns.
    skew = run.artifact("ServingSkewReport", "report", files={"report.json": skew_report("warn", ["trip_miles"])})
    run.node(N.SERVING_SKEW, outputs={"report": [skew]})
    run.node(N.TRANSFORM, inputs={"examples": [examples]})
    if scenario == "trainer_crashed":
        run.node(N.TRAINER, "FAILED", inputs={"examples": [examples]})
        return run
    model = run.artifact("Model", "model", {"training_strategy": "default", "training_precision_policy": "float32",
                                            "code_git_commit": "abc123", "code_git_dirty": 0})
    run.node(N.TRAINER, inputs={"examples": [examples]}, outputs={"model": [model]})
    blessed = scenario != "not_blessed"
    blessing = run.artifact("ModelBlessing", "blessing", {"blessed": int(blessed)})
    run.node(N.EVALUATOR, inputs={"model": [model]}, outputs={"blessing": [blessing]})
    if not blessed:
        run.node(N.PUSHER, "CANCELED", inputs={"model": [model]})
        return run
    check_ok = scenario != "failed_serving_check"
    check = run.artifact("InfraBlessing", "blessing", {"blessed": int(check_ok)}, files={"serving_check.json": {
        "passed": check_ok, "reasons": [] if check_ok else ["p99 latency 900 ms over 500 ms"],
        "latency_ms": {"p50": 3.0, "p99": 5.0}}})
    run.node(N.SERVING_CHECK, inputs={"model": [model]}, outputs={"blessing": [check]})
    if not check_ok:
        return run
    if scenario == "awaiting_approval":
        run.node(N.APPROVAL_GATE, "FAILED", inputs={"model": [model]})
        return run
    decision = "reject" if scenario == "rejected" else "approve"
    approval = run.artifact("ModelApproval", "approval", {"decision": decision, "reviewer": "ana",
                                                          "comment": "looks fine", "decided_at": "2026-11-30"})
    run.node(N.APPROVAL_GATE, inputs={"model": [model]}, outputs={"approval": [approval]})
    if scenario == "rejected":
        run.node(N.PUSHER, "CANCELED", inputs={"model": [model]})
        return run
    pushed = run.artifact("PushedModel", "pushed_model", {"pushed": 1, "pushed_version": "1700000000",
                                                          "pushed_destination": "/serving/taxi/1700000000"})
    run.node(N.PUSHER, inputs={"model": [model]}, outputs={"pushed_model": [pushed]})
    return run
