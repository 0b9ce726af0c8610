"""Canary rollouts in models.config and the history: the push rule, a newer candidate
during a test, promotion, roll-back, and what TF Serving and retention see."""

import json
import os

import pytest

from serving.errors import FailedPrecondition, InvalidArgument
from serving.repository import history, model_config, versions


def _version(base, v):
    path = os.path.join(base, str(v))
    os.makedirs(os.path.join(path, "variables"))
    open(os.path.join(path, "saved_model.pb"), "wb").close()
    open(os.path.join(path, "variables", "variables.index"), "wb").close()


def _three_versions(tmp_path):
    root, base = str(tmp_path), os.path.join(str(tmp_path), "m")
    for v in (1, 2, 3):
        _version(base, v)
    return root, base


def _entry(root):
    return model_config.find(model_config.load(versions.config_path(root)), "m")


def test_the_first_version_is_stable_and_later_ones_canaries_beside_it(tmp_path):
    root = str(tmp_path)
    base = os.path.join(root, "m")
    assert versions.hold(root, "m") is None  # nothing served yet
    _version(base, 1)
    versions.start_canary(root, "m", 1, 0.1, reason="first")
    assert dict(_entry(root).version_labels) == {"stable": 1} and versions.rollout_state(base) is None
    # The next push: stable pinned before the folder appears, then labelled canary beside it.
    assert versions.hold(root, "m") == 1
    _version(base, 2)
    assert list(_entry(root).model_version_policy.specific.versions) == [1]  # 2 is not loaded as latest
    versions.start_canary(root, "m", 2, 0.1, reason="blessed", model_uri="/m/2")
    entry = _entry(root)
    assert list(entry.model_version_policy.specific.versions) == [1, 2]
    assert dict(entry.version_labels) == {"stable": 1, "canary": 2}
    state = versions.rollout_state(base)
    assert (state["stable"], state["canary"], state["canary_share"], state["model_uri"]) == (1, 2, 0.1, "/m/2")
    assert versions.served_version(entry, [1, 2]) == 1  # what reviewers see as served: stable
    assert versions.protected_versions(root, "m") == {1, 2}


def test_a_newer_candidate_replaces_the_canary_and_the_test_starts_again(tmp_path):
    root, base = _three_versions(tmp_path)
    versions.start_canary(root, "m", 1, 0.1, reason="first")
    versions.start_canary(root, "m", 2, 0.1, reason="blessed")
    started = versions.rollout_state(base)["started_at"]
    versions.start_canary(root, "m", 3, 0.2, reason="blessed")
    assert dict(_entry(root).version_labels) == {"stable": 1, "canary": 3}
    assert list(_entry(root).model_version_policy.specific.versions) == [1, 3]
    assert versions.rollout_state(base)["started_at"] >= started
    superseded = [e for e in history.read(base) if e["event"] == "canary_superseded"]
    assert superseded and superseded[0]["version"] == 2 and superseded[0]["by_version"] == 3
    assert os.path.isdir(os.path.join(base, "2"))


def test_promotion_and_rollback_of_the_canary(tmp_path):
    root, base = _three_versions(tmp_path)
    versions.start_canary(root, "m", 1, 0.1, reason="first")
    versions.start_canary(root, "m", 2, 0.1, reason="blessed")
    versions.end_canary(root, "m", promote=True, reason="no worse", user="controller")
    assert dict(_entry(root).version_labels) == {"stable": 2} and versions.rollout_state(base) is None
    versions.start_canary(root, "m", 3, 0.1, reason="blessed")
    versions.end_canary(root, "m", promote=False, reason="worse", user="controller")
    assert dict(_entry(root).version_labels) == {"stable": 2}
    assert list(_entry(root).model_version_policy.specific.versions) == [2]
    events = history.read(base)
    assert [e["event"] for e in events][-2:] == ["canary", "canary_rollback"]
    assert events[-1]["version"] == 3 and events[-1]["reason"] == "worse"
    with pytest.raises(FailedPrecondition, match="no canary"):
        versions.end_canary(root, "m", promote=True, reason="x")


def test_a_stable_rollback_ends_a_canary_and_bad_state_files_are_refused(tmp_path):
    root, base = _three_versions(tmp_path)
    versions.start_canary(root, "m", 2, 0.1, reason="first")
    versions.start_canary(root, "m", 3, 0.1, reason="blessed")
    versions.rollback(root, "m", 1, reason="incident")
    assert dict(_entry(root).version_labels) == {"stable": 1} and versions.rollout_state(base) is None
    with pytest.raises(InvalidArgument, match="within"):
        versions.start_canary(root, "m", 3, 1.5, reason="x")
    with pytest.raises(InvalidArgument, match="version 9 not found"):
        versions.start_canary(root, "m", 9, 0.1, reason="x")
    with open(os.path.join(base, versions.ROLLOUT_FILENAME), "w") as f:
        json.dump({"stable": 1}, f)
    with pytest.raises(InvalidArgument, match="lacks stable, canary or canary_share"):
        versions.rollout_state(base)
