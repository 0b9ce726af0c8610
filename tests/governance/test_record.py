"""One run record: the summary, the report, `retrain models` and the exit code agree on
every outcome, because they all read `governance.record` (in-process, temp SQLite MLMD)."""

from __future__ import annotations

import json
import os

import pytest

from core import exit_codes, layout, outcome, run_folder
from core import nodes as N
from core.results import NodeResult
from governance import record as record_lib
from governance import registry
from governance import report as report_lib
from runner import summary as summary_lib
from tests.governance.fake_runs import open_store, write_run

SCENARIOS = {
    # scenario: (outcome, exit code)
    "pushed": (outcome.PUSHED, exit_codes.OK),
    "not_blessed": (outcome.NOT_BLESSED, exit_codes.OK),
    "failed_serving_check": (outcome.FAILED_SERVING_CHECK, exit_codes.OK),
    "rejected": (outcome.REJECTED, exit_codes.OK),
    "awaiting_approval": (outcome.AWAITING_APPROVAL, exit_codes.AWAITING_APPROVAL),
    "stopped_by_data_gate": (outcome.STOPPED_BY_DATA_GATE, exit_codes.GATE_STOPPED),
    "stopped_by_serving_skew": (outcome.STOPPED_BY_SERVING_SKEW, exit_codes.GATE_STOPPED),
    "trainer_crashed": ("failed_at_Trainer", exit_codes.FAILED),
}


@pytest.fixture
def workdir(tmp_path):
    os.makedirs(tmp_path / "metadata")
    return str(tmp_path)


def _store(workdir):
    return open_store(layout.metadata_path(workdir, "taxi"))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_summary_report_registry_and_exit_code_agree(workdir, scenario):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, scenario)
    expected, code = SCENARIOS[scenario]

    record = record_lib.read(store, "taxi", root, "run-1")
    summary = summary_lib.build_summary(record)
    written = report_lib.write(record, root)
    assert record.outcome.name == summary["outcome"] == written["report"]["outcome"] == expected
    assert outcome.exit_code(summary["outcome"]) == record.outcome.exit_code == code
    html = open(written["html"]).read()
    assert os.path.exists(written["html"]) and expected.replace("_", " ").upper() in html
    if scenario != "stopped_by_data_gate":  # the skew check ran: in the summary and the report
        skew = summary["serving_skew"]
        assert skew["skewed_features"] == ["trip_miles"] and skew["report"].endswith("report.json")
        assert "Serving skew: " in html and "trip_miles" in html and "Unexpected string values: Bitcoin" in html
        assert "serving skew" in summary_lib.format_summary(summary)
        if scenario == "stopped_by_serving_skew":
            assert record.outcome.reason == "stopped by serving skew: trip_miles" and not skew["passed"]
        else:
            assert skew["passed"] and "WARNING: trip_miles" in html
    rows = registry.candidates(store, "taxi", root, workdir, "taxi")
    if record.model:  # runs that produced a candidate are in the registry, with the same outcome
        [row] = rows
        assert row["outcome"] == expected and row["run_id"] == "run-1"
        assert row["pushed_version"] == (1700000000 if expected == outcome.PUSHED else None)
    else:
        assert rows == []
    if expected != outcome.PUSHED:  # the report says why, in the words of the outcome's reason
        assert written["report"]["push"] == {"pushed": False, "reason": record.outcome.reason}
        assert record.outcome.reason
        # The summary carries it too: an orchestrator's alert quotes it (retrain summary --outcome-line).
        assert summary["reason"] == record.outcome.reason


def test_sections_read_back_what_the_nodes_recorded(workdir):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "pushed", span=201611)
    record = record_lib.read(store, "taxi", root, "run-1")
    assert record.span == 201611
    assert record.data_gate["passed"] and record.data_gate["baseline_span"] == 201610
    assert record.training == {"strategy": "default", "precision_policy": "float32"}
    assert record.code == {"git_commit": "abc123", "git_dirty": False}
    assert record.serving_check["latency_ms"]["p99"] == 5.0
    assert record.approval["decision"] == "approve" and record.blessed is True
    assert record.push["pushed"] and record.push["version"] == "1700000000"
    summary = summary_lib.build_summary(record)
    assert summary["pushed"] == {"version": "1700000000", "path": "/serving/taxi/1700000000", "already_serving": False,
                                 "signature": None}  # a fake version folder: nothing signed
    assert summary["approval"]["reviewer"] == "ana"
    assert [n for n, s in summary["nodes"].items() if s["status"] == "complete"][:2] == [N.CSV_EXAMPLE_GEN, N.STATISTICS_GEN]


