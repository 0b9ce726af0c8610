"""The ML Test Score scorecard (governance/scorecard.py): each test's status from a check
that ran, with its inputs, threshold and outcome; on a crafted workdir every rule can fail,
and passes only where the evidence is real; configuration alone earns nothing."""

import copy
import datetime as dt
import hashlib
import json
import os

import pytest

from governance import attestation, scorecard

NOW = dt.datetime(2026, 12, 10, 12, 0, tzinfo=dt.timezone.utc)


def _report(run_id="r2", generated_at="2026-12-02T00:00:00+00:00", version=None) -> dict:
    return {
        "run_id": run_id, "generated_at": generated_at, "_path": f"/w/governance/{run_id}/report.json",
        "schema": {"source": "schemas/taxi/schema.pbtxt", "sha256": "ab" * 32},
        "data_gate": {"passed": True, "blocking_features": []},
        "serving_skew": {"checked": True, "passed": True, "skewed_features": [], "examples": 120},
        "feature_policy": {"path": "schemas/taxi/feature_policy.yaml", "forbidden": {"tract": "why"},
                           "sensitive": {"tract": "pseudonymous"}, "not_logged": ["tract"], "logged_hashed": []},
        "code": {"git_commit": "abc", "git_dirty": False},
        "model": {"runtime": {"sbom_sha256": "cd" * 32}},
        "data": {"window": [{"span": 201611}, {"span": 201612}]},
        "training": {"hparams": {"seed": 42}, "numerics": {"loss_finite_every_step": True, "eval_outputs_finite": True,
                                                            "eval_outputs_checked": 100},
                     "importance": {"computed": True, "bytes_per_example": 500, "examples": 85, "confidence": 0.95,
                                    "inputs": [{"input": "fare_xf", "raw_feature": "fare", "contributes": True,
                                                "bytes_per_example": 12.0}]}},
        "cost": {"cpu_seconds": 60.0, "energy_j": 2500.0, "energy_method": "tdp-estimate"},
        "evaluation": {"overall": {"auc": {"candidate": 0.80}}, "slices": {"trip_start_hour=1": {}}, "significance": {
            "blessed": True, "reasons": [],
            "staleness": {"model_artifact_id": 7, "metric": "auc", "age_spans": 2, "max_drop": 0.05,
                          "max_age_spans": 6, "loss_per_span": 0.004, "drop_kind": "drop", "alerts": [],
                          "points": [{"span": 201611, "age_spans": 1}, {"span": 201612, "age_spans": 2}],
                          "reason": "the served model is 2 span(s) old, lost 0.008 on the new span"},
            "simple_baseline": {"judged": True, "refused": False, "metric": "auc", "reason": "lead +0.01"},
            "fairness": {"judged": True, "refused": False, "threshold": 0.1, "reason": "within max_gap"},
            "new_span": {"judged": True, "collapsed": False, "bound": -0.01, "reason": "steady"},
            "runtime": {"reason": "the same runtime as the baseline"}}},
        "serving_check": {"passed": True, "max_abs_diff": 0.0, "latency_ms": {"p99": 3.0},
                          "performance": {"figures": {"latency_p50_ms": {"baseline": 1.5, "candidate": 1.4}},
                                          "refusals": []}},
        "approval": {"decision": "approve", "reviewer": "ana", "decided_at": "2026-12-01T10:00:00+00:00"},
        "push": {"pushed": True, "version": str(version or 1700000000)}, "blessed": True,
        "baseline_model": {"artifact_id": 7},
        "nodes": {"Trainer": {"status": "complete"}, "Evaluator": {"status": "complete"}},
    }


