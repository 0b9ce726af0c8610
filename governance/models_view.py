"""What the Models view in Airflow shows (airflow_tfx/plugins/retrain_models.py), as data.

One document per pipeline, built in the TFX runtime from ML Metadata (quarantined spans)
and the run records (each run's report.json, which the governance_report task writes
from the run's record, governance/record.py), the serving folder (labels, rollout state, history of
labels and pins) and the alerts the Airflow side recorded. The plugin only renders it:
nothing is parsed out of HTML, and the Airflow process never opens MLMD itself.

`retrain view --pipeline P --json` prints it. TF-free.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from core import files, layout, metadata, tasks
from core import outcome as outcomes
from core.finite import finite
from governance import quarantine
from governance import record as record_lib
from serving.repository import history, model_config, versions
from serving.repository.base_path import discover

# Alerts from before the newest pushed run are no longer open.
_ENDED_WELL = (outcomes.PUSHED,)
_REFUSED = (outcomes.NOT_BLESSED, outcomes.FAILED_SERVING_CHECK, outcomes.REJECTED)


def _closest_check(gate: dict | None) -> dict | None:
    """The gate's check nearest to its limit (highest value / limit), with its description."""
    if not gate:
        return None
    checks = [*(gate.get("drift") or []), *(gate.get("completeness") or []), *record_lib.row_check_list(gate)]
    best, best_ratio = None, None
    for c in checks:
        if not isinstance(c, dict):
            continue
        if isinstance(c.get("value"), (int, float)) and c.get("threshold"):
            ratio = c["value"] / c["threshold"]
        elif isinstance(c.get("share"), (int, float)) and c.get("allowed_share"):
            ratio = c["share"] / c["allowed_share"]
        else:
            continue
        failed = bool(c.get("failed") or c.get("drifted"))
        if best is None or (failed, ratio) > (bool(best.get("failed") or best.get("drifted")), best_ratio):
            best, best_ratio = c, ratio
    volume = gate.get("volume")
    if isinstance(volume, dict) and volume.get("failed"):
        best, best_ratio = volume, None
    if best is None:
        return None
    return {"feature": best.get("feature"), "description": best.get("description"),
            "share_of_limit": None if best_ratio is None else round(best_ratio, 4),
            "failed": bool(best.get("failed") or best.get("drifted"))}


def _key_metric(report: dict) -> dict | None:
    """The candidate's key metric with its interval, and the baseline's where it was compared."""
    evaluation = report.get("evaluation") or {}
    overall = evaluation.get("overall") or {}
    name = tasks.primary_metric(overall)
    if name is None:
        return None
    m = overall[name]
    out = {"name": name, "value": m.get("candidate"), "interval": m.get("candidate_interval"),
           "baseline": m.get("baseline"), "baseline_interval": m.get("baseline_interval"),
           "lower_is_better": name in tasks.LOWER_IS_BETTER}
    for c in (evaluation.get("significance") or {}).get("comparisons") or []:
        if c.get("metric") == name:
            out["difference"] = c.get("difference")
            out["difference_interval"] = c.get("interval")
    return out


def _rows(report: dict) -> int | None:
    rows = (report.get("data") or {}).get("rows")
    if isinstance(rows, dict) and rows:
        return int(sum(v for v in rows.values() if isinstance(v, (int, float))))
    gate = report.get("data_gate") or {}
    return gate.get("rows")


def _started(report: dict) -> str:
    """The run's first node start, for ordering runs whose ids do not sort in time (Airflow's)."""
    starts = [n.get("started") for n in (report.get("nodes") or {}).values() if n.get("started")]
    return min(starts) if starts else report.get("generated_at") or ""


