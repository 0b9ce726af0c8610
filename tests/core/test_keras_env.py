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


_RULE = ("import tf_keras; from tensorflow.python.autograph.impl import conversion;"
         " print(conversion.is_allowlisted(tf_keras.Model.train_step))")


def test_autograph_leaves_tf_keras_alone_once_keras_env_is_imported():
    # The rule comes from core.keras_env (an import hook, set before TensorFlow loads) ...
    assert _run("import core.keras_env; " + _RULE).splitlines()[-1] == "True"
    # ... not from TensorFlow 2.16, which converts tf-keras' own code.
    assert _run("import os; os.environ['TF_USE_LEGACY_KERAS'] = '1'; " + _RULE).splitlines()[-1] == "False"
    # Importing it at DAG-parse time does not import TensorFlow.
    assert _run("import sys, core.keras_env; print('tensorflow' in sys.modules)") == "False"
    # With TensorFlow already imported (the variable set), importing it sets the rule at once.
    assert _run("import os; os.environ['TF_USE_LEGACY_KERAS'] = '1'; import tensorflow, core.keras_env; "
                + _RULE).splitlines()[-1] == "True"
