"""The runtime's SBOM (core/sbom.py), written by `make venv`: it lists the lock file's pins."""

import json
import re

from core import sbom
from tests.conftest import REPO


def _locked(name: str) -> str:
    text = open(f"{REPO}/requirements/tfx.lock").read()
    return re.search(rf"^{re.escape(name)}==(\S+)$", text, re.M).group(1)


def test_the_environment_sbom_lists_the_pinned_versions():
    info = sbom.describe()
    assert info is not None, f"no SBOM at {sbom.path()}: make venv writes it"
    assert info["format"].startswith("CycloneDX 1.") and info["components"] > 200
    for package in ("tensorflow", "tfx", "apache-beam", "tensorflow-model-analysis", "tensorflow-data-validation"):
        assert info["versions"][package] == _locked(package), package
    with open(info["path"]) as f:
        doc = json.load(f)
    assert "serialNumber" not in doc  # reproducible: the digest changes only with the packages
    values = sbom.mlmd_values(info)
    assert values["runtime_sbom_sha256"] == info["sha256"] and "tensorflow==" in values["runtime_versions"]


def test_no_sbom_records_nothing(tmp_path):
    assert sbom.describe(str(tmp_path / "absent.json")) is None and sbom.mlmd_values(None) == {}
