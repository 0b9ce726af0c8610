"""Pins every entry point to Keras 2 (tf-keras) before TensorFlow is imported.

TFX 1.16's Transform/Trainer/TFMA path is tested with Keras 2; TF 2.16's default
`tf.keras` is Keras 3, under which the stock taxi example fails ("`inputs` not
connected to `outputs`"). TensorFlow reads TF_USE_LEGACY_KERAS once, at import,
so this module must be imported before anything imports TensorFlow.
"""

import importlib.abc
import os
import sys

from core import noise

LEGACY_KERAS_VAR = "TF_USE_LEGACY_KERAS"


def ensure_legacy_keras() -> None:
    """Routes `tf.keras` to tf-keras, or fails if TensorFlow was imported too early.

    Raises:
      RuntimeError: TensorFlow is already imported with Keras 3 behind `tf.keras`.
    """
    if os.environ.get(LEGACY_KERAS_VAR) == "1":
        return
    if "tensorflow" in sys.modules:
        raise RuntimeError(
            "TensorFlow was imported before core.keras_env; set "
            f"{LEGACY_KERAS_VAR}=1 or import retrain first."
        )
    # Child processes (Beam workers, node subprocesses) inherit it, which is the point.
    os.environ[LEGACY_KERAS_VAR] = "1"
    # TensorFlow 2.16's C++ start-up lines (CUDA probing, duplicate cuFFT/cuDNN factory
    # registration) are harmless noise in a CLI; a user can set the variable to see them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


ensure_legacy_keras()
# Library noise a user cannot act on (core/noise.py), before the libraries print it.
noise.quiet_third_party()


# Packages whose code is written for graph mode, like `tensorflow` and `keras`, which
# AutoGraph's own rules already exempt. (Adding tensorflow_transform was measured: no gain.)
_GRAPH_READY_PACKAGES = ("tf_keras",)
# The module holding AutoGraph's rules; TensorFlow imports it with `import tensorflow`.
_AUTOGRAPH_CONFIG = "tensorflow.python.autograph.core.config"


def _exempt(config) -> None:
    """Puts the graph-ready packages first in AutoGraph's rules (idempotent)."""
    from tensorflow.python.autograph.core import config_lib

    present = {getattr(r, "_prefix", None) for r in config.CONVERSION_RULES}
    new = tuple(config_lib.DoNotConvert(p) for p in _GRAPH_READY_PACKAGES if p not in present)
    config.CONVERSION_RULES = new + tuple(config.CONVERSION_RULES)


class _ExemptOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds AutoGraph's config module as the other finders would, and adds the rules
    right after it executes, so they hold before TensorFlow converts anything."""

    def find_spec(self, name, path, target=None):
        if name != _AUTOGRAPH_CONFIG:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    self._loader = spec.loader
                    spec.loader = self
                    return spec
        return None

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _exempt(module)


def skip_autograph_for_libraries() -> None:
    """Tells AutoGraph not to rewrite tf-keras' own code, in this process and what it forks.

    AutoGraph exempts the `tensorflow` and `keras` packages (their code is written for
    graph mode) but, in TF 2.16, not `tf_keras`, the same Keras 2 code under a new name
    (later TensorFlow adds the rule itself). Without it the first `Model.fit` of a process
    spent ~10 s on this CPU rewriting Keras' training loop (a one-layer model's first fit:
    9.8 s -> 0.6 s; a 5-step toolkit job 11.9 -> 3.3 CPU-s). User code, such as
    `preprocessing_fn`, `run_fn` and model layers, is still converted. Called when this
    module is imported, before TensorFlow: it only installs an import hook, so DAG parsing
    stays TensorFlow-free; where TensorFlow is already imported the rules are added now.
    Idempotent.
    """
    if _AUTOGRAPH_CONFIG in sys.modules:
        _exempt(sys.modules[_AUTOGRAPH_CONFIG])
    elif not any(isinstance(f, _ExemptOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ExemptOnImport())


skip_autograph_for_libraries()
