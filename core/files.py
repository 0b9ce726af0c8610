"""Atomic file writes (a reader sees the old file or the new one, never half of either),
reading a YAML file with an error that names it, and JSON-lines logs (history, audits)."""

from __future__ import annotations

import hashlib
import os
import shutil


def _tmp(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


def write_bytes(path: str, data: bytes) -> str:
    """Writes `data` to `path` through a temporary file and a rename; returns `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = _tmp(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_text(path: str, text: str) -> str:
    """`write_bytes` for UTF-8 text."""
    return write_bytes(path, text.encode("utf-8"))


def replace_dir(staging: str, target: str, aside: str | None = None) -> str:
    """Moves a fully written `staging` folder to `target`, replacing what was there.

    The replaced folder is renamed to `aside` (default: beside the target) and deleted;
    give a path outside a folder that must never hold a stray entry (a signed version).
    """
    old = aside or _tmp(target) + ".old"
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_yaml(path: str, error: type[Exception], what: str):
    """A YAML file's content ({} when empty).

    Raises:
      error: "cannot read <what> <path>: ..." or "<what> <path> is not valid YAML: ...".
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f) or {}
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e}") from e
    except yaml.YAMLError as e:
        raise error(f"{what} {path} is not valid YAML: {e}") from e


def append_jsonl(path: str, entry: dict) -> None:
    """Appends one JSON line (sorted keys) to an append-only log file, creating its folder."""
    import json

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def read_jsonl(path: str) -> list[dict]:
    """The entries of a JSON-lines file, oldest first ([] when it does not exist)."""
    import json

    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