def test_gate_stop_names_the_feature_everywhere(workdir):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "stopped_by_data_gate")
    record = record_lib.read(store, "taxi", root, "run-1")
    summary = summary_lib.build_summary(record)
    assert summary["data_gate"]["blocking_features"] == ["trip_miles"]
    assert "STOPPED: trip_miles" in summary_lib.format_summary(summary)
    assert record.outcome.reason == "stopped by the data gate: trip_miles"


def test_run_folder_results_complete_what_mlmd_lacks(workdir):
    """A node that failed before MLMD recorded an execution still decides the outcome, and
    the runner's error text and timings reach every reader."""
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "trainer_crashed")
    folder = layout.run_dir(workdir, "taxi", "run-1")
    run_folder.write_info(folder, {"run_id": "run-1", "pipeline": "taxi", "span": 201612, "pipeline_root": root,
                                   "metadata_path": layout.metadata_path(workdir, "taxi"), "backfilled_spans": [201611],
                                   "nodes": [N.CSV_EXAMPLE_GEN, N.TRAINER]})
    run_folder.write_result(folder, NodeResult(N.TRAINER, "failed", seconds=3.25, error="OOM: killed"))
    run_folder.write_result(folder, NodeResult(N.CSV_EXAMPLE_GEN, "complete", seconds=1.0))
    record = record_lib.read_folder(folder, store)
    assert list(record.nodes)[:2] == [N.CSV_EXAMPLE_GEN, N.TRAINER]  # run order from run.json
    assert record.nodes[N.TRAINER].seconds == 3.2 and record.nodes[N.TRAINER].state == "FAILED"
    assert record.outcome.name == "failed_at_Trainer" and "OOM: killed" in record.outcome.reason
    assert record.backfilled_spans == [201611]
    summary = summary_lib.build_summary(record)
    assert summary["error"] == "OOM: killed" and summary["backfilled_spans"] == [201611]


def test_an_approval_pending_result_is_awaiting_approval(workdir):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "awaiting_approval")
    pending = NodeResult(N.APPROVAL_GATE, "failed", error="awaiting approval of model 3", approval_pending=True)
    record = record_lib.read(store, "taxi", root, "run-1", results=[pending])
    assert record.outcome.name == outcome.AWAITING_APPROVAL
    assert record.outcome.reason == "awaiting approval of model 3"


def test_unknown_run_is_a_lookup_error(workdir):
    store = _store(workdir)
    with pytest.raises(LookupError, match="no run 'nope'"):
        record_lib.read(store, "taxi", layout.pipeline_root(workdir, "taxi"), "nope")


def test_every_outcome_has_an_exit_code():
    for name in (outcome.PUSHED, outcome.NOT_BLESSED, outcome.FAILED_SERVING_CHECK, outcome.REJECTED,
                 outcome.NOT_PUSHED, outcome.STOPPED_BY_DATA_GATE, outcome.STOPPED_BY_SERVING_SKEW,
                 outcome.AWAITING_APPROVAL,
                 outcome.FAILED_BACKFILLING, "failed_at_Transform"):
        assert outcome.exit_code(name) in (0, 1, 3, 4)
    with pytest.raises(ValueError, match="unknown run outcome"):
        outcome.exit_code("maybe")


