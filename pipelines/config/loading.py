"""Loading a pipeline config: YAML files, CLI overrides (`--set KEY=VALUE`) and plain dicts.

`load(path, overrides)` reads the file, applies the overrides, types every top-level key
against `PipelineConfig` (pipelines/config/schema.py), resolves relative paths against the
file's folder and validates (pipelines/config/validation.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import yaml

from core import files
from core import settings as settings_lib
from pipelines.config.schema import ConfigError, PipelineConfig
from pipelines.config.validation import validate

# Fields of earlier releases, and what says the same now.
_REPLACED = {
    "beam_mode": "beam.profile (in_memory is direct, multi_processing is direct-multiprocess; pipelines/beam.py)",
    "beam_workers": "beam.workers",
}
# Relative to the config file. `workdir` stays relative to where the command runs.
_PATH_FIELDS = ("data_root", "schema_path", "gate_policy", "feature_policy")


def from_dict(values: Mapping[str, Any], base_dir: str = ".") -> PipelineConfig:
    """Builds and validates a config.

    Raises:
      ConfigError: unknown or missing field, wrong type, or a value out of range.
    """
    for old, new in _REPLACED.items():
        if old in values:
            raise ConfigError(f"{old}: replaced by {new}")
    try:  # the same loader as every settings block: unknown and missing keys, types
        built = settings_lib.build(PipelineConfig, values)
    except settings_lib.SettingsError as e:
        raise ConfigError(f"config: {e}" if str(e).startswith(("unknown", "missing")) else str(e)) from None
    checked = {n: getattr(built, n) for n in values}
    for name in _PATH_FIELDS:
        if checked.get(name) is not None and not os.path.isabs(checked[name]):
            checked[name] = os.path.normpath(os.path.join(base_dir, checked[name]))
    key = (checked.get("signing") or {}).get("key")
    if isinstance(key, str) and not os.path.isabs(key):
        checked["signing"] = {**checked["signing"], "key": os.path.normpath(os.path.join(base_dir, key))}
    config = PipelineConfig(**checked)
    validate(config)
    return config


def load(path: str, overrides: Mapping[str, Any] | None = None) -> PipelineConfig:
    """Loads a YAML config; `overrides` (already typed values) win over the file.

    Raises:
      ConfigError: unreadable file or invalid values.
    """
    values = files.read_yaml(path, ConfigError, "config")
    if not isinstance(values, dict):
        raise ConfigError(f"config {path} must be a mapping of field: value")
    for key, value in (overrides or {}).items():
        if value is CLEAR:
            values.pop(key, None)
        elif value is not None:
            _set_dotted(values, key, value)
    return from_dict(values, base_dir=os.path.dirname(os.path.abspath(path)))


# An override that removes a top-level key (e.g. the file's train_epochs when --train-steps is given).
CLEAR = object()


def _set_dotted(values: dict, key: str, value: Any) -> None:
    """values["a"]["b"] = value for key "a.b" (the mappings on the way are copied, not shared)."""
    *path, last = key.split(".")
    target = values
    for part in path:
        inner = target.get(part)
        if inner is None:
            inner = {}
        elif not isinstance(inner, Mapping):
            raise ConfigError(f"{key}: {part} is not a mapping in the config")
        target[part] = inner = dict(inner)
        target = inner
    target[last] = value


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (`--set beam.profile=portable`) as overrides; values read as YAML.

    Raises:
      ConfigError: an item without `=`.
    """
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. beam.profile=direct-multiprocess")
        try:
            out[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML: {e}") from e
    return out


def replace(config: PipelineConfig, **changes: Any) -> PipelineConfig:
    """`dataclasses.replace` plus validation."""
    new = dataclasses.replace(config, **changes)
    validate(new)
    return new
