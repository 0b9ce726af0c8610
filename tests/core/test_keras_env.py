"""Every entry point runs TensorFlow with Keras 2 (tf-keras) behind tf.keras."""

import os
import subprocess
import sys


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_cli_module_routes_tf_keras_to_keras_2():
    out = _run("import retrain.cli, tensorflow as tf; print(tf.keras.__name__)")
    assert out.startswith("tf_keras"), out


def test_without_it_tf_keras_would_be_keras_3():
    # Proves the test above tests something: TensorFlow 2.21's default is Keras 3.
    out = _run("import tensorflow as tf; print(tf.keras.__name__)")
    assert out.startswith("keras"), out


def test_importing_after_tensorflow_fails_loudly():
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-c", "import tensorflow, core.keras_env"],
        env=env, capture_output=True, text=True,
    )
    assert proc.returncode != 0 and "imported before core.keras_env" in proc.stderr


_RULE = ("import tf_keras; from tensorflow.python.autograph.impl import conversion;"
         " print(conversion.is_allowlisted(tf_keras.Model.train_step))")


def test_autograph_leaves_tf_keras_alone():
    """AutoGraph must not rewrite tf-keras' own training loop (the first fit of a process
    spent ~10 s on it under TF 2.16, whose rules exempted `keras` but not `tf_keras`, so
    core.keras_env carried the rule). TensorFlow 2.21 has it itself: this holds it there."""
    assert _run("import core.keras_env; " + _RULE).splitlines()[-1] == "True"
    # Importing it at DAG-parse time does not import TensorFlow.
    assert _run("import sys, core.keras_env; print('tensorflow' in sys.modules)") == "False"
