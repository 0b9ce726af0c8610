"""The compiled DAG file (`dags/compiled/<pipeline>.json`, "the DAG template" in messages):
a compiled pipeline's nodes, edges and stages, as JSON.

`retrain compile` (TFX runtime) writes it from the pipeline's IR; DAG files (Airflow) read
it. It carries a fingerprint of the pipeline code so a DAG built from a stale template
fails loudly at parse time instead of running the wrong graph.
"""

from __future__ import annotations

import json
import os
from typing import Any

from core import project, source_hash
from core.errors import BadInput
from core.files import write_text

REPO = project.ROOT
# The code that decides a pipeline's nodes and edges (and the node ids and resource classes).
_FINGERPRINTED = ("pipelines", "components", "core/nodes.py")
_FINGERPRINTED_SUFFIXES = (".py", ".yaml")


class StaleTemplateError(RuntimeError):
    """The compiled template no longer matches the pipeline code."""


class TemplateError(BadInput):
    """The template file is missing or is not a compiled template."""


def source_fingerprint(repo: str = REPO) -> str:
    """sha256 over the pipeline code (paths and contents), in a stable order."""
    return source_hash.tree_sha256(_FINGERPRINTED, _FINGERPRINTED_SUFFIXES, repo)


def from_ir(ir: Any, config_path: str, stages: dict[str, str], deployment: dict | None = None) -> dict:
    """Builds the template from a compiled `pipeline_pb2.Pipeline`.

    `deployment`: the config's non-secret settings the DAG needs at parse time (the
    metadata URL setting, never a password; the `airflow:` and `alerts:` blocks; the data
    folder and format the span-arrival check watches).
    """
    nodes = []
    for n in ir.nodes:
        node = n.pipeline_node
        nodes.append(
            {
                "id": node.node_info.id,
                "type": node.node_info.type.name.rsplit(".", 1)[-1],
                "upstream": sorted(node.upstream_nodes),
                "downstream": sorted(node.downstream_nodes),
                "stage": stages.get(node.node_info.id, "other"),
            }
        )
    return {
        "pipeline": ir.pipeline_info.id,
        "config": os.path.relpath(os.path.abspath(config_path), REPO),
        "fingerprint": source_fingerprint(),
        "nodes": nodes,
        "deployment": dict(deployment or {}),
    }


def repo_relative(path: str) -> str:
    """`path` relative to the repo when it lies inside it (templates are committed), else absolute."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def repo_path(path: str) -> str:
    """The inverse of repo_relative: an absolute path."""
    return path if os.path.isabs(path) else os.path.join(REPO, path)


def write(template: dict, path: str) -> None:
    write_text(path, json.dumps(template, indent=2, sort_keys=True) + "\n")


def read(path: str, check_fresh: bool = True) -> dict:
    """Reads a template.

    Raises:
      TemplateError: no such file, or not a template.
      StaleTemplateError: the pipeline code changed since it was compiled.
    """
    try:
        with open(path, encoding="utf-8") as f:
            template = json.load(f)
        template["fingerprint"], template["nodes"]  # noqa: B018  (the keys every reader needs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TemplateError(f"{path} is not a readable DAG template ({type(e).__name__}: {e}); run `make compile`") from e
    if check_fresh and template["fingerprint"] != source_fingerprint():
        raise StaleTemplateError(
            f"{path} was compiled from other pipeline code than is here now; "
            "run `make compile` (retrain compile) and reload the DAG"
        )
    return template


def is_fresh(path: str) -> bool:
    """Whether the template at `path` was compiled from the pipeline code here (the check
    DAG parsing makes), so `make` need not start the TFX runtime to compile it again."""
    try:
        read(path)
    except (TemplateError, StaleTemplateError):
        return False
    return True


def mismatch(template: dict, ir: Any) -> str | None:
    """Describes how a freshly compiled IR differs from the template's graph, or None."""
    want = {n["id"]: sorted(n["upstream"]) for n in template["nodes"]}
    got = {n.pipeline_node.node_info.id: sorted(n.pipeline_node.upstream_nodes) for n in ir.nodes}
    if want == got:
        return None
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    return f"nodes missing {missing}, unexpected {extra}, edges changed for {changed}"


if __name__ == "__main__":
    # `python -m airflow_tfx.compiled_dag --fresh PATH`: exit 0 when PATH is current (Makefile).
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--fresh":
        sys.exit("usage: python -m airflow_tfx.compiled_dag --fresh TEMPLATE")
    sys.exit(0 if is_fresh(sys.argv[2]) else 1)
