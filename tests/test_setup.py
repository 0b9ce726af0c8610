"""What `make venv` leaves behind, beyond the pinned packages."""

import importlib.util
import os

import apache_beam
import tensorflow
import tfx


def test_the_runtime_has_bytecode_for_its_packages():
    # Without it (uv installs none, PYTHONDONTWRITEBYTECODE stops caching at import) every
    # process compiled these packages' sources again: ~10 s per process on 2 cores.
    for module in (tfx, tensorflow, apache_beam):
        cached = importlib.util.cache_from_source(module.__file__)
        assert os.path.exists(cached), f"no bytecode for {module.__name__}: {cached} (make venv compiles it)"
