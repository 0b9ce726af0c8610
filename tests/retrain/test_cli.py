"""The CLI in-process: `main()` returns the exit code, and every config, span and input
error is exit 2 with a one-line message naming the problem (no traceback)."""

from __future__ import annotations

import os

import pytest
import yaml

from core import exit_codes, layout, run_folder
from retrain import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAXI = os.path.join(REPO, "pipelines", "taxi", "config.yaml")


def _config(tmp_path, **changes) -> str:
    with open(TAXI, encoding="utf-8") as f:
        values = yaml.safe_load(f)
    for k in ("data_root", "schema_path", "gate_policy", "feature_policy"):
        values[k] = os.path.normpath(os.path.join(os.path.dirname(TAXI), values[k]))
    values.update(changes)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", [
    ["compile", "--out", "{tmp}/t.json"],
    ["models", "--workdir", "{tmp}"],
    ["lineage", "taxi", "1", "--workdir", "{tmp}"],
    ["spans", "--workdir", "{tmp}"],
    ["schema", "calibrate", "--out", "{tmp}/g.yaml"],
    ["run", "--workdir", "{tmp}"],
    ["prepare-run", "--workdir", "{tmp}", "--run-id", "r"],
])
def test_a_config_error_is_exit_2_with_the_field_named(tmp_path, capsys, command):
    bad = _config(tmp_path, window_spans=0)
    argv = [a.format(tmp=tmp_path) for a in command] + ["--config", bad]
    code, _, err = _run(capsys, *argv)
    assert code == exit_codes.BAD_INPUT
    assert f"retrain {command[0]}: window_spans: must be at least 1" in err
    assert "Traceback" not in err


def test_a_feature_the_policy_forbids_is_refused_naming_it_and_where_the_code_uses_it(tmp_path, capsys):
    # The shipped policy, with `company` (which the taxi model one-hots) forbidden.
    with open(os.path.join(REPO, "schemas", "taxi", "feature_policy.yaml"), encoding="utf-8") as f:
        policy = yaml.safe_load(f)
    policy["features"]["company"] = {"pii": "none", "use_in_model": "forbidden", "reason": "a test's rule", "log": "keep"}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    bad = _config(tmp_path, feature_policy=str(tmp_path / "policy.yaml"))
    for argv in (["compile", "--out", str(tmp_path / "t.json")], ["run", "--workdir", str(tmp_path / "w")]):
        code, _, err = _run(capsys, *argv, "--config", bad)
        assert code == exit_codes.BAD_INPUT
        assert ("feature_policy: feature 'company' is forbidden in the model (a test's rule) but the pipeline's code"
                " uses it: pipelines/taxi/features.py:") in err
        assert "Traceback" not in err
    assert not os.path.exists(tmp_path / "t.json") and not os.path.exists(tmp_path / "w" / "pipeline_root")
    # A row-identifying feature cannot be a slice: a slice is named by its value.
    policy["features"]["company"] = {"pii": "pseudonymous", "use_in_model": "allowed", "log": "hash"}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    sliced = _config(tmp_path, feature_policy=str(tmp_path / "policy.yaml"), slice_features=["company"])
    code, _, err = _run(capsys, "compile", "--out", str(tmp_path / "t.json"), "--config", sliced)
    assert code == exit_codes.BAD_INPUT
    assert "feature_policy: company (pseudonymous) cannot be a slice or a fairness group" in err
    # The shipped policy forbids the census tracts, which no taxi code names: it loads.
    code, _, err = _run(capsys, "compile", "--out", str(tmp_path / "t.json"), "--config", _config(tmp_path))
    assert code == 0, err


def test_a_hparams_typo_fails_at_config_load_naming_the_key(tmp_path, capsys):
    bad = _config(tmp_path, hparams={"learning_rte": 0.1})
    code, _, err = _run(capsys, "run", "--config", bad, "--workdir", str(tmp_path / "w"))
    assert code == exit_codes.BAD_INPUT
    assert "hparams: unknown key(s) learning_rte (did you mean learning_rate?" in err and "the taxi model's HParams" in err
    assert not os.path.exists(tmp_path / "w" / "pipeline_root")  # nothing ran, nothing written


@pytest.mark.parametrize("command", ["summary", "report", "node"])
def test_a_missing_run_folder_is_exit_2(tmp_path, capsys, command):
    argv = [command] + (["run"] if command == "node" else [])
    argv += ["--workdir", str(tmp_path), "--pipeline", "taxi", "--run-id", "never"]
    argv += ["--node", "Trainer"] if command == "node" else []
    code, _, err = _run(capsys, *argv)
    assert code == exit_codes.BAD_INPUT
    assert "holds no prepared run" in err


def test_run_dir_options_must_name_a_run(capsys):
    code, _, err = _run(capsys, "summary")
    assert code == exit_codes.BAD_INPUT and "give --run-dir, or --workdir, --pipeline and --run-id" in err


def test_a_bad_span_is_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "run", "--config", _config(tmp_path), "--workdir", str(tmp_path), "--span", "2016-13")
    assert code == exit_codes.BAD_INPUT and "retrain run:" in err and "2016-13" in err


