"""Renders a governance report as one self-contained HTML page (inline CSS and SVG plots, no
scripts or network), readable offline and in an artifact store."""

from __future__ import annotations

import html
import json
from typing import Any

from core import tasks
from governance import record as record_lib

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} td,th{border:1px solid #dde2ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f9} .ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600} .muted{color:#667085}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.pushed{background:#137333} .other{background:#b3261e} pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px}
.grid{display:flex;flex-wrap:wrap;gap:14px} .card{border:1px solid #dde2ea;padding:6px;border-radius:6px}
"""
_BLUE, _GREY = "#2f6fdb", "#b4bcc8"


def _fmt(value) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(rows: list[tuple[str, Any]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _yes_no(flag: Any, yes="yes", no="no") -> str:
    if flag is None:
        return '<span class="muted">n/a</span>'
    return f'<span class="ok">{yes}</span>' if flag else f'<span class="bad">{no}</span>'


def bar_chart(title: str, labels: list[str], series: dict[str, list[float]], width=520, height=200) -> str:
    """Grouped bars, one group per label, one bar per series (candidate, baseline, ...)."""
    if not labels:
        return ""
    colors = [_BLUE, _GREY, "#e8a33d"]
    top = max([v for vals in series.values() for v in vals if v is not None] + [1e-9])
    n, k = len(labels), max(len(series), 1)
    left, bottom, top_pad = 40, 40, 34
    gw = (width - left - 10) / n
    bw = max(gw * 0.8 / k, 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{_e(title)}">',
             f'<text x="{left}" y="12" font-size="12" font-weight="600">{_e(title)}</text>']
    plot_h = height - bottom - top_pad
    for s, (name, vals) in enumerate(series.items()):
        for i, v in enumerate(vals):
            if v is None:
                continue
            h = plot_h * v / top
            x = left + i * gw + gw * 0.1 + s * bw
            parts.append(f'<rect x="{x:.1f}" y="{top_pad + plot_h - h:.1f}" width="{bw:.1f}" height="{h:.1f}" fill="{colors[s % 3]}"><title>{_e(labels[i])} {_e(name)}: {v:.4g}</title></rect>')
        parts.append(f'<text x="{left + 110 * s}" y="26" font-size="11" fill="{colors[s % 3]}">&#9632; {_e(name)}</text>')
    step = max(1, n // 12)
    for i in range(0, n, step):
        parts.append(f'<text x="{left + i * gw + gw / 2:.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">{_e(labels[i])[:10]}</text>')
    parts.append(f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - 10}" y2="{top_pad + plot_h}" stroke="#667085"/>')
    parts.append(f'<text x="2" y="{top_pad + 6}" font-size="10">{top:.3g}</text><text x="2" y="{top_pad + plot_h}" font-size="10">0</text></svg>')
    return "".join(parts)


def line_chart(title: str, points: list[tuple[float, float]], width=520, height=200) -> str:
    if len(points) < 2:
        return f'<p class="muted">{_e(title)}: fewer than two points recorded</p>'
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = lambda x: 40 + (width - 50) * (x - x0) / ((x1 - x0) or 1)
    sy = lambda y: 20 + (height - 50) * (1 - (y - y0) / ((y1 - y0) or 1))
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(points))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{_e(title)}">'
            f'<text x="40" y="12" font-size="12" font-weight="600">{_e(title)}</text>'
            f'<path d="{path}" fill="none" stroke="{_BLUE}" stroke-width="2"/>'
            f'<text x="2" y="24" font-size="10">{y1:.3g}</text><text x="2" y="{height - 30}" font-size="10">{y0:.3g}</text>'
            f'<text x="40" y="{height - 8}" font-size="10">step {x0:g}</text>'
            f'<text x="{width - 60}" y="{height - 8}" font-size="10">step {x1:g}</text></svg>')


def _distribution(current: dict, baseline: dict | None, cur_span, base_span) -> str:
    series_names = (f"span {cur_span}", f"span {base_span}")
    if current.get("kind") == "numeric" and current.get("histogram"):
        labels = [f"{b['low']:.3g}" for b in current["histogram"]]
        total = sum(b["count"] for b in current["histogram"]) or 1
        series = {series_names[0]: [b["count"] / total for b in current["histogram"]]}
        if baseline and baseline.get("histogram"):
            btotal = sum(b["count"] for b in baseline["histogram"]) or 1
            # Baseline mass re-bucketed onto the current buckets, by bucket midpoint.
            mass = [0.0] * len(current["histogram"])
            for b in baseline["histogram"]:
                mid = (b["low"] + b["high"]) / 2
                i = next((j for j, c in enumerate(current["histogram"]) if c["low"] <= mid <= c["high"]), None)
                if i is not None:
                    mass[i] += b["count"] / btotal
            series[series_names[1]] = mass
        return bar_chart(f"{current['name']} (share per bucket)", labels, series, width=340, height=170)
    if current.get("kind") == "categorical" and current.get("top"):
        labels = [t["value"] for t in current["top"]]
        total = sum(t["count"] for t in current["top"]) or 1
        series = {series_names[0]: [t["count"] / total for t in current["top"]]}
        if baseline and baseline.get("top"):
            counts = {t["value"]: t["count"] for t in baseline["top"]}
            btotal = sum(counts.values()) or 1
            series[series_names[1]] = [counts.get(v, 0) / btotal for v in labels]
        return bar_chart(f"{current['name']} (top values)", labels, series, width=340, height=170)
    return ""


def _runtime_cell(runtime: dict | None) -> str:
    if not runtime:
        return '<span class="bad">not recorded (no runtime SBOM: set up without make venv)</span>'
    return (f'CycloneDX SBOM sha256 <code>{_e(runtime.get("sbom_sha256"))}</code>, '
            f'{_e(runtime.get("sbom_components"))} packages: {_e(runtime.get("versions"))}')


def _signature_cell(sig: dict | None) -> str:
    if not sig:
        return '<span class="bad">unsigned</span>'
    if sig.get("error"):
        return f'<span class="bad">{_e(sig["error"])}</span>'
    return (f'<code>{_e(sig.get("digest"))}</code> over {_e(sig.get("files"))} files, signer key '
            f'<code>{_e(sig.get("key_id"))}</code> (<code>retrain verify</code> checks it)')


def _model_card(card: dict) -> str:
    details, considerations = card["model_details"], card["considerations"]

    def items(entries, key="description"):
        return "<ul>" + "".join(f"<li>{_e(e.get(key))}</li>" for e in entries) + "</ul>" if entries else \
            '<span class="bad">not stated (pipeline config: model_card)</span>'

    metrics = card["quantitative_analysis"]["performance_metrics"]
    overall = [m for m in metrics if not m.get("slice")]
    return ("<h2>Model card</h2><p class=muted>Google's Model Card schema v" + _e(card["schema_version"])
            + ", also in <code>model_card.json</code> beside this report</p>" + _table([
                ("overview", _e(details.get("overview")) or '<span class="bad">not stated</span>'),
                ("owners", _e(", ".join(f"{o.get('name')} <{o.get('contact', '')}>" for o in details["owners"]))
                 or '<span class="bad">not stated</span>'),
                ("version", _e(f"{details['version'].get('name')} ({details['version'].get('date')})")),
                ("intended users", items(considerations["users"])),
                ("intended use", items(considerations["use_cases"])),
                ("limitations", items(considerations["limitations"])),
                ("trade-offs", items(considerations["tradeoffs"])),
                ("ethical considerations", "<ul>" + "".join(
                    f"<li>{_e(r.get('name'))}: {_e(r.get('mitigation_strategy'))}</li>"
                    for r in considerations["ethical_considerations"]) + "</ul>"
                 if considerations["ethical_considerations"] else '<span class="bad">not stated</span>'),
                ("training and evaluation data", items(card["model_parameters"]["data"])),
                ("model", _e(card["model_parameters"]["model_architecture"])),
                ("metrics (overall)", _e("; ".join(
                    f"{m['type']} {m['value']}" + (f" [{m['confidence_interval']['lower_bound']}, "
                                                   f"{m['confidence_interval']['upper_bound']}]"
                                                   if m.get("confidence_interval") else "") for m in overall))),
                ("references", "<ul>" + "".join(f"<li><a href=\"{_e(x['reference'])}\">{_e(x['reference'])}</a></li>"
                                                for x in details["references"]) + "</ul>"),
                ("record", _e(details.get("documentation"))),
            ]))


def _row_checks(gate: dict) -> list[str]:
    """The gate's row-level checks: domains, span consistency, the label (failed first), and
    why a feature has no domain."""
    checks = record_lib.row_check_list(gate)
    if not checks:
        return []
    checks = sorted(checks, key=lambda c: (not c["failed"], c.get("p_value", 1.0) if c.get("p_value") is not None else 1.0))
    failed = sum(c["failed"] for c in checks)
    label = (gate.get("row_checks") or {}).get("label") or {}
    out = [f"<h3>Row checks over every row of the span: {failed} failed</h3>",
           "<p>Domains learned from history (value sets and ranges), span consistency (event times in the span's"
           " period, derived fields recomputed from them) and the label as <code>" + _e(label.get("fn")) +
           "</code> computes it.</p>"
           f"<details{' open' if failed else ''}><summary>every row check, failed first</summary>"
           "<table><tr><th>feature</th><th>check</th><th>what was found</th><th>result</th></tr>" + "".join(
               f"<tr><td>{_e(c['feature'])}</td><td>{_e(c['check'])}</td><td>{_e(c['description'])}</td>"
               f"<td>{_yes_no(not c['failed'], 'within', 'FAILED')}</td></tr>" for c in checks) + "</table></details>"]
    if label.get("note"):
        out.append(f"<p class=muted>{_e(label['note'])}</p>")
    reasons = [(k, "opted out: " + v) for k, v in sorted((gate.get("domain_opt_out") or {}).items())]
    reasons += sorted((gate.get("no_domain") or {}).items())
    if reasons:
        out.append("<p>Features without a domain check, and why:</p><table><tr><th>feature</th><th>reason</th></tr>"
                   + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in reasons) + "</table>")
    return out


def _new_span(check: dict | None) -> list[str]:
    """The Evaluator's new-span block: both models on the newest span, and the per-span trail."""
    if not check:
        return []
    title = ("not judged" if not check.get("judged") else "COLLAPSED: refused as bad data" if check["collapsed"]
             else "no collapse")
    rows = "".join(
        f"<tr><td>{_e(s['span'])}</td><td>{_e(s['examples'])}</td><td>{_e(None if s.get('baseline') is None else round(s['baseline'], 4))}</td>"
        f"<td>{_e(None if s.get('z') is None else round(s['z'], 2))}</td></tr>" for s in check.get("spans") or [])
    return [f"<h3>The new span alone ({_e(check['span'])}): {_e(title)}</h3>",
            f"<p>{_e(record_lib.new_span_note({'new_span': check}))}</p>",
            f"<p class=muted>{_e(check.get('refusal') or check.get('reason'))}</p>",
            f"<details><summary>the baseline's {_e(check['metric'])} on each span of the window (z: its drop in"
            " standard errors)</summary><table><tr><th>span</th><th>eval examples</th><th>baseline</th><th>z</th></tr>"
            + rows + "</table></details>"]


def _staleness(check: dict | None, history: dict | None) -> list[str]:
    """How stale the served model is: its quality on each span of the window against its
    age, and the history of every run's reading."""
    if not check:
        return []
    out = [f"<h3>The served model's age: {_e('STALE' if check.get('alerts') else 'not stale')}</h3>",
           f"<p>{_e(check['reason'])}</p>"]
    for alert in check.get("alerts") or []:
        out.append(f'<p class="bad">{_e(alert)}</p>')
    if check.get("points"):
        out.append(f"<table><tr><th>span</th><th>age (spans since its training window)</th><th>{_e(check['metric'])}</th>"
                   f"<th>{_e(check['drop_kind'])} vs the spans it trained on</th><th>eval examples</th></tr>" + "".join(
                       f"<tr><td>{_e(p['span'])}</td><td>{_e(p['age_spans'])}</td><td>{_e(_fmt(p['value']))}</td>"
                       f"<td>{_e(_fmt(p.get('drop')))}</td><td>{_e(p['examples'])}</td></tr>" for p in check["points"])
                   + "</table>")
    points = (history or {}).get("points") or []
    if points:
        slope = history.get("loss_per_span")
        out.append(f"<p>Over {len(points)} run(s) of this pipeline, the served models lost"
                   f" {_e(_fmt(slope) if slope is not None else 'n/a')} {_e(check['metric'])} per span of age.</p>")
        out.append(line_chart(f"{check['drop_kind']} of the served model on each run's new span, by age",
                              sorted((p["age_spans"], p["drop"]) for p in points if p.get("drop") is not None)))
    return out


def _runtime_changes(check: dict | None) -> list[str]:
    """The packages that changed between the baseline's runtime and the candidate's."""
    if not check:
        return []
    changed = bool(check.get("lines"))
    out = [f"<h3>Runtime against the baseline's: {_e('CHANGED' if changed else 'unchanged' if check.get('compared') else 'not compared')}</h3>",
           f"<p>{_e(check['reason'])}{_e(' (' + check['scope'] + ')') if check.get('scope') else ''}</p>"]
    rows = ([("changed", c["package"], f"{c['from']} -> {c['to']}") for c in check.get("changed") or []]
            + [("added", a["package"], a["version"]) for a in check.get("added") or []]
            + [("removed", r["package"], r["version"]) for r in check.get("removed") or []])
    if rows:
        out.append("<table><tr><th>change</th><th>package</th><th>version</th></tr>" + "".join(
            f"<tr><td>{_e(k)}</td><td>{_e(p)}</td><td>{_e(v)}</td></tr>" for k, p, v in rows) + "</table>")
    return out


def _performance(perf: dict | None) -> list[str]:
    """Computing performance against the baseline (components/serving_check/performance.py)."""
    if not perf:
        return []
    verdict = "REGRESSED" if perf.get("refusals") else "warnings" if perf.get("warnings") else "not regressed"
    out = [f"<h3>Computing performance against the baseline: {_e(verdict)}</h3>",
           f"<p class=muted>Both served by the check server, {_e(perf.get('requests_each'))} requests each, alternating"
           " which goes first; training throughput as each model's Trainer recorded it.</p>"]
    def row(name: str, f: dict) -> str:
        change = f"{100 * f['change']:+.0f}%"
        return (f"<tr><td>{_e(name)}</td><td>{_e(_fmt(f['candidate']))}</td><td>{_e(_fmt(f['baseline']))}</td>"
                f"<td>{_e(change)}</td><td>{_e(f['limit'])}</td><td>{_e(f['action'])}</td>"
                f"<td>{_yes_no(not f['past_limit'], 'within', 'PAST THE LIMIT')}</td></tr>")

    rows = "".join(row(name, f) for name, f in (perf.get("figures") or {}).items())
    if rows:
        out.append("<table><tr><th>figure</th><th>candidate</th><th>baseline</th><th>change</th><th>limit (relative)</th>"
                   "<th>past it</th><th>result</th></tr>" + rows + "</table>")
    for reason in perf.get("refusals") or []:
        out.append(f'<p class="bad">refused: {_e(reason)}</p>')
    for reason in perf.get("warnings") or []:
        out.append(f"<p>warning: {_e(reason)}</p>")
    for name, why in (perf.get("not_compared") or {}).items():
        out.append(f'<p class="muted">{_e(name)} not compared: {_e(why)}</p>')
    return out


def _cost(spent: dict | None) -> list[str]:
    """What producing the candidate cost (core/cost.py): totals, per node, and the method."""
    if not spent:
        return []
    method = spent.get("energy_method") or "?"
    how = ("measured by the CPU's RAPL energy counters (the whole machine while each node ran)" if method == "rapl"
           else "estimated (no energy counter readable here): CodeCarbon's method, the CPU's TDP shared by its cores"
                " per CPU-second, plus 0.375 W per GB of peak memory, plus each GPU's board power per GPU-second"
           if method == "tdp-estimate" else method)
    rows = [("CPU", _e(f"{spent['cpu_seconds']:.1f} CPU-seconds")),
            ("accelerators", _e(f"{spent.get('accelerator_seconds') or 0:.1f} GPU-seconds")),
            ("peak memory", _e(f"{spent['peak_rss_mb']:.0f} MB (largest node)") if spent.get("peak_rss_mb") else "not measured"),
            ("energy", _e(f"{spent['energy_j'] / 1000:.2f} kJ ({spent['energy_j'] / 3.6e6 * 1000:.3f} Wh), {how}"))]
    nodes = spent.get("nodes") or {}
    table = ("<details><summary>per node</summary><table><tr><th>node</th><th>wall s</th><th>CPU-s</th><th>peak MB</th>"
             "<th>GPU-s</th><th>energy J</th></tr>" + "".join(
                 f"<tr><td>{_e(n)}</td><td>{_e(c.get('wall_seconds'))}</td><td>{_e(c.get('cpu_seconds'))}</td>"
                 f"<td>{_e(c.get('peak_rss_mb'))}</td><td>{_e(c.get('accelerator_seconds'))}</td><td>{_e(c.get('energy_j'))}</td></tr>"
                 for n, c in nodes.items()) + "</table></details>") if nodes else ""
    return ["<h2>Cost of this candidate</h2>", _table(rows), table]


def _scorecard(card: dict | None) -> list[str]:
    """The ML Test Score (governance/scorecard.py): each test's status and evidence."""
    if not card:
        return []
    sums = ", ".join(f"{s} {card['sections'][s]:g}" for s in card["sections"])
    rows = "".join(
        f"<tr><td>{_e(t['section'])} {t['number']}</td><td>{_e(t['title'])}</td>"
        f"<td class='{'bad' if t['status'] in ('missing', 'automated-failing') else ''}'>{_e(t['status'])}</td>"
        f"<td>{_e(_evidence(t['evidence']))}</td></tr>" for t in card["tests"])
    return [f"<h2>ML Test Score: {card['score']:g}</h2><p>From {card['runs']} run record(s) of this pipeline;"
            f" section sums {_e(sums)}, the score is the smallest. Automated (passing or failing) scores 1,"
            " manual 0.5 with a valid attestation, missing 0; `retrain scorecard --explain TEST` re-derives one"
            " (docs/guides/scorecard.md).</p>"
            "<details><summary>the 28 tests and their evidence</summary><table><tr><th>test</th><th>what</th>"
            f"<th>status</th><th>evidence</th></tr>{rows}</table></details>"]


def _evidence(e: dict) -> str:
    text = (f"{'run ' + str(e['run']) + ': ' if e.get('run') else ''}{e['check']}: {e.get('detail')}"
            if e.get("check") else e.get("detail") or "")
    if e.get("threshold"):
        text += f" (threshold: {e['threshold']})"
    if e.get("procedure") and e["procedure"] not in text:
        text += f"; by hand: {e['procedure']}"
    return text


def _feature_policy(policy: dict | None) -> list[str]:
    """The feature policy in force (core/feature_policy.py): what no model may use and why,
    the sensitive features, and what request logs keep."""
    if not policy:
        return ["<h2>Feature policy</h2><p class=bad>No feature policy: every feature may be used by the model,"
                " and request logs keep every feature as it is (config key feature_policy).</p>"]
    rows = [("policy", _e(f"{policy.get('path')} (sha256 {policy.get('sha256')}), {policy.get('features')} features"))]
    rows += [(f"forbidden in the model: {f}", _e(why)) for f, why in (policy.get("forbidden") or {}).items()]
    rows.append(("sensitive (values never printed)",
                 _e(", ".join(f"{f} ({c})" for f, c in (policy.get("sensitive") or {}).items()) or "none")))
    rows.append(("request logs: hashed (keyed)", _e(", ".join(policy.get("logged_hashed") or []) or "none")))
    rows.append(("request logs: never written", _e(", ".join(policy.get("not_logged") or []) or "none")))
    rows.append(("never stored by the pipeline (not ingested)",
                 _e(", ".join(policy.get("not_ingested") or []) or "none")))
    return ["<h2>Feature policy</h2>", _table(rows)]


def _simple_baseline(check: dict | None, fitted: dict | None) -> list[str]:
    """A simpler model is not better: the candidate against the linear model fitted beside
    it (the Evaluator's comparison), and the trivial predictor for reference (the Trainer's)."""
    if not check:
        return []
    title = ("opted out" if check.get("opted_out") else "not judged" if not check.get("judged")
             else "REFUSED: a simpler model is better" if check["refused"] else "the candidate is not worse")
    out = [f"<h3>A simpler model is not better: {_e(title)}</h3>", f"<p>{_e(record_lib.simple_baseline_note({'simple_baseline': check}))}</p>"]
    if fitted and not fitted.get("opted_out"):
        trivial = fitted.get("trivial") or {}
        rows = [("simple model", _e(fitted.get("model"))), ("steps, learning rate", _e(f"{fitted.get('steps')}, {fitted.get('learning_rate')}")),
                ("fitted in", _e(f"{fitted.get('fit_s')} s")), ("its training metrics", _e(fitted.get("final_metrics")))]
        if fitted.get("left_out_features"):
            rows.append(("features it could not take", _e(", ".join(fitted["left_out_features"]))))
        if trivial.get("predictor"):
            scores = {k: v for k, v in trivial.items() if k not in ("predictor", "value", "eval_examples", "share_in_training")}
            rows.append((f"trivial predictor ({_e(trivial['predictor'])} {_e(trivial.get('value'))})",
                         _e(f"{scores} on {trivial.get('eval_examples')} eval examples")))
        out.append(_table(rows))
    return out


def _pct(share: float | None) -> str | None:
    return None if share is None else f"{100 * share:.1f}%"


def _importance(record: dict | None, history: dict | None) -> list[str]:
    """Every feature earns its place: each input's permutation importance with its interval,
    its bytes per example, the flag where the interval includes 0, and its trend over runs."""
    if not record:
        return []
    flagged = record.get("not_contributing") or []
    title = "not computed" if not record.get("computed") else (
        f"{len(flagged)} input(s) not shown to contribute" if flagged else "every input contributes")
    out = [f"<h3>Every feature earns its place: {_e(title)}</h3>",
           f"<p>{_e(record_lib.importance_note({'importance': record}))}</p>"]
    if not record.get("computed"):
        return out
    runs = (history or {}).get("runs") or []
    trend = {}
    for run in runs:
        for name, v in run["inputs"].items():
            trend.setdefault(name, []).append(v["importance"])
    out.append(f"<p class=muted>rise of the {_e(record['loss'])} per example when an input is shuffled across"
               f" {_e(record['examples'])} eval examples ({_e(record['repeats'])} permutations, seed {_e(record['seed'])}),"
               f" {_e(round(100 * record['confidence']))}% interval; {_e(record['seconds'])} s. Time per feature:"
               f" {_e(record['time_share'])}.</p>")
    rows = "".join(
        f"<tr{'' if r['contributes'] else ' class=bad'}><td>{_e(r['input'])}</td><td>{_e(_fmt(r['importance']))}</td>"
        f"<td>[{_e(_fmt(r['interval'][0]))}, {_e(_fmt(r['interval'][1]))}]</td>"
        f"<td>{_e('yes' if r['contributes'] else 'NOT SHOWN: interval includes 0')}</td>"
        f"<td>{_e(r.get('raw_feature'))}</td><td>{_e(r.get('bytes_per_example'))}</td>"
        f"<td>{_e(_pct(r.get('bytes_share')))}</td>"
        f"<td>{_e(', '.join(_fmt(v) for v in trend.get(r['input'], [])[-6:]))}</td></tr>" for r in record["inputs"])
    out.append("<table><tr><th>model input</th><th>importance</th><th>interval</th><th>contributes</th>"
               "<th>raw feature</th><th>bytes per example</th><th>share of bytes</th>"
               f"<th>importance over the last runs ({_e(len(runs))} recorded), oldest first</th></tr>" + rows + "</table>")
    if record.get("left_out_inputs"):
        out.append(f"<p class=muted>not dense, not permuted: {_e(', '.join(record['left_out_inputs']))}</p>")
    return out


def _fairness(check: dict | None) -> list[str]:
    """Quality across groups: each judged slice's rate against the overall one, the gap and
    its bound beside the limit, the last blessed model's gap; slices too small, listed."""
    if not check:
        return []
    title = ("not judged" if not check.get("judged") else "REFUSED: a group is worse off" if check["refused"]
             else "every group within its limit")
    out = [f"<h3>Quality across groups: {_e(title)}</h3>", f"<p>{_e(record_lib.fairness_note({'fairness': check}))}</p>",
           f"<p class=muted>gap limits {_e(check.get('gates'))} at {_e(round(100 * check.get('confidence', 0.95)))}%"
           f" confidence; binary rates at threshold {_e(check.get('threshold'))}; slices under"
           f" {_e(check.get('min_slice_examples'))} eval examples are not judged</p>"]
    for warning in check.get("warnings") or []:
        out.append(f"<p class=muted>{_e(warning)}</p>")
    for feature, report in (check.get("features") or {}).items():
        rows = "".join(
            f"<tr{' class=bad' if r['status'] == 'over' else ''}><td>{_e(r['slice'])}</td><td>{_e(r['metric'])}</td>"
            f"<td>{_e(_fmt(r['value']))}</td><td>{_e(_fmt(r['overall']))}</td><td>{_e(_fmt(r['gap']))}</td>"
            f"<td>{_e(_fmt(r.get('lower_bound')))}</td><td>{_e(r['limit'])}</td><td>{_e(_fmt(r.get('baseline_gap')))}</td>"
            f"<td>{_e(r['examples'])}</td><td>{_e(r['status'])}</td></tr>" for r in report.get("slices") or [])
        rows += "".join(f"<tr><td>{_e(r['slice'])}</td><td colspan=8>too small to judge</td><td>{_e(r['examples'])}"
                        "</td></tr>" for r in report.get("too_small") or [])
        rows += "".join(f"<tr><td>{_e(r['slice'])}</td><td>{_e(r['metric'])}</td><td colspan=7>undefined on this"
                        f" slice</td><td>{_e(r['examples'])}</td></tr>" for r in report.get("undefined") or [])
        out.append(f"<h4>by {_e(feature)}</h4><table><tr><th>slice</th><th>metric</th><th>candidate</th><th>overall</th>"
                   "<th>gap</th><th>gap lower bound</th><th>limit</th><th>last blessed model's gap</th><th>eval examples</th>"
                   "<th>status</th></tr>" + rows + "</table>")
    return out


def _live(live: dict | None, push: dict) -> list[str]:
    """After the push: offline against live metrics, the version's role and the decision trail."""
    if not push.get("pushed"):
        return []
    if not live:
        return ["<h2>Live</h2><p class=muted>no rollout has measured this version on live traffic (direct push, "
                "or no labelled traffic yet)</p>"]
    rows = "".join(
        f"<tr><td>{_e(x['metric'])}</td><td>{_fmt(x['offline'])}</td><td>{_fmt(x['live'])} "
        f"<span class=muted>[{_fmt(x.get('live_low'))}, {_fmt(x.get('live_high'))}]</span></td>"
        f"<td>{_fmt(x.get('other_live'))}</td></tr>" for x in live.get("offline_vs_live") or [])
    out = [f"<h2>Live: version {_e(live['version'])} is {_e(live.get('role') or 'unknown')}</h2>"]
    if rows:
        out.append(f"<table><tr><th>metric</th><th>offline (eval split)</th><th>live (95% interval)</th>"
                   f"<th>live, version {_e(live.get('compared_with'))}</th></tr>{rows}</table>")
    trail = "".join(
        f"<tr><td>{_e(d.get('decided_at'))}</td><td>{_e(d.get('action'))}{' (applied)' if d.get('applied') else ''}</td>"
        f"<td>{_e(d.get('decided_by'))}</td><td>{_e(d.get('reason'))}</td></tr>" for d in live.get("decisions") or [])
    if trail:
        out.append("<h3>Decisions (ML Metadata, RolloutDecision)</h3><table><tr><th>when</th><th>decision</th>"
                   f"<th>by</th><th>why</th></tr>{trail}</table>")
    events = "".join(f"<tr><td>{_e(e.get('time'))}</td><td>{_e(e.get('event'))}</td><td>{_e(e.get('user'))}</td>"
                     f"<td>{_e(e.get('reason'))}</td></tr>" for e in live.get("events") or [])
    if events:
        out.append("<details><summary>labels and pins (history.jsonl)</summary><table><tr><th>when</th><th>event</th>"
                   f"<th>by</th><th>why</th></tr>{events}</table></details>")
    return out


def render(r: dict) -> str:
    push = r.get("push") or {}
    outcome = r.get("outcome", "?")
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>Governance report: {_e(r['pipeline'])} run {_e(r['run_id'])}</title><style>{_CSS}</style></head><body>"]
    out.append(f"<h1>{_e(r['pipeline'])} — governance report</h1>")
    out.append(f'<p><span class="badge {"pushed" if outcome == "pushed" else "other"}">{_e(outcome.replace("_", " ").upper())}</span> '
               f'run <code>{_e(r["run_id"])}</code>, generated {_e(r["generated_at"])}</p>')
    model = r.get("model") or {}
    out.append("<h2>Decision</h2>" + _table([
        ("outcome", _e(outcome)),
        ("pushed", (f'<span class="ok">version {_e(push.get("version"))}</span> at <code>{_e(push.get("path"))}</code>, {_e(push.get("time"))}'
                    + (" (already serving: cached re-run)" if push.get("already_serving") else ""))
         if push.get("pushed") else f'<span class="bad">no</span>: {_e(push.get("reason"))}'),
        *([("signature", _signature_cell(push.get("signature")))] if push.get("pushed") else []),
        ("blessed by Evaluator", _yes_no(r.get("blessed"))),
        ("serving check", _yes_no((r.get("serving_check") or {}).get("passed"), "passed", "failed") if r.get("serving_check") else '<span class="muted">not run</span>'),
        ("human approval", _e(f"{r['approval'].get('decision')} by {r['approval'].get('reviewer')} at {r['approval'].get('decided_at')}: {r['approval'].get('comment') or ''}") if r.get("approval") else '<span class="muted">not required</span>'),
        ("candidate model", f"MLMD artifact {_e(model.get('artifact_id'))}, <code>{_e(model.get('uri'))}</code>" if model else "none (the run stopped before training)"),
        *([("runtime (SBOM)", _runtime_cell(model.get("runtime")))] if model else []),
        ("baseline model", f"MLMD artifact {_e((r.get('baseline_model') or {}).get('artifact_id'))}" if r.get("baseline_model") else "none (first model)"),
    ]))
    out += _live(r.get("live"), push)
    code = r.get("code") or {}
    out.append("<h2>Code</h2>" + _table([
        ("git commit", f"<code>{_e(code.get('git_commit'))}</code>"),
        ("tree dirty", _yes_no(None if code.get("git_dirty") is None else not code["git_dirty"], "no", "yes (uncommitted changes)")),
        ("pipeline code sha256", f"<code>{_e(code.get('code_sha256'))}</code>"),
        ("pipeline run id", f"<code>{_e(r['run_id'])}</code>"),
    ]) if code else "<h2>Code</h2><p class=muted>recorded by the Trainer; this run did not train</p>")

    data = r.get("data") or {}
    window = data.get("window") or []
    schema = r.get("schema") or {}
    out.append("<h2>Data</h2>" + _table([
        ("span ingested", _e(data.get("span"))),
        ("rows", _e(", ".join(f"{k} {v}" for k, v in (data.get("rows") or {}).items()))),
        ("new columns (left out)", f'<span class=bad>{_e(", ".join(data["new_columns"]))}</span>: the source added'
         ' them; not in the schema, so not ingested (gate policy columns.new: report)' if data.get("new_columns")
         else '<span class="muted">none</span>'),
        ("training window", _e(", ".join(str(w["span"]) for w in window)) or '<span class="muted">not reached</span>'),
        ("schema", f"<code>{_e(schema.get('path'))}</code><br>sha256 <code>{_e(schema.get('sha256'))}</code>"),
        ("statistics", f"<code>{_e(data.get('statistics_uri'))}</code>"),
    ]))
    gate = r.get("data_gate")
    if gate:
        out.append(f"<h2>Data gate: {_yes_no(gate.get('passed'), 'passed', 'STOPPED')}</h2>")
        if gate.get("anomalies"):
            out.append("<table><tr><th>feature</th><th>kind</th><th>split</th><th>reasons</th></tr>" + "".join(
                f"<tr><td>{_e(a['feature'])}</td><td>{_e(a['kind'])}</td><td>{_e(a['split'])}</td><td>{_e('; '.join(x.get('description') or x.get('type') for x in a['reasons']))}</td></tr>"
                for a in gate["anomalies"]) + "</table>")
        else:
            out.append("<p>No schema anomalies.</p>")
        volume = gate.get("volume")
        if volume:
            out.append(f"<p>Volume: {_e(volume['description'])}: {_yes_no(not volume['failed'], 'within', 'OUTSIDE')}</p>")
        checks = [("drift", d, not d["drifted"]) for d in gate.get("drift") or []]
        checks += [("completeness", c, not c["failed"]) for c in gate.get("completeness") or []]
        if checks:
            limits = gate.get("calibration") or {}
            checks.sort(key=lambda x: x[2])  # exceeded limits first
            failed = sum(not ok for _, _, ok in checks)
            out.append(
                f"<p>{len(checks)} checks vs span {_e(gate.get('baseline_span'))}, {failed} beyond their limit; limits from "
                f"{_e('calibration of spans ' + str(limits.get('spans')) + ' (' + str(limits.get('rule')) + ')' if limits else 'the strict defaults')}:</p>"
                f"<details{' open' if failed else ''}><summary>every check, exceeded first</summary>"
                "<table><tr><th>feature</th><th>check</th><th>measure</th><th>value</th><th>limit</th><th>limit from</th><th>result</th></tr>" + "".join(
                    f"<tr><td>{_e(c['feature'])}</td><td>{_e(kind)}</td><td>{_e(c.get('measure'))}</td><td>{c['value']:.4g}</td>"
                    f"<td>{c['threshold']:.4g}</td><td>{_e(c.get('limit_source'))}"
                    f"{_e(' k=' + format(c['k'], 'g') + ', n_eff=' + format(c['n_eff'], 'g')) if 'k' in c else ''}</td>"
                    f"<td>{_yes_no(ok, 'within', 'EXCEEDED')}</td></tr>"
                    for kind, c, ok in checks) + "</table></details>")
        elif not gate.get("drift_checked"):
            out.append('<p class="muted">Drift not checked (no earlier span passed the gate).</p>')
        if gate.get("opt_out"):
            out.append("<p>Not watched for drift (opted out in the gate policy):</p><table><tr><th>feature</th><th>reason</th></tr>" + "".join(
                f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in sorted(gate["opt_out"].items())) + "</table>")
        out += _row_checks(gate)
    skew = r.get("serving_skew")
    if skew:
        title = ("not checked" if not skew.get("checked") else "none" if not skew.get("skewed_features")
                 else ("STOPPED the run: " if not skew.get("passed") else "WARNING: ") + ", ".join(skew["skewed_features"]))
        out.append(f"<h2>Serving skew: {_e(title)}</h2>")
        if not skew.get("checked"):
            out.append(f"<p class=muted>{_e(skew.get('reason'))}</p>")
        else:
            if skew.get("anomalies"):
                out.append("<p>Against the schema (SERVING environment):</p><table><tr><th>feature</th><th>reasons</th></tr>"
                           + "".join(f"<tr><td>{_e(a['feature'])}</td><td>{_e('; '.join(x.get('description') or x.get('type') for x in a['reasons']))}</td></tr>"
                                     for a in skew["anomalies"]) + "</table>")
            checks = [(c, not c["drifted"]) for c in skew.get("skew") or []]
            checks += [(c, not c["failed"]) for c in skew.get("completeness") or []]
            checks.sort(key=lambda x: x[1])
            out.append(
                f"<p>Served version {_e(skew.get('served_version'))}: {_e(skew.get('examples'))} examples from "
                f"{_e(skew.get('logged_requests'))} logged requests vs its training data (span "
                f"{_e(skew.get('training_span'))}), with the data gate's limits; action <b>{_e(skew.get('action'))}</b>. "
                f"Request logs: <code>{_e(skew.get('request_log_prefix'))}</code>.</p>"
                f"<details{' open' if skew.get('skewed_features') else ''}><summary>every check, exceeded first</summary>"
                "<table><tr><th>feature</th><th>measure</th><th>value</th><th>limit</th><th>result</th></tr>" + "".join(
                    f"<tr><td>{_e(c['feature'])}</td><td>{_e(c['measure'])}</td><td>{c['value']:.4g}</td>"
                    f"<td>{c['threshold']:.4g}</td><td>{_yes_no(ok, 'within', 'EXCEEDED')}</td></tr>"
                    for c, ok in checks) + "</table></details>")
    if r.get("quarantine"):
        out.append("<h2>Quarantined spans</h2><table><tr><th>span</th><th>decision</th><th>by</th><th>at</th><th>reason</th></tr>" + "".join(
            f"<tr><td>{_e(d['span'])}</td><td>{_e(d['action'])}</td><td>{_e(d['decided_by'])}</td><td>{_e(d['decided_at'])}</td><td>{_e(d['reason'])}</td></tr>"
            for d in r["quarantine"]) + "</table>")
    if data.get("features"):
        base = {f["name"]: f for f in data.get("baseline_features") or []}
        charts = [_distribution(f, base.get(f["name"]), data.get("span"), data.get("baseline_span")) for f in data["features"]]
        out.append("<h2>Feature distributions (train split), current vs previous span</h2><div class=grid>"
                   + "".join(f"<div class=card>{c}</div>" for c in charts if c) + "</div>")
        redacted = [f for f in data["features"] if f.get("redacted")]
        if redacted:
            out.append("<p>Not drawn, by the feature policy (values of sensitive features are never printed): "
                       + _e(", ".join(f"{f['name']} ({f['redacted']}; {f.get('unique', '?')} distinct,"
                                      f" {f.get('missing')} missing)" for f in redacted)) + "</p>")
    out += _feature_policy(r.get("feature_policy"))
    out += _cost(r.get("cost"))
    out += _scorecard(r.get("scorecard"))
    if r.get("transform") or r.get("trainer"):
        out.append("<h2>Transform and Trainer settings</h2><pre>" + _e(json.dumps({"transform": r.get("transform"), "trainer": r.get("trainer")}, indent=2, default=str)) + "</pre>")
    training = r.get("training")
    if training:
        rows = [(k, _e(v)) for k, v in training.items()
                if k not in ("loss_curve", "final_metrics", "simple_baseline", "importance", "importance_history")]
        out.append("<h2>Training</h2>" + _table(rows + [("final metrics", _e(training.get("final_metrics")))]))
        out.append(line_chart("training loss by step", [tuple(p) for p in training.get("loss_curve") or []]))
        out += _importance(training.get("importance"), training.get("importance_history"))
    ev = r.get("evaluation")
    if ev:
        out.append(f"<h2>Evaluation: {_yes_no(ev.get('validation_ok'), 'thresholds passed', 'thresholds FAILED')}</h2>")
        out.append("<table><tr><th>metric (overall)</th><th>candidate</th><th>baseline</th><th>change</th></tr>" + "".join(
            f"<tr><td>{_e(m)}</td><td>{_e(v.get('candidate'))}</td><td>{_e(v.get('baseline'))}</td><td>{_e(v.get('candidate_diff'))}</td></tr>"
            for m, v in sorted(ev["overall"].items())) + "</table>")
        if ev.get("thresholds"):
            out.append("<table><tr><th>threshold</th><th>slice</th><th>value bound</th><th>change bound</th><th>result</th></tr>" + "".join(
                f"<tr><td>{_e(t['metric'])}</td><td>{_e(t['slice'])}</td><td>{_e(t.get('value_threshold'))}</td><td>{_e(t.get('change_threshold'))}</td><td>{_yes_no(t['passed'], 'passed', 'FAILED')}</td></tr>"
                for t in ev["thresholds"]) + "</table>")
        for f in ev.get("failures") or []:
            out.append(f'<p class="bad">TFMA threshold failed: {_e(f["metric"])} on {_e(f["slice"])} = {_e(f["value"])} ({_e(f["threshold"])})</p>')
        verdict = ev.get("significance")
        if verdict:
            out.append(
                f"<p>Verdict on {_e(verdict.get('example_count'))} eval examples (minimum {_e(verdict.get('min_eval_examples'))}),"
                f" significance level {_e(verdict.get('significance_level'))}: {_yes_no(verdict.get('blessed'), 'blessed', 'NOT blessed')}"
                f"{_e(': ' + '; '.join(verdict['reasons'])) if verdict.get('reasons') else ''}</p>")
            if record_lib.sample_note(verdict):
                out.append(f"<p>Evaluated on {_e(record_lib.sample_note(verdict))}.</p>")
            out += _new_span(verdict.get("new_span"))
            out += _staleness(verdict.get("staleness"), ev.get("staleness_history"))
            out += _simple_baseline(verdict.get("simple_baseline"), (r.get("training") or {}).get("simple_baseline"))
            out += _fairness(verdict.get("fairness"))
            out += _runtime_changes(verdict.get("runtime"))
            if verdict.get("comparisons"):
                out.append("<table><tr><th>metric</th><th>candidate</th><th>baseline</th><th>difference</th><th>interval</th><th>tolerated drop</th><th>verdict</th></tr>" + "".join(
                    f"<tr><td>{_e(c['metric'])}</td><td>{_e(_fmt(c.get('candidate')))}</td><td>{_e(_fmt(c.get('baseline')))}</td><td>{_e(_fmt(c.get('difference')))}</td>"
                    f"<td>{_e('[' + ', '.join(_fmt(x) for x in c['interval']) + '] at ' + format(c['confidence'], '.0%') + ' one-sided') if c.get('interval') else 'none'}</td>"
                    f"<td>{_e(_fmt(c.get('tolerance')))}</td><td>{_e(c['verdict'])}</td></tr>"
                    for c in verdict["comparisons"]) + "</table>")
        primary = tasks.primary_metric(ev["overall"])
        if primary and ev.get("slices"):
            labels = list(ev["slices"])
            series = {"candidate": [ev["slices"][s].get(primary, {}).get("candidate") for s in labels]}
            if any(ev["slices"][s].get(primary, {}).get("baseline") is not None for s in labels):
                series["baseline"] = [ev["slices"][s].get(primary, {}).get("baseline") for s in labels]
            out.append(bar_chart(f"{primary} per slice", [s.split("=", 1)[-1] for s in labels], series, width=1000, height=230))
            out.append("<details><summary>per-slice metrics</summary><table><tr><th>slice</th><th>metrics (candidate / baseline)</th></tr>" + "".join(
                f"<tr><td>{_e(s)}</td><td>{_e({m: (v.get('candidate'), v.get('baseline')) for m, v in vals.items()})}</td></tr>"
                for s, vals in ev["slices"].items()) + "</table></details>")
    check = r.get("serving_check")
    if check:
        lat = check.get("latency_ms") or {}
        out.append(f"<h2>Serving check: {_yes_no(check.get('passed'), 'passed', 'FAILED')}</h2>" + _table([
            ("requests", _e(check.get("requests"))), ("latency p50 / p99", _e(f"{lat.get('p50')} / {lat.get('p99')} ms (budget {check.get('latency_budget_ms')} ms)")),
            ("max |served - in-process|", _e(check.get("max_abs_diff"))), ("warm-up requests", _e(check.get("warmup_requests"))),
            ("reasons", _e("; ".join(check.get("reasons") or []) or "none")),
        ]))
        out += _performance(check.get("performance"))
    lite = r.get("tflite")
    if lite:
        saved = lite["saved_model"]
        out.append(f"<h2>TFLite exports: {_e(', '.join(lite.get('published') or []) or 'none published')}</h2>"
                   f"<p class=muted>signature <code>{_e(lite['signature'])}</code>, {_e(lite['eval_examples'])} eval examples, "
                   f"int8 calibrated on {_e(lite['representative_examples'])} training examples; published to "
                   f"<code>{_e(lite.get('published_path') or '-')}</code></p>"
                   "<table><tr><th>model</th><th>size</th><th>accuracy</th><th>drop</th><th>bound</th><th>published</th></tr>"
                   f"<tr><td>SavedModel</td><td>{_e(saved['size_bytes'])} B</td><td>{_e(saved['accuracy'])}</td><td></td><td></td><td>(served)</td></tr>"
                   + "".join(f"<tr><td>TFLite {_e(v)}</td><td>{_e(x['size_bytes'])} B</td><td>{_e(x['accuracy'])}</td>"
                             f"<td>{_e(x['accuracy_drop'])}</td><td>{_e(lite['max_accuracy_drop'])}</td><td>{_yes_no(x['passed'])}</td></tr>"
                             for v, x in lite["variants"].items()) + "</table>")
    card = r.get("model_card")
    if card:
        out.append(_model_card(card))
    out.append("<h2>Node executions (ML Metadata)</h2><table><tr><th>node</th><th>status</th><th>MLMD state</th>"
               "<th>execution</th><th>started</th><th>seconds</th></tr>" + "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v.get('status'))}</td><td>{_e(v.get('state') or '-')}</td>"
        f"<td>{_e(v.get('execution_id') or '-')}</td><td>{_e(v.get('started') or '-')}</td><td>{_e(v.get('seconds') or '-')}</td></tr>"
        + (f'<tr><td></td><td colspan=5 class="bad">{_e(v["error"])}</td></tr>' if v.get("error") else "")
        for k, v in r.get("nodes", {}).items()) + "</table>")
    if r.get("beam"):
        out.append("<h2>Beam runner per node</h2><table><tr><th>node</th><th>profile</th><th>why</th><th>Beam flags</th></tr>"
                   + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v.get('profile'))}</td><td>{_e(v.get('reason'))}"
                             + (f"; analyzer cache {'on' if v['analyzer_cache']['enabled'] else 'off'}"
                                f" ({_e(v['analyzer_cache']['reason'])})" if v.get("analyzer_cache") else "") + "</td>"
                             f"<td><code>{_e(' '.join(v.get('args') or []) or '(none: in-memory DirectRunner)')}</code></td></tr>"
                             for k, v in r["beam"].items()) + "</table>")
    out.append("</body></html>")
    return "\n".join(out)
