"""The Models view's pages: server-rendered HTML with inline CSS and SVG (no script, no CDN,
no web fonts), from the documents of governance/models_view.py. Every value is escaped."""

from __future__ import annotations

import html
import urllib.parse
from typing import Any

from airflow_tfx import links

_CSS = """
body{font:14px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1a202c;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid #e2e8f0;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f7fafc;font-weight:600}
.muted{color:#718096}.tag{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;background:#edf2f7}
.pushed{background:#c6f6d5}.stopped,.failed{background:#fed7d7}.refused{background:#feebc8}
.quarantined{background:#e9d8fd}.rolled-back{background:#fbd38d}.stable{background:#bee3f8}.canary{background:#fefcbf}
form{display:inline-block;margin:4px 16px 4px 0;padding:8px;border:1px solid #e2e8f0;border-radius:6px}
input,select,button{font:inherit;margin:2px}.note{padding:6px 10px;background:#f0fff4;border:1px solid #9ae6b4}
a{color:#2b6cb0}
"""
_COLORS = {"pushed": "#38a169", "stopped": "#e53e3e", "failed": "#e53e3e", "refused": "#dd6b20",
           "quarantined": "#805ad5", "rolled back": "#d69e2e"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


def _q(value: Any) -> str:
    return urllib.parse.quote(str(value), safe="")


def _tag(text: str) -> str:
    return f"<span class='tag {_e(text.replace(' ', '-'))}'>{_e(text)}</span>"


def _num(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else "–"


def _metric(m: dict | None) -> str:
    if not m:
        return "<span class='muted'>not evaluated</span>"
    interval = m.get("interval")
    text = f"{_e(m['name'])} {_num(m.get('value'))}"
    if interval:
        text += f" [{_num(interval[0])}, {_num(interval[1])}]"
    if m.get("baseline") is not None:
        text += f" <span class='muted'>vs baseline {_num(m['baseline'])}</span>"
    return text


def _report_link(pipeline: str, entry: dict) -> str:
    if not entry.get("report") or entry.get("shown_as") == "no report yet":
        return "<span class='muted'>no report yet</span>"
    return f"<a href='/retrain/reports/{_q(pipeline)}/{_e(entry['report'])}' target='_top'>report</a>"


def _run_link(pipeline: str, run_id: str | None) -> str:
    if not run_id:
        return ""
    return (f"<a href='/dags/{_q(links.dag_id(pipeline))}/runs/{_q(run_id)}' target='_top'>{_e(run_id)}</a>")


def _version_link(pipeline: str, version: Any) -> str:
    return f"<a href='/retrain/models/{_q(pipeline)}/versions/{_q(version)}'>{_e(version)}</a>"


def _live(entry: dict | None) -> str:
    live = (entry or {}).get("live") or {}
    rows = live.get("offline_vs_live") or []
    if not rows:
        return "<span class='muted'>no labelled traffic yet</span>"
    return "; ".join(f"{_e(r.get('metric'))} {_num(r.get('live'))} (offline {_num(r.get('offline'))})" for r in rows)


def overview(views: list[dict], user: str) -> str:
    rows = []
    for v in views:
        p = v["pipeline"]
        serving = v.get("serving") or {}
        served = []
        for role in ("stable", "canary"):
            s = serving.get(role)
            if s:
                age = s.get("age") or {}
                served.append(f"{_tag(role)} {_version_link(p, s['version'])} <span class='muted'>"
                              f"{_e(age.get('spans'))} spans, {_e(age.get('days'))} days old</span>")
        stable = serving.get("stable") or {}
        metrics = stable.get("metrics") or {}
        offline = ", ".join(f"{_e(k)} {_num(m.get('candidate'))}" for k, m in metrics.items()
                            if k != "example_count") or "–"
        last = v.get("last_run")
        last_text = (f"span {_e(last['span'])} {_tag(last['shown_as'])} {_run_link(p, last['run_id'])}"
                     if last else "<span class='muted'>no run yet</span>")
        approvals = v.get("pending_approvals") or []
        approval_text = (f"<a href='/required_actions' target='_top'>{len(approvals)} pending</a>" if approvals
                         else "none")
        alerts = v.get("open_alerts") or []
        alert_text = "<br>".join(_e(a.get("subject")) for a in alerts[-3:]) or "none"
        held = v.get("quarantined") or []
        held_text = ", ".join(_e(q["span"]) for q in held) or "none"
        rows.append(
            f"<tr><td><a href='/retrain/models/{_q(p)}'>{_e(p)}</a></td>"
            f"<td>{'<br>'.join(served) or '<span class=muted>nothing served</span>'}</td>"
            f"<td>{offline}</td><td>{_live(stable)}</td><td>{last_text}</td><td>{approval_text}</td>"
            f"<td>{alert_text}</td><td>{held_text}</td></tr>")
    body = (f"<h1>Models</h1><p class='muted'>Signed in as {_e(user)}. What each retraining pipeline serves, "
            "and how its latest run ended.</p><table><tr><th>pipeline</th><th>serving</th><th>offline metrics</th>"
            "<th>live metrics</th><th>last run</th><th>approvals</th><th>open alerts</th><th>quarantined spans</th>"
            f"</tr>{''.join(rows)}</table>")
    if not views:
        body += "<p>No retraining pipeline you may read.</p>"
    return _page("Models", body)


def trend_svg(timeline: list[dict], width: int = 900, height: int = 220) -> str:
    """The key metric per span with its interval (whiskers), the baseline (hollow), and each
    span's outcome as the point's colour; spans without a metric are marked at the bottom."""
    points = [t for t in timeline if t.get("span") is not None]
    if not points:
        return ""
    values = []
    for t in points:
        m = t.get("metric") or {}
        values += [x for x in (m.get("value"), m.get("baseline"), *(m.get("interval") or [])) if isinstance(x, (int, float))]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    pad_l, pad_r, pad_t, pad_b = 50, 10, 10, 40
    n = len(points)
    step = (width - pad_l - pad_r) / max(n, 1)

    def y(v: float) -> float:
        return pad_t + (hi - v) / (hi - lo) * (height - pad_t - pad_b)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='key metric per span'><rect width='100%' height='100%' fill='#fff'/>"]
    for frac in (0.0, 0.5, 1.0):
        v = lo + frac * (hi - lo)
        parts.append(f"<line x1='{pad_l}' x2='{width - pad_r}' y1='{y(v):.1f}' y2='{y(v):.1f}' stroke='#edf2f7'/>"
                     f"<text x='4' y='{y(v) + 4:.1f}' font-size='11' fill='#718096'>{_num(v, 3)}</text>")
    line = []
    for i, t in enumerate(points):
        x = pad_l + step * (i + 0.5)
        m = t.get("metric") or {}
        color = _COLORS.get(t.get("shown_as"), "#4a5568")
        title = f"<title>span {_e(t['span'])}: {_e(t.get('shown_as'))}</title>"
        if isinstance(m.get("value"), (int, float)):
            interval = m.get("interval")
            if interval:
                parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y(interval[0]):.1f}' y2='{y(interval[1]):.1f}' "
                             f"stroke='{color}' stroke-opacity='0.5'/>")
            if isinstance(m.get("baseline"), (int, float)):
                parts.append(f"<circle cx='{x:.1f}' cy='{y(m['baseline']):.1f}' r='3' fill='none' stroke='#718096'/>")
            parts.append(f"<circle cx='{x:.1f}' cy='{y(m['value']):.1f}' r='4' fill='{color}'>{title}</circle>")
            line.append(f"{x:.1f},{y(m['value']):.1f}")
        else:
            parts.append(f"<rect x='{x - 4:.1f}' y='{height - pad_b - 8}' width='8' height='8' fill='{color}'>"
                         f"{title}</rect>")
        if n <= 24 or i % max(1, n // 12) == 0:
            parts.append(f"<text x='{x:.1f}' y='{height - pad_b + 14}' font-size='10' text-anchor='middle' "
                         f"fill='#4a5568'>{_e(t['span'])}</text>")
    if len(line) > 1:
        parts.insert(1, f"<polyline points='{' '.join(line)}' fill='none' stroke='#a0aec0'/>")
    legend = " ".join(f"<tspan fill='{c}'>● {_e(k)}</tspan>" for k, c in _COLORS.items())
    parts.append(f"<text x='{pad_l}' y='{height - 6}' font-size='11'>{legend} <tspan fill='#718096'>○ baseline"
                 "</tspan></text></svg>")
    return "".join(parts)


def cost_svg(timeline: list[dict], width: int = 900, height: int = 160) -> str:
    """What each run cost (core/cost.py): CPU-seconds per span as bars, energy in each
    bar's title; runs without a measurement are left out."""
    points = [t for t in timeline if t.get("span") is not None and (t.get("cost") or {}).get("cpu_seconds") is not None]
    if not points:
        return ""
    top = max(t["cost"]["cpu_seconds"] for t in points) or 1.0
    pad_l, pad_b, pad_t = 50, 30, 10
    step = (width - pad_l - 10) / len(points)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='CPU-seconds per run'><rect width='100%' height='100%' fill='#fff'/>"
             f"<text x='4' y='{pad_t + 10}' font-size='11' fill='#718096'>{_num(top, 0)} CPU-s</text>"]
    for i, t in enumerate(points):
        c = t["cost"]
        h = (height - pad_t - pad_b) * c["cpu_seconds"] / top
        x = pad_l + step * i
        parts.append(f"<rect x='{x + step * 0.15:.1f}' y='{height - pad_b - h:.1f}' width='{step * 0.7:.1f}' "
                     f"height='{h:.1f}' fill='#4c78a8'><title>span {_e(t['span'])}: {_e(c['cpu_seconds'])} CPU-s, "
                     f"{_e(round((c.get('energy_j') or 0) / 1000, 2))} kJ ({_e(c.get('energy_method'))})</title></rect>")
        if len(points) <= 24 or i % max(1, len(points) // 12) == 0:
            parts.append(f"<text x='{x + step / 2:.1f}' y='{height - pad_b + 14}' font-size='10' text-anchor='middle'"
                         f" fill='#4a5568'>{_e(t['span'])}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _timeline_rows(v: dict) -> str:
    p = v["pipeline"]
    rows = []
    for t in reversed(v.get("timeline") or []):
        gate = t.get("gate")
        if gate is None:
            gate_text = "<span class='muted'>not checked</span>"
        else:
            closest = gate.get("closest") or {}
            verdict = "passed" if gate["passed"] else "stopped: " + ", ".join(map(str, gate["blocking_features"]))
            share = closest.get("share_of_limit")
            gate_text = (f"{_e(verdict)}<br><span class='muted'>closest: {_e(closest.get('description'))}"
                         + (f" ({share:.0%} of its limit)" if isinstance(share, (int, float)) else "") + "</span>")
        version = t.get("pushed_version")
        outcome = _tag(t["shown_as"]) + (f" {_version_link(p, version)}" if version else "")
        if t.get("outcome_reason"):
            outcome += f"<br><span class='muted'>{_e(str(t['outcome_reason'])[:300])}</span>"
        rows.append(f"<tr id='span-{_e(t['span'])}'><td>{_e(t['span'])}</td><td>{_e(t.get('rows'))}</td>"
                    f"<td>{gate_text}</td><td>{_metric(t.get('metric'))}</td><td>{outcome}</td>"
                    f"<td>{_report_link(p, t)}<br>{_run_link(p, t['run_id'])}</td></tr>")
    return "".join(rows)


def _events_rows(events: list[dict]) -> str:
    return "".join(
        f"<tr><td>{_e(e.get('time'))}</td><td>{_e(e.get('event'))}</td>"
        f"<td>{_e(e.get('version') or e.get('to_version'))}</td><td>{_e(e.get('user'))}</td>"
        f"<td>{_e(e.get('reason'))}</td></tr>" for e in reversed(events))


def pipeline_page(v: dict, user: str, token: str | None, done: str | None = None) -> str:
    p = v["pipeline"]
    serving = v.get("serving") or {}
    served = ", ".join(f"{_tag(role)} {_version_link(p, s['version'])}" for role, s in serving.items()) or "nothing"
    body = [f"<p><a href='/retrain/models/'>Models</a> / {_e(p)}</p><h1>{_e(p)}</h1>",
            f"<p>Serving: {served}. Model <code>{_e(v['model'])}</code>, task {_e(v.get('task'))}.</p>"]
    if done:
        body.append(f"<p class='note'>{_e(done)}</p>")
    body.append("<h2>Key metric across spans</h2>" + trend_svg(v.get("timeline") or []))
    spent = cost_svg(v.get("timeline") or [])
    if spent:
        body.append("<h2>Cost per run</h2><p class='muted'>CPU-seconds of each run's nodes; energy in each bar's"
                    " title (measured by RAPL where readable, else a TDP estimate: docs/guides/governance.md).</p>"
                    + spent)
    body.append("<h2>Spans</h2><table><tr><th>span</th><th>rows</th><th>gate</th><th>key metric (interval)</th>"
                f"<th>outcome</th><th>evidence</th></tr>{_timeline_rows(v)}</table>")
    held = v.get("quarantined") or []
    if held:
        body.append("<h2>Quarantined spans</h2><table><tr><th>span</th><th>by</th><th>when</th><th>reason</th></tr>"
                    + "".join(f"<tr><td>{_e(q['span'])}</td><td>{_e(q['decided_by'])}</td><td>{_e(q['decided_at'])}"
                              f"</td><td>{_e(q['reason'])}</td></tr>" for q in held) + "</table>")
    if token:
        options = "".join(f"<option value='{_e(x)}'>{_e(x)}</option>" for x in reversed(v.get("available_versions") or []))
        spans = "".join(f"<option value='{_e(t['span'])}'>{_e(t['span'])}</option>"
                        for t in reversed(v.get("timeline") or []) if t.get("span") is not None)
        body.append(
            "<h2>Actions</h2>"
            f"<form method='post' action='/retrain/models/{_q(p)}/rollback'><b>Roll back</b> to version "
            f"<select name='version'>{options}</select> reason <input name='reason' required size='30'>"
            f"<input type='hidden' name='token' value='{_e(token)}'><button type='submit'>Roll back</button></form>"
            f"<form method='post' action='/retrain/models/{_q(p)}/quarantine'><b>Quarantine</b> span "
            f"<select name='span'>{spans}</select> reason <input name='reason' required size='30'>"
            f"<input type='hidden' name='token' value='{_e(token)}'><button type='submit'>Quarantine</button></form>"
            f"<p class='muted'>Recorded as {_e(user)}, in the model's history and ML Metadata, as the CLI records them.</p>")
    else:
        body.append("<p class='muted'>Roll-back and quarantine need edit rights on "
                    f"{_e(links.dag_id(p))}.</p>")
    body.append("<h2>Labels and pins</h2><table><tr><th>time</th><th>event</th><th>version</th><th>by</th>"
                f"<th>reason</th></tr>{_events_rows(v.get('history') or [])}</table>")
    return _page(f"{p}: models", "".join(body))


def version_page(v: dict, version: str) -> str:
    p = v["pipeline"]
    d = (v.get("versions") or {}).get(version) or {"version": version, "history": []}
    roles = [role for role, s in (v.get("serving") or {}).items() if s.get("version") == version]
    code = d.get("code") or {}
    runtime = d.get("runtime") or {}
    signature = d.get("signature") or {}
    check = d.get("serving_check") or {}
    latency = check.get("latency_ms") or {}
    rows = d.get("rows") or {}
    lineage = [
        ("trained on spans", ", ".join(map(str, d.get("window") or [])) or "–"),
        ("newest span", d.get("span")),
        ("rows", ", ".join(f"{k} {n}" for k, n in rows.items()) if isinstance(rows, dict) else rows),
        ("code commit", f"{code.get('git_commit') or '–'}{' (uncommitted changes)' if code.get('git_dirty') else ''}"),
        ("code sha256", code.get("code_sha256")),
        ("runtime", runtime.get("versions")),
        ("runtime SBOM sha256", runtime.get("sbom_sha256")),
        ("signature", signature.get("digest")),
        ("signer key", signature.get("key_id")),
        ("pushed", d.get("pushed_at")),
        ("run", None),
    ]
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(val)}</td></tr>" for k, val in lineage if k != "run")
    table += f"<tr><th>run</th><td>{_run_link(p, d.get('run_id'))} {_report_link(p, d)}</td></tr>"
    metrics = d.get("metrics") or {}
    names = [k for k in metrics if k != "example_count"]
    slice_rows = [("overall", metrics)] + sorted((d.get("slices") or {}).items())
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    mrows = []
    for name, ms in slice_rows:
        cells = []
        for n in names:
            m = (ms or {}).get(n) or {}
            interval = m.get("candidate_interval")
            cells.append(f"<td>{_num(m.get('candidate'))}"
                         + (f" <span class='muted'>[{_num(interval[0], 3)}, {_num(interval[1], 3)}]</span>"
                            if interval else "") + "</td>")
        count = ((ms or {}).get("example_count") or {}).get("candidate")
        mrows.append(f"<tr><td>{_e(name)}</td><td>{_num(count)}</td>{''.join(cells)}</tr>")
    body = (f"<p><a href='/retrain/models/'>Models</a> / <a href='/retrain/models/{_q(p)}'>{_e(p)}</a> / "
            f"{_e(version)}</p><h1>{_e(p)} version {_e(version)} {' '.join(_tag(r) for r in roles)}</h1>"
            f"<h2>Lineage</h2><table>{table}</table>"
            f"<h2>Serving check</h2><p>p50 {_num(latency.get('p50'))} ms, p99 {_num(latency.get('p99'))} ms, "
            f"max {_num(latency.get('max'))} ms (budget {_num(check.get('latency_budget_ms'))} ms): "
            f"{'passed' if check.get('passed') else 'not passed' if check else 'not run'}</p>"
            f"<h2>Live metrics</h2><p>{_live(d)}</p>"
            f"<h2>Metrics per slice</h2><table><tr><th>slice</th><th>examples</th>{head}</tr>{''.join(mrows)}</table>"
            "<h2>Labels and pins</h2><table><tr><th>time</th><th>event</th><th>version</th><th>by</th><th>reason</th>"
            f"</tr>{_events_rows(d.get('history') or [])}</table>")
    return _page(f"{p} {version}", body)


def run_tab(v: dict, run_id: str) -> str:
    p = v["pipeline"]
    entry = next((t for t in v.get("timeline") or [] if t.get("run_id") == run_id), None)
    if entry is None:
        return _page("Model", f"<p>Run {_e(run_id)} of {_e(p)} has no record yet (it has not prepared its span).</p>"
                     f"<p><a href='/retrain/models/{_q(p)}'>All spans of {_e(p)}</a></p>")
    single = {**v, "timeline": [entry]}
    body = (f"<h1>{_e(p)}: span {_e(entry['span'])}</h1><table><tr><th>span</th><th>rows</th><th>gate</th>"
            f"<th>key metric (interval)</th><th>outcome</th><th>evidence</th></tr>{_timeline_rows(single)}</table>"
            f"<p><a href='/retrain/models/{_q(p)}'>All spans of {_e(p)}</a></p>")
    return _page(f"{p} {run_id}", body)


def not_retraining(dag_id: str) -> str:
    return _page("Model", f"<p>{_e(dag_id)} is not a retraining DAG: it has no model.</p>")
