"""What `make venv` and `make airflow-venv` leave behind, beyond the pinned packages."""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECK = """
import importlib, importlib.util, os, sys
missing = [m for m in sys.argv[1:] if not os.path.exists(importlib.util.cache_from_source(importlib.import_module(m).__file__))]
print(" ".join(missing))
"""


# Without bytecode (uv installs none, PYTHONDONTWRITEBYTECODE stops caching at import)
# every process compiled these packages' sources again: ~10 s per TFX process on 2 cores.
@pytest.mark.parametrize("venv, modules", [(".venv", ["tfx", "tensorflow", "apache_beam"]),
                                           (".venv-airflow", ["airflow", "sqlalchemy", "pydantic"])])
def test_each_environment_has_bytecode_for_its_packages(venv, modules):
    python = os.path.join(REPO, venv, "bin", "python")
    out = subprocess.run([python, "-c", _CHECK, *modules], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"no bytecode in {venv} for: {out.stdout.strip()} (make venv compiles it)"
