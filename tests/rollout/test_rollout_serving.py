"""The rollout loop through a real server: split, keyed request logs, delayed labels, the
decision and its effect, a restart in the middle, and clients that address versions."""

import base64
import json
import os
import urllib.request

import pytest

from core import layout, tasks
from rollout import controller, simulate
from rollout.settings import RolloutSettings
from serving.repository import history, model_config, versions
from serving.server import request_log
from serving.server.manager import ModelManager
from tests.rollout import toy_scorer
from tests.serving.conftest import Server
from tests.waiting import request_logs_closed, until

SETTINGS = RolloutSettings(mode="canary", canary_share=0.5, max_regression=0.05, effect_size=0.05, min_labelled=200,
                           significance_level=0.05)


def _versions_answering(url: str, keys: list[str], label: str | None = None) -> list[int]:
    body = json.dumps({"instances": [{"b64": base64.b64encode(toy_scorer.examples(1, 0)[0][0]).decode()}]}).encode()
    out = []
    for key in keys:
        target = f"{url}/v1/models/toy" + (f"/labels/{label}" if label else "") + ":predict"
        request = urllib.request.Request(target, data=body, headers={"X-Request-Id": key})
        with urllib.request.urlopen(request, timeout=30) as response:
            out.append(int(json.load(response)["predictions"][0]["version"][0]))
    return out


def _settled_split(url: str, keys: list[str], expected: set[int]) -> list[int] | None:
    """The versions answering `keys` when both of `expected` answer and a second pass agrees."""
    first = _versions_answering(url, keys)
    return first if set(first) == expected and _versions_answering(url, keys) == first else None


def _grpc_versions(target: str, keys: list[str]) -> list[int]:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.inputs["examples"].CopyFrom(tf.make_tensor_proto([toy_scorer.examples(1, 0)[0][0]]))
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return [int(tf.make_ndarray(stub.Predict(request, timeout=30, metadata=[("x-request-id", key)])
                                    .outputs["version"]).ravel()[0]) for key in keys]


def _log_records(prefix: str, origin: str) -> int:
    """Records logged for requests keyed `<origin>-<i>`; the probes' records, which the
    writer may still be flushing, are not counted."""
    return sum(1 for log in request_log.read(prefix) if log.log_metadata.request_origin.startswith(origin + "-"))


def _traffic(url, workdir, name, count, seed):
    examples, labels = toy_scorer.examples(count, seed)
    sent = simulate.replay(url, "toy", examples, key_prefix=name, max_seconds=120)
    assert sent.failed == 0, sent.errors
    simulate.write_feedback(layout.feedback_dir(workdir, "toy"), name, sent.keys, labels[: len(sent.keys)])
    return sent


@pytest.fixture
def served(tmp_path):
    workdir = str(tmp_path / "work")
    root = layout.serving_root(workdir)
    base = os.path.join(root, "toy")
    toy_scorer.save(os.path.join(base, "1"), 1, weight=2.0)
    config = model_config.single_model("toy", base)
    prefix = layout.request_log_prefix(workdir, "toy")
    model_config.set_request_log(config, "toy", 1.0, prefix)
    model_config.write(config, versions.config_path(root))
    versions.start_canary(root, "toy", 1, 0.5, reason="first")
    server = Server(["--model-config-file", versions.config_path(root), "--poll-seconds", "0.2",
                     "--request-log-max-file-seconds", "0.5", "--request-log-max-files", "1000"], tmp_path)
    yield workdir, root, base, prefix, server
    server.stop()


