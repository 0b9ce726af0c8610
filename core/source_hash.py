"""Content hashes of the project's source: paths and contents, in a stable order.

One walker for every fingerprint the project takes: the DAG template's (pipeline code, so a
stale template fails at parse time), the Trainer's code version (governance), and the warm
TFX runtime's (it never runs a node with code older than the files on disk).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

from core import project

REPO = project.ROOT
# The packages the TFX runtime imports (airflow_tfx and dags run in Airflow, not there).
RUNTIME_PACKAGES = ("core", "runner", "retrain", "pipelines", "components", "csv_engine", "parquet_engine",
                    "trainer_toolkit", "serving",
                    "governance", "rollout", "task_host")


def tree_sha256(tops: Iterable[str], suffixes: tuple[str, ...] = (".py",), repo: str = REPO) -> str:
    """sha256 over the files under `tops` (folders or single files, relative to `repo`)
    whose names end with one of `suffixes`; `__pycache__` is skipped."""
    digest = hashlib.sha256()

    def add(path: str) -> None:
        digest.update(os.path.relpath(path, repo).encode())
        with open(path, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())

    for top in tops:
        path = os.path.join(repo, top)
        if os.path.isfile(path):
            add(path)
            continue
        for folder, dirs, files in sorted(os.walk(path)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(suffixes):
                    add(os.path.join(folder, name))
    return digest.hexdigest()


def runtime_fingerprint(repo: str = REPO) -> str:
    """The code a TFX-runtime process would import now."""
    return tree_sha256(RUNTIME_PACKAGES, (".py",), repo)
