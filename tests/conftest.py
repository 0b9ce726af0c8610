"""Shared fixtures. Importing retrain.keras_env first routes tf.keras to tf-keras, as every
entry point does."""

import os

from retrain import keras_env  # noqa: F401  (before anything imports TensorFlow)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAXI_CONFIG = os.path.join(REPO, "pipelines", "taxi", "config.yaml")
TAXI_SCHEMA = os.path.join(REPO, "schemas", "taxi", "schema.pbtxt")
TAXI_DATA = os.path.join(REPO, "data", "taxi")
TESTDATA = os.path.join(REPO, "tests", "testdata")
DIGITS_CONFIG = os.path.join(REPO, "pipelines", "digits", "config.yaml")
DIGITS_DATA = os.path.join(REPO, "data", "digits")
