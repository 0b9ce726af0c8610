"""What is served under a serving root (`<workdir>/serving/`): its models.config, pinning
(rollback), canary rollouts (labels `stable` and `canary`) and retention of old versions.

A canary rollout is written in two places, both on disk so a restarted server keeps it:
models.config serves both versions (`specific` policy) under the labels `stable` and
`canary`, exactly as TF Serving reads them; `<base>/rollout.json` (TF Serving ignores
non-numeric entries of a base path) holds the share of unlabelled traffic the canary gets,
which only this project's server reads (docs/rollout.md: the split is an extension).
"""

from __future__ import annotations

import json
import os
import shutil
import time

from core import files
from serving.errors import FailedPrecondition, InvalidArgument
from serving.repository import history, model_config
from serving.repository.base_path import discover

CONFIG_FILENAME = "models.config"
ROLLOUT_FILENAME = "rollout.json"
STABLE, CANARY = "stable", "canary"


def config_path(serving_root: str) -> str:
    return os.path.join(serving_root, CONFIG_FILENAME)


def load_or_default(serving_root: str, model_name: str) -> model_config.ModelServerConfig:
    """The root's models.config, with an entry (latest version) for `model_name` if it has none."""
    path = config_path(serving_root)
    config = model_config.load(path) if os.path.exists(path) else model_config.ModelServerConfig()
    if model_config.find(config, model_name) is None:
        entry = model_config.single_model(model_name, os.path.join(serving_root, model_name))
        config.model_config_list.config.extend(entry.model_config_list.config)
    return config


def served_version(entry, available: list[int]) -> int | None:
    """The version a server following this entry answers with by default."""
    kind = entry.model_version_policy.WhichOneof("policy_choice") or "latest"
    stable = entry.version_labels.get(STABLE)
    if stable in available and (kind != "specific" or stable in entry.model_version_policy.specific.versions):
        return stable
    if kind == "specific":
        chosen = [v for v in entry.model_version_policy.specific.versions if v in available]
        return max(chosen) if chosen else None
    return max(available) if available else None


def rollback(serving_root: str, model_name: str, to: int | None, reason: str, user: str | None = None) -> dict:
    """Serves `to` (default: the version before the one served now) by pinning it in
    models.config (`specific` policy, label `stable`); deletes nothing.

    Raises:
      InvalidArgument: unknown version, or no earlier version to go back to.
    """
    base = os.path.join(serving_root, model_name)
    available = sorted(discover(base))
    if not available:
        raise InvalidArgument(f"no versions of {model_name} under {base}")
    config = load_or_default(serving_root, model_name)
    entry = model_config.find(config, model_name)
    current = served_version(entry, available)
    if to is None:
        earlier = [v for v in available if current is not None and v < current]
        if not earlier:
            raise InvalidArgument(f"{model_name}: no version older than the served {current} to roll back to")
        to = earlier[-1]
    if to not in available:
        raise InvalidArgument(f"{model_name}: version {to} not found; available: {available}")
    canary = rollout_state(base)
    _serve(serving_root, config, entry, stable=to)
    if canary is not None:
        _write_state(base, None)
        history.append(base, "canary_ended", version=canary["canary"], reason=f"rollback of stable to {to}", user=user)
    return history.append(base, "rollback", from_version=current, to_version=to, reason=reason, user=user)


def release(serving_root: str, model_name: str, reason: str, user: str | None = None) -> dict:
    """Back to serving the latest version (undoes a rollback's pin)."""
    base = os.path.join(serving_root, model_name)
    config = load_or_default(serving_root, model_name)
    entry = model_config.find(config, model_name)
    before = served_version(entry, sorted(discover(base)))
    entry.model_version_policy.Clear()
    entry.model_version_policy.latest.num_versions = 1
    entry.version_labels.clear()
    _write_state(base, None)
    model_config.write(config, config_path(serving_root))
    return history.append(base, "release", from_version=before, to_version=served_version(entry, sorted(discover(base))),
                          reason=reason, user=user)


# -- canary rollouts -----------------------------------------------------------------
def rollout_state(base_path: str) -> dict | None:
    """The canary under test (`<base>/rollout.json`), or None.

    Raises:
      InvalidArgument: a rollout file that is not the JSON this module writes.
    """
    path = os.path.join(base_path, ROLLOUT_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"rollout state {path} is unreadable: {e}") from e
    if not isinstance(state, dict) or not {"stable", "canary", "canary_share"} <= set(state):
        raise InvalidArgument(f"rollout state {path} lacks stable, canary or canary_share")
    share = state["canary_share"]
    if not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise InvalidArgument(f"rollout state {path}: canary_share {share!r} is not within [0, 1]")
    return state