def test_registry_shows_the_run_that_judged_the_candidate_last(workdir):
    """Awaiting approval in one run, approved and pushed in the next (the Trainer cached):
    the row is the second run's, with its outcome."""
    from tests.governance.fake_runs import FakeRun

    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    first = write_run(store, root, "awaiting_approval", run_id="run-1")
    [model] = store.get_artifacts_by_type("Model")
    again = FakeRun(store, root, run_id="run-2")
    again.node(N.TRAINER, "CACHED", outputs={"model": [model]})
    approval = again.artifact("ModelApproval", "approval", {"decision": "approve", "reviewer": "ana"})
    again.node(N.APPROVAL_GATE, inputs={"model": [model]}, outputs={"approval": [approval]})
    pushed = again.artifact("PushedModel", "pushed_model", {"pushed": 1, "pushed_version": "17",
                                                            "pushed_destination": "/serving/taxi/17"})
    again.node(N.PUSHER, inputs={"model": [model]}, outputs={"pushed_model": [pushed]})
    assert first.run_id == "run-1"
    [row] = registry.candidates(store, "taxi", root, workdir, "taxi")
    assert row["run_id"] == "run-2" and row["outcome"] == outcome.PUSHED and row["pushed_version"] == 17
    assert record_lib.read(store, "taxi", root, "run-1").outcome.name == outcome.AWAITING_APPROVAL


def test_lineage_chain_goes_from_spans_to_the_pushed_version(workdir):
    store = _store(workdir)
    write_run(store, layout.pipeline_root(workdir, "taxi"), "pushed", span=201612)
    lines = registry.chain(store, 1700000000)
    assert lines[0].startswith("span 201612: CsvExampleGen examples #") and "(run run-1)" in lines[0]
    assert lines[0].endswith("passed")  # the span's gate report said so
    assert any("-> Trainer model #" in line and "commit abc123" in line for line in lines)
    assert any("Evaluator blessing" in line and "blessed=1" in line for line in lines)
    assert any("ApprovalGate: approve by ana" in line for line in lines)
    assert lines[-1].endswith("version 1700000000 at /serving/taxi/1700000000")
    with pytest.raises(LookupError, match="no pushed version 5"):
        registry.chain(store, 5)


def test_the_models_view_document_is_strict_json_where_a_rate_is_undefined():
    """TFMA gives NaN for a rate a slice cannot define (an FNR without positives); the view
    document the Models view serves must still be JSON (Starlette refuses NaN)."""
    import json
    import math

    from governance import models_view

    text = models_view.to_json({"slices": {"payment_type=Cash": {"fnr": {"candidate": math.nan,
                                                                         "interval": [math.inf, 1.0]}}}})
    def refuse(name):
        raise ValueError(name)

    doc = json.loads(text, parse_constant=refuse)
    assert doc["slices"]["payment_type=Cash"]["fnr"] == {"candidate": None, "interval": [None, 1.0]}


def test_a_sensitive_features_domain_check_lists_no_value_in_the_report():
    # The gate's domain check of a census tract names the values the history holds.
    gate = {"anomalies": [], "row_checks": {
        "domains": [{"check": "domain", "feature": "pickup_census_tract", "checked": 70, "outside": 1,
                     "description": "pickup_census_tract: 1 of 70 values never seen (17031081401)",
                     "examples": ["17031980000"]},
                    {"check": "domain", "feature": "company", "checked": 70, "outside": 0,
                     "description": "company: 0 of 70 (Flash Cab)", "examples": []}],
        "accepted_values": {"pickup_census_tract": ["17031081401"], "company": ["Flash Cab"]}, "mistyped": {}}}
    policy = {"sensitive": {"pickup_census_tract": "pseudonymous"}}
    out = record_lib.redact_anomalies(gate, policy)
    assert "1703" not in json.dumps(out) and "Flash Cab" in json.dumps(out)
    [tract, company] = out["row_checks"]["domains"]
    assert tract["description"] == ("pickup_census_tract: 1 of 70 values outside the domain; values withheld:"
                                    " pickup_census_tract is pseudonymous (feature policy)")
    assert company == gate["row_checks"]["domains"][1]
    assert record_lib.redact_anomalies(gate, None) is gate


