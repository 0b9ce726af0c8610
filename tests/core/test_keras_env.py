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
    # Proves the test above tests something: TF 2.16's default is Keras 3.
    out = _run("import tensorflow as tf; print(tf.keras.__name__)")
    assert out.startswith("keras"), out


def test_importing_after_tensorflow_fails_loudly():
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-c", "import tensorflow, core.keras_env"],
        env=env, capture_output=True, text=True,
    )
    assert proc.returncode != 0 and "imported before core.keras_env" in proc.stderr
