"""Governance reports, the registry and lineage on a real pipeline run (the digits pipeline,
the quickest): values equal what the TFDV/TFMA artifacts hold; the HTML renders in headless
Chromium (screenshot kept in test-artifacts/); the approval gate's approve and reject paths."""

import json
import os
import shutil
import subprocess

import pytest
import tensorflow_data_validation as tfdv
import tensorflow_model_analysis as tfma
import yaml

from governance import model_card
from tests.conftest import REPO, retrain_cli, run_retrain

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ARTIFACTS = os.path.join(REPO, "test-artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def env(digits_run):
    with open(digits_run["config"]) as f:
        cfg = yaml.safe_load(f)
    cfg.update(require_approval=True)
    # About approval: the digits e2e covers TFLite, the first run the pre-push serving check.
    cfg["tflite"] = {**cfg["tflite"], "enabled": False}
    cfg["enable_serving_check"] = False
    (digits_run["root"] / "approval.yaml").write_text(yaml.safe_dump(cfg))
    return {**digits_run, "approval": str(digits_run["root"] / "approval.yaml")}


def cli(env, *args, config=None):
    return retrain_cli(*args, "--workdir", env["work"], "--config", config or env["config"])


def run(env, *args, config=None):
    # Span 201606 explicitly: the digits e2e test adds a later, gate-stopped span.
    return run_retrain("run", "--json", "--span", "201606", "--workdir", env["work"], "--config", config or env["config"], *args)


@pytest.fixture(scope="module")
def pushed(env):
    code, summary, err = env["first"]
    assert code == 0 and summary["outcome"] == "pushed", err[-3000:]
    with open(summary["report_json"]) as f:
        return summary, json.load(f)


def test_report_values_equal_the_artifacts(pushed):
    summary, report = pushed
    assert report["outcome"] == "pushed" and report["push"]["version"] == str(summary["pushed"]["version"])
    stats = tfdv.load_stats_binary(os.path.join(report["data"]["statistics_uri"], "Split-train", "FeatureStats.pb"))
    assert report["data"]["rows"]["train"] == stats.datasets[0].num_examples
    label = next(f for f in stats.datasets[0].features if f.path.step[0] == "label")
    reported = next(f for f in report["data"]["features"] if f["name"] == "label")
    assert reported["mean"] == pytest.approx(label.num_stats.mean, abs=1e-4)
    assert sum(b["count"] for b in reported["histogram"]) == pytest.approx(stats.datasets[0].num_examples)
    overall = next(r for r in tfma.load_metrics(report["evaluation"]["path"]) if not r.slice_key.single_slice_keys)
    acc = next(kv.value.double_value.value for kv in overall.metric_keys_and_values
               if kv.key.name == "sparse_categorical_accuracy" and kv.key.model_name in ("", "candidate")
               and not kv.key.is_diff)
    assert report["evaluation"]["overall"]["sparse_categorical_accuracy"]["candidate"] == pytest.approx(acc, abs=1e-5)
    assert len(report["evaluation"]["slices"]) == 10  # one per class
    # ... and each span of the window apart (the Evaluator's span tag, for the new-span check).
    assert sorted(report["evaluation"]["spans"]) == ["201604", "201605", "201606"]
    assert report["data_gate"]["passed"] and report["schema"]["sha256"]
    assert report["data"]["window"] and [w["span"] for w in report["data"]["window"]] == [201604, 201605, 201606]
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert report["code"]["git_commit"] == head and isinstance(report["code"]["git_dirty"], bool)
    assert report["training"]["strategy"] == "default" and len(report["training"]["loss_curve"]) > 10
    assert report["serving_check"]["passed"] and report["approval"] is None


def test_report_travels_with_the_pushed_model(pushed):
    summary, _ = pushed
    folder = os.path.join(summary["pushed"]["path"], "assets.extra", "governance")
    assert sorted(os.listdir(folder)) == ["model_card.json", "report.html", "report.json", "report.sig"]
    with open(os.path.join(folder, "model_card.json")) as f:
        card = json.load(f)
    model_card.validate(card)
    assert card["model_details"]["version"]["name"] == str(summary["pushed"]["version"])
    accuracy = [m for m in card["quantitative_analysis"]["performance_metrics"] if m["type"] == "sparse_categorical_accuracy"]
    assert len(accuracy) == 11  # overall and one per class
    assert card["considerations"]["ethical_considerations"] and card["model_details"]["owners"]


def test_report_html_renders_in_headless_chromium(pushed, tmp_path):
    summary, _ = pushed
    html = open(summary["report"]).read()
    for section in ("Decision", "Code", "Data gate", "Feature distributions", "Training", "Evaluation", "Serving check",
                    "Model card"):
        assert f"<h2>{section}" in html
    assert html.count("<svg") >= 3  # distributions, loss curve, metrics per slice
    if CHROMIUM is None:
        pytest.fail("chromium is needed for the rendering check (make test installs it)")
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "governance-report.png")
    if os.path.exists(shot):
        os.remove(shot)
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
               "--window-size=1200,2400"]
    # What the browser built from the page (its DOM after rendering), not the picture's size.
    dom = subprocess.run([*browser, "--dump-dom", "file://" + summary["report"]], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    for section in ("Decision", "Evaluation", "Model card"):
        assert f"<h2>{section}" in dom, section
    assert dom.count("<svg") >= 3 and "<table" in dom
    subprocess.run([*browser, f"--screenshot={shot}", "file://" + summary["report"]], capture_output=True, timeout=120,
                   check=True)
    assert os.path.exists(shot)  # kept in test-artifacts/ for a person to look at


def test_models_lists_every_candidate_with_its_report(env, pushed):
    summary, _ = pushed
    proc = cli(env, "models", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    [row] = [r for r in out["models"] if str(r["pushed_version"]) == str(summary["pushed"]["version"])]
    assert row["served_now"] and row["blessed"] and not row["rolled_back"]
    assert os.path.exists(row["report_html"]) and os.path.exists(out["index"])
    assert os.path.relpath(row["report_html"], os.path.dirname(out["index"])) in open(out["index"]).read()


def test_lineage_goes_from_spans_to_the_served_version(env, pushed):
    summary, _ = pushed
    proc = retrain_cli("lineage", "digits", str(summary["pushed"]["version"]), "--workdir", env["work"],
                       "--config", env["config"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [l.split(":")[0] for l in lines[:3]] == ["span 201604", "span 201605", "span 201606"]
    assert "DataGate report" in lines[0] and "passed" in lines[0]
    assert any("Trainer model" in l for l in lines) and any("blessed=1" in l for l in lines)
    assert lines[-1].endswith(summary["pushed"]["path"])


def test_approval_gate_approve_then_reject(env, pushed):
    # A new candidate (another seed) with approval required: the run waits, nothing pushed.
    with open(env["approval"]) as f:
        cfg = yaml.safe_load(f)
    cfg["hparams"]["seed"] = 7
    approve_cfg = env["root"] / "approve.yaml"
    approve_cfg.write_text(yaml.safe_dump(cfg))
    served = sorted(v for v in os.listdir(os.path.join(env["work"], "serving", "digits")) if v.isdigit())
    code, summary, err = run(env, config=str(approve_cfg))
    assert code == 4 and summary["outcome"] == "awaiting_approval", err[-3000:]
    model_id = int(summary["error"].split("approval of model ")[1].split(":")[0])
    proc = cli(env, "approve", "--model-id", str(model_id), "--decision", "approve", "--reviewer", "ana",
               "--comment", "metrics reviewed", config=str(approve_cfg))
    assert proc.returncode == 0, proc.stderr
    code, summary, err = run(env, config=str(approve_cfg))
    assert code == 0 and summary["outcome"] == "pushed", err[-3000:]
    assert summary["nodes"]["Trainer"]["status"] == "cached"  # the same candidate, now approved
    assert summary["approval"]["reviewer"] == "ana" and summary["approval"]["decision"] == "approve"
    with open(summary["report_json"]) as f:
        assert json.load(f)["approval"]["decision"] == "approve"

    cfg["hparams"]["seed"] = 8
    reject_cfg = env["root"] / "reject.yaml"
    reject_cfg.write_text(yaml.safe_dump(cfg))
    code, summary, _ = run(env, config=str(reject_cfg))
    assert code == 4
    model_id = int(summary["error"].split("approval of model ")[1].split(":")[0])
    assert cli(env, "approve", "--model-id", str(model_id), "--decision", "Reject", "--reviewer", "bo",
               "--comment", "class 8 regressed", config=str(reject_cfg)).returncode == 0
    before = sorted(v for v in os.listdir(os.path.join(env["work"], "serving", "digits")) if v.isdigit())
    code, summary, err = run(env, config=str(reject_cfg))
    assert code == 0 and summary["outcome"] == "rejected", err[-3000:]
    assert summary["nodes"]["AtomicPusher"]["status"] == "skipped"
    assert sorted(v for v in os.listdir(os.path.join(env["work"], "serving", "digits")) if v.isdigit()) == before
    assert len(before) == len(served) + 1  # only the approved one was added
    with open(summary["report_json"]) as f:
        report = json.load(f)
    assert report["outcome"] == "rejected" and "rejected by bo: class 8 regressed" in report["push"]["reason"]