def test_the_feature_policy_is_reported_and_no_sensitive_value_is_printed(workdir):
    # payment_type marked personal: the skew report's TFDV description quotes a served value.
    rules = {"trip_miles": {"pii": "none", "use_in_model": "allowed", "log": "keep"},
             "payment_type": {"pii": "personal", "use_in_model": "forbidden", "reason": "a test's rule", "log": "drop"}}
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "stopped_by_serving_skew")
    policy = {"source": "/r/schemas/taxi/feature_policy.yaml", "sha256": "ab" * 32, "features": rules}
    record = record_lib.read(store, "taxi", root, "run-1", feature_policy=policy)
    assert record.feature_policy["forbidden"] == {"payment_type": "a test's rule"}
    assert record.feature_policy["sensitive"] == {"payment_type": "personal"}
    [anomaly] = record.serving_skew["anomalies"]
    assert "Bitcoin" not in str(anomaly) and "withheld: payment_type is personal" in str(anomaly)
    from governance import html as html_lib

    page = html_lib.render(report_lib.build(record))
    assert "Bitcoin" not in page
    assert "Feature policy" in page and "forbidden in the model: payment_type" in page and "a test&#x27;s rule" in page
    summary = summary_lib.build_summary(record)
    assert summary["feature_policy"]["not_logged"] == ["payment_type"]
    assert "feature policy   1 forbidden in the model (payment_type)" in summary_lib.format_summary(summary)
    # Without a policy the report says so.
    plain = html_lib.render(report_lib.build(record_lib.read(store, "taxi", root, "run-1")))
    assert "No feature policy" in plain


def test_sensitive_features_keep_their_counts_and_lose_their_values():
    features = [{"name": "zip", "kind": "categorical", "missing": 0.1, "unique": 40,
                 "top": [{"value": "60614", "count": 9}]},
                {"name": "fare", "kind": "numeric", "missing": 0.0, "mean": 9.5, "min": 2.0, "max": 80.0,
                 "histogram": [{"low": 2.0, "high": 80.0, "count": 10}]}]
    out = record_lib.redact(features, {"sensitive": {"zip": "personal"}})
    assert out[0] == {"name": "zip", "kind": "categorical", "missing": 0.1, "unique": 40, "redacted": "personal"}
    assert out[1] == features[1]
    assert record_lib.redact(features, None) == features


def test_a_report_carries_the_scorecard_and_the_cost_of_its_candidate(workdir):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "pushed", span=201611)
    results = [NodeResult(N.TRAINER, "complete", seconds=3.0,
                          cost={"cpu_seconds": 4.5, "peak_rss_mb": 800.0, "accelerator_seconds": 0.0,
                                "energy_j": 190.0, "energy_method": "tdp-estimate", "wall_seconds": 3.0})]
    record = record_lib.read(store, "taxi", root, "run-1", results)
    assert record.cost["cpu_seconds"] == 4.5 and record.cost["energy_method"] == "tdp-estimate"
    written = report_lib.write(record, root, scorecard_context={"retention_days": 30.0})
    card = written["report"]["scorecard"]
    assert len(card["tests"]) == 28 and card["runs"] == 1
    with open(written["html"]) as f:
        page = f.read()
    assert "Cost of this candidate" in page and "4.5 CPU-seconds" in page and "CodeCarbon" in page
    assert f"ML Test Score: {card['score']:g}" in page
    assert summary_lib.build_summary(record)["cost"]["energy_j"] == 190.0


def test_a_node_error_quoting_a_sensitive_features_values_is_withheld(workdir):
    store = _store(workdir)
    root = layout.pipeline_root(workdir, "taxi")
    write_run(store, root, "stopped_by_data_gate")
    error = "DataGateError: span 201612 failed the data gate: payment_type (values missing from the schema: Bitcoin)"
    results = [NodeResult(N.DATA_GATE, "failed", error=error, gate_stopped=True)]
    policy = {"features": {"payment_type": {"pii": "personal", "use_in_model": "allowed", "log": "drop"}}}
    record = record_lib.read(store, "taxi", root, "run-1", results, feature_policy=policy)
    assert "Bitcoin" not in record.nodes[N.DATA_GATE].error
    assert record.nodes[N.DATA_GATE].error.startswith("DataGateError: withheld, it concerns sensitive feature(s)"
                                                      " payment_type")
    assert "Bitcoin" not in str(record.to_dict())
    assert "Bitcoin" in record_lib.read(store, "taxi", root, "run-1", results).nodes[N.DATA_GATE].error  # no policy
