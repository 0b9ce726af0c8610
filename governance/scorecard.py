"""The ML Test Score scorecard (Breck et al., "The ML Test Score: A Rubric for ML
Production Readiness and Technical Debt Reduction", 2017), computed from a pipeline's
run records.

Each of the rubric's 28 tests gets a status from what the governance reports of this
pipeline's runs show (`compute`), newest run first:

- `automated-passing` / `automated-failing`: a real run recorded the check (which run,
  which check, which file are the evidence); it scores 1 either way, as the rubric scores
  an automated test;
- `manual`: only possible by hand here; the evidence points to the documented procedure
  (docs/guides/scorecard.md); it scores 0.5;
- `missing`: no run recorded it (switched off, opted out, or never run); it scores 0.

The section sums are the scores of the tests of each section (data, model,
infrastructure, monitoring); the final score is the smallest of the four. Nothing counts
as automated unless a report of a real run holds its evidence.

TensorFlow-free: reads report.json files (governance/report.py).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable

from core import layout

SECTIONS = ("data", "model", "infrastructure", "monitoring")
AUTOMATED_PASSING, AUTOMATED_FAILING, MANUAL, MISSING = (
    "automated-passing", "automated-failing", "manual", "missing")
POINTS = {AUTOMATED_PASSING: 1.0, AUTOMATED_FAILING: 1.0, MANUAL: 0.5, MISSING: 0.0}
PROCEDURES = "docs/guides/scorecard.md"


def _sig(report: dict) -> dict:
    return ((report.get("evaluation") or {}).get("significance") or {})


def _found(report: dict, check: str, passed: bool, detail: str) -> dict:
    return {"status": AUTOMATED_PASSING if passed else AUTOMATED_FAILING,
            "evidence": {"run": report.get("run_id"), "check": check, "file": report.get("_path"), "detail": detail}}


def _first(reports: list[dict], pick: Callable[[dict], dict | None]) -> dict | None:
    """The newest report where `pick` finds evidence (its result), else None."""
    for report in reports:
        found = pick(report)
        if found is not None:
            return found
    return None


def _newest(reports: list[dict], applies: Callable[[dict], bool], pick: Callable[[dict], dict | None],
            what: str) -> dict | None:
    """The newest report that got far enough for the check (`applies`) decides: its
    evidence, or `missing` when it did not record the check (switched off there); None
    when no report got that far."""
    for report in reports:
        if applies(report):
            found = pick(report)
            if found is not None:
                return found
            return {"status": MISSING, "evidence": {
                "run": report.get("run_id"), "file": report.get("_path"),
                "detail": f"the newest run that got this far did not record {what} (switched off?)"}}
    return None


def _trained(r) -> bool:
    return bool(r.get("training"))


def _evaluated(r) -> bool:
    return "blessed" in _sig(r)


def _manual(procedure: str) -> Callable[[list[dict], dict], dict]:
    def test(reports, context):
        return {"status": MANUAL, "evidence": {"procedure": f"{PROCEDURES}#{procedure}"}}
    return test


# -- data ----------------------------------------------------------------------------

def _schema(reports, context):
    def pick(r):
        gate = r.get("data_gate")
        if not gate or not (r.get("schema") or {}).get("sha256"):
            return None
        return _found(r, "DataGate against the curated schema", bool(gate.get("passed")),
                      f"schema {r['schema'].get('source')} (sha256 {r['schema']['sha256'][:12]}); gate "
                      f"{'passed' if gate.get('passed') else 'stopped: ' + ', '.join(gate.get('blocking_features') or [])}")
    return _newest(reports, lambda r: bool(r.get("data_gate")), pick, "the schema checks")


def _importance(r):
    imp = (r.get("training") or {}).get("importance") or {}
    return imp if imp.get("computed") else None


def _beneficial(reports, context):
    def pick(r):
        imp = _importance(r)
        if imp is None:
            return None
        idle = [i["input"] for i in imp.get("inputs") or [] if not i.get("contributes")]
        return _found(r, "permutation importance (Trainer)", not idle,
                      f"{len(imp.get('inputs') or [])} inputs on {imp.get('examples')} eval examples; "
                      + (f"not shown to contribute: {', '.join(idle)}" if idle else "every input contributes"))
    return _newest(reports, _trained, pick, "permutation importance")


def _feature_cost(reports, context):
    def pick(r):
        imp = _importance(r)
        if imp is None or imp.get("bytes_per_example") is None:
            return None
        spent = r.get("cost") or {}
        return _found(r, "bytes per example of each feature (Trainer) and the run's cost", True,
                      f"{imp['bytes_per_example']} bytes per example"
                      + (f"; run {spent.get('cpu_seconds')} CPU-s, {spent.get('energy_j')} J ({spent.get('energy_method')})"
                         if spent else ""))
    return _newest(reports, _trained, pick, "each feature's cost")


def _meta_level(reports, context):
    def pick(r):
        policy = r.get("feature_policy")
        if not policy:
            return None
        return _found(r, "feature policy enforced at config load (forbidden features refused)", True,
                      f"{policy.get('path')}: {len(policy.get('forbidden') or {})} forbidden in the model")
    return _newest(reports, lambda r: True, pick, "a feature policy")


def _privacy(reports, context):
    def pick(r):
        policy = r.get("feature_policy")
        if not policy:
            return None
        retention = context.get("retention_days")
        ok = retention is not None
        return _found(r, "request logs follow the feature policy; retention; reports redact sensitive values", ok,
                      f"{len(policy.get('sensitive') or {})} sensitive, {len(policy.get('not_logged') or [])} never"
                      f" logged, {len(policy.get('logged_hashed') or [])} hashed; retention "
                      + (f"{retention:g} days" if ok else "not configured"))
    return _newest(reports, lambda r: True, pick, "a feature policy")


# -- model ---------------------------------------------------------------------------

def _reviewed(reports, context):
    def pick(r):
        code = r.get("code") or {}
        if not code.get("git_commit") and not code.get("code_sha256"):
            return None
        approval = (r.get("approval") or {}).get("decision")
        clean = code.get("git_dirty") is False
        return _found(r, "code version recorded on the model (Trainer)" + (", reviewer's approval" if approval else ""),
                      clean or approval == "approve",
                      f"commit {str(code.get('git_commit'))[:12]}, {'clean' if clean else 'uncommitted changes'}"
                      + (f", approval: {approval}" if approval else ""))
    return _newest(reports, lambda r: bool(r.get("model")), pick, "the code version")


def _live_decisions(r) -> list[dict]:
    return [d for d in ((r.get("live") or {}).get("decisions") or []) if d.get("live")]


def _decision_evidence(context: dict, check: str) -> dict | None:
    """The newest rollout decision with live metrics in ML Metadata (context "decisions")."""
    decisions = [d for d in context.get("decisions") or [] if d.get("live")]
    if not decisions:
        return None
    d = decisions[-1]
    return {"status": AUTOMATED_PASSING, "evidence": {
        "run": None, "check": check, "file": context.get("metadata"),
        "detail": f"rollout decision {d.get('id')} ({d.get('decided_at')}): {d.get('action')} canary"
                  f" {d.get('canary_version')}: {d.get('reason')}"}}


def _live(check: str):
    """A test met by live metrics from delayed labels: a rollout decision in a report's
    live section, else in ML Metadata (context "decisions")."""
    def test(reports, context):
        def pick(r):
            decisions = _live_decisions(r)
            if not decisions:
                return None
            d = decisions[-1]
            return _found(r, check, True, f"{d.get('action')} canary {d.get('canary_version')}: {d.get('reason')}")
        return _first(reports, pick) or _decision_evidence(context, f"{check} (ML Metadata)")
    return test


_online_offline = _live("live metrics from delayed labels beside the offline ones (rollout)")


def _tuned(reports, context):
    def pick(r):
        tuning = (r.get("training") or {}).get("tuning")
        if not tuning:
            return None
        return _found(r, "hyperparameters from a Tuner search (retrain tune)", True,
                      f"{tuning.get('source')}: {tuning.get('values')} (changed: {tuning.get('changed') or 'none'})")
    return _newest(reports, _trained, pick, "tuned hyperparameters")


def _verdict_check(key: str, check: str, passed: Callable[[dict], bool], detail: Callable[[dict], str]):
    def test(reports, context):
        for r in reports:
            if not _evaluated(r):
                continue
            v = _sig(r).get(key)
            if not v:
                return {"status": MISSING, "evidence": {"run": r.get("run_id"), "file": r.get("_path"),
                                                        "detail": f"the newest evaluation did not run {check}"}}
            if v.get("opted_out"):
                return {"status": MISSING, "evidence": {"run": r.get("run_id"), "file": r.get("_path"),
                                                        "detail": v.get("reason")}}
            if key != "staleness" and not v.get("judged", True):  # it ran and could not decide
                return {**_found(r, check, False, v.get("reason") or "not judged")}
            return _found(r, check, passed(v), detail(v))
        return None
    return test


_staleness = _verdict_check("staleness", "staleness of the served model (Evaluator)",
                            lambda v: not v.get("alerts"), lambda v: v.get("reason") or "")
_simpler = _verdict_check("simple_baseline", "candidate vs the simple model (Evaluator)",
                          lambda v: not v.get("refused"), lambda v: v.get("reason") or "")
_inclusion = _verdict_check("fairness", "quality across groups (Evaluator)",
                            lambda v: not v.get("refused"), lambda v: v.get("reason") or "")


def _slices(reports, context):
    def pick(r):
        ev = r.get("evaluation") or {}
        if not ev.get("slices") and not _sig(r).get("new_span"):
            return None
        new = _sig(r).get("new_span") or {}
        return _found(r, "key metric per slice and on the new span (Evaluator)", not new.get("collapsed"),
                      f"{len(ev.get('slices') or {})} slices; new span: {new.get('reason', 'not judged')}")
    return _newest(reports, _evaluated, pick, "per-slice metrics")


# -- infrastructure --------------------------------------------------------------------

def _reproducible(reports, context):
    def pick(r):
        runtime = (r.get("model") or {}).get("runtime") or {}
        code = r.get("code") or {}
        seed = ((r.get("training") or {}).get("hparams") or {}).get("seed")
        if not runtime.get("sbom_sha256") or not code:
            return None
        ok = code.get("git_dirty") is False and seed is not None
        return _found(r, "code, runtime SBOM, seed and input spans recorded per model", ok,
                      f"runtime sbom {runtime['sbom_sha256'][:12]}, commit {str(code.get('git_commit'))[:12]}"
                      f"{' (uncommitted changes)' if code.get('git_dirty') else ''}, seed {seed}, spans "
                      f"{[w.get('span') for w in (r.get('data') or {}).get('window') or []]}")
    return _newest(reports, lambda r: bool(r.get("model")), pick, "the runtime SBOM and code version")


def _integration(reports, context):
    def pick(r):
        nodes = r.get("nodes") or {}
        if not nodes or r.get("serving_check") is None:
            return None
        failed = [n for n, s in nodes.items() if (s or {}).get("status") == "failed"]
        return _found(r, "a scheduled run: every node from ingestion to the served candidate", not failed,
                      f"{len(nodes)} nodes" + (f", failed: {', '.join(failed)}" if failed else ", all completed"))
    return _newest(reports, _evaluated, pick, "the serving check")


def _validated(reports, context):
    def pick(r):
        v = _sig(r)
        if "blessed" not in v:
            return None
        return _found(r, "Evaluator's significance verdict before the push", True,
                      f"{'blessed' if v.get('blessed') else 'refused: ' + '; '.join(v.get('reasons') or [])}")
    return _newest(reports, _evaluated, pick, "the verdict")


def _canaried(reports, context):
    def pick(r):
        check = r.get("serving_check")
        if not check:
            return None
        canary = any(e.get("event") == "canary" for e in (r.get("live") or {}).get("events") or [])
        return _found(r, "served for real before the push (ServingCheck)" + (", then a canary" if canary else ""),
                      bool(check.get("passed")),
                      f"serving check {'passed' if check.get('passed') else 'failed'}, p99 "
                      f"{(check.get('latency_ms') or {}).get('p99')} ms" + ("; canary rollout" if canary else ""))
    return _newest(reports, lambda r: bool(r.get("blessed")), pick, "the serving check")


def _rollback(reports, context):
    def pick(r):
        live = r.get("live") or {}
        rolled = [e for e in live.get("events") or [] if "rollback" in str(e.get("event"))]
        if rolled:
            return _found(r, "a rollback recorded (rollout controller or retrain rollback)", True,
                          f"{rolled[-1].get('event')} at {rolled[-1].get('time')}: {rolled[-1].get('reason')}")
        return None
    found = _first(reports, pick)
    rolled = [d for d in context.get("decisions") or [] if d.get("action") == "rollback"]
    if found is None and rolled:
        d = rolled[-1]
        return {"status": AUTOMATED_PASSING, "evidence": {
            "run": None, "check": "the rollout controller rolled a canary back (ML Metadata)",
            "file": context.get("metadata"), "detail": f"decision {d.get('id')}: {d.get('reason')}"}}
    if found is None and any((r.get("push") or {}).get("pushed") for r in reports):
        # Versions are kept and the controller would roll back, but no record shows it done.
        return {"status": MANUAL, "evidence": {
            "procedure": f"{PROCEDURES}#rollback",
            "detail": f"never exercised in these records; keep_versions {context.get('keep_versions')},"
                      f" rollout mode {context.get('rollout_mode')}"}}
    return found


# -- monitoring ----------------------------------------------------------------------

def _dependencies(reports, context):
    def pick(r):
        runtime = _sig(r).get("runtime")
        if not runtime:
            return None
        return _found(r, "runtime SBOM compared with the baseline's; changes alerted (run_summary)", True,
                      runtime.get("reason") or "")
    return _newest(reports, _evaluated, pick, "the runtime comparison")


def _invariants(reports, context):
    def served(r):
        skew = r.get("serving_skew")
        if not skew or not skew.get("checked"):
            return None
        return _found(r, "served traffic against its training data (ServingSkew), the data gate on each span",
                      bool(skew.get("passed")) and not skew.get("skewed_features"),
                      f"{skew.get('examples')} logged examples; skewed: {skew.get('skewed_features') or 'none'}")

    def trained(r):
        gate = r.get("data_gate")
        if not gate:
            return None
        why = (r.get("serving_skew") or {}).get("reason") or "no serving skew check in this run"
        return _found(r, "the data gate on each span's training inputs (serving inputs not checked yet)",
                      bool(gate.get("passed")), f"gate {'passed' if gate.get('passed') else 'stopped'}; serving: {why}")
    return _first(reports, served) or _first(reports, trained)


def _same_values(reports, context):
    def pick(r):
        check = r.get("serving_check") or {}
        if check.get("max_abs_diff") is None:
            return None
        return _found(r, "the served candidate answers as the Trainer's model does (ServingCheck)",
                      bool(check.get("passed")), f"largest difference {check['max_abs_diff']}")
    return _newest(reports, lambda r: bool(r.get("blessed")), pick, "the serving check")


_not_stale = _verdict_check("staleness", "the served model's age and drop on new data (alert)",
                            lambda v: not v.get("alerts"), lambda v: v.get("reason") or "")


def _numerics(reports, context):
    def pick(r):
        n = (r.get("training") or {}).get("numerics")
        if not n:
            return None
        ok = n.get("loss_finite_every_step") is not False and n.get("eval_outputs_finite") is not False
        return _found(r, "finite loss at every step and finite outputs on the eval split (Trainer)", ok,
                      f"{n.get('eval_outputs_checked')} eval outputs checked")
    return _newest(reports, _trained, pick, "the numerics check")


def _performance(reports, context):
    def pick(r):
        perf = (r.get("serving_check") or {}).get("performance") or {}
        figures = perf.get("figures") or {}
        if not figures:
            return None
        past = [k for k, f in figures.items() if f.get("past_limit")]
        return _found(r, "latency, size and throughput against the served model (ServingCheck)", not perf.get("refusals"),
                      ", ".join(f"{k} {f.get('baseline')} -> {f.get('candidate')}" for k, f in figures.items())
                      + (f"; past limit: {', '.join(past)}" if past else ""))
    return _newest(reports, lambda r: bool(r.get("blessed")) and bool(r.get("baseline_model")), pick,
                   "the performance comparison")


_quality_live = _live("live quality from delayed labels; the canary promoted or rolled back")


# (section, number, the rubric's title, test)
TESTS: list[tuple[str, int, str, Callable]] = [
    ("data", 1, "Feature expectations are captured in a schema", _schema),
    ("data", 2, "All features are beneficial", _beneficial),
    ("data", 3, "No feature's cost is too much", _feature_cost),
    ("data", 4, "Features adhere to meta-level requirements", _meta_level),
    ("data", 5, "The data pipeline has appropriate privacy controls", _privacy),
    ("data", 6, "New features can be added quickly", _manual("new-features")),
    ("data", 7, "All input feature code is tested", _manual("feature-code-tests")),
    ("model", 1, "Model specs are reviewed and submitted", _reviewed),
    ("model", 2, "Offline and online metrics correlate", _online_offline),
    ("model", 3, "All hyperparameters have been tuned", _tuned),
    ("model", 4, "The impact of model staleness is known", _staleness),
    ("model", 5, "A simpler model is not better", _simpler),
    ("model", 6, "Model quality is sufficient on important data slices", _slices),
    ("model", 7, "The model is tested for considerations of inclusion", _inclusion),
    ("infrastructure", 1, "Training is reproducible", _reproducible),
    ("infrastructure", 2, "Model specs are unit tested", _manual("model-unit-tests")),
    ("infrastructure", 3, "The ML pipeline is integration tested", _integration),
    ("infrastructure", 4, "Model quality is validated before serving", _validated),
    ("infrastructure", 5, "The model is debuggable", _manual("debugging")),
    ("infrastructure", 6, "Models are canaried before serving", _canaried),
    ("infrastructure", 7, "Serving models can be rolled back", _rollback),
    ("monitoring", 1, "Dependency changes result in notification", _dependencies),
    ("monitoring", 2, "Data invariants hold for inputs", _invariants),
    ("monitoring", 3, "Training and serving are not skewed", _same_values),
    ("monitoring", 4, "Models are not too stale", _not_stale),
    ("monitoring", 5, "Models are numerically stable", _numerics),
    ("monitoring", 6, "Computing performance has not regressed", _performance),
    ("monitoring", 7, "Prediction quality has not regressed", _quality_live),
]


def compute(reports: list[dict], context: dict | None = None) -> dict:
    """The scorecard from a pipeline's reports (newest first; each may carry `_path`, the
    file it was read from).

    Args:
      context: what the config and ML Metadata say that no report holds: retention_days,
        keep_versions, rollout_mode; decisions (rollout decisions, core.metadata_queries)
        and metadata (the store's URL) where the caller read them.

    Returns:
      {"tests": [{"section", "number", "title", "status", "points", "evidence"}...],
       "sections": {section: sum}, "score": the smallest sum, "runs": how many reports read}.
    """
    context = context or {}
    tests = []
    for section, number, title, test in TESTS:
        result = test(reports, context) or {"status": MISSING, "evidence": {"detail": "no run recorded it"}}
        tests.append({"section": section, "number": number, "title": title, "status": result["status"],
                      "points": POINTS[result["status"]], "evidence": result["evidence"]})
    sections = {s: sum(t["points"] for t in tests if t["section"] == s) for s in SECTIONS}
    return {"tests": tests, "sections": sections, "score": min(sections.values()), "runs": len(reports)}


def context(config, store=None) -> dict:
    """What the scorecard needs beyond the reports, from a pipeline config (and, where
    given, its ML Metadata store: the rollout decisions)."""
    from core.metadata_queries import rollout_decisions

    out = {"retention_days": config.retention_settings.max_age_days, "keep_versions": config.keep_versions,
           "rollout_mode": config.rollout_settings.mode, "metadata": config.metadata_store.url}
    if store is not None:
        from ml_metadata import errors as mlmd_errors

        try:
            out["decisions"] = rollout_decisions(store, config.model_name)
        except mlmd_errors.NotFoundError:  # a store without the decision type yet: none made
            out["decisions"] = []
    return out


def read_reports(pipeline_root: str) -> list[dict]:
    """Every report.json of the pipeline's runs, the newest run first (`started`), each with `_path`."""
    out = []
    for path in glob.glob(os.path.join(pipeline_root, layout.REPORT_DIR, "*", layout.REPORT_JSON)):
        try:
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
        except (OSError, ValueError):
            continue
        out.append({**report, "_path": path})
    return sorted(out, key=started, reverse=True)


def started(report: dict) -> str:
    """When the run began (its earliest node's start): a report is rewritten after later
    decisions (rollout), so when it was generated does not order runs."""
    times = [str(n.get("started")) for n in (report.get("nodes") or {}).values()
             if isinstance(n, dict) and n.get("started")]
    return min(times) if times else str(report.get("generated_at") or "")


def format_text(card: dict) -> str:
    """The scorecard for a terminal: one line per test, the section sums and the score."""
    lines = [f"ML Test Score from {card['runs']} run record(s)"]
    for section in SECTIONS:
        lines.append(f"\n{section} ({card['sections'][section]:g})")
        for t in (t for t in card["tests"] if t["section"] == section):
            e = t["evidence"]
            where = (f"run {e['run']}: {e['check']}" if e.get("check") and e.get("run")
                     else e.get("check") if e.get("check") else e.get("procedure") or e.get("detail") or "")
            lines.append(f"  {t['number']}. {t['title']:<55} {t['status']:<18} {where}")
    lines.append("\nsections: " + ", ".join(f"{s} {card['sections'][s]:g}" for s in SECTIONS)
                 + f"; final score {card['score']:g} (the smallest)")
    return "\n".join(lines)
