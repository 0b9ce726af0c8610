"""Defers TFX modules that every process imports but no pipeline of ours uses.

`tfx/v1/__init__.py` imports `tfx.v1.extensions`, whose Vertex AI and BigQuery components
import `google.cloud.aiplatform` at module level. In TFX 1.21 that package tree takes
~12 s of the ~23 s a `from tfx import v1` takes on these 2 cores, in every task process,
test process and warm runtime. Here `tfx.v1.extensions` is loaded lazily (the standard
library's `importlib.util.LazyLoader`): the name exists at once, and its code runs the
first time an attribute of it is used, so `tfx.extensions.google_cloud_big_query...`
still works exactly as before, only later. Installed by `core.keras_env`, which every
TFX-runtime entry point imports first.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

# Modules loaded on first use instead of at import: (name, why it is safe to defer).
DEFERRED: tuple[tuple[str, str], ...] = (
    ("tfx.v1.extensions",
     "Google Cloud (Vertex AI, BigQuery) components; our pipelines build none of them"),
)


class _LazyFinder(importlib.abc.MetaPathFinder):
    """Finds a deferred module as the other finders would and wraps its loader in a
    `LazyLoader`, so its code runs on first attribute access."""

    names = frozenset(name for name, _ in DEFERRED)

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Defers the modules in `DEFERRED` in this process (idempotent; a module already
    imported stays as it is)."""
    if not any(isinstance(f, _LazyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyFinder())