def _reports(config) -> list[dict]:
    """Each run's report.json, oldest run first. A run without one yet (still running, or
    ended before its report task) is listed from its run folder as "no report yet"."""
    runs_root = os.path.join(config.workdir, layout.RUNS_DIR, config.pipeline_name)
    if not os.path.isdir(runs_root):
        return []
    out = []
    for folder_name in os.listdir(runs_root):
        info_path = os.path.join(runs_root, folder_name, layout.RUN_INFO)
        try:
            with open(info_path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        run_id = info.get("run_id") or folder_name
        path = os.path.join(layout.report_dir(config.pipeline_root, run_id), layout.REPORT_JSON)
        try:
            with open(path, encoding="utf-8") as f:
                out.append(json.load(f))
        except FileNotFoundError:
            started = os.path.getmtime(info_path)
            out.append({"run_id": run_id, "data": {"span": info.get("span")}, "outcome": None, "no_report": True,
                        "generated_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat()})
    return sorted(out, key=_started)


def _span_entry(report: dict, rolled_back: set, quarantined: dict) -> dict:
    gate = report.get("data_gate")
    span = (report.get("data") or {}).get("span")
    push = report.get("push") or {}
    version = push.get("version") if push.get("pushed") else None
    outcome = report.get("outcome")
    if report.get("no_report"):
        shown = "no report yet"
    elif span in quarantined:
        shown = "quarantined"
    elif version is not None and str(version) in rolled_back:
        shown = "rolled back"
    elif outcome == outcomes.PUSHED:
        shown = "pushed"
    elif (outcome or "").startswith("stopped"):
        shown = "stopped"
    elif outcome in _REFUSED:
        shown = "refused"
    elif outcome == outcomes.AWAITING_APPROVAL:
        shown = "awaiting approval"
    elif (outcome or "").startswith("failed"):
        shown = "failed"
    else:
        shown = "not pushed"
    return {
        "run_id": report.get("run_id"),
        "report": f"{layout.safe_id(report.get('run_id') or '')}/{layout.REPORT_HTML}",
        "span": span,
        "rows": _rows(report),
        "gate": None if gate is None else {"passed": bool(gate.get("passed")),
                                           "blocking_features": gate.get("blocking_features") or [],
                                           "closest": _closest_check(gate)},
        "metric": _key_metric(report),
        "outcome": outcome,
        "outcome_reason": report.get("outcome_reason") or report.get("error"),
        "shown_as": shown,
        "pushed_version": None if version is None else str(version),
        "blessed": report.get("blessed"),
        "approval_pending": outcome == outcomes.AWAITING_APPROVAL,
        "generated_at": report.get("generated_at"),
        # What the run cost (core/cost.py): CPU-seconds, energy and how it was had.
        "cost": ({k: (report.get("cost") or {}).get(k) for k in ("cpu_seconds", "accelerator_seconds", "energy_j",
                                                               "peak_rss_mb", "energy_method")}
                 if report.get("cost") else None),
    }


def _version_entry(report: dict, events: list[dict]) -> dict:
    push = report.get("push") or {}
    data = report.get("data") or {}
    model = report.get("model") or {}
    evaluation = report.get("evaluation") or {}
    version = str(push.get("version"))
    signature = push.get("signature") or {}
    check = report.get("serving_check") or {}
    return {
        "version": version,
        "run_id": report.get("run_id"),
        "report": f"{layout.safe_id(report.get('run_id') or '')}/{layout.REPORT_HTML}",
        "pushed_at": push.get("time"),
        "span": data.get("span"),
        "window": [w.get("span") for w in data.get("window") or []],
        "rows": data.get("rows"),
        "code": report.get("code"),
        "runtime": (model.get("runtime") or {}),
        "signature": {"digest": signature.get("digest"), "key_id": signature.get("key_id")} if signature else None,
        "metrics": {k: v for k, v in (evaluation.get("overall") or {}).items()},
        "slices": evaluation.get("slices") or {},
        "serving_check": {"latency_ms": check.get("latency_ms"), "latency_budget_ms": check.get("latency_budget_ms"),
                          "passed": check.get("passed")} if check else None,
        "live": report.get("live"),
        "history": [e for e in events if str(e.get("version")) == version or str(e.get("to_version")) == version
                    or str(e.get("from_version")) == version],
    }


def _alerts(workdir: str, pipeline: str, since: str | None) -> list[dict]:
    alerts = files.read_jsonl(layout.alerts_path(workdir, pipeline))
    return [a for a in alerts if since is None or (a.get("time") or "") > since]


def _age(pushed_at: str | None, pushed_span: int | None, newest_span: int | None) -> dict:
    days = None
    if pushed_at:
        when = dt.datetime.fromisoformat(pushed_at)
        days = round((dt.datetime.now(dt.timezone.utc) - when).total_seconds() / 86400, 1)
    spans = None
    if pushed_span is not None and newest_span is not None:
        spans = (newest_span // 100 - pushed_span // 100) * 12 + (newest_span % 100 - pushed_span % 100)
    return {"days": days, "spans": spans}


def pipeline_view(config) -> dict:
    """The Models view's document for one pipeline (see the module's doc)."""
    where = config.metadata_store
    store = metadata.open_store(where, readonly=True) if where.exists() else None
    held = quarantine.current(store, config.pipeline_name) if store is not None else {}
    base = os.path.join(layout.serving_root(config.workdir), config.model_name)
    events = history.read(base)
    rolled_back = ({str(e.get("from_version")) for e in events if e.get("event") == "rollback"}
                   | {str(e.get("version")) for e in events if e.get("event") == "canary_rollback"})
    reports = _reports(config)
    timeline = [_span_entry(r, rolled_back, held) for r in reports]
    by_version = {str(r["push"]["version"]): r for r in reports if (r.get("push") or {}).get("pushed")}
    available = sorted(discover(base))
    stable = canary = None
    if available:
        entry = model_config.find(versions.load_or_default(layout.serving_root(config.workdir), config.model_name),
                                  config.model_name)
        stable = versions.served_version(entry, available)
        canary = entry.version_labels.get(versions.CANARY)
    rollout = versions.rollout_state(base)
    newest_span = max((t["span"] for t in timeline if t["span"] is not None), default=None)
    serving = {}
    for role, version in (("stable", stable), ("canary", canary)):
        if version is None:
            continue
        r = by_version.get(str(version))
        entry = _version_entry(r, events) if r else {"version": str(version), "history": []}
        entry["age"] = _age(entry.get("pushed_at"), entry.get("span"), newest_span)
        serving[role] = entry
    ended_well = [t for t in timeline if t["outcome"] in _ENDED_WELL]
    return {
        "pipeline": config.pipeline_name,
        "model": config.model_name,
        "task": config.task,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "serving": serving,
        "rollout": rollout,
        "last_run": timeline[-1] if timeline else None,
        "pending_approvals": [t for t in timeline if t["approval_pending"]],
        "open_alerts": _alerts(config.workdir, config.pipeline_name,
                               ended_well[-1]["generated_at"] if ended_well else None),
        "quarantined": [{"span": s, **{k: d.get(k) for k in ("decided_by", "decided_at", "reason")}}
                        for s, d in sorted(held.items())],
        "timeline": timeline,
        "versions": {v: _version_entry(r, events) for v, r in by_version.items()},
        "history": events,
        "available_versions": [str(v) for v in available],
    }


def to_json(view: dict[str, Any]) -> str:
    """Strict JSON (no NaN): what `retrain view` prints and the Models view serves."""
    return json.dumps(finite(view), default=str, sort_keys=True, allow_nan=False)
