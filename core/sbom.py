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
KEY_PACKAGES = ("python", "tensorflow", "tfx", "apache-beam", "tensorflow-model-analysis",
                "tensorflow-data-validation", "glibc")


# Where the runtime's SBOM is when not in the environment itself (a runtime image that
# writes it elsewhere): the Trainer records and copies that file instead.
PATH_ENV = "RETRAIN_RUNTIME_SBOM"
# The copy each model carries (in its SavedModel's assets.extra, which TF Serving ignores),
# so a pushed version names the runtime that built it and the next candidate is compared with it.
MODEL_COPY = os.path.join("assets.extra", FILENAME)


def path(prefix: str | None = None) -> str:
    """Where the SBOM of the environment at `prefix` lives (default: this interpreter's, or
    the file RETRAIN_RUNTIME_SBOM names)."""
    if prefix is None and os.environ.get(PATH_ENV):
        return os.environ[PATH_ENV]
    return os.path.join(prefix or sys.prefix, FILENAME)


def describe(sbom_path: str | None = None) -> dict | None:
    """{"sha256", "path", "spec_version", "components", "versions": {package: version}},
    or None where no SBOM was written (an environment not set up by `make venv`)."""
    return _describe(sbom_path or path())


@functools.lru_cache(maxsize=4)
def _describe(sbom_path: str) -> dict | None:
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


def platform_components(os_release: str = "/etc/os-release") -> list[dict]:
    """CycloneDX components for what runs the packages and is no package itself: the Python
    interpreter (`platform`), the C library (glibc) and the operating system. `cyclonedx-py
    environment` lists only the installed distributions, so without these an SBOM could not
    say that a model was built by Python 3.13 on a Debian 13 root."""
    import platform

    python = platform.python_version()
    out = [{"bom-ref": f"platform:python@{python}", "type": "platform", "name": "python", "version": python,
            "description": f"{platform.python_implementation()} interpreter ({sys.executable})",
            "purl": f"pkg:generic/python@{python}"}]
    libc, libc_version = platform.libc_ver()
    if libc == "glibc" and libc_version:
        out.append({"bom-ref": f"platform:glibc@{libc_version}", "type": "library", "name": "glibc",
                    "version": libc_version, "purl": f"pkg:generic/glibc@{libc_version}"})
    try:
        with open(os_release, encoding="utf-8") as f:
            release = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        release = {}
    name = release.get("ID", "").strip('"')
    version = (release.get("VERSION_ID") or "").strip('"')
    if name and version:
        out.append({"bom-ref": f"platform:{name}@{version}", "type": "operating-system", "name": name,
                    "version": version, "description": release.get("PRETTY_NAME", "").strip('"')})
    return out


def add_platform(sbom_path: str) -> list[dict]:
    """Adds `platform_components()` to an SBOM file (replacing earlier ones: idempotent); what
    was added."""
    with open(sbom_path, encoding="utf-8") as f:
        doc = json.load(f)
    added = platform_components()
    refs = {c["bom-ref"].split("@")[0] for c in added}
    doc["components"] = [c for c in doc.get("components", [])
                         if str(c.get("bom-ref", "")).split("@")[0] not in refs] + added
    from core.files import write_text

    write_text(sbom_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return added


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


def packages(sbom_path: str) -> dict[str, str] | None:
    """Every package the SBOM lists, {canonical name: version}; None where there is no file."""
    try:
        with open(sbom_path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError:
        return None
    except ValueError as e:
        raise ValueError(f"{sbom_path}: not a CycloneDX JSON document ({e})") from None
    return {_canonical(c["name"]): str(c.get("version")) for c in doc.get("components", []) if c.get("name")}


def copy_into(serving_model_dir: str, sbom_path: str | None = None) -> str | None:
    """Copies the runtime's SBOM into the SavedModel's assets.extra; the copy's path, or None
    where there is no SBOM."""
    import shutil

    source = sbom_path or path()
    if not os.path.exists(source):
        return None
    target = os.path.join(serving_model_dir, MODEL_COPY)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    return target


def diff(before: dict[str, str], after: dict[str, str]) -> dict:
    """What changed from `before` to `after` ({package: version} each): added, removed and
    changed packages, and one line each (`tensorflow 2.16.1 -> 2.16.2`, `+ x 1.0`, `- y 2.0`)."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    # The packages the models are built with first: those are the ones a reviewer looks for.
    changed.sort(key=lambda p: (p not in KEY_PACKAGES, p))
    lines = ([f"{p} {before[p]} -> {after[p]}" for p in changed] + [f"+ {p} {after[p]}" for p in added]
             + [f"- {p} {before[p]}" for p in removed])
    return {"changed": [{"package": p, "from": before[p], "to": after[p]} for p in changed],
            "added": [{"package": p, "version": after[p]} for p in added],
            "removed": [{"package": p, "version": before[p]} for p in removed],
            "lines": lines}


def _versions_property(value: str | None) -> dict[str, str]:
    """{package: version} from a Model's `runtime_versions` property ("a==1 b==2")."""
    out = {}
    for item in (value or "").split():
        name, _, version = item.partition("==")
        if version:
            out[_canonical(name)] = version
    return out


def compare_models(candidate_dir: str, baseline_dir: str | None, baseline_versions: str | None = None) -> dict:
    """The candidate's runtime against its baseline's (the model it would replace).

    Args:
      candidate_dir, baseline_dir: the SavedModel folders (each carries MODEL_COPY).
      baseline_versions: the baseline's `runtime_versions` property, for a baseline built
        before models carried their SBOM (then only the key packages are compared).

    Returns:
      {"compared": bool, "reason", "changed", "added", "removed", "lines", "scope"}.
    """
    if baseline_dir is None:
        return {"compared": False, "reason": "no baseline model: nothing to compare the runtime with", "lines": []}
    after = packages(os.path.join(candidate_dir, MODEL_COPY))
    if after is None:
        return {"compared": False, "reason": "the candidate carries no runtime SBOM (set up without `make venv`?)",
                "lines": []}
    try:
        before, scope = packages(os.path.join(baseline_dir, MODEL_COPY)), "every package"
    except ValueError as e:  # a damaged copy is reported, not a failed evaluation of the candidate
        return {"compared": False, "reason": f"the baseline's runtime SBOM is unreadable: {e}", "lines": []}
    if before is None:
        before = _versions_property(baseline_versions)
        if not before:
            return {"compared": False, "reason": "the baseline carries no runtime SBOM: not compared", "lines": []}
        scope = f"the key packages only ({', '.join(KEY_PACKAGES)}): the baseline predates models carrying their SBOM"
        after = {p: v for p, v in after.items() if p in KEY_PACKAGES}
    out = {"compared": True, "scope": scope, **diff(before, after)}
    n = len(out["lines"])
    out["reason"] = (f"{n} package change{'s' if n != 1 else ''} since the baseline: " + "; ".join(out["lines"][:8])
                     + (f"; and {n - 8} more" if n > 8 else "")) if n else "the same runtime as the baseline"
    return out


if __name__ == "__main__":  # runtime/install.sh: python -m core.sbom add-platform FILE
    if sys.argv[1:2] != ["add-platform"] or len(sys.argv) != 3:
        sys.exit("usage: python -m core.sbom add-platform SBOM.cdx.json")
    for component in add_platform(sys.argv[2]):
        print(f"sbom: + {component['name']} {component['version']}")
