"""`retrain rollout`: status, decide (with a person's review), promote and rollback, in-process."""

import json
import os

from core import layout
from retrain import cli
from serving.repository import history, versions
from tests.rollout import canary_workdir


def _run(capsys, *args):
    code = cli.main(["rollout", *args])
    return code, capsys.readouterr()


def test_a_person_vetoes_then_forces_and_both_are_recorded_with_their_names(tmp_path, capsys):
    work = str(tmp_path / "work")
    canary_workdir.build(work, "taxi", canary_weight=-2.0, requests=600)
    code, out = _run(capsys, "decide", "--workdir", work, "--dry-run", "--json")
    assert code == 0 and json.loads(out.out)["action"] == "rollback" and not json.loads(out.out)["applied"]
    assert versions.rollout_state(os.path.join(layout.serving_root(work), "taxi")) is not None  # nothing changed
    code, out = _run(capsys, "decide", "--workdir", work, "--json", "--review", "Veto", "--reviewer", "ana")
    vetoed = json.loads(out.out)
    assert code == 0 and vetoed["action"] == "continue" and vetoed["decided_by"] == "ana"
    assert vetoed["reason"].startswith("vetoed by ana (proposed: rollback)")
    code, out = _run(capsys, "decide", "--workdir", work, "--json", "--review", "Force promote", "--reviewer", "bo")
    forced = json.loads(out.out)
    assert forced["action"] == "promote" and forced["applied"] and forced["reason"].startswith("promote forced by bo")
    base = os.path.join(layout.serving_root(work), "taxi")
    assert history.read(base)[-1]["event"] == "promote" and history.read(base)[-1]["user"] == "bo"
    code, out = _run(capsys, "status", "--workdir", work, "--json")
    answer = json.loads(out.out)
    assert answer["labels"] == {"stable": 2} and [d["decided_by"] for d in answer["decisions"]] == ["ana", "bo"]
    code, out = _run(capsys, "rollback", "--workdir", work, "--reason", "nothing to roll back")
    assert code == 2 and "no canary is under test" in out.err
    code, out = _run(capsys, "decide", "--workdir", work, "--json")
    assert code == 0 and json.loads(out.out)["action"] == "none"


def test_malformed_feedback_is_reported_by_the_decision_and_an_unusable_file_is_exit_2(tmp_path, capsys):
    work = str(tmp_path / "work")
    canary_workdir.build(work, "taxi", canary_weight=2.0, requests=300)
    folder = layout.feedback_dir(work, "taxi")
    with open(os.path.join(folder, "late.jsonl"), "w") as f:
        f.write('{"request_key": "req-1", "label": 1, "time": 5}\n')       # a duplicate key
        f.write('{"request_key": "nobody", "label": 0, "time": 5}\n')      # an unknown key
        f.write('{"label": 1, "time": 5}\n')                               # no key
        f.write('{"request_key": "req-2", "label": "yes", "time": 5}\n')   # a label of the wrong type
    code, out = _run(capsys, "decide", "--workdir", work, "--dry-run", "--json")
    decision = json.loads(out.out)
    assert code == 0
    assert decision["counts"]["duplicate_label"] == 2 and decision["counts"]["unmatched_label"] == 1
    assert decision["counts"]["missing_key"] == 1 and decision["counts"]["bad_label"] == 1
    assert decision["live"]["stable"]["labelled"] + decision["live"]["canary"]["labelled"] == 299  # req-1 is out
    with open(os.path.join(folder, "zz-binary.csv"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n\x00\x00")
    code, out = _run(capsys, "decide", "--workdir", work, "--dry-run")
    assert code == 2 and "zz-binary.csv" in out.err


def test_a_decision_records_its_evidence_and_a_canary_out_of_budget_is_held_for_a_person(tmp_path):
    import dataclasses

    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    from core import tasks
    from rollout import controller
    from rollout.settings import RolloutSettings

    work = str(tmp_path / "work")
    canary_workdir.build(work, "taxi", canary_weight=-2.0, requests=600)
    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = str(tmp_path / "m.sqlite")
    store = metadata_store.MetadataStore(cfg)
    settings = RolloutSettings(mode="canary", canary_share=0.5, max_regression=0.02)
    decision = controller.measure(work, "taxi", tasks.BINARY, settings)
    assert decision.action == "rollback" and decision.srm["judged"] and not decision.srm["mismatch"]
    assert decision.routing["split"]["stable"]["requests"] + decision.routing["split"]["canary"]["requests"] == 600
    assert decision.maturity["mature_labelled"] == {"stable": decision.live["stable"]["labelled"],
                                                    "canary": decision.live["canary"]["labelled"]}
    controller.record(store, work, decision)
    [recorded] = controller.decisions(store, "taxi")
    test = recorded["test"]  # what an auditor re-derives the decision from
    assert recorded["action"] == "rollback" and recorded["canary_version"] == 2 and test["versions"]["canary"] == 2
    assert test["labels"] == {"stable": decision.live["stable"]["labelled"], "canary": decision.live["canary"]["labelled"]}
    assert test["threshold"] == 20 and test["ratio_vs_no_difference"] >= 20 and test["high"] < 0
    assert recorded["srm"]["p_value"] > 0.001 and recorded["routing"]["compared"] == "split"
    # Too few labels when the budget runs out: held for a person, never rolled back.
    starved = dataclasses.replace(settings, min_labelled=5000, max_labelled=5000)
    state = versions.rollout_state(os.path.join(layout.serving_root(work), "taxi"))
    held = controller.measure(work, "taxi", tasks.BINARY, starved, now=state["started_at"] + 73 * 3600)
    assert held.action == "inconclusive" and held.ran_out and held.test is None
    assert held.reason.startswith("ran out after 73.0 h (max_hours 72) with too few labels for the test to run")
    assert held.alerts and held.alerts[0].startswith("rollout_inconclusive: the canary holds")
    controller.apply(work, held, store)
    assert versions.rollout_state(os.path.join(layout.serving_root(work), "taxi")) is not None  # nothing changed
    assert controller.decisions(store, "taxi")[-1]["action"] == "inconclusive"
