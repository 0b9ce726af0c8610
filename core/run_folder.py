"""A run folder, `<workdir>/runs/<pipeline>/<run>/`: what the runner leaves for every reader.

    run.json             the run's inputs: pipeline, run id, span, MLMD path, pipeline root,
                         backfilled spans, node ids in run order
    pipeline.pb          the run-id-bound IR (written by the runner; TFX reads it)
    nodes/<node>.json    one `NodeResult` per node that ran

Both `retrain run` and an orchestrator's tasks (`prepare-run`, `node run`) write one, so
`retrain summary`, `retrain report` and `retrain models` read any run the same way.
"""

from __future__ import annotations

import json
import os

from core import files, layout
from core.errors import BadInput
from core.results import NodeResult


class NoRunFolder(BadInput):
    """The run folder named by the arguments does not exist or holds no prepared run."""


def write_info(folder: str, info: dict) -> str:
    os.makedirs(os.path.join(folder, layout.NODES_DIR), exist_ok=True)
    return files.write_text(os.path.join(folder, layout.RUN_INFO), json.dumps(info, indent=2, sort_keys=True))


def _read_json(path: str) -> dict:
    """Raises NoRunFolder naming the file when it is missing or not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise NoRunFolder(f"{path} cannot be read ({e})") from e


def read_info(folder: str) -> dict:
    return _read_json(os.path.join(folder, layout.RUN_INFO))


def read_result(folder: str, node_id: str) -> NodeResult:
    """One node's recorded result. Raises NoRunFolder if the node has none or it is unreadable."""
    path = layout.node_result_path(folder, node_id)
    if not os.path.exists(path):
        raise NoRunFolder(f"the run in {folder} has no {node_id} result ({path})")
    try:
        return NodeResult(**_read_json(path))
    except (TypeError, ValueError) as e:
        raise NoRunFolder(f"{path} is not a node result ({e})") from e


def write_result(folder: str, result: NodeResult) -> str:
    return files.write_text(layout.node_result_path(folder, result.node_id), result.to_json())


def read_results(folder: str) -> list[NodeResult]:
    """The node results recorded in a run folder, in run order (`run.json`'s node ids)."""
    nodes_dir = os.path.join(folder, layout.NODES_DIR)
    names = [n[: -len(".json")] for n in os.listdir(nodes_dir) if n.endswith(".json")] if os.path.isdir(nodes_dir) else []
    order = {node_id: i for i, node_id in enumerate(read_info(folder).get("nodes") or [])}
    results = [read_result(folder, node_id) for node_id in names]
    return sorted(results, key=lambda r: (order.get(r.node_id, len(order)), r.execution_id or 0, r.node_id))


def locate(run_dir: str | None, workdir: str | None, pipeline: str | None, run_id: str | None) -> str:
    """The folder of a prepared run, from `--run-dir` or from `--workdir/--pipeline/--run-id`.

    Raises:
      NoRunFolder: neither was given, or the folder holds no prepared run.
    """
    if run_dir:
        folder = run_dir
    elif workdir and pipeline and run_id:
        folder = layout.run_dir(os.path.abspath(workdir), pipeline, run_id)
    else:
        raise NoRunFolder("give --run-dir, or --workdir, --pipeline and --run-id")
    if not os.path.exists(os.path.join(folder, layout.RUN_INFO)):
        raise NoRunFolder(f"{folder} holds no prepared run (did prepare-run fail? see its log)")
    return folder
