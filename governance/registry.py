"""The model registry view: every candidate model of a pipeline with its run, span, key
metrics, blessing, push, whether it is served now or was rolled back, and its report; and
the lineage chain of one served version."""

from __future__ import annotations

import html
import json
import os
from typing import Any

from core import files, layout, nodes, tasks
from core import metadata_queries as lineage
from core.metadata_queries import props
from governance import record as record_lib
from governance import report as report_lib
from serving.repository import history, model_config, versions
from serving.repository.base_path import discover


def _training_execution(store, model):
    execution, node = lineage.producer(store, model.id)
    return execution if node == nodes.TRAINER else None


def report(store, pipeline: str, pipeline_root: str, workdir: str, run_id: str) -> dict:
    """The run's report.json, written from its record first if it is missing."""
    path = os.path.join(layout.report_dir(pipeline_root, run_id), layout.REPORT_JSON)
    if not os.path.exists(path):
        folder = layout.run_dir(workdir, pipeline, run_id)
        record = (record_lib.read_folder(folder, store) if os.path.exists(os.path.join(folder, layout.RUN_INFO))
                  else record_lib.read(store, pipeline, pipeline_root, run_id))
        report_lib.write(record, pipeline_root)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def candidates(store, pipeline: str, pipeline_root: str, workdir: str, model_name: str) -> list[dict]:
    """One row per Model artifact the Trainer produced, oldest first; builds missing reports.

    Each row shows the record (`governance.record`) of the run that judged the candidate
    last, so its outcome is that run's summary's outcome.
    """
    serving_root = layout.serving_root(workdir)
    base = os.path.join(serving_root, model_name)
    available = sorted(discover(base))
    served_now = canary_now = None
    if available:
        entry = model_config.find(versions.load_or_default(serving_root, model_name), model_name)
        served_now = versions.served_version(entry, available)
        canary_now = entry.version_labels.get(versions.CANARY)
    events = history.read(base)
    rolled_back = ({e.get("from_version") for e in events if e.get("event") == "rollback"}
                   | {e.get("version") for e in events if e.get("event") == "canary_rollback"})
    rows = []
    for model in sorted(store.get_artifacts_by_type("Model"), key=lambda a: a.id):
        execution = _training_execution(store, model)
        if execution is None:
            continue
        run_id = _latest_run(store, model, execution)
        folder = layout.report_dir(pipeline_root, run_id)
        rep = report(store, pipeline, pipeline_root, workdir, run_id)
        overall = (rep.get("evaluation") or {}).get("overall") or {}
        version = _pushed_version(store, model)
        mp = props(model)
        rows.append({
            "model_id": model.id, "run_id": run_id, "span": (rep.get("data") or {}).get("span"),
            "window": [w["span"] for w in (rep.get("data") or {}).get("window") or []],
            "metrics": {m: overall[m].get("candidate") for m in tasks.ALL_KEY_METRICS if m in overall},
            "blessed": rep.get("blessed"), "serving_check": (rep.get("serving_check") or {}).get("passed"),
            "approval": (rep.get("approval") or {}).get("decision"),
            "pushed_version": version, "still_on_disk": version in available if version else False,
            "served_now": version is not None and version == served_now,
            # Under test: labelled `canary`, answering its share of traffic (docs/rollout.md).
            "canary_now": version is not None and version == canary_now,
            "rolled_back": version in rolled_back if version else False,
            "outcome": rep.get("outcome"),
            # Which runtime built it: its CycloneDX SBOM's digest and key package versions.
            "runtime": {"sbom_sha256": mp.get("runtime_sbom_sha256"), "versions": mp.get("runtime_versions")}
            if mp.get("runtime_sbom_sha256") else None,
            # What producing it cost (core/cost.py), totals over the run's nodes.
            "cost": {k: v for k, v in (rep.get("cost") or {}).items() if k != "nodes"} or None,
            "report_html": os.path.join(folder, layout.REPORT_HTML), "report_json": os.path.join(folder, layout.REPORT_JSON),
        })
    return rows


