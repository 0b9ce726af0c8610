"""What is served under a serving root (`<workdir>/serving/`): its models.config, pinning
(rollback) and retention of old versions."""

from __future__ import annotations

import os
import shutil

from serving import history, model_config
from serving.errors import FailedPrecondition, InvalidArgument
from serving.layout import discover

CONFIG_FILENAME = "models.config"


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
    entry.model_version_policy.Clear()
    entry.model_version_policy.specific.versions.append(to)
    entry.version_labels.clear()
    entry.version_labels["stable"] = to
    model_config.write(config, config_path(serving_root))
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
    model_config.write(config, config_path(serving_root))
    return history.append(base, "release", from_version=before, to_version=served_version(entry, sorted(discover(base))),
                          reason=reason, user=user)


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
