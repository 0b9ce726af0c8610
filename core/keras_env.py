"""Pins every entry point to Keras 2 (tf-keras) before TensorFlow is imported.

TFX 1.16's Transform/Trainer/TFMA path is tested with Keras 2; TF 2.16's default
`tf.keras` is Keras 3, under which the stock taxi example fails ("`inputs` not
connected to `outputs`"). TensorFlow reads TF_USE_LEGACY_KERAS once, at import,
so this module must be imported before anything imports TensorFlow.
"""

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


def skip_autograph_for_libraries() -> None:
    """Tells AutoGraph not to rewrite tf-keras' own code.

    AutoGraph exempts the `tensorflow` and `keras` packages (their code is written for
    graph mode) but not `tf_keras`, the same Keras 2 code under a new name, so the first `Model.fit` spent ~10 s on this CPU rewriting
    Keras' training loop (a one-layer model's first fit: 9.8 s -> 0.6 s). User code,
    such as `preprocessing_fn` and `run_fn`, is still converted. Idempotent; imports
    TensorFlow, so call it where nodes run, not at DAG-parse time.
    """
    from tensorflow.python.autograph.core import config as ag_config  # no public knob
    from tensorflow.python.autograph.core import config_lib

    present = {getattr(r, "_prefix", None) for r in ag_config.CONVERSION_RULES}
    new = tuple(config_lib.DoNotConvert(p) for p in _GRAPH_READY_PACKAGES if p not in present)
    ag_config.CONVERSION_RULES = new + tuple(ag_config.CONVERSION_RULES)
