"""The ML Test Score scorecard (governance/scorecard.py): each test's status from the run
records, section sums and the final score; switching a check off turns its test missing."""

import copy

from governance import scorecard


def _report(run_id="r2", generated_at="2026-12-02T00:00:00+00:00") -> dict:
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
                     "importance": {"computed": True, "bytes_per_example": 500, "examples": 85,
                                    "inputs": [{"input": "fare_xf", "contributes": True}]}},
        "cost": {"cpu_seconds": 60.0, "energy_j": 2500.0, "energy_method": "tdp-estimate"},
        "evaluation": {"slices": {"trip_start_hour=1": {}}, "significance": {
            "blessed": True, "reasons": [],
            "staleness": {"reason": "0 spans old", "alerts": []},
            "simple_baseline": {"judged": True, "refused": False, "reason": "lead +0.01"},
            "fairness": {"judged": True, "refused": False, "reason": "within max_gap"},
            "new_span": {"collapsed": False, "reason": "steady"},
            "runtime": {"reason": "the same runtime as the baseline"}}},
        "serving_check": {"passed": True, "max_abs_diff": 0.0, "latency_ms": {"p99": 3.0},
                          "performance": {"figures": {"latency_p50_ms": {"baseline": 1.5, "candidate": 1.4}},
                                          "refusals": []}},
        "live": {"events": [{"event": "canary"}], "decisions": [
            {"action": "promote", "canary_version": 2, "reason": "no worse", "live": {"canary": {}}}]},
        "push": {"pushed": True}, "blessed": True, "baseline_model": {"artifact_id": 7},
        "nodes": {"Trainer": {"status": "complete"}, "Evaluator": {"status": "complete"}},
    }


CONTEXT = {"retention_days": 30.0, "keep_versions": 5, "rollout_mode": "canary"}


def _status(card, section, number):
    return next(t for t in card["tests"] if t["section"] == section and t["number"] == number)


def test_every_test_is_scored_from_evidence_and_the_score_is_the_smallest_sum():
    card = scorecard.compute([_report()], CONTEXT)
    assert len(card["tests"]) == 28 and {t["section"] for t in card["tests"]} == set(scorecard.SECTIONS)
    simple = _status(card, "model", 5)
    assert simple["status"] == "automated-passing" and simple["points"] == 1
    assert simple["evidence"] == {"run": "r2", "check": "candidate vs the simple model (Evaluator)",
                                  "file": "/w/governance/r2/report.json", "detail": "lead +0.01"}
    assert _status(card, "data", 6)["status"] == "manual" and _status(card, "data", 6)["points"] == 0.5
    assert _status(card, "data", 6)["evidence"]["procedure"] == "docs/guides/scorecard.md#new-features"
    assert _status(card, "model", 3)["status"] == "missing"  # no Tuner search recorded
    # Versions are kept but no rollback was ever recorded: manual until one is.
    rollback = _status(card, "infrastructure", 7)
    assert rollback["status"] == "manual" and rollback["evidence"]["procedure"].endswith("#rollback")
    assert card["sections"] == {"data": 6.0, "model": 6.0, "infrastructure": 5.5, "monitoring": 7.0}
    assert card["score"] == 5.5
    text = scorecard.format_text(card)
    assert "final score 5.5 (the smallest)" in text and "A simpler model is not better" in text
    recorded = _report()
    recorded["live"]["events"].append({"event": "canary_rollback", "time": "t", "reason": "worse live"})
    assert _status(scorecard.compute([recorded], CONTEXT), "infrastructure", 7)["status"] == "automated-passing"


def test_runs_are_ordered_by_when_they_started_not_when_their_report_was_rewritten(tmp_path):
    import json
    import os

    old, new = _report("old"), _report("new")
    old["nodes"] = {"Trainer": {"status": "complete", "started": "2026-12-01T00:00:00"}}
    new["nodes"] = {"Trainer": {"status": "complete", "started": "2026-12-02T00:00:00"}}
    old["generated_at"] = "2026-12-09T00:00:00+00:00"  # rewritten after a later rollout decision
    for r in (old, new):
        folder = tmp_path / "governance" / r["run_id"]
        os.makedirs(folder)
        (folder / "report.json").write_text(json.dumps(r))
    assert [r["run_id"] for r in scorecard.read_reports(str(tmp_path))] == ["new", "old"]


def test_switching_a_check_off_turns_its_test_missing_and_the_score_changes():
    report = _report()
    report["evaluation"]["significance"]["simple_baseline"] = {"judged": False, "opted_out": True,
                                                               "reason": "opted out: a test"}
    card = scorecard.compute([report], CONTEXT)
    assert _status(card, "model", 5)["status"] == "missing"
    assert _status(card, "model", 5)["evidence"]["detail"] == "opted out: a test"
    assert card["sections"]["model"] == 5.0 and card["score"] == 5.0
    # An older run that ran it does not count: the newest evaluation decides.
    older = _report("r1", "2026-12-01T00:00:00+00:00")
    assert _status(scorecard.compute([report, older], CONTEXT), "model", 5)["status"] == "missing"
    # The same for a Trainer check: importance switched off in the newest run.
    newest = _report("r3", "2026-12-03T00:00:00+00:00")
    del newest["training"]["importance"]
    card = scorecard.compute([newest, older], CONTEXT)
    assert _status(card, "data", 2)["status"] == "missing" and _status(card, "data", 2)["evidence"]["run"] == "r3"
    assert "did not record permutation importance" in _status(card, "data", 2)["evidence"]["detail"]


def test_a_failing_check_still_counts_as_automated_and_says_so():
    report = copy.deepcopy(_report())
    report["training"]["importance"]["inputs"].append({"input": "noise_xf", "contributes": False})
    report["code"]["git_dirty"] = True
    card = scorecard.compute([report], CONTEXT)
    beneficial = _status(card, "data", 2)
    assert beneficial["status"] == "automated-failing" and beneficial["points"] == 1
    assert "not shown to contribute: noise_xf" in beneficial["evidence"]["detail"]
    assert _status(card, "infrastructure", 1)["status"] == "automated-failing"  # uncommitted code
    # Without retention configured, privacy fails; without any report, everything automatable is missing.
    assert _status(scorecard.compute([report], {}), "data", 5)["status"] == "automated-failing"
    empty = scorecard.compute([], {})
    assert {t["status"] for t in empty["tests"]} == {"missing", "manual"}
    assert empty["sections"]["data"] == 1.0 and empty["score"] == 0.0  # monitoring has nothing manual