def _decision(id, action, canary, stable, canary_auc=0.8, stable_auc=0.8, labelled=500, **extra) -> dict:
    """A rollout decision as core.metadata_queries.rollout_decisions returns it."""
    measured = labelled >= 200
    return {"id": id, "model": "taxi", "action": action, "metric": "auc", "canary_version": canary,
            "stable_version": stable, "decided_at": f"2026-12-0{min(id, 9)}T00:00:00+00:00", "applied": 1,
            "reason": "measured" if measured else f"waiting for labels: canary {labelled}, stable {labelled}",
            "live": {"canary": {"labelled": labelled, "auc": {"value": canary_auc}},
                     "stable": {"labelled": labelled, "auc": {"value": stable_auc}}},
            "difference": {"estimate": canary_auc - stable_auc, "low": -0.01, "high": 0.01} if measured else None,
            **extra}


CONTEXT = {"rollout_mode": "canary", "now": NOW.isoformat(), "decisions": [], "attestations": [],
           "settings": {"max_feature_bytes": 100.0, "min_versions": 5, "confidence": 0.95}}


def _status(card, test_id):
    return scorecard.find(card, test_id)


def _card(report=None, **context):
    reports = report if isinstance(report, list) else [report or _report()]
    return scorecard.compute(reports, {**CONTEXT, **context})


def _write(tmp_path, report) -> str:
    folder = tmp_path / "governance" / report["run_id"]
    os.makedirs(folder, exist_ok=True)
    body = {k: v for k, v in report.items() if not k.startswith("_")}
    (folder / "report.json").write_text(json.dumps(body))
    return str(folder / "report.json")


def test_every_automated_point_names_its_check_inputs_threshold_and_outcome(tmp_path):
    _write(tmp_path, _report())
    [report] = scorecard.read_reports(str(tmp_path))
    digest = hashlib.sha256(open(report["_path"], "rb").read()).hexdigest()
    assert report["_sha256"] == digest
    card = scorecard.compute([report], CONTEXT)
    assert len(card["tests"]) == 28 and {t["section"] for t in card["tests"]} == set(scorecard.SECTIONS)
    automated = [t for t in card["tests"] if t["status"].startswith("automated")]
    assert automated
    for t in automated:
        e = t["evidence"]
        assert e["check"] and e["outcome"] and e["threshold"] and e["rederive"], t["id"]
        assert any(i.get("sha256") == digest for i in e["inputs"]) or t["id"] in ("data.5",), t["id"]
    simple = _status(card, "model.5")
    assert simple["status"] == "automated-passing" and simple["points"] == 1
    assert simple["evidence"]["run"] == "r2" and simple["evidence"]["file"] == report["_path"]
    assert card["score"] == min(card["sections"].values())
    # --explain: the file, its digest and the field to read, as commands a person can type.
    text = scorecard.explain(card, "model.5")
    assert f"sha256sum {report['_path']}   # expect {digest}" in text
    assert f"jq '.evaluation.significance.simple_baseline' {report['_path']}" in text
    assert "rule: passes when refused is false" in text
    with pytest.raises(KeyError):
        scorecard.explain(card, "model.9")
    assert scorecard.find(card, "Infra 7")["id"] == "infrastructure.7"


def test_configuration_alone_earns_nothing():
    # An empty workdir, a pipeline configured with everything: no check ran, no point.
    empty = scorecard.compute([], {**CONTEXT, "retention_days": 30.0, "keep_versions": 5})
    assert {t["status"] for t in empty["tests"]} == {"missing"}
    assert empty["score"] == 0.0 and sum(empty["sections"].values()) == 0.0
    # A pushed model with its versions kept, but no rollback ever done: not 0.5 for "never exercised".
    assert _status(_card(), "infrastructure.7")["status"] == "missing"


