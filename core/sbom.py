"""The TFX runtime's software bill of materials: a CycloneDX SBOM of the environment that
trains and serves the models, written once at set-up (`make venv`, the runtime image's
build) by `cyclonedx-py environment --output-reproducible` into the environment itself,
so its digest names exactly the installed packages.

The Trainer records the digest (and the TensorFlow/TFX versions it lists) on every Model
artifact in ML Metadata; governance reports and `retrain models` show which runtime built
each model. Reading it needs no TensorFlow.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys

FILENAME = "retrain-runtime.cdx.json"
KEY_PACKAGES = ("tensorflow", "tfx", "apache-beam", "tensorflow-model-analysis", "tensorflow-data-validation")


def path(prefix: str | None = None) -> str:
    """Where the SBOM of the environment at `prefix` (default: this interpreter's) lives."""
    return os.path.join(prefix or sys.prefix, FILENAME)


@functools.lru_cache(maxsize=4)
def describe(sbom_path: str | None = None) -> dict | None:
    """{"sha256", "path", "spec_version", "components", "versions": {package: version}},
    or None where no SBOM was written (an environment not set up by `make venv`)."""
    sbom_path = sbom_path or path()
    try:
        with open(sbom_path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    doc = json.loads(raw)
    components = doc.get("components", [])
    # Distribution names as installed (tensorflow_model_analysis), compared as PEP 503 spells them.
    versions = {_canonical(c["name"]): c.get("version") for c in components
                if _canonical(c.get("name", "")) in KEY_PACKAGES}
    return {
        "sha256": hashlib.sha256(raw).hexdigest(),
        "path": sbom_path,
        "format": f"CycloneDX {doc.get('specVersion')}",
        "components": len(components),
        "versions": dict(sorted(versions.items())),
    }


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def mlmd_values(info: dict | None) -> dict[str, str | int]:
    """The Model artifact's custom properties for an SBOM (none without one)."""
    if not info:
        return {}
    return {
        "runtime_sbom_sha256": info["sha256"],
        "runtime_sbom_components": info["components"],
        "runtime_versions": " ".join(f"{k}=={v}" for k, v in info["versions"].items()),
    }
