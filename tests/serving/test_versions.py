"""Version handling of the local server: hot reload under load, broken and incomplete
versions, labels, rollback through models.config, retention, batching."""

import base64
import json
import os
import shutil
import threading
import urllib.error
import urllib.request

import pytest

from components.atomic_pusher.executor import atomic_copy_dir
from retrain import cli
from serving.repository import history, model_config, versions
from tests.serving import toy_model
from tests.serving.toy_model import example
from tests.waiting import until


def predict(url, model, x, path=""):
    body = json.dumps({"instances": [{"b64": base64.b64encode(example(x)).decode()}]}).encode()
    req = urllib.request.Request(f"{url}/v1/models/{model}{path}:predict", data=body)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["predictions"][0][0]


def status(url, model):
    try:
        with urllib.request.urlopen(f"{url}/v1/models/{model}", timeout=30) as r:
            return {int(s["version"]): s for s in json.loads(r.read())["model_version_status"]}
    except urllib.error.HTTPError:
        return {}


def wait_for(condition, timeout=60.0):
    return until(condition, timeout, "what the server answers to change")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Version folders 1..4 built once, pushed (copied atomically) by the tests."""
    root = tmp_path_factory.mktemp("builds")
    for v in (1, 2, 3, 4):
        toy_model.save(str(root / str(v)), v)
    return root


def test_hot_reload_under_load_never_fails_a_request(builds, tmp_path, serve_in_process):
    base = tmp_path / "serving" / "toy"
    atomic_copy_dir(str(builds / "1"), str(base), 1)
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(base), "--poll-seconds", "0.2")
    answers, errors, stop = [], [], threading.Event()

    def client():
        while not stop.is_set():
            try:
                answers.append(predict(server.url, "toy", 1.0))
            except Exception as e:  # noqa: BLE001  every failure is a test failure
                errors.append(repr(e))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for v in (2, 3, 4):
        # Load on the version being replaced, then the push under that load.
        assert wait_for(lambda v=v: answers.count(float(v - 1)) >= 20), v
        atomic_copy_dir(str(builds / str(v)), str(base), v)  # the Pusher's own copy
        assert wait_for(lambda: status(server.url, "toy").get(v, {}).get("state") == "AVAILABLE"), v
    assert wait_for(lambda: answers.count(4.0) >= 20)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert len(answers) > 50
    assert set(answers) <= {1.0, 2.0, 3.0, 4.0}  # always a whole version: y = version * x
    assert answers[-1] == 4.0 and {1.0, 4.0} <= set(answers)
    # Older versions were unloaded after the new one was available.
    assert status(server.url, "toy")[1]["state"] == "END"


def test_incomplete_and_broken_versions_never_replace_the_served_one(builds, tmp_path, serve_in_process):
    base = tmp_path / "toy"
    atomic_copy_dir(str(builds / "1"), str(base), 1)
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(base), "--poll-seconds", "0.2")
    # A non-atomic writer mid-copy: variables but no graph yet -> not a candidate.
    os.makedirs(base / "5" / "variables")
    shutil.copy(builds / "2" / "variables" / "variables.index", base / "5" / "variables")
    # A complete-looking version that cannot load.
    shutil.copytree(builds / "2", base / "6")
    (base / "6" / "saved_model.pb").write_bytes(b"not a SavedModel")
    assert wait_for(lambda: status(server.url, "toy").get(6, {}).get("state") == "END")
    states = status(server.url, "toy")
    assert "failed to load" in states[6]["status"]["error_message"]
    assert 5 not in states
    assert predict(server.url, "toy", 1.0) == 1.0  # version 1 still answers


def test_labels_and_rollback_through_models_config(builds, tmp_path, serve_in_process, capsys):
    root = tmp_path / "serving"
    for v in (1, 2, 3):
        atomic_copy_dir(str(builds / str(v)), str(root / "toy"), v)
    model_config.write(model_config.single_model("toy", str(root / "toy")), versions.config_path(str(root)))
    server = serve_in_process("--model-config-file", versions.config_path(str(root)), "--poll-seconds", "0.2")
    assert predict(server.url, "toy", 1.0) == 3.0

    def rollback(*args):  # `retrain rollback`, in this process
        code = cli.main(["rollback", "--workdir", str(tmp_path), "--model", "toy", *args])
        return code, capsys.readouterr().err

    code, err = rollback("--reason", "AUC dropped in production")
    assert code == 0, err
    assert wait_for(lambda: status(server.url, "toy").get(3, {}).get("state") == "END")
    assert predict(server.url, "toy", 1.0) == 2.0
    assert predict(server.url, "toy", 1.0, "/labels/stable") == 2.0

    code, err = rollback("--to", "1", "--reason", "back to the audited one")
    assert code == 0, err
    assert wait_for(lambda: predict(server.url, "toy", 1.0) == 1.0)
    assert sorted(os.listdir(root / "toy")) == ["1", "2", "3", "history.jsonl"]  # nothing deleted

    code, err = rollback("--to", "9", "--reason", "x")
    assert code == 2 and "version 9 not found" in err

    code, err = rollback("--latest", "--reason", "fixed")
    assert code == 0, err
    assert wait_for(lambda: predict(server.url, "toy", 1.0) == 3.0)
    events = history.read(str(root / "toy"))
    assert [(e["event"], e["from_version"], e["to_version"]) for e in events] == [
        ("rollback", 3, 2), ("rollback", 2, 1), ("release", 1, 3)]
    assert events[0]["reason"] == "AUC dropped in production" and events[0]["user"]


def test_retention_keeps_the_newest_and_anything_pinned(builds, tmp_path):
    root = tmp_path / "serving"
    for v in (1, 2, 3, 4):
        atomic_copy_dir(str(builds / str(v)), str(root / "toy"), v)
    versions.rollback(str(root), "toy", 1, reason="pin the audited one")
    assert versions.retain(str(root), "toy", keep=2) == [2]
    assert sorted(v for v in os.listdir(root / "toy") if v.isdigit()) == ["1", "3", "4"]


def test_concurrent_requests_are_batched_and_answered_per_row(builds, tmp_path, serve_in_process):
    base = tmp_path / "toy"
    atomic_copy_dir(str(builds / "3"), str(base), 3)
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(base), "--batch-timeout-ms", "20")
    results = {}

    def one(x):
        results[x] = predict(server.url, "toy", x)

    threads = [threading.Thread(target=one, args=(float(i),)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {float(i): 3.0 * i for i in range(24)}
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    calls = float(next(l for l in metrics.splitlines() if l.startswith('retrain_serving_batch_rows_count{model="toy"}')).split()[-1])
    assert calls < 24  # fewer model calls than requests: batched