def test_manual_tests_score_half_only_with_a_valid_attestation(tmp_path):
    evidence = tmp_path / "ci-run.log"
    evidence.write_text("tests/pipelines/taxi: 14 passed")
    made = attestation.entry("Data 6", "Ana Lima", str(evidence), "2027-03-01", now=NOW)
    assert made["test"] == "data.6" and made["evidence_sha256"] == hashlib.sha256(evidence.read_bytes()).hexdigest()
    recorded = [{**made, "pipeline": "taxi", "id": 11}]
    card = _card(attestations=recorded)
    six = _status(card, "data.6")
    assert six["status"] == "manual" and six["points"] == 0.5
    assert "attested by Ana Lima 0 days ago" in six["evidence"]["detail"]
    assert {"kind": "mlmd_execution", "type": "ScorecardAttestation", "id": 11} in six["evidence"]["inputs"]
    assert _status(card, "data.7")["status"] == "missing"  # another test's attestation does not count
    # Listed with its age, and it expires.
    later = NOW + dt.timedelta(days=40)
    assert "40" in attestation.format_list(recorded, later) and "valid" in attestation.format_list(recorded, later)
    expired = _card(attestations=recorded, now=dt.datetime(2027, 3, 2, tzinfo=dt.timezone.utc).isoformat())
    assert _status(expired, "data.6")["status"] == "missing"
    assert "expired on 2027-03-01" in _status(expired, "data.6")["evidence"]["detail"]
    # Evidence changed after the fact: void.
    evidence.write_text("tests/pipelines/taxi: 14 passed, edited")
    assert _status(_card(attestations=recorded), "data.6")["status"] == "missing"
    # A URL is evidence too; rollback takes an attestation until a rollback is recorded.
    url = attestation.entry("infra.7", "Bo", "https://ci.example.org/runs/42", "2027-01-01", now=NOW)
    assert _status(_card(attestations=[{**url, "id": 12}]), "infrastructure.7")["status"] == "manual"
    # What cannot be attested.
    for args, message in [(("model.5", "Bo", str(evidence), "2027-01-01"), "only tests done by hand"),
                          (("data.6", " ", str(evidence), "2027-01-01"), "--by"),
                          (("data.6", "Bo", str(tmp_path / "nope.txt"), "2027-01-01"), "--evidence"),
                          (("data.6", "Bo", str(evidence), "2026-12-01"), "after today"),
                          (("data.6", "Bo", str(evidence), "2029-01-01"), "at most 366 days"),
                          (("data.6", "Bo", str(evidence), "soon"), "YYYY-MM-DD")]:
        with pytest.raises(attestation.AttestationError, match=message):
            attestation.entry(*args, now=NOW)


def test_attestations_are_stored_in_ml_metadata(tmp_path):
    from tests.governance.fake_runs import open_store

    store = open_store(str(tmp_path / "mlmd.sqlite"))
    assert attestation.read(store, "taxi") == []
    made = attestation.entry("data.7", "Ana", "https://ci.example.org/1", "2027-01-01", now=NOW)
    first = attestation.record(store, "taxi", made)
    attestation.record(store, "other", made)
    second = attestation.record(store, "taxi", {**made, "by": "Bo"})
    found = attestation.read(store, "taxi")
    assert [a["id"] for a in found] == [first, second] and found[0]["evidence"] == "https://ci.example.org/1"
    assert attestation.current(found, "data.7", NOW)["by"] == "Bo"  # the newest supersedes
    assert "superseded" in attestation.format_list(found, NOW)


