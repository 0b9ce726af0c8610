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


def read_info(folder: str) -> dict:
    with open(os.path.join(folder, layout.RUN_INFO), encoding="utf-8") as f:
        return json.load(f)


def write_result(folder: str, result: NodeResult) -> str:
    return files.write_text(layout.node_result_path(folder, result.node_id), result.to_json())


def read_results(folder: str) -> list[NodeResult]:
    """The node results recorded in a run folder, in run order (`run.json`'s node ids)."""
    nodes_dir = os.path.join(folder, layout.NODES_DIR)
    names = [n[: -len(".json")] for n in os.listdir(nodes_dir) if n.endswith(".json")] if os.path.isdir(nodes_dir) else []
    order = {node_id: i for i, node_id in enumerate(read_info(folder).get("nodes") or [])}
    results = []
    for node_id in names:
        with open(layout.node_result_path(folder, node_id), encoding="utf-8") as f:
            results.append(NodeResult.from_json(f.read()))
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
