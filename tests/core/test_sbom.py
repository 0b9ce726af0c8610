"""The runtime's SBOM (core/sbom.py), written by `make venv`: it lists the lock file's pins."""

import json
import re

import pytest

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
    # The stack that runs the packages, added by set-up (runtime/install.sh): this interpreter
    # and this C library, so a report names Python 3.13 and the glibc of the Debian 13 root.
    import platform

    assert info["versions"]["python"] == platform.python_version()
    assert info["versions"]["glibc"] == platform.libc_ver()[1]


def test_adding_the_platform_is_idempotent_and_keeps_the_packages(tmp_path):
    path = tmp_path / "x.cdx.json"
    path.write_text(json.dumps({"specVersion": "1.6", "components": [{"name": "tensorflow", "version": "2.21.0"}]}))
    sbom.add_platform(str(path))
    once = path.read_text()
    sbom.add_platform(str(path))
    assert path.read_text() == once
    names = [c["name"] for c in json.loads(once)["components"]]
    assert names[0] == "tensorflow" and names.count("python") == 1 and "glibc" in names


def test_no_sbom_records_nothing(tmp_path):
    assert sbom.describe(str(tmp_path / "absent.json")) is None and sbom.mlmd_values(None) == {}


def _write_sbom(path, components: dict[str, str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6",
                                "components": [{"name": n, "version": v} for n, v in components.items()]}))
    return str(path)


def test_the_diff_of_two_runtimes_lists_changed_added_and_removed_packages():
    before = {"absl-py": "2.1.0", "tensorflow": "2.16.1", "numpy": "1.26.4", "six": "1.16.0"}
    after = {"absl-py": "2.1.0", "tensorflow": "2.16.2", "numpy": "1.26.5", "zstd": "1.5"}
    out = sbom.diff(before, after)
    # The packages models are built with come first among the changes.
    assert out["lines"] == ["tensorflow 2.16.1 -> 2.16.2", "numpy 1.26.4 -> 1.26.5", "+ zstd 1.5", "- six 1.16.0"]
    assert out["changed"][0] == {"package": "tensorflow", "from": "2.16.1", "to": "2.16.2"}
    assert out["added"] == [{"package": "zstd", "version": "1.5"}]
    assert out["removed"] == [{"package": "six", "version": "1.16.0"}]
    assert sbom.diff(before, dict(before))["lines"] == []


def test_models_carry_their_sbom_and_are_compared_with_their_baseline(tmp_path, monkeypatch):
    runtime = _write_sbom(tmp_path / "runtime.cdx.json", {"tensorflow": "2.16.2", "Tensorflow_Model_Analysis": "0.47.0"})
    monkeypatch.setenv(sbom.PATH_ENV, runtime)
    assert sbom.path() == runtime and sbom.describe()["versions"]["tensorflow-model-analysis"] == "0.47.0"
    candidate, baseline = tmp_path / "candidate", tmp_path / "baseline"
    assert sbom.copy_into(str(candidate)) == str(candidate / sbom.MODEL_COPY)
    _write_sbom(baseline / sbom.MODEL_COPY, {"tensorflow": "2.16.1", "tensorflow-model-analysis": "0.47.0"})
    out = sbom.compare_models(str(candidate), str(baseline))
    assert out["compared"] and out["scope"] == "every package" and out["lines"] == ["tensorflow 2.16.1 -> 2.16.2"]
    assert out["reason"] == "1 package change since the baseline: tensorflow 2.16.1 -> 2.16.2"
    # A baseline from before models carried their SBOM: its recorded key versions.
    old = sbom.compare_models(str(candidate), str(tmp_path / "old"), "tensorflow==2.16.2 tfx==1.16.0")
    assert old["compared"] and "key packages only" in old["scope"]
    assert old["lines"] == ["+ tensorflow-model-analysis 0.47.0", "- tfx 1.16.0"]
    assert not sbom.compare_models(str(candidate), None)["compared"]
    assert not sbom.compare_models(str(tmp_path / "bare"), str(baseline))["compared"]
    (baseline / sbom.MODEL_COPY).write_text("{not json")
    damaged = sbom.compare_models(str(candidate), str(baseline))
    assert not damaged["compared"] and "unreadable" in damaged["reason"] and "not a CycloneDX JSON" in damaged["reason"]
    with pytest.raises(ValueError, match="not a CycloneDX JSON document"):
        sbom.packages(str(baseline / sbom.MODEL_COPY))
