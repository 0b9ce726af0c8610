"""TF Serving's model server config (`models.config`): read, write and generate it.

The local server reads the same text-proto file as `tensorflow_model_server
--model_config_file`, so one file sets version policy and labels for both. Writes are
atomic (a server polling the file never reads half of it).
"""

from __future__ import annotations

import os

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from core import files
from serving.errors import InvalidArgument

ModelServerConfig = model_server_config_pb2.ModelServerConfig
ModelConfig = model_server_config_pb2.ModelConfig


def single_model(
    name: str,
    base_path: str,
    policy: str = "latest",
    versions: tuple[int, ...] = (),
    labels: dict[str, int] | None = None,
    num_latest: int = 1,
) -> ModelServerConfig:
    """A config serving one model.

    Args:
      policy: "latest" (the `num_latest` newest), "all", or "specific" (`versions`).

    Raises:
      InvalidArgument: unknown policy, or "specific" without versions.
    """
    config = ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name = name
    model.base_path = os.path.abspath(base_path)
    model.model_platform = "tensorflow"
    if policy == "latest":
        model.model_version_policy.latest.num_versions = num_latest
    elif policy == "all":
        model.model_version_policy.all.SetInParent()
    elif policy == "specific":
        if not versions:
            raise InvalidArgument("a specific version policy needs at least one version")
        model.model_version_policy.specific.versions.extend(sorted(versions))
    else:
        raise InvalidArgument(f"version policy {policy!r} is not one of latest, all, specific")
    for label, version in sorted((labels or {}).items()):
        model.version_labels[label] = version
    return config


def set_request_log(config: ModelServerConfig, name: str, sampling_rate: float, filename_prefix: str) -> None:
    """Turns request logging on for one model: TF Serving's `logging_config` (LoggingConfig).

    Raises:
      InvalidArgument: no model of that name in the config.
    """
    model = find(config, name)
    if model is None:
        raise InvalidArgument(f"no model {name!r} in the model config")
    model.logging_config.sampling_config.sampling_rate = sampling_rate
    model.logging_config.log_collector_config.type = "tfrecord"
    model.logging_config.log_collector_config.filename_prefix = os.path.abspath(filename_prefix)


def load(path: str) -> ModelServerConfig:
    """Parses a models.config file.

    Raises:
      InvalidArgument: unreadable or not a ModelServerConfig text proto.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return text_format.Parse(f.read(), ModelServerConfig())
    except OSError as e:
        raise InvalidArgument(f"cannot read model config {path}: {e}") from e
    except text_format.ParseError as e:
        raise InvalidArgument(f"model config {path} is not a ModelServerConfig text proto: {e}") from e


def dumps(config: ModelServerConfig) -> str:
    return text_format.MessageToString(config)


def write(config: ModelServerConfig, path: str) -> None:
    """Writes atomically: a temp file in the same folder, then rename."""
    files.write_text(path, dumps(config))


def find(config: ModelServerConfig, name: str) -> ModelConfig | None:
    for model in config.model_config_list.config:
        if model.name == name:
            return model
    return None
