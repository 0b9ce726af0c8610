"""`python -m retrain`: the same as the `retrain` console script."""

from retrain.cli import entry_point

entry_point()
