"""`retrain new`: bad inputs write nothing; generated pipelines pass the project's own rules
and run end to end (binary and multiclass here, regression is the committed diabetes
pipeline: tests/e2e/test_diabetes_pipeline.py)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from core import exit_codes
from runner import datasets, scaffold
from tests.conftest import REPO, retrain_cli

PROBE = "t_new_probe"


def _written(name: str) -> list[str]:
    return [p for p in scaffold.targets(REPO, name).values() if os.path.exists(p)]


@pytest.fixture
def no_probe():
    yield
    for path in _written(PROBE):  # only if the command under test wrongly wrote something
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _spans(root, rows_by_span: dict[int, list[dict]]):
    for span, rows in rows_by_span.items():
        folder = root / f"span-{span}"
        folder.mkdir(parents=True)
        with open(folder / "data.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return root


@pytest.mark.parametrize("case, args, message", [
    ("unknown label", ["--label", "tip"], "label 'tip' is not a column of the spans (columns: x, y, constant, word)"),
    ("one-valued label", ["--label", "constant"], "label 'constant' has one value ('7') in every span"),
    ("text label for regression", ["--label", "word", "--task", "regression"], "label 'word' is not numeric"),
    ("binary with three values", ["--label", "y", "--task", "binary_classification"], "has 3 values, a binary label needs exactly 2"),
    ("empty folder", ["--label", "y", "--data", "{empty}"], "no span folders"),
    ("bad name", ["--label", "y", "--name", "Bad-Name"], "pipeline name 'Bad-Name'"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, no_probe, case, args, message):
    rows = {202401 + i: [{"x": str(j * (i + 1)), "y": str(j % 3), "constant": "7", "word": "ab"[j % 2]}
                         for j in range(12)] for i in range(2)}
    data = _spans(tmp_path / "data", rows)
    (tmp_path / "empty").mkdir()
    name = PROBE
    if "--name" in args:
        name = args[args.index("--name") + 1]
        args = args[: args.index("--name")]
    args = [a.format(empty=tmp_path / "empty") for a in args]
    if "--data" not in args:
        args += ["--data", str(data)]
    proc = retrain_cli("new", name, *args)
    assert proc.returncode == exit_codes.BAD_INPUT, (case, proc.stderr[-2000:])
    assert message in proc.stderr, (case, proc.stderr[-2000:])
    assert _written(PROBE) == [] and _written(name) == []


def test_an_existing_pipeline_is_not_replaced_without_force(tmp_path):
    before = {p: open(p, "rb").read() for p in ("pipelines/taxi/model.py", "schemas/taxi/schema.pbtxt")}
    proc = retrain_cli("new", "taxi", "--data", os.path.join(REPO, "data", "taxi"), "--label", "tips")
    assert proc.returncode == exit_codes.BAD_INPUT
    assert "pipelines/taxi, schemas/taxi, dags/taxi_retraining.py, dags/compiled/taxi.json already exist(s)" in proc.stderr
    assert all(open(p, "rb").read() == text for p, text in before.items())


# --- generated pipelines, in a copy of the project (as a user runs it in their checkout) ---

TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project's tracked and new files (no venvs, no work, no data)."""
    root = tmp_path_factory.mktemp("project")
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in listed:
        if rel.startswith("data/") or not os.path.isfile(os.path.join(REPO, rel)):
            continue
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, rel), os.path.join(root, rel))
    return root


def _in(project, *args, timeout=1200):
    """`retrain ARGS` with the copy's code first on the path (a cold process of the runtime)."""
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run([TFX_PYTHON, "-m", "retrain.cli", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("dataset, label, task", [
    ("breast_cancer", "diagnosis", "binary_classification"),
    ("wine", "cultivar", "multiclass_classification"),
])
def test_a_generated_pipeline_passes_the_project_rules_and_is_pushed(project, tmp_path, dataset, label, task):
    data = tmp_path / "data"
    # Three months keep the run short (the diabetes test runs `retrain sample-spans` itself).
    datasets.write_spans(dataset, str(data), num_spans=3)
    name = f"my_{dataset}"
    new = _in(project, "new", name, "--data", str(data), "--label", label)
    assert new.returncode == 0, new.stderr[-3000:]
    assert f"task: {task} (" in new.stderr  # chosen from the label's values
    config = os.path.join("pipelines", name, "config.yaml")
    for rel in (config, f"schemas/{name}/gate.yaml", f"dags/{name}_retraining.py", f"dags/compiled/{name}.json"):
        assert os.path.exists(project / rel) and f"wrote {rel}" in new.stdout
    # The project's own rules hold for the generated code: lint and the layer rule.
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", f"pipelines/{name}", f"dags/{name}_retraining.py"],
                          cwd=project, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    # The layer rule of the copy (tests/test_layers.py resolves its REPO from where it lies).
    layers = subprocess.run([sys.executable, "-c", "from tests import test_layers as t;"
                             " print(t.upward_imports(), t.cycles(), t.REPO)"],
                            cwd=project, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(project)})
    assert layers.stdout.split() == ["[]", "[]", str(project)], layers.stdout + layers.stderr[-2000:]

    run = _in(project, "run", "--config", config, "--workdir", str(tmp_path / "work"), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["outcome"] == "pushed", summary
    metric = "auc" if task == "binary_classification" else "sparse_categorical_accuracy"
    assert summary["evaluation"]["candidate"][metric] > 0.8
    served = summary["pushed"]["path"]
    assert os.path.exists(os.path.join(served, "saved_model.pb"))
    assert os.path.exists(os.path.join(served, "assets.extra", "model.sig"))  # signed like the others
    assert list((tmp_path / "work").rglob("governance/*/report.html")), "no governance report"
    assert summary["serving_check"]["passed"]
