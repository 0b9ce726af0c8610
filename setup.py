"""Packaging for the TFX runtime: the project's own packages and the `retrain` console script.

Dependencies are pinned in requirements/tfx.lock (installed by `make venv`), not here,
so that `pip install -e .` never re-resolves TFX's dependency tree.
"""

from setuptools import find_packages, setup

setup(
    name="tfx-retrain",
    version="0.1.0",
    description="Scheduled, governed retraining of TensorFlow models with TFX and Airflow",
    # One distribution for both environments: the TFX runtime (Python 3.13) runs all of it; the Airflow
    # control plane (3.11) imports only the TensorFlow-free layers (core, task_host's client, airflow_tfx:
    # tests/test_layers.py holds the rule).
    python_requires=">=3.11",
    packages=find_packages(include=["core*", "runner*", "retrain*", "pipelines*", "components*", "csv_engine*",
                                    "parquet_engine*",
                                    "trainer_toolkit*", "serving*", "governance*", "rollout*", "airflow_tfx*", "task_host*"]),
    package_data={"pipelines": ["*/config.yaml"], "runner": ["scaffold_templates/*.tmpl"]},
    entry_points={"console_scripts": ["retrain = retrain.cli:entry_point"]},
)