def _write_state(base_path: str, state: dict | None) -> None:
    path = os.path.join(base_path, ROLLOUT_FILENAME)
    if state is None:
        if os.path.exists(path):
            os.remove(path)
        return
    files.write_text(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def _serve(serving_root: str, config, entry, stable: int, canary: int | None = None) -> None:
    """models.config: exactly these versions, labelled (written atomically)."""
    entry.model_version_policy.Clear()
    entry.model_version_policy.specific.versions.extend(sorted({stable} | ({canary} if canary else set())))
    entry.version_labels.clear()
    entry.version_labels[STABLE] = stable
    if canary is not None:
        entry.version_labels[CANARY] = canary
    model_config.write(config, config_path(serving_root))


def hold(serving_root: str, model_name: str) -> int | None:
    """Before a version is made visible in canary mode: pins what is served now as `stable`,
    so the new folder is not loaded as "latest" before it is labelled. Returns the stable
    version (None for a model with no version yet)."""
    base = os.path.join(serving_root, model_name)
    available = sorted(discover(base))
    if not available:
        return None
    config = load_or_default(serving_root, model_name)
    entry = model_config.find(config, model_name)
    current = served_version(entry, available)
    state = rollout_state(base)
    if entry.model_version_policy.WhichOneof("policy_choice") == "specific" and entry.version_labels.get(STABLE) == current:
        return current
    _serve(serving_root, config, entry, stable=current, canary=state["canary"] if state else None)
    return current


def start_canary(serving_root: str, model_name: str, version: int, share: float, reason: str,
                 user: str | None = None, **details) -> dict:
    """Serves a newly pushed version as `canary` beside `stable`, or as `stable` if the model
    has none. A canary already under test is replaced (its version is kept, unlabelled, and
    marked superseded) and the test starts again.

    Raises:
      InvalidArgument: an unknown version, or a share outside (0, 1).
    """
    if not 0 < share < 1:
        raise InvalidArgument(f"canary_share must be within (0, 1), got {share}")
    base = os.path.join(serving_root, model_name)
    available = sorted(discover(base))
    if version not in available:
        raise InvalidArgument(f"{model_name}: version {version} not found; available: {available}")
    config = load_or_default(serving_root, model_name)
    entry = model_config.find(config, model_name)
    stable = entry.version_labels.get(STABLE)
    if stable not in available or stable == version:
        _serve(serving_root, config, entry, stable=version)
        _write_state(base, None)
        return history.append(base, "stable", version=version, reason=reason or "the model's first version", user=user,
                              **details)
    previous = rollout_state(base)
    if previous is not None and previous["canary"] != version:
        history.append(base, "canary_superseded", version=previous["canary"], by_version=version,
                       reason="a newer blessed candidate replaces the canary; the test starts again", user=user)
    _serve(serving_root, config, entry, stable=stable, canary=version)
    state = {"stable": stable, "canary": version, "canary_share": share, "started_at": time.time(), **details}
    _write_state(base, state)
    return history.append(base, "canary", version=version, stable_version=stable, canary_share=share, reason=reason,
                          user=user, **details)


def end_canary(serving_root: str, model_name: str, promote: bool, reason: str, user: str | None = None,
               **details) -> dict:
    """Promotes the canary (`stable` moves to its version) or rolls it back (its label goes,
    the version stays on disk, marked rolled back in the history).

    Raises:
      FailedPrecondition: no canary under test.
    """
    base = os.path.join(serving_root, model_name)
    state = rollout_state(base)
    if state is None:
        raise FailedPrecondition(f"{model_name}: no canary is under test")
    config = load_or_default(serving_root, model_name)
    entry = model_config.find(config, model_name)
    canary, stable = state["canary"], state["stable"]
    _serve(serving_root, config, entry, stable=canary if promote else stable)
    _write_state(base, None)
    if promote:
        return history.append(base, "promote", from_version=stable, to_version=canary, reason=reason, user=user,
                              **details)
    return history.append(base, "canary_rollback", version=canary, stable_version=stable, reason=reason, user=user,
                          **details)


def protected_versions(serving_root: str, model_name: str) -> set[int]:
    """Versions models.config pins or labels: never removed by retention."""
    path = config_path(serving_root)
    if not os.path.exists(path):
        return set()
    entry = model_config.find(model_config.load(path), model_name)
    if entry is None:
        return set()
    return set(entry.model_version_policy.specific.versions) | set(entry.version_labels.values())


def retain(serving_root: str, model_name: str, keep: int) -> list[int]:
    """Removes all but the newest `keep` versions (and any pinned or labelled one).

    Raises:
      FailedPrecondition: keep < 1.
    """
    if keep < 1:
        raise FailedPrecondition(f"keep_versions must be at least 1, got {keep}")
    base = os.path.join(serving_root, model_name)
    available = sorted(discover(base))
    protected = protected_versions(serving_root, model_name)
    removed = []
    for version in available[:-keep]:
        if version in protected:
            continue
        # Rename first: a watcher never sees a half-deleted version.
        doomed = os.path.join(base, f".removing-{version}")
        os.rename(os.path.join(base, str(version)), doomed)
        shutil.rmtree(doomed)
        removed.append(version)
    if removed:
        history.append(base, "retired", versions=removed, reason=f"keep the newest {keep} versions")
    return removed


def production_config(serving_root: str, base_path_prefix: str | None = None) -> model_config.ModelServerConfig:
    """models.config for every model under the root, for `tensorflow_model_server`.

    Pins and labels of the local models.config are kept; `base_path_prefix` rewrites the
    base paths to where the root is mounted (e.g. /models in the tensorflow/serving image).
    """
    models = sorted(n for n in os.listdir(serving_root) if os.path.isdir(os.path.join(serving_root, n))
                    and discover(os.path.join(serving_root, n)))
    config = model_config.ModelServerConfig()
    for name in models:
        entry = model_config.find(load_or_default(serving_root, name), name)
        if base_path_prefix:
            entry.base_path = f"{base_path_prefix.rstrip('/')}/{name}"
        config.model_config_list.config.add().CopyFrom(entry)
    return config