def test_quarantine_needs_a_pipeline_and_a_valid_span(tmp_path, capsys):
    code, _, err = _run(capsys, "quarantine", "--span", "201612", "--reason", "x", "--workdir", str(tmp_path))
    assert code == exit_codes.BAD_INPUT and "give --pipeline NAME or --config FILE" in err
    code, _, err = _run(capsys, "quarantine", "--pipeline", "taxi", "--span", "12/2016", "--reason", "x",
                        "--workdir", str(tmp_path))
    assert code == exit_codes.BAD_INPUT and "12/2016" in err


def test_approve_without_a_candidate_is_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "approve", "--workdir", str(tmp_path), "--decision", "approve", "--reviewer", "ana")
    assert code == exit_codes.BAD_INPUT and "give --model-id, or --pipeline and --run-id" in err
    code, _, err = _run(capsys, "approve", "--workdir", str(tmp_path), "--model-id", "3", "--decision", "maybe",
                        "--reviewer", "ana")
    assert code == exit_codes.BAD_INPUT and "decision must be one of" in err


def test_serving_commands_refuse_what_is_not_there(tmp_path, capsys):
    code, _, err = _run(capsys, "serving-config", "--workdir", str(tmp_path))
    assert code == exit_codes.BAD_INPUT and "no serving folder" in err
    code, _, err = _run(capsys, "rollback", "--workdir", str(tmp_path), "--model", "taxi", "--reason", "x")
    assert code == exit_codes.BAD_INPUT and "no versions of taxi" in err


def test_summary_of_a_recorded_run_returns_its_outcome_code(tmp_path, capsys):
    """`retrain summary` in-process over a run written into a temp MLMD."""
    from tests.governance.fake_runs import open_store, write_run

    workdir = str(tmp_path)
    os.makedirs(tmp_path / "metadata")
    root = layout.pipeline_root(workdir, "taxi")
    write_run(open_store(layout.metadata_path(workdir, "taxi")), root, "stopped_by_data_gate")
    folder = layout.run_dir(workdir, "taxi", "run-1")
    run_folder.write_info(folder, {"run_id": "run-1", "pipeline": "taxi", "span": 201612, "pipeline_root": root,
                                   "metadata_path": layout.metadata_path(workdir, "taxi"), "backfilled_spans": []})
    code, out, _ = _run(capsys, "summary", "--run-dir", folder)
    assert code == exit_codes.GATE_STOPPED
    assert "STOPPED_BY_DATA_GATE" in out and "STOPPED: trip_miles" in out


def test_node_run_of_an_unknown_node_is_exit_2_and_runs_nothing(tmp_path, capsys):
    """Checked against the prepared run's IR before anything runs (a KeyError inside a
    node's executor is that node's failure, not bad input)."""
    from pipelines import config as config_lib
    from runner import node_runner, runs

    config = config_lib.load(_config(tmp_path), {"workdir": str(tmp_path)})
    folder = layout.run_dir(str(tmp_path), "taxi", "r1")
    node_runner.write_ir(runs.compile_for_span(config, 201612), os.path.join(folder, layout.RUN_IR))
    run_folder.write_info(folder, {"run_id": "r1", "pipeline": "taxi"})
    code, out, err = _run(capsys, "node", "run", "--run-dir", folder, "--node", "Traner")
    assert code == exit_codes.BAD_INPUT and "node 'Traner' is not in pipeline taxi" in err
    assert "RESULT" not in out and not os.path.exists(os.path.join(folder, "nodes", "Traner.json"))


def test_unreadable_run_files_and_templates_are_exit_2_naming_the_file(tmp_path, capsys):
    """The same class as a missing run folder: a corrupt run.json, a failed Trainer's result
    with no model to approve, a DAG template that is not there."""
    folder = layout.run_dir(str(tmp_path), "taxi", "r1")
    os.makedirs(os.path.join(folder, "nodes"))
    with open(os.path.join(folder, "run.json"), "w") as f:
        f.write("{not json")
    code, _, err = _run(capsys, "summary", "--run-dir", folder)
    assert code == exit_codes.BAD_INPUT and "run.json cannot be read" in err and "Traceback" not in err
    run_folder.write_info(folder, {"run_id": "r1", "pipeline": "taxi"})
    with open(os.path.join(folder, "nodes", "Trainer.json"), "w") as f:
        f.write('{"node_id": "Trainer", "status": "failed", "error": "OOM"}')
    code, _, err = _run(capsys, "approve", "--workdir", str(tmp_path), "--pipeline", "taxi", "--run-id", "r1",
                        "--decision", "approve", "--reviewer", "ana")
    assert code == exit_codes.BAD_INPUT and "Trainer produced no model (failed)" in err
    code, _, err = _run(capsys, "prepare-run", "--config", _config(tmp_path), "--workdir", str(tmp_path),
                        "--run-id", "r2", "--span", "201612", "--expect", str(tmp_path / "missing.json"))
    assert code == exit_codes.BAD_INPUT and "missing.json is not a readable DAG template" in err
    assert not os.path.exists(layout.run_dir(str(tmp_path), "taxi", "r2"))  # nothing written
