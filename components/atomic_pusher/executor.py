"""Executor of AtomicPusher: the stock filesystem push, made safe for TF Serving's watcher.

TF Serving loads any numeric directory it finds under the model's base path. The
stock Pusher copies files straight into `<base>/<version>/`, so a poll can land on a
half-written SavedModel. Here the copy goes to a hidden staging directory on the same
filesystem (`<base>/.staging-<version>-<pid>`, not numeric, so never loaded) and then
one `os.rename` makes the complete version visible. Where signing is on, the staged
version is signed (serving/repository/signing.py) before that rename, so no version is ever visible
unsigned; the signature's digest and signer go on the PushedModel artifact.

In canary rollout mode (custom_config `rollout.mode: canary`), what serves now is pinned
as `stable` before the rename (so the new folder is not loaded as "latest"), and the new
version is then labelled `canary` beside it (serving/repository/versions.py `start_canary`); the
first version of a model becomes `stable` directly. The rollout controller decides later.
"""

import json
import logging
import os
import re
import shutil
import time
from typing import Any

from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from serving.repository import history, signing, versions

logger = logging.getLogger(__name__)

_NUMERIC = re.compile(r"^\d+$")
# TF Serving replays this file when it loads a version (written by ServingCheck).
WARMUP_FILENAME = "tf_serving_warmup_requests"
WARMUP_PATH = os.path.join("assets.extra", WARMUP_FILENAME)
# Written into each pushed version (TF Serving ignores assets.extra/ except warm-up files).
PUSH_INFO = os.path.join("assets.extra", "push_info.json")


def existing_versions(base_directory: str) -> list[int]:
    """Numeric version directories under a model's base path, ascending."""
    if not os.path.isdir(base_directory):
        return []
    return sorted(int(n) for n in os.listdir(base_directory) if _NUMERIC.match(n))


def next_version(base_directory: str, now: float | None = None) -> int:
    """A Unix-seconds version, bumped past any existing one so versions only grow."""
    stamp = int(time.time() if now is None else now)
    versions = existing_versions(base_directory)
    return max([stamp] + [v + 1 for v in versions])


def version_pushed_from(base_directory: str, model_uri: str) -> int | None:
    """The existing version that was pushed from this model artifact, if any."""
    for version in reversed(existing_versions(base_directory)):
        path = os.path.join(base_directory, str(version), PUSH_INFO)
        try:
            with open(path, encoding="utf-8") as f:
                if json.load(f).get("model_uri") == model_uri:
                    return version
        except (OSError, ValueError):
            continue  # pushed by something else, or unreadable: not ours to judge
    return None


def atomic_copy_dir(
    src: str, base_directory: str, version: int, push_info: dict | None = None,
    extra_files: dict[str, str] | None = None, sign_with: signing.SigningKey | None = None,
) -> str:
    """Copies `src` to `<base>/<version>` so that the version appears complete or not at all.

    `extra_files` maps paths inside the version (e.g. the warm-up requests under
    assets.extra/) to files copied in before the version becomes visible; `sign_with`
    signs the complete copy before it does.

    Raises:
      FileExistsError: the version directory already exists (nothing is overwritten).
    """
    final = os.path.join(base_directory, str(version))
    if os.path.exists(final):
        raise FileExistsError(f"version directory {final} already exists; not overwriting it")
    os.makedirs(base_directory, exist_ok=True)
    staging = os.path.join(base_directory, f".staging-{version}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(src, staging)
        if push_info is not None:
            os.makedirs(os.path.dirname(os.path.join(staging, PUSH_INFO)), exist_ok=True)
            with open(os.path.join(staging, PUSH_INFO), "w", encoding="utf-8") as f:
                json.dump(push_info, f, indent=2, sort_keys=True)
        for relative, source in (extra_files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(staging, relative)), exist_ok=True)
            shutil.copy(source, os.path.join(staging, relative))
        if sign_with is not None:
            signing.sign_version(staging, sign_with)
        os.rename(staging, final)  # atomic on POSIX within one filesystem
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


class Executor(pusher_executor.Executor):
    """Pushes a blessed model to `<base_directory>/<version>/` atomically (local filesystem)."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        custom_config = json.loads(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null") or {}
        model_path = self.GetModelPath(input_dict)
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination
        )
        if destination.WhichOneof("destination") != "filesystem":
            raise ValueError("AtomicPusher pushes to a filesystem destination only")
        base = destination.filesystem.base_directory
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        already = version_pushed_from(base, model.uri)
        if already is not None:
            # A cached re-run must not publish the same model again under a new version.
            serving_path = os.path.join(base, str(already))
            logger.info("Model %s is already served as version %d", model.uri, already)
            model_push.set_int_custom_property("already_pushed", 1)
            self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=str(already))
            return
        version = next_version(base)
        push_info = {
            "model_uri": model.uri,
            "model_artifact_id": model.id,
            "version": version,
            "pushed_at_unix": int(time.time()),
        }
        extra = {}
        infra = input_dict.get(standard_component_specs.INFRA_BLESSING_KEY)
        if infra:
            warmup = os.path.join(artifact_utils.get_single_instance(infra).uri, WARMUP_FILENAME)
            if os.path.exists(warmup):
                extra[WARMUP_PATH] = warmup
                push_info["warmup_requests"] = True
        rollout = custom_config.get("rollout") or {}
        canary_mode = rollout.get("mode") == "canary"
        serving_root, model_name = os.path.dirname(base), os.path.basename(base)
        if canary_mode:
            stable = versions.hold(serving_root, model_name)
            if stable is not None:
                logger.info("Canary rollout: version %d stays stable while the new version is tested", stable)
        key = None
        if custom_config.get("signing_workdir"):
            key = signing.resolve_key(custom_config.get("signing_key") or None, custom_config["signing_workdir"])
        serving_path = atomic_copy_dir(model_path, base, version, push_info, extra, sign_with=key)
        logger.info("Model version %d visible at %s", version, serving_path)
        if key is not None:
            signed = signing.describe(os.path.join(serving_path, signing.SIGNATURE))
            model_push.set_string_custom_property("signature_digest", signed["digest"])
            model_push.set_string_custom_property("signer_key_id", signed["key_id"])
            model_push.set_int_custom_property("signed_files", signed["files"])
            logger.info("Version %d signed: %s by key %s (%d files)", version, signed["digest"],
                        signed["key_id"][:16], signed["files"])
        history.append(base, "push", version=version, model_uri=model.uri, model_artifact_id=model.id,
                       user="pipeline")
        if canary_mode:
            entry = versions.start_canary(serving_root, model_name, version, float(rollout.get("canary_share", 0.1)),
                                          reason="blessed candidate", user="pipeline", model_uri=model.uri,
                                          model_artifact_id=model.id)
            model_push.set_string_custom_property("rollout", entry["event"])
            logger.info("Version %d serves as %s%s", version, entry["event"],
                        f" ({100 * entry['canary_share']:.0f}% of unlabelled requests)" if entry["event"] == "canary" else "")
        keep = int(custom_config.get("keep_versions") or 0)
        if keep:
            removed = versions.retain(os.path.dirname(base), os.path.basename(base), keep)
            if removed:
                logger.info("Removed versions %s (keeping the newest %d)", removed, keep)
        io_utils.copy_dir(model_path, model_push.uri)
        self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=str(version))