def test_canaried_needs_a_decision_on_live_labels_for_this_model():
    waiting = _decision(1, "continue", 2, 1, labelled=0)
    assert _status(_card(decisions=[waiting]), "infrastructure.6")["status"] == "missing"
    assert "waiting for labels" in _status(_card(decisions=[waiting]), "infrastructure.6")["evidence"]["detail"]
    promoted = _decision(2, "promote", 2, 1)
    card = _card(decisions=[waiting, promoted])
    canaried = _status(card, "infrastructure.6")
    assert canaried["status"] == "automated-passing" and canaried["evidence"]["outcome"] == "promote"
    assert canaried["evidence"]["inputs"][0] == {"kind": "mlmd_execution", "type": "RolloutDecision", "id": 2}
    assert "WHERE execution_id = 2" in scorecard.explain(card, "infrastructure.6")
    inconclusive = _decision(3, "inconclusive", 3, 2)
    assert _status(_card(decisions=[inconclusive]), "infrastructure.6")["status"] == "automated-passing"
    # Direct mode: no canary, whatever was decided before the switch.
    assert _status(_card(decisions=[promoted], rollout_mode="direct"), "infrastructure.6")["status"] == "missing"
    # A sample-ratio mismatch voids the comparison (read defensively: the controller's field).
    mismatched = _decision(4, "inconclusive", 4, 3, srm={"mismatch": True, "p_value": 1e-9}, blocked_by="srm")
    assert _status(_card(decisions=[mismatched]), "infrastructure.6")["status"] == "missing"
    checked = _decision(5, "promote", 4, 3, srm={"mismatch": False, "p_value": 0.4})
    assert _status(_card(decisions=[checked]), "infrastructure.6")["status"] == "automated-passing"
    assert "sample ratio checked" in _status(_card(decisions=[checked]), "infrastructure.6")["evidence"]["threshold"]


def test_offline_and_live_must_correlate_over_enough_versions():
    reports, decisions = [], []
    offline = [0.70, 0.74, 0.78, 0.80, 0.83, 0.86]
    for i, auc in enumerate(offline, start=1):
        reports.insert(0, _report(f"r{i}", version=i))
        reports[0]["evaluation"]["overall"]["auc"]["candidate"] = auc
    for i in range(2, 7):  # each canary v against stable v-1, live a little below offline
        decisions.append(_decision(i, "promote", i, i - 1, canary_auc=offline[i - 1] - 0.03,
                                   stable_auc=offline[i - 2] - 0.03))
    card = _card(reports, decisions=decisions)
    corr = _status(card, "model.2")
    assert corr["status"] == "automated-passing", corr
    assert "r +1.000" in corr["evidence"]["detail"] and "6 versions" in corr["evidence"]["detail"]
    # Live that moves against offline: the check fails.
    against = [_decision(i, "promote", i, i - 1, canary_auc=0.9 - offline[i - 1], stable_auc=0.9 - offline[i - 2])
               for i in range(2, 7)]
    assert _status(_card(reports, decisions=against), "model.2")["status"] == "automated-failing"
    # Too few versions: nothing measured.
    assert _status(_card(reports, decisions=decisions[:2]), "model.2")["status"] == "missing"
    # A decision waiting for labels carries no live value to correlate.
    waiting = [_decision(i, "continue", i, i - 1, labelled=0) for i in range(2, 7)]
    assert _status(_card(reports, decisions=waiting), "model.2")["status"] == "missing"
    # Model 2 and Monitoring 7 do not read the same thing: one decision is no correlation.
    one = _card(reports, decisions=decisions[-1:])
    assert _status(one, "model.2")["status"] == "missing"
    assert _status(one, "monitoring.7")["status"] == "automated-passing"


def test_live_quality_fails_on_a_rollback_or_the_live_floor_and_needs_labels():
    assert _status(_card(decisions=[_decision(1, "continue", 2, 1, labelled=0)]), "monitoring.7")["status"] == "missing"
    rolled = _decision(2, "rollback", 3, 2, canary_auc=0.7)
    assert _status(_card(decisions=[rolled]), "monitoring.7")["status"] == "automated-failing"
    floor = _decision(3, "promote", 4, 3, alerts=["live_floor: stable version 3 live auc 0.6 is past the floor 0.65"])
    assert _status(_card(decisions=[floor]), "monitoring.7")["status"] == "automated-failing"
    promoted = _decision(4, "promote", 5, 4)
    assert _status(_card(decisions=[promoted]), "monitoring.7")["status"] == "automated-passing"
    assert _status(_card(decisions=[promoted], rollout_mode="direct"), "monitoring.7")["status"] == "missing"


