"""Pins every entry point to Keras 2 (tf-keras) before TensorFlow is imported.

TFX 1.21's Transform/Trainer/TFMA path is Keras 2: TFT 1.21 and TFMA 0.52 require
tf-keras, and TF 2.21's default `tf.keras` is Keras 3 (docs/decisions/keras-2-everywhere.md). TensorFlow reads TF_USE_LEGACY_KERAS once, at import,
so this module must be imported before anything imports TensorFlow.
"""

import os
import sys

from core import lazy_imports, noise

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
    # TensorFlow's C++ start-up lines (CUDA probing, duplicate cuFFT/cuDNN factory
    # registration) are harmless noise in a CLI; a user can set the variable to see them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


ensure_legacy_keras()
# TFX modules no pipeline of ours uses load on first use (~12 s per process: core/lazy_imports.py).
lazy_imports.install()
# Library noise a user cannot act on (core/noise.py), before the libraries print it.
noise.quiet_third_party()