def test_a_good_canary_is_promoted_and_a_degraded_one_rolled_back_from_delayed_labels(served, tmp_path):
    workdir, root, base, prefix, server = served
    assert versions.load_or_default(root, "toy").model_config_list.config[0].version_labels["stable"] == 1
    # A good candidate (the same ranking) as canary beside stable.
    toy_scorer.save(os.path.join(base, "2"), 2, weight=2.0)
    versions.start_canary(root, "toy", 2, 0.5, reason="blessed candidate")
    keys = [f"probe-{i}" for i in range(40)]
    until(lambda: set(_versions_answering(server.url, keys)) == {1, 2}, 60, "both versions to answer")
    first = _versions_answering(server.url, keys)
    assert first == _versions_answering(server.url, keys)  # a key stays on its version
    assert _grpc_versions(server.grpc_target, keys) == first  # gRPC's x-request-id: the same choice
    assert set(_versions_answering(server.url, keys[:10], label="stable")) == {1}  # label-addressed: exact

    sent = _traffic(server.url, workdir, "good", 3000, seed=1)
    until(lambda: _log_records(prefix, "good") >= 3000 and request_logs_closed(prefix), 30, "the request logs")
    assert _log_records(prefix, "good") == 3000  # every request logged once
    decision = controller.measure(workdir, "toy", tasks.BINARY, SETTINGS)
    assert decision.action == "promote", decision.reason
    assert decision.live["canary"]["labelled"] + decision.live["stable"]["labelled"] == len(sent.keys)
    controller.apply(workdir, decision)
    entry = model_config.find(model_config.load(versions.config_path(root)), "toy")
    assert dict(entry.version_labels) == {"stable": 2} and versions.rollout_state(base) is None
    until(lambda: set(_versions_answering(server.url, keys)) == {2}, 30, "stable 2 to answer everything")

    # A degraded candidate: rolled back, while stable answers throughout.
    toy_scorer.save(os.path.join(base, "3"), 3, weight=-2.0)
    versions.start_canary(root, "toy", 3, 0.5, reason="blessed candidate")
    # The split in effect: both versions answer, the same way twice (a capture straddling the
    # moment the server took up the split would not be the split the restart must keep).
    before_restart = until(lambda: _settled_split(server.url, keys, {2, 3}), 60, "the canary split to answer")
    server.stop()  # a restart in the middle of the rollout keeps the split: it is on disk
    server = Server(["--model-config-file", versions.config_path(root), "--poll-seconds", "0.2",
                     "--request-log-max-file-seconds", "0.5", "--request-log-max-files", "1000"], tmp_path)
    try:
        until(lambda: _versions_answering(server.url, keys) == before_restart, 60, "the same split after restart")
        sent = _traffic(server.url, workdir, "bad", 1500, seed=2)
        assert set(_versions_answering(server.url, keys[:10], label="stable")) == {2}
        until(lambda: _log_records(prefix, "bad") >= len(sent.keys) and request_logs_closed(prefix), 30, "the logs")
        assert _log_records(prefix, "bad") == len(sent.keys)  # no record lost across the restart
        decision = controller.measure(workdir, "toy", tasks.BINARY, SETTINGS)
        assert decision.action == "rollback", decision.reason
        assert decision.live["canary"]["auc"]["value"] < 0.3 < 0.7 < decision.live["stable"]["auc"]["value"]
        controller.apply(workdir, decision)
        until(lambda: set(_versions_answering(server.url, keys)) == {2}, 30, "stable to answer everything again")
        events = [e["event"] for e in history.read(base)]
        assert events[-1] == "canary_rollback" and "promote" in events
        assert os.path.isdir(os.path.join(base, "3"))  # kept, marked rolled back
    finally:
        server.stop()


def test_a_split_only_happens_where_models_config_labels_both_versions(tmp_path):
    base = str(tmp_path / "toy")
    for v in (1, 2):
        toy_scorer.save(os.path.join(base, str(v)), v, weight=2.0)
    config = model_config.single_model("toy", base, policy="specific", versions=(1, 2), labels={"stable": 1})
    (tmp_path / "toy" / "rollout.json").write_text(json.dumps({"stable": 1, "canary": 2, "canary_share": 0.5}))
    manager = ModelManager(config)
    manager.poll_once()
    assert manager.split("toy") is None  # no canary label: a stale file splits nothing
    assert {manager.get("toy", key=f"k{i}").version for i in range(20)} == {2}  # TF Serving's default: the newest
    config.model_config_list.config[0].version_labels["canary"] = 2
    manager.poll_once()
    chosen = [manager.get("toy", key=f"k{i}").version for i in range(200)]
    assert 60 < chosen.count(2) < 140 and chosen == [manager.get("toy", key=f"k{i}").version for i in range(200)]
    assert manager.get("toy").version == 2 and manager.get("toy", label="stable").version == 1
    assert manager.get("toy", version=1, key="k1").version == 1