def _latest_run(store, model, training_execution) -> str:
    """The run that judged the candidate last: the newest run whose nodes read the model as
    their candidate (a re-run after an approval, or a cached re-run, judges the same Model
    artifact again); the training run if none did. A later month reading it as its
    baseline (the Evaluator's `baseline_model`, the model resolver) does not count."""
    readers = [e for e, node in lineage.consumers(store, model.id, key="model") if node != nodes.MODEL_RESOLVER]
    newest = max(readers, key=lambda e: e.id, default=training_execution)
    return lineage.run_id_of(store, newest) or lineage.run_id_of(store, training_execution)


def run_of_version(store, version: int) -> str | None:
    """The run that judged (and pushed) the Model artifact served as `version`, or None."""
    for model in store.get_artifacts_by_type("Model"):
        if _pushed_version(store, model) == version:
            execution = _training_execution(store, model)
            if execution is not None:
                return _latest_run(store, model, execution)
    return None


def _pushed_version(store, model) -> int | None:
    for execution, node in lineage.consumers(store, model.id):
        if node == nodes.PUSHER:
            for pushed in lineage.outputs_of(store, execution.id).get("pushed_model", []):
                p = props(pushed)
                if p.get("pushed") and p.get("pushed_version"):
                    return int(p["pushed_version"])
    return None


def format_table(rows: list[dict]) -> str:
    head = (f"{'model':>5} {'version':>11} {'span':>6} {'metrics':<34} {'blessed':<7} {'pushed':<6} {'serving':<7} "
            f"{'rolled back':<11} {'runtime sbom':<12} {'cost (CPU-s, kJ)':<22} report")
    lines = [head]
    for r in rows:
        metrics = ", ".join(f"{k} {v}" for k, v in r["metrics"].items()) or "-"
        lines.append(
            f"{r['model_id']:>5} {r['pushed_version'] or '-'!s:>11} {r['span']!s:>6} {metrics:<34} "
            f"{_flag(r['blessed']):<7} {_flag(r['pushed_version'] is not None):<6} "
            f"{'canary' if r.get('canary_now') else _flag(r['served_now']):<7} "
            f"{_flag(r['rolled_back']):<11} {(r['runtime'] or {}).get('sbom_sha256', '-')[:12]:<12} "
            f"{_cost_cell(r.get('cost')):<22} {r['report_html']}"
        )
    return "\n".join(lines)


def _cost_cell(spent: dict | None) -> str:
    if not spent:
        return "-"
    method = "est." if spent.get("energy_method") == "tdp-estimate" else spent.get("energy_method")
    return f"{spent['cpu_seconds']:.0f} CPU-s, {spent['energy_j'] / 1000:.1f} kJ {method}"


def _flag(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "no")


def write_index(rows: list[dict], pipeline: str, pipeline_root: str) -> str:
    """`<pipeline_root>/governance/index.html`, linking every candidate's report."""
    folder = os.path.join(pipeline_root, layout.REPORT_DIR)
    os.makedirs(folder, exist_ok=True)
    e = html.escape
    body = "".join(
        f"<tr><td>{r['model_id']}</td><td>{e(str(r['pushed_version'] or '-'))}</td><td>{e(str(r['span']))}</td>"
        f"<td>{e(', '.join(f'{k} {v}' for k, v in r['metrics'].items()))}</td><td>{_flag(r['blessed'])}</td>"
        f"<td>{_flag(r['pushed_version'] is not None)}</td>"
        f"<td>{'<b>yes</b>' if r['served_now'] else 'canary' if r.get('canary_now') else 'no'}</td>"
        f"<td>{_flag(r['rolled_back'])}</td><td>{e(r['outcome'] or '')}</td><td><code>{e(r['run_id'])}</code></td>"
        f"<td title=\"{e((r['runtime'] or {}).get('versions') or '')}\"><code>"
        f"{e((r['runtime'] or {}).get('sbom_sha256', '-')[:12])}</code></td>"
        f"<td><a href=\"{e(os.path.relpath(r['report_html'], folder))}\">report</a></td></tr>"
        for r in reversed(rows)
    )
    page = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(pipeline)} models</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:24px}td,th{border:1px solid #ccd;padding:3px 8px}"
        "table{border-collapse:collapse}th{background:#f3f5f9}</style></head><body>"
        f"<h1>{e(pipeline)}: every candidate model</h1><table><tr><th>model</th><th>version</th><th>span</th>"
        "<th>metrics</th><th>blessed</th><th>pushed</th><th>serving now</th><th>rolled back</th><th>outcome</th>"
        f"<th>run</th><th>runtime SBOM</th><th>report</th></tr>{body}</table></body></html>"
    )
    return files.write_text(os.path.join(folder, "index.html"), page)