def test_feature_cost_is_held_to_a_configured_budget():
    no_budget = _card(settings={"min_versions": 5})
    assert _status(no_budget, "data.3")["status"] == "missing"
    assert "no budget" in _status(no_budget, "data.3")["evidence"]["detail"]
    assert _status(_card(), "data.3")["status"] == "automated-passing"  # 12 B under 100 B
    tight = _card(settings={"max_feature_bytes": 10.0})
    assert _status(tight, "data.3")["status"] == "automated-failing"
    assert "over budget: fare 12.0 B" in _status(tight, "data.3")["evidence"]["detail"]


def test_meta_level_requirements_check_the_models_inputs_against_the_policy():
    assert _status(_card(), "data.4")["status"] == "automated-passing"
    report = _report()
    report["training"]["importance"]["inputs"].append({"input": "tract_xf", "raw_feature": "tract",
                                                       "contributes": True, "bytes_per_example": 8.0})
    assert _status(_card(report), "data.4")["status"] == "automated-failing"
    unmapped = _report()
    unmapped["training"]["importance"]["inputs"].append({"input": "tract_xf", "contributes": True})
    assert "tract_xf (from tract)" in _status(_card(unmapped), "data.4")["evidence"]["detail"]
    report["feature_policy"]["forbidden"] = {}
    assert _status(_card(report), "data.4")["status"] == "missing"  # a policy that forbids nothing checks nothing


def test_reviewed_needs_a_reviewers_decision_not_a_clean_commit():
    assert _status(_card(), "model.1")["status"] == "automated-passing"
    unreviewed = _report()
    del unreviewed["approval"]
    assert unreviewed["code"]["git_dirty"] is False
    assert _status(_card(unreviewed), "model.1")["status"] == "missing"
    rejected = _report()
    rejected["approval"]["decision"] = "reject"
    assert _status(_card(rejected), "model.1")["status"] == "automated-failing"


def test_numerics_without_their_fields_earn_nothing():
    absent = _report()
    absent["training"]["numerics"] = {"eval_outputs_checked": 100}
    assert _status(_card(absent), "monitoring.5")["status"] == "missing"
    nan = _report()
    nan["training"]["numerics"]["loss_finite_every_step"] = False
    assert _status(_card(nan), "monitoring.5")["status"] == "automated-failing"


def test_slices_must_judge_a_slice():
    assert _status(_card(), "model.6")["status"] == "automated-passing"
    small = _report()
    small["evaluation"]["significance"]["new_span"] = {"judged": False, "collapsed": False,
                                                      "reason": "too small to judge: 4 eval examples"}
    assert _status(_card(small), "model.6")["status"] == "missing"
    collapsed = _report()
    collapsed["evaluation"]["significance"]["new_span"].update(collapsed=True, bound=0.2)
    assert _status(_card(collapsed), "model.6")["status"] == "automated-failing"


def test_staleness_impact_and_staleness_alert_are_two_checks_and_need_a_served_model():
    card = _card()
    assert _status(card, "model.4")["status"] == "automated-passing"  # 0.004 x 6 = 0.024 <= 0.05
    assert _status(card, "monitoring.4")["status"] == "automated-passing"
    fast = _report()
    fast["evaluation"]["significance"]["staleness"]["loss_per_span"] = 0.02  # 0.12 over 6 spans
    assert _status(_card(fast), "model.4")["status"] == "automated-failing"
    assert _status(_card(fast), "monitoring.4")["status"] == "automated-passing"  # today's drop is fine
    alerted = _report()
    alerted["evaluation"]["significance"]["staleness"]["alerts"] = ["the served model is 8 spans old"]
    assert _status(_card(alerted), "monitoring.4")["status"] == "automated-failing"
    assert _status(_card(alerted), "model.4")["status"] == "automated-passing"
    # The demo's first run: no served model yet, nothing to age: neither passes.
    first = _report()
    first["evaluation"]["significance"]["staleness"] = {
        "model_artifact_id": None, "metric": "auc", "alerts": [], "points": [],
        "reason": "no served model yet (no baseline): nothing to age"}
    for test in ("model.4", "monitoring.4"):
        assert _status(_card(first), test)["status"] == "missing"
        assert "nothing to age" in _status(_card(first), test)["evidence"]["detail"]


