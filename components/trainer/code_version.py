"""The code version a model was trained with: git commit, dirty tree, and a content hash of
the pipeline code (what `airflow_tfx.compiled_dag` fingerprints), for governance."""

from __future__ import annotations

import os
import subprocess

from core import project, source_hash

REPO = project.ROOT
_CODE_DIRS = ("pipelines", "components", "serving", "retrain")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_fingerprint() -> str:
    return source_hash.tree_sha256(_CODE_DIRS, (".py", ".yaml"), REPO)


def code_version() -> dict:
    """{git_commit, git_dirty, code_sha256}; outside a git checkout (a container image) the
    commit comes from RETRAIN_CODE_VERSION, else "unknown"."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": commit or os.environ.get("RETRAIN_CODE_VERSION", "unknown"),
        "git_dirty": bool(status) if status is not None else None,
        "code_sha256": code_fingerprint(),
    }