def chain(store, version: int) -> list[str]:
    """The lineage of a pushed version, data span to serving, one step per line.

    Raises:
      LookupError: no push of that version in this MLMD.
    """
    pushed = next((a for a in store.get_artifacts_by_type("PushedModel")
                   if props(a).get("pushed") and str(props(a).get("pushed_version")) == str(version)), None)
    if pushed is None:
        raise LookupError(f"no pushed version {version} recorded in this pipeline's ML Metadata")
    push_exec, push_node = lineage.producer(store, pushed.id)
    model = lineage.inputs_of(store, push_exec.id)["model"][0]
    train_exec, _ = lineage.producer(store, model.id)
    train_inputs = lineage.inputs_of(store, train_exec.id)
    lines = []
    for ex in sorted(train_inputs.get("examples", []), key=lambda a: props(a).get("span", 0)):
        gen_exec, gen_node = lineage.producer(store, ex.id)
        gate = next((lineage.outputs_of(store, e.id).get("report", [None])[0]
                     for e, n in lineage.consumers(store, ex.id) if n == nodes.DATA_GATE), None)
        verdict = f"DataGate report #{gate.id} passed" if gate is not None and props(gate).get("passed") else "no passing gate report"
        lines.append(f"span {props(ex).get('span')}: {gen_node} examples #{ex.id} (run {lineage.run_id_of(store, gen_exec)}) -> {verdict}")
    graph = (train_inputs.get("transform_graph") or [None])[0]
    if graph is not None:
        lines.append(f"  -> Transform graph #{graph.id} {graph.uri}")
    mp = props(model)
    lines.append(
        f"  -> Trainer model #{model.id} (run {lineage.run_id_of(store, train_exec)}): "
        f"{mp.get('training_strategy')} strategy, {mp.get('training_precision_policy')}, "
        f"commit {str(mp.get('code_git_commit'))[:12]}{' (dirty)' if mp.get('code_git_dirty') else ''}"
    )
    for execution, node in lineage.consumers(store, model.id):
        outs = lineage.outputs_of(store, execution.id)
        if node == nodes.EVALUATOR and outs.get("blessing"):
            b = outs["blessing"][0]
            lines.append(f"  -> Evaluator blessing #{b.id}: blessed={props(b).get('blessed')} (execution {execution.id})")
        elif node == nodes.SERVING_CHECK and outs.get("blessing"):
            b = outs["blessing"][0]
            lines.append(f"  -> ServingCheck infra blessing #{b.id}: passed={props(b).get('blessed')}")
        elif node == nodes.APPROVAL_GATE and outs.get("approval"):
            a = props(outs["approval"][0])
            lines.append(f"  -> ApprovalGate: {a.get('decision')} by {a.get('reviewer')} at {a.get('decided_at')}")
    pp = props(pushed)
    lines.append(f"  -> {push_node} pushed_model #{pushed.id}: version {pp.get('pushed_version')} at {pp.get('pushed_destination')}")
    return lines