def test_an_old_runs_evidence_does_not_count_once_the_check_is_switched_off():
    report = _report()
    report["evaluation"]["significance"]["simple_baseline"] = {"judged": False, "opted_out": True,
                                                               "reason": "opted out: a test"}
    older = _report("r1", "2026-12-01T00:00:00+00:00")
    card = _card([report, older])
    assert _status(card, "model.5")["status"] == "missing"
    assert _status(card, "model.5")["evidence"]["detail"] == "opted out: a test"
    newest = _report("r3")
    del newest["training"]["importance"]
    card = _card([newest, older])
    assert _status(card, "data.2")["status"] == "missing" and _status(card, "data.2")["evidence"]["run"] == "r3"
    assert "did not record permutation importance" in _status(card, "data.2")["evidence"]["detail"]
    # Serving skew switched off in the newest run: the older run's skew check does not stand in.
    no_skew = _report("r3")
    no_skew["serving_skew"] = {"checked": False, "reason": "serving_skew.action is off"}
    older["serving_skew"]["skewed_features"] = ["trip_miles"]
    invariants = _status(_card([no_skew, older]), "monitoring.2")
    assert invariants["evidence"]["run"] == "r3" and "serving inputs not checked" in invariants["evidence"]["check"]


def test_rollback_counts_when_the_history_records_one():
    history = [{"event": "push", "version": 2}, {"event": "canary_rollback", "version": 2, "time": "t",
                                                 "user": "controller", "reason": "worse live"}]
    rollback = _status(_card(history=history, history_path="/w/serving/taxi/history.jsonl"), "infrastructure.7")
    assert rollback["status"] == "automated-passing" and "worse live" in rollback["evidence"]["detail"]
    applied = _decision(2, "rollback", 3, 2)
    assert _status(_card(decisions=[applied]), "infrastructure.7")["status"] == "automated-passing"


def test_a_crafted_workdir_before_and_after_real_evidence(tmp_path):
    """The same workdir scored with configuration only, then with the evidence each rule
    asks for: every rule that failed to earn a point before earns it for a reason after."""
    first = _report("r1", version=1)
    first["evaluation"]["significance"]["staleness"] = {"model_artifact_id": None, "alerts": [], "points": [],
                                                        "reason": "no served model yet (no baseline): nothing to age"}
    del first["approval"]
    before = _card([first], decisions=[_decision(1, "continue", 2, 1, labelled=0)], settings={"min_versions": 5})
    lost = {t["id"] for t in before["tests"] if t["status"] == "missing"}
    assert {"data.3", "data.5", "data.6", "model.1", "model.2", "model.4", "infrastructure.6", "infrastructure.7",
            "monitoring.4", "monitoring.7"} <= lost
    evidence = tmp_path / "checklist.md"
    evidence.write_text("done")
    made = [{**attestation.entry(t, "Ana", str(evidence), "2027-06-01", now=NOW), "id": i}
            for i, t in enumerate(("data.6", "data.7", "infrastructure.2", "infrastructure.5"))]
    reports = [_report(f"r{v}", version=v) for v in range(6, 0, -1)]
    for r, auc in zip(reversed(reports), (0.70, 0.74, 0.78, 0.80, 0.83, 0.86)):
        r["evaluation"]["overall"]["auc"]["candidate"] = auc
        r["training"]["tuning"] = {"source": "Tuner search of run r0", "values": {"learning_rate": 0.01}}
    decisions = [_decision(v, "promote", v, v - 1, canary_auc=a - 0.02, stable_auc=b - 0.02)
                 for v, a, b in zip(range(2, 7), (0.74, 0.78, 0.80, 0.83, 0.86), (0.70, 0.74, 0.78, 0.80, 0.83))]
    history = [{"event": "rollback", "from_version": 6, "to_version": 5, "time": "t", "user": "ana", "reason": "drill"}]
    privacy = {"ran": True, "passed": True, "findings": [], "finding_count": 0, "policy": "p.yaml",
               "policy_sha256": "ee" * 32, "sensitive": {"tract": "pseudonymous"},
               "declared": {"spans": [], "values": {"tract": 3}, "searched": 3, "too_short_to_search": 0},
               "planted": {"features": ["tract"], "findings": []}, "request_logs": {"files": [], "logs": 0},
               "texts": {"files": 2, "sha256": "ff" * 32}, "not_ingested": {"features": []},
               "retention": {"max_age_days": 30}}
    after = _card(reports, decisions=decisions, attestations=made, history=history, privacy=privacy)
    for test in lost - {"data.6", "data.7", "infrastructure.2", "infrastructure.5"}:
        assert _status(after, test)["status"].startswith("automated"), (test, _status(after, test))
    assert {_status(after, t)["status"] for t in ("data.6", "data.7", "infrastructure.2", "infrastructure.5")} == {
        "manual"}
    assert after["score"] > before["score"]


def test_a_report_card_keeps_the_old_evidence_shape_for_the_html_page():
    from governance import html

    card = _card()
    assert "run r2: candidate vs the simple model (Evaluator): lead +0.01" in html._evidence(
        _status(card, "model.5")["evidence"])
    assert "retrain attest --test data.6" in html._evidence(_status(card, "data.6")["evidence"])


def test_a_failing_check_still_counts_as_automated_and_says_so():
    report = copy.deepcopy(_report())
    report["training"]["importance"]["inputs"].append({"input": "noise_xf", "contributes": False})
    report["code"]["git_dirty"] = True
    card = _card(report)
    beneficial = _status(card, "data.2")
    assert beneficial["status"] == "automated-failing" and beneficial["points"] == 1
    assert "not shown to contribute: noise_xf" in beneficial["evidence"]["detail"]
    assert _status(card, "infrastructure.1")["status"] == "automated-failing"  # uncommitted code


def test_runs_are_ordered_by_when_they_started_not_when_their_report_was_rewritten(tmp_path):
    old, new = _report("old"), _report("new")
    old["nodes"] = {"Trainer": {"status": "complete", "started": "2026-12-01T00:00:00"}}
    new["nodes"] = {"Trainer": {"status": "complete", "started": "2026-12-02T00:00:00"}}
    old["generated_at"] = "2026-12-09T00:00:00+00:00"  # rewritten after a later rollout decision
    for r in (old, new):
        _write(tmp_path, r)
    assert [r["run_id"] for r in scorecard.read_reports(str(tmp_path))] == ["new", "old"]


def test_the_scorecard_settings_are_checked():
    from core.settings import SettingsError

    assert scorecard.ScorecardSettings.from_dict({}, "scorecard").max_feature_bytes is None
    for bad, message in [({"max_feature_bytes": 0}, "max_feature_bytes"), ({"min_versions": 3}, "min_versions"),
                         ({"confidence": 1.0}, "confidence"), ({"budget": 1}, "budget")]:
        with pytest.raises(SettingsError, match=message):
            scorecard.ScorecardSettings.from_dict(bad, "scorecard")


def test_computing_performance_needs_a_served_model_to_compare_with():
    assert _status(_card(), "monitoring.6")["status"] == "automated-passing"
    first = _report()
    first["baseline_model"] = None
    first["serving_check"]["performance"] = {}
    found = _status(_card(first), "monitoring.6")
    assert found["status"] == "missing" and "a first push has no baseline" in found["evidence"]["detail"]
    regressed = _report()
    regressed["serving_check"]["performance"]["refusals"] = ["latency_p50_ms 1.5 -> 9.0 past the limit"]
    assert _status(_card(regressed), "monitoring.6")["status"] == "automated-failing"
