"""The ML Test Score scorecard (Breck et al., "The ML Test Score: A Rubric for ML
Production Readiness and Technical Debt Reduction", 2017), computed from checks that ran.

Each of the rubric's 28 tests gets a status (`compute`):

- `automated-passing` / `automated-failing`: a check ran and could have failed; it scores 1
  either way, as the rubric scores an automated test. Its evidence says which check, its
  inputs (run id, report file and its SHA-256, MLMD execution and artifact ids, the files
  a scan read with their digests), the threshold it was held to and its outcome;
- `manual`: done by hand, with a valid attestation (governance/attestation.py: who, when,
  the evidence, not expired); it scores 0.5. Without one, or once it expires, `missing`;
- `missing`: no check ran (switched off, opted out, never run, or nothing it could judge),
  or only configuration speaks for it; it scores 0.

A check's evidence comes from the newest run that got far enough to run it: a check
switched off in that run is `missing`, whatever older runs recorded. `explain` prints how to
re-derive a test's status by hand from its listed evidence (`retrain scorecard --explain`).

The section sums are the scores of the tests of each section (data, model,
infrastructure, monitoring); the final score is the smallest of the four.

TensorFlow-free: reads report.json files (governance/report.py) and what `context` gathered
(rollout decisions and attestations from ML Metadata, the served model's history, the
privacy scan, which needs TensorFlow, run by `context`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import hashlib
import json
import math
import os
from collections.abc import Callable

from core import layout
from core.settings import Settings, SettingsError
from governance import attestation as attestation_lib
from governance import privacy

SECTIONS = ("data", "model", "infrastructure", "monitoring")
AUTOMATED_PASSING, AUTOMATED_FAILING, MANUAL, MISSING = (
    "automated-passing", "automated-failing", "manual", "missing")
POINTS = {AUTOMATED_PASSING: 1.0, AUTOMATED_FAILING: 1.0, MANUAL: 0.5, MISSING: 0.0}
PROCEDURES = "docs/guides/scorecard.md"
# Rollout decisions that end a canary (rollout/controller.py; `inconclusive` holds it for a
# person); `continue` does not.
TERMINAL_ACTIONS = ("promote", "rollback", "inconclusive")


@dataclasses.dataclass(frozen=True)
class ScorecardSettings(Settings):
    """The `scorecard:` block of a pipeline config: the thresholds of the tests that have no
    other home."""

    # Data 3: the most bytes per example one model input's raw feature may cost. None: no
    # budget, and "no feature's cost is too much" scores 0 (measured against nothing).
    max_feature_bytes: float | None = None
    # Model 2: versions with both an offline and a live value before the correlation counts.
    min_versions: int = 5
    # Model 2: the level of the correlation's interval (Fisher's z).
    confidence: float = 0.95
    # Data 5: run the privacy scan (governance/privacy.py); false: the test scores 0.
    privacy_scan: bool = True

    def check(self) -> None:
        if self.max_feature_bytes is not None and self.max_feature_bytes <= 0:
            raise SettingsError(f"max_feature_bytes: must be > 0, got {self.max_feature_bytes}")
        if self.min_versions < 4:
            raise SettingsError(f"min_versions: at least 4 (Fisher's interval needs n - 3 > 0), got {self.min_versions}")
        if not 0.5 <= self.confidence < 1.0:
            raise SettingsError(f"confidence: within [0.5, 1), got {self.confidence}")


# -- evidence ------------------------------------------------------------------------------

def _sig(report: dict) -> dict:
    return ((report.get("evaluation") or {}).get("significance") or {})


def _where(r: dict) -> str:
    return r.get("_path") or "this run's report.json"


def _report_input(r: dict) -> dict:
    return {"kind": "report", "run": r.get("run_id"), "path": r.get("_path"), "sha256": r.get("_sha256")}


def _jq(r: dict, expression: str) -> str:
    return f"jq '{expression}' {_where(r)}"


def _digest_step(r: dict) -> list[str]:
    if r.get("_path") and r.get("_sha256"):
        return [f"sha256sum {r['_path']}   # expect {r['_sha256']}"]
    return []


def _result(status: str, check: str | None, *, detail: str, run=None, file=None, inputs=(), threshold=None,
            outcome=None, rederive=(), procedure=None) -> dict:
    evidence = {"check": check, "run": run, "file": file, "detail": detail, "inputs": list(inputs),
                "threshold": threshold, "outcome": outcome, "rederive": list(rederive)}
    if procedure:
        evidence["procedure"] = procedure
    return {"status": status, "evidence": {k: v for k, v in evidence.items() if v not in (None, [], "")}}


def _found(r: dict, check: str, passed: bool, detail: str, *, jq: str, rule: str, threshold=None,
           outcome=None, inputs=()) -> dict:
    """A check a run's report recorded: passing or failing, with how to read it again."""
    return _result(AUTOMATED_PASSING if passed else AUTOMATED_FAILING, check, detail=detail, run=r.get("run_id"),
                   file=r.get("_path"), inputs=[_report_input(r), *inputs], threshold=threshold,
                   outcome=outcome or ("passed" if passed else "failed"),
                   rederive=[*_digest_step(r), _jq(r, jq), f"rule: {rule}"])


def _absent(r: dict, detail: str, jq: str | None = None) -> dict:
    """`missing`, because the run that decides recorded nothing the test could count."""
    return _result(MISSING, None, detail=detail, run=r.get("run_id"), file=r.get("_path"),
                   inputs=[_report_input(r)], outcome="not run",
                   rederive=[*_digest_step(r), *([_jq(r, jq)] if jq else [])])


def _newest(reports: list[dict], applies: Callable[[dict], bool], pick: Callable[[dict], dict | None],
            what: str, jq: str | None = None) -> dict | None:
    """The newest report that got far enough for the check (`applies`) decides: its
    evidence, or `missing` when it did not record the check (switched off there); None
    when no report got that far. An older run's evidence never stands in."""
    for report in reports:
        if applies(report):
            found = pick(report)
            if found is not None:
                return found
            return _absent(report, f"the newest run that got this far did not record {what} (switched off?)", jq)
    return None


def _trained(r) -> bool:
    return bool(r.get("training"))


def _evaluated(r) -> bool:
    return "blessed" in _sig(r)


def _now(context: dict) -> dt.datetime:
    now = context.get("now")
    if isinstance(now, dt.datetime):
        return now
    return dt.datetime.fromisoformat(now) if now else dt.datetime.now(dt.timezone.utc)


def _attested(key: str, anchor: str, context: dict, before: str = "") -> dict:
    """A test done by hand: `manual` (0.5) with a valid attestation, else `missing`."""
    procedure = f"{PROCEDURES}#{anchor}"
    how = f"retrain attest --test {key} --by NAME --evidence URL-or-FILE --expires YYYY-MM-DD"
    a = attestation_lib.current(context.get("attestations") or [], key, _now(context))
    listing = "retrain attest --list   # every attestation, its age and whether it counts"
    if a is None:
        return _result(MISSING, None, procedure=procedure, outcome="not attested",
                       detail=f"{before}done by hand ({procedure}); no attestation recorded ({how})",
                       rederive=[listing, f"rule: manual scores 0.5 only with a valid attestation ({how})"])
    inputs = [{"kind": "mlmd_execution", "type": attestation_lib.EXECUTION_TYPE, "id": a["id"]},
              {"kind": "evidence", "path": a.get("evidence"), "sha256": a.get("evidence_sha256") or None}]
    steps = [listing, f"the attestation is MLMD execution {a['id']} ({attestation_lib.EXECUTION_TYPE}): by "
             f"{a.get('by')} at {a.get('attested_at')}, expires {a.get('expires')}, evidence {a.get('evidence')}"]
    if a.get("evidence_sha256"):
        steps.append(f"sha256sum {a.get('evidence')}   # expect {a['evidence_sha256']}")
    steps.append("rule: counts until its expiry day, while its evidence file is unchanged; then 0")
    detail = (f"{before}attested by {a.get('by')} {a['age_days']:g} days ago ({a.get('attested_at')}), "
              f"{a['why']}; evidence {a.get('evidence')}")
    return _result(MANUAL if a["valid"] else MISSING, "attestation (retrain attest)", procedure=procedure,
                   detail=detail, inputs=inputs, threshold=f"expires {a.get('expires')}",
                   outcome="valid" if a["valid"] else "void", rederive=steps)


def _manual(key: str, anchor: str) -> Callable[[list[dict], dict], dict]:
    def test(reports, context):
        return _attested(key, anchor, context)
    return test


# -- data ----------------------------------------------------------------------------

def _schema(reports, context):
    def pick(r):
        gate = r.get("data_gate")
        if not gate or not (r.get("schema") or {}).get("sha256"):
            return None
        return _found(r, "DataGate against the curated schema", bool(gate.get("passed")),
                      f"schema {r['schema'].get('source')} (sha256 {r['schema']['sha256'][:12]}); gate "
                      f"{'passed' if gate.get('passed') else 'stopped: ' + ', '.join(gate.get('blocking_features') or [])}",
                      jq="{schema: .schema.sha256, passed: .data_gate.passed, blocking: .data_gate.blocking_features}",
                      rule="passes when the gate passed (no blocking feature); the schema's sha256 names the file",
                      threshold=f"the curated schema {r['schema'].get('source')} and the gate policy's limits")
    return _newest(reports, lambda r: bool(r.get("data_gate")), pick, "the schema checks")


def _importance(r):
    imp = (r.get("training") or {}).get("importance") or {}
    return imp if imp.get("computed") else None


_IMPORTANCE_JQ = ".training.importance.inputs[] | {input, raw_feature, interval, contributes, bytes_per_example}"


def _beneficial(reports, context):
    def pick(r):
        imp = _importance(r)
        if imp is None:
            return None
        idle = [i["input"] for i in imp.get("inputs") or [] if not i.get("contributes")]
        return _found(r, "permutation importance (Trainer)", not idle,
                      f"{len(imp.get('inputs') or [])} inputs on {imp.get('examples')} eval examples; "
                      + (f"not shown to contribute: {', '.join(idle)}" if idle else "every input contributes"),
                      jq=_IMPORTANCE_JQ, rule="passes when every input's interval lies above 0 (contributes: true)",
                      threshold=f"each input's importance interval ({imp.get('confidence', 0.95):g} two-sided) above 0")
    return _newest(reports, _trained, pick, "permutation importance", ".training.importance")


def _feature_cost(reports, context):
    budget = (context.get("settings") or {}).get("max_feature_bytes")

    def pick(r):
        imp = _importance(r)
        if imp is None or imp.get("bytes_per_example") is None:
            return None
        rows = [i for i in imp.get("inputs") or [] if i.get("bytes_per_example") is not None]
        if budget is None:
            return _result(MISSING, None, run=r.get("run_id"), file=r.get("_path"), inputs=[_report_input(r)],
                           outcome="no budget",
                           detail=f"cost measured ({imp['bytes_per_example']} bytes per example) but no budget to hold"
                                  " it to: set scorecard.max_feature_bytes",
                           rederive=[*_digest_step(r), _jq(r, _IMPORTANCE_JQ),
                                     "rule: needs scorecard.max_feature_bytes in the config"])
        over = sorted({f"{i.get('raw_feature') or i['input']} {i['bytes_per_example']} B" for i in rows
                       if i["bytes_per_example"] > budget})
        costliest = max(rows, key=lambda i: i["bytes_per_example"]) if rows else None
        return _found(r, "bytes per example of each input's raw feature (Trainer) against the budget", not over,
                      (f"over budget: {', '.join(over)}" if over else
                       f"{len(rows)} inputs, the costliest {costliest.get('raw_feature') or costliest['input']} "
                       f"{costliest['bytes_per_example']} B" if costliest else "no input measured")
                      + f"; {imp['bytes_per_example']} bytes per example in all",
                      jq=_IMPORTANCE_JQ, rule=f"passes when every bytes_per_example <= {budget:g}",
                      threshold=f"scorecard.max_feature_bytes {budget:g} bytes per example per feature")
    return _newest(reports, _trained, pick, "each feature's cost", ".training.importance")


def _meta_level(reports, context):
    def pick(r):
        imp = _importance(r)
        policy = r.get("feature_policy")
        if imp is None:
            return None
        forbidden = sorted((policy or {}).get("forbidden") or {})
        if not forbidden:
            return _absent(r, "no feature policy forbids anything: no requirement to check the model's inputs"
                              " against", ".feature_policy.forbidden")
        # An input not mapped to a raw feature is judged by its name (Transform's `<raw>_xf`).
        used = sorted({f"{i['input']} (from {f})" for i in imp.get("inputs") or [] for f in forbidden
                       if i.get("raw_feature") == f
                       or (not i.get("raw_feature") and str(i.get("input", "")).removesuffix("_xf") == f)})
        return _found(r, "the model's measured inputs (Trainer) against the features the policy forbids", not used,
                      (f"uses forbidden: {', '.join(used)}" if used else
                       f"none of {len(imp.get('inputs') or [])} inputs derives from the {len(forbidden)} forbidden"
                       f" feature(s) ({', '.join(forbidden)})") + f"; policy {(policy or {}).get('path')}",
                      jq="{forbidden: .feature_policy.forbidden, inputs: [.training.importance.inputs[] | "
                         "{input, raw_feature}]}",
                      rule="passes when no input's raw_feature (or name) is a forbidden feature",
                      threshold=f"forbidden in the model: {', '.join(forbidden)}",
                      inputs=[{"kind": "policy", "path": (policy or {}).get("path"),
                               "sha256": (policy or {}).get("sha256")}])
    return _newest(reports, _trained, pick, "the model's inputs (permutation importance)", ".training.importance")


def _privacy(reports, context):
    scan = context.get("privacy")
    if scan is None:
        return _result(MISSING, None, outcome="not run",
                       detail="no privacy scan ran (scorecard.privacy_scan off, or the card was computed without the"
                              " pipeline's config); a feature policy and a retention period alone earn nothing",
                       rederive=["retrain scorecard --pipeline P --explain data.5   # runs the scan"])
    if not scan.get("ran"):
        return _result(MISSING, None, outcome="not run", detail=f"privacy scan: {scan.get('reason')}")
    declared, logs, texts = scan["declared"], scan["request_logs"], scan["texts"]
    inputs = [{"kind": "policy", "path": scan["policy"], "sha256": scan["policy_sha256"]},
              *({"kind": "span", **s} for s in declared["spans"]),
              *({"kind": "request_log", **f} for f in logs["files"]),
              {"kind": "texts", "files": texts["files"], "sha256": texts["sha256"]}]
    if scan["not_ingested"]["features"]:
        inputs.append({"kind": "artifacts", "files": scan["not_ingested"]["files"],
                       "sha256": scan["not_ingested"]["sha256"]})
    sensitive = ", ".join(f"{f} ({p})" for f, p in scan["sensitive"].items())
    detail = (f"{'no finding' if scan['passed'] else str(scan['finding_count']) + ' finding(s): ' + '; '.join(scan['findings'][:3])}"
              f"; planted values in {len(scan['planted']['features'])} feature(s) through the log policy;"
              f" {declared['searched']} declared values of {sensitive} searched in {logs['logs']} logged requests"
              f" ({len(logs['files'])} file(s)) and {texts['files']} report/log file(s)"
              + (f"; {declared['too_short_to_search']} too short to search" if declared["too_short_to_search"] else "")
              + (f"; {declared['note']}" if declared.get("note") else ""))
    steps = [
        f"sha256sum {scan['policy']} and each listed span and request log file; each must match its listed sha256",
        f"the sensitive features: yq '.features | to_entries[] | select(.value.pii != \"none\")' {scan['policy']}",
        "declared values: each sensitive column of the listed span CSVs (csvcut -c FEATURE FILE | sort -u > values.txt),"
        f" those of {privacy.MIN_VALUE_CHARS}+ characters",
        f"grep -rlwF -f values.txt {' '.join(texts.get('roots') or ['<pipeline_root>/governance'])}   # must print nothing",
        ".venv/bin/python -c \"from serving.server import request_log; import tensorflow as tf; import sys; "
        "[print(sorted(tf.train.Example.FromString(e).features.feature)) for p in sys.argv[1:] for log in "
        "request_log.read_file(p) for e in request_log.logged_examples(log)]\" LOG_FILES   # no `log: drop` feature;"
        " `log: hash` ones only hmac-sha256: values",
        "rule: passes when no step finds anything (a planted value, a dropped or unhashed feature in a log, a"
        " declared value in a log or report, a request log past retention)",
    ]
    return _result(AUTOMATED_PASSING if scan["passed"] else AUTOMATED_FAILING, "privacy scan (governance/privacy.py)",
                   detail=detail, inputs=inputs, outcome="passed" if scan["passed"] else "failed",
                   threshold=f"zero findings; retention {scan['retention'].get('max_age_days')} days",
                   rederive=steps)


# -- model ---------------------------------------------------------------------------

def _reviewed(reports, context):
    def pick(r):
        approval = r.get("approval") or {}
        if not approval.get("decision"):
            return _absent(r, "no reviewer's decision recorded for this run's candidate (require_approval off?);"
                              " a clean commit is not a review", ".approval")
        decision = approval["decision"]
        return _found(r, "a reviewer's decision on the candidate before the push (ApprovalGate)",
                      decision == "approve",
                      f"{decision} by {approval.get('reviewer')} at {approval.get('decided_at')}"
                      + (f": {approval['comment']}" if approval.get("comment") else ""),
                      jq=".approval", rule="passes when decision is approve (reject: reviewed and refused)",
                      threshold="a named reviewer's approve", outcome=decision)
    return _newest(reports, lambda r: bool(r.get("model")), pick, "a review")


def _decisions(reports, context) -> list[dict]:
    """The rollout decisions, oldest first: ML Metadata's where `context` read them, else
    those the reports' live sections carry."""
    if "decisions" in context:
        return list(context.get("decisions") or [])
    seen = {}
    for r in reports:
        for d in (r.get("live") or {}).get("decisions") or []:
            seen.setdefault(d.get("id", id(d)), d)
    return sorted(seen.values(), key=lambda d: (str(d.get("decided_at") or ""), d.get("id") or 0))


def _labelled(d: dict) -> bool:
    """A decision taken on labelled traffic: the test ran (a difference with its interval),
    and no sample-ratio mismatch voids the comparison."""
    srm = d.get("srm")
    if d.get("blocked_by") or (isinstance(srm, dict) and (srm.get("passed") is False or srm.get("mismatch") is True)):
        return False
    return isinstance(d.get("difference"), dict) and d["difference"].get("estimate") is not None


def _decision_input(d: dict, context: dict) -> dict:
    out = {"kind": "mlmd_execution", "type": "RolloutDecision", "id": d.get("id")}
    return {**out, "store": context["metadata"]} if context.get("metadata") else out


def _decision_steps(d: dict, context: dict) -> list[str]:
    db = str(context.get("metadata") or "<metadata>").removeprefix("sqlite:///")
    return [f"sqlite3 /{db.lstrip('/')} \"SELECT name, int_value, string_value FROM ExecutionProperty WHERE"
            f" execution_id = {d.get('id')}\"   # (MySQL: the same query) or: retrain rollout status"]


def _arm_value(d: dict, arm: str, metric: str) -> tuple[float | None, int]:
    live = (d.get("live") or {}).get(arm) or {}
    entry = live.get(metric) if isinstance(live, dict) else None
    value = entry.get("value") if isinstance(entry, dict) else None
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    return (float(value) if ok else None), int(live.get("labelled") or 0) if isinstance(live, dict) else 0


def correlation(xs: list[float], ys: list[float], confidence: float = 0.95) -> dict:
    """Pearson's r with Fisher's z interval (n >= 4), or None values where undefined."""
    from statistics import NormalDist

    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if n < 4 or sxx == 0 or syy == 0:
        return {"n": n, "r": None, "low": None, "high": None}
    r = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)
    r = max(-0.999999, min(0.999999, r))
    z, half = math.atanh(r), NormalDist().inv_cdf(0.5 + confidence / 2) / math.sqrt(n - 3)
    return {"n": n, "r": r, "low": math.tanh(z - half), "high": math.tanh(z + half)}


def _online_offline(reports, context):
    settings = context.get("settings") or {}
    need, confidence = int(settings.get("min_versions", 5)), float(settings.get("confidence", 0.95))
    offline = {}  # version -> (report, overall metrics)
    for r in reversed(reports):  # oldest first: a newer report of the same version wins
        version = (r.get("push") or {}).get("version")
        if r.get("push", {}).get("pushed") and str(version).isdigit():
            offline[int(version)] = r
    pairs: dict[int, dict] = {}
    for d in _decisions(reports, context):
        if not _labelled(d):
            continue
        metric = d.get("metric")
        for arm, version in (("canary", d.get("canary_version")), ("stable", d.get("stable_version"))):
            r = offline.get(int(version)) if str(version).isdigit() else None
            if r is None:
                continue
            off = (((r.get("evaluation") or {}).get("overall") or {}).get(metric) or {}).get("candidate")
            live, labelled = _arm_value(d, arm, metric)
            if isinstance(off, (int, float)) and live is not None:
                pairs[int(version)] = {"version": int(version), "metric": metric, "offline": off, "live": live,
                                       "labelled": labelled, "decision": d.get("id"), "run": r.get("run_id"),
                                       "report": r.get("_path"), "sha256": r.get("_sha256")}
    rows = sorted(pairs.values(), key=lambda p: p["version"])
    metrics = sorted({p["metric"] for p in rows})
    inputs = [*({"kind": "mlmd_execution", "type": "RolloutDecision", "id": p["decision"]} for p in rows),
              *({"kind": "report", "run": p["run"], "path": p["report"], "sha256": p["sha256"]} for p in rows)]
    listed = ", ".join(f"v{p['version']} {p['offline']:.4g}/{p['live']:.4g}" for p in rows)
    steps = ["for each listed version: its offline value is jq '.evaluation.overall.METRIC.candidate' of its report;"
             " its live value is the `live` property of the listed RolloutDecision (live.canary or live.stable"
             ".METRIC.value, the version's arm) of a decision with a difference (labelled traffic)",
             *(_decision_steps({"id": p["decision"]}, context)[0] for p in rows[:3]),
             f"Pearson's r over the pairs; Fisher's interval tanh(atanh(r) +/- z/sqrt(n-3)) at {confidence:g}",
             "rule: passes when the interval's low end is above 0 (offline and live move together)"]
    if len(metrics) > 1:
        return _result(AUTOMATED_FAILING, "offline against live metric per version", inputs=inputs, rederive=steps,
                       detail=f"the decisions measured different metrics ({', '.join(metrics)}): no one correlation",
                       outcome="failed", threshold=f"{need} versions, one metric")
    if len(rows) < need:
        return _result(MISSING, None, inputs=inputs, rederive=steps, outcome="too few versions",
                       detail=f"{len(rows)} version(s) with an offline and a live value on labelled traffic"
                              f" ({listed or 'none'}); the correlation needs {need} (scorecard.min_versions)")
    c = correlation([p["offline"] for p in rows], [p["live"] for p in rows], confidence)
    passed = c["low"] is not None and c["low"] > 0
    shown = ("undefined (no variation)" if c["r"] is None else
             f"r {c['r']:+.3f}, {100 * confidence:g}% interval [{c['low']:+.3f}, {c['high']:+.3f}]")
    return _result(AUTOMATED_PASSING if passed else AUTOMATED_FAILING,
                   f"offline {metrics[0]} against live {metrics[0]} over {len(rows)} versions", inputs=inputs,
                   detail=f"{shown} over {len(rows)} versions (offline/live: {listed})", rederive=steps,
                   outcome=shown, threshold=f"the interval's low end above 0, at least {need} versions")


def _tuned(reports, context):
    def pick(r):
        tuning = (r.get("training") or {}).get("tuning")
        if not tuning:
            return None
        return _found(r, "hyperparameters from a Tuner search (retrain tune)", True,
                      f"{tuning.get('source')}: {tuning.get('values')} (changed: {tuning.get('changed') or 'none'})",
                      jq=".training.tuning", rule="passes when the Trainer's hyperparameters came from a recorded search",
                      threshold="a Tuner search behind the Trainer's values")
    return _newest(reports, _trained, pick, "tuned hyperparameters", ".training.tuning")


def _verdict(r: dict, key: str, check: str, jq: str) -> dict | None:
    """The newest evaluation's verdict `key`, or `missing` when it was not run, opted out or
    could not judge (None: this verdict is usable)."""
    v = _sig(r).get(key)
    if not v:
        return _absent(r, f"the newest evaluation did not run {check}", jq)
    if v.get("opted_out"):
        return _absent(r, v.get("reason") or "opted out", jq)
    return None


def _verdict_check(key: str, check: str, passed: Callable[[dict], bool], rule: str,
                   threshold: Callable[[dict], str]):
    jq = f".evaluation.significance.{key}"

    def test(reports, context):
        r = next((r for r in reports if _evaluated(r)), None)
        if r is None:
            return None
        v = _sig(r).get(key)
        gap = _verdict(r, key, check, jq)
        if gap is not None:
            return gap
        if not v.get("judged", True):  # it ran and could not decide: no verdict to count
            return _absent(r, f"{check} could not judge: {v.get('reason') or 'not judged'}", jq)
        return _found(r, check, passed(v), v.get("reason") or "", jq=jq, rule=rule, threshold=threshold(v))
    return test


_simpler = _verdict_check("simple_baseline", "candidate vs the simple model (Evaluator)",
                          lambda v: not v.get("refused"), "passes when refused is false",
                          lambda v: v.get("rule") or f"the candidate's {v.get('metric')} against the simple"
                                                       f" model's ({v.get('require') or 'config'})")
_inclusion = _verdict_check("fairness", "quality across groups (Evaluator)",
                            lambda v: not v.get("refused"), "passes when refused is false (no group over its gap)",
                            lambda v: f"gap threshold {v.get('threshold')} at confidence {v.get('confidence')}")


def _staleness_known(reports, context):
    """Model 4: the measured loss per span of age, held to what max_age_spans allows."""
    jq = ".evaluation.significance.staleness | {model_artifact_id, metric, loss_per_span, max_drop, max_age_spans, points}"
    r = next((r for r in reports if _evaluated(r)), None)
    if r is None:
        return None
    gap = _verdict(r, "staleness", "the staleness measurement", jq)
    if gap is not None:
        return gap
    v = _sig(r)["staleness"]
    if v.get("model_artifact_id") is None:
        return _absent(r, f"no served model to measure: {v.get('reason')}", jq)
    rate = v.get("loss_per_span")
    if not isinstance(rate, (int, float)):
        return _absent(r, f"no loss per span measured (no reading older than the model's training): {v.get('reason')}", jq)
    max_drop, max_age = v.get("max_drop"), v.get("max_age_spans")
    implied = rate * max_age
    return _found(r, "the served model's quality against its age on the window's spans (Evaluator)",
                  implied <= max_drop,
                  f"{v.get('metric')} {'rises' if v.get('drop_kind') == 'relative rise' else 'drops'} {rate:.3g} per"
                  f" span of age over {len(v.get('points') or [])} readings; at max_age_spans {max_age} that is"
                  f" {implied:.3g} against max_drop {max_drop:g}",
                  jq=jq, rule="passes when loss_per_span x max_age_spans <= max_drop (the cadence keeps the loss in"
                              " bounds)", threshold=f"max_drop {max_drop:g} by max_age_spans {max_age}",
                  inputs=[{"kind": "artifact", "type": "Model", "id": v.get("model_artifact_id")}])


def _slices(reports, context):
    """Model 6: a slice judged: the new span, as a slice of the window (Evaluator)."""
    jq = ".evaluation.significance.new_span | {judged, collapsed, drop, bound, reason}"
    r = next((r for r in reports if _evaluated(r)), None)
    if r is None:
        return None
    gap = _verdict(r, "new_span", "the new-span slice check", jq)
    if gap is not None:
        return gap
    v = _sig(r)["new_span"]
    configured = sorted((r.get("evaluation") or {}).get("slices") or {})
    if not v.get("judged"):
        return _absent(r, f"no slice judged: {v.get('reason') or 'not judged'}"
                          f" ({len(configured)} configured slices reported, none held to a threshold)", jq)
    return _found(r, "the key metric on the new span's slice against the window's (Evaluator)",
                  not v.get("collapsed"),
                  f"{v.get('reason')}; {len(configured)} configured slices reported beside it", jq=jq,
                  rule="passes when collapsed is false (the drop's bound within min_drop)",
                  threshold=f"the drop's bound {v.get('bound')} within min_drop {v.get('min_drop', 'config')}")


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
                      f"{[w.get('span') for w in (r.get('data') or {}).get('window') or []]}",
                      jq="{sbom: .model.runtime.sbom_sha256, code: .code, seed: .training.hparams.seed,"
                         " spans: [.data.window[].span]}",
                      rule="passes when git_dirty is false and a seed is recorded",
                      threshold="committed code, a seed, the runtime SBOM")
    return _newest(reports, lambda r: bool(r.get("model")), pick, "the runtime SBOM and code version")


def _integration(reports, context):
    def pick(r):
        nodes = r.get("nodes") or {}
        if not nodes or r.get("serving_check") is None:
            return None
        failed = [n for n, s in nodes.items() if (s or {}).get("status") == "failed"]
        return _found(r, "a scheduled run: every node from ingestion to the served candidate", not failed,
                      f"{len(nodes)} nodes" + (f", failed: {', '.join(failed)}" if failed else ", all completed"),
                      jq=".nodes | map_values(.status)", rule="passes when no node failed and the serving check ran",
                      threshold="every node completed, ServingCheck included")
    return _newest(reports, _evaluated, pick, "the serving check")


def _validated(reports, context):
    def pick(r):
        v = _sig(r)
        if "blessed" not in v:
            return None
        return _found(r, "Evaluator's significance verdict before the push", True,
                      f"{'blessed' if v.get('blessed') else 'refused: ' + '; '.join(v.get('reasons') or [])}",
                      jq=".evaluation.significance | {blessed, reasons}",
                      rule="passes when the verdict exists (blessed or refused: either way nothing unvalidated"
                           " is pushed)", threshold="the Evaluator's thresholds (.evaluation.thresholds)",
                      outcome="blessed" if v.get("blessed") else "refused")
    return _newest(reports, _evaluated, pick, "the verdict")


def _canaried(reports, context):
    mode = context.get("rollout_mode")
    if mode is not None and mode != "canary":
        return _result(MISSING, None, outcome="not run", threshold="rollout.mode canary",
                       detail=f"rollout.mode is {mode}: versions serve without a canary (earlier decisions do not"
                              " count once it is switched off)")
    decisions = _decisions(reports, context)
    decided = [d for d in decisions if d.get("action") in TERMINAL_ACTIONS and _labelled(d)]
    if not decided:
        waiting = decisions[-1] if decisions else None
        return _result(MISSING, None, outcome="no decision", inputs=[_decision_input(waiting, context)] if waiting else [],
                       detail="no canary decided on labelled traffic yet"
                              + (f" (newest: {waiting.get('action')}: {waiting.get('reason')})" if waiting else ""))
    d = decided[-1]
    srm = d.get("srm")
    return _result(AUTOMATED_PASSING, "a canary decided on live labels (rollout controller)",
                   detail=f"decision {d.get('id')} ({d.get('decided_at')}): {d.get('action')} canary"
                          f" {d.get('canary_version')} against stable {d.get('stable_version')}: {d.get('reason')}",
                   inputs=[_decision_input(d, context)], outcome=d.get("action"),
                   threshold="a promote, rollback or inconclusive decision with a difference measured on labels"
                             + ("; sample ratio checked" if isinstance(srm, dict) else ""),
                   rederive=[*_decision_steps(d, context),
                             "rule: passes when action is promote, rollback or inconclusive and `difference` has an"
                             " estimate (labelled traffic); continue does not count"])


def _rollback(reports, context):
    events = [e for e in context.get("history") or [] if e.get("event") in ("rollback", "canary_rollback")]
    if events:
        e = events[-1]
        path = context.get("history_path")
        return _result(AUTOMATED_PASSING, "a rollback recorded in the served model's history", outcome=e.get("event"),
                       detail=f"{e.get('event')} at {e.get('time')} by {e.get('user')}: {e.get('reason')}"
                              f" ({len(events)} in all)",
                       inputs=[{"kind": "history", "path": path, "sha256": context.get("history_sha256")}],
                       threshold="a rollback done (controller or retrain rollback)",
                       rederive=[f"grep -E '\"event\": \"(canary_)?rollback\"' {path}",
                                 "rule: passes when the history holds a rollback"])
    rolled = [d for d in _decisions(reports, context) if d.get("action") == "rollback" and d.get("applied")]
    if rolled:
        d = rolled[-1]
        return _result(AUTOMATED_PASSING, "the rollout controller rolled a canary back (ML Metadata)",
                       detail=f"decision {d.get('id')}: {d.get('reason')}", inputs=[_decision_input(d, context)],
                       outcome="rollback", threshold="a rollback done",
                       rederive=[*_decision_steps(d, context), "rule: action rollback, applied 1"])
    return _attested("infrastructure.7", "rollback", context,
                     before="no rollback recorded in the history or ML Metadata; ")


# -- monitoring ----------------------------------------------------------------------

def _dependencies(reports, context):
    def pick(r):
        runtime = _sig(r).get("runtime")
        if not runtime:
            return None
        return _found(r, "runtime SBOM compared with the baseline's; changes alerted (run_summary)", True,
                      runtime.get("reason") or "", jq=".evaluation.significance.runtime",
                      rule="passes when the comparison ran (a change raises runtime_changed)",
                      threshold="any package change is alerted")
    return _newest(reports, _evaluated, pick, "the runtime comparison", ".evaluation.significance.runtime")


def _invariants(reports, context):
    def pick(r):
        skew = r.get("serving_skew") or {}
        gate = r.get("data_gate") or {}
        if skew.get("checked"):
            return _found(r, "served traffic against its training data (ServingSkew), the data gate on each span",
                          bool(skew.get("passed")) and not skew.get("skewed_features") and bool(gate.get("passed")),
                          f"{skew.get('examples')} logged examples; skewed: {skew.get('skewed_features') or 'none'};"
                          f" gate {'passed' if gate.get('passed') else 'stopped'}",
                          jq="{gate: .data_gate.passed, skew: .serving_skew | {checked, passed, skewed_features}}",
                          rule="passes when the gate passed and serving skew found no skewed feature",
                          threshold="the gate policy's and serving_skew's limits")
        why = skew.get("reason") or "no serving skew check in this run"
        return _found(r, "the data gate on the span's training inputs (serving inputs not checked in this run)",
                      bool(gate.get("passed")), f"gate {'passed' if gate.get('passed') else 'stopped'}; serving: {why}",
                      jq="{gate: .data_gate.passed, skew: .serving_skew}", rule="passes when the gate passed",
                      threshold="the gate policy's limits")
    return _newest(reports, lambda r: bool(r.get("data_gate")), pick, "the data gate")


def _same_values(reports, context):
    def pick(r):
        check = r.get("serving_check") or {}
        if check.get("max_abs_diff") is None:
            return None
        return _found(r, "the served candidate answers as the Trainer's model does (ServingCheck)",
                      bool(check.get("passed")), f"largest difference {check['max_abs_diff']}",
                      jq=".serving_check | {passed, max_abs_diff, reasons}", rule="passes when passed is true",
                      threshold=f"the serving check's tolerance{' ' + str(check['tolerance']) if 'tolerance' in check else ''}")
    return _newest(reports, lambda r: bool(r.get("blessed")), pick, "the serving check")


def _not_stale(reports, context):
    """Monitoring 4: the served model's age and drop today, alerted past their limits."""
    jq = ".evaluation.significance.staleness | {model_artifact_id, age_spans, drop, drop_bound, alerts, reason}"
    r = next((r for r in reports if _evaluated(r)), None)
    if r is None:
        return None
    gap = _verdict(r, "staleness", "the staleness check", jq)
    if gap is not None:
        return gap
    v = _sig(r)["staleness"]
    if v.get("model_artifact_id") is None or v.get("age_spans") is None:
        return _absent(r, f"nothing served to age: {v.get('reason')}", jq)
    return _found(r, "the served model's age and drop on the new span (Evaluator; `stale` alert)",
                  not v.get("alerts"), v.get("reason") or "", jq=jq, rule="passes when alerts is empty",
                  threshold=f"age <= max_age_spans {v.get('max_age_spans')}, drop bound <= max_drop {v.get('max_drop')}",
                  inputs=[{"kind": "artifact", "type": "Model", "id": v.get("model_artifact_id")}])


def _numerics(reports, context):
    def pick(r):
        n = (r.get("training") or {}).get("numerics")
        if not n:
            return None
        fields = ("loss_finite_every_step", "eval_outputs_finite")
        absent = [f for f in fields if not isinstance(n.get(f), bool)]
        if absent or not n.get("eval_outputs_checked"):
            return _absent(r, f"the numerics record lacks {', '.join(absent) or 'eval_outputs_checked'}: no"
                              " evidence the check ran", ".training.numerics")
        ok = n["loss_finite_every_step"] and n["eval_outputs_finite"]
        return _found(r, "finite loss at every step and finite outputs on the eval split (Trainer)", ok,
                      f"{n.get('eval_outputs_checked')} eval outputs checked; loss finite every step:"
                      f" {n['loss_finite_every_step']}, outputs finite: {n['eval_outputs_finite']}",
                      jq=".training.numerics", threshold="no NaN or Inf",
                      rule="passes when loss_finite_every_step and eval_outputs_finite are both true")
    return _newest(reports, _trained, pick, "the numerics check", ".training.numerics")


def _performance(reports, context):
    def pick(r):
        perf = (r.get("serving_check") or {}).get("performance") or {}
        figures = perf.get("figures") or {}
        if not figures:
            return None
        past = [k for k, f in figures.items() if f.get("past_limit")]
        return _found(r, "latency, size and throughput against the served model (ServingCheck)",
                      not perf.get("refusals"),
                      ", ".join(f"{k} {f.get('baseline')} -> {f.get('candidate')}" for k, f in figures.items())
                      + (f"; past limit: {', '.join(past)}" if past else ""),
                      jq=".serving_check.performance", rule="passes when refusals is empty",
                      threshold="the performance: block's limits")
    found = _newest(reports, lambda r: bool(r.get("blessed")) and bool(r.get("baseline_model")), pick,
                    "the performance comparison")
    if found is None and any(r.get("blessed") for r in reports):
        return _result(MISSING, None, outcome="not run",
                       detail="no blessed candidate had a served model to be compared with yet (a first push has no"
                              " baseline): the comparison runs from the next blessed candidate on")
    return found


def _quality_live(reports, context):
    """Monitoring 7: live quality on labelled traffic: the canary against stable, and the
    live floor of stable."""
    mode = context.get("rollout_mode")
    if mode is not None and mode != "canary":
        return _result(MISSING, None, outcome="not run", threshold="rollout.mode canary",
                       detail=f"rollout.mode is {mode}: no live quality is measured (earlier decisions do not count"
                              " once it is switched off)")
    measured = [d for d in _decisions(reports, context) if _labelled(d)]
    if not measured:
        return _result(MISSING, None, outcome="no live measurement",
                       detail="no decision measured live quality on labelled traffic (a `continue` waiting for labels"
                              " is no measurement)")
    d = measured[-1]
    newer = [x for x in _decisions(reports, context) if x.get("id") is not None and d.get("id") is not None
             and x["id"] > d["id"]]
    floor = [a for a in d.get("alerts") or [] if str(a).startswith("live_floor")]
    diff = d.get("difference") or {}
    regressed = d.get("action") == "rollback" or bool(floor)
    return _result(AUTOMATED_FAILING if regressed else AUTOMATED_PASSING,
                   "live quality from delayed labels (rollout controller)",
                   detail=f"decision {d.get('id')} ({d.get('decided_at')}): {d.get('action')}; {d.get('metric')} canary"
                          f" - stable {diff.get('estimate')} [{diff.get('low')}, {diff.get('high')}]"
                          + (f"; {floor[0]}" if floor else "")
                          + (f"; {len(newer)} newer decision(s) still waiting for labels" if newer else ""),
                   inputs=[_decision_input(d, context)], outcome=d.get("action"),
                   threshold="not shown worse than stable (no rollback), stable above rollout.live_floor",
                   rederive=[*_decision_steps(d, context),
                             "rule: fails on a rollback or a live_floor alert; passes otherwise; needs `difference`"
                             " (labelled traffic)"])


# (section, number, the rubric's title, test)
TESTS: list[tuple[str, int, str, Callable]] = [
    ("data", 1, "Feature expectations are captured in a schema", _schema),
    ("data", 2, "All features are beneficial", _beneficial),
    ("data", 3, "No feature's cost is too much", _feature_cost),
    ("data", 4, "Features adhere to meta-level requirements", _meta_level),
    ("data", 5, "The data pipeline has appropriate privacy controls", _privacy),
    ("data", 6, "New features can be added quickly", _manual("data.6", "new-features")),
    ("data", 7, "All input feature code is tested", _manual("data.7", "feature-code-tests")),
    ("model", 1, "Model specs are reviewed and submitted", _reviewed),
    ("model", 2, "Offline and online metrics correlate", _online_offline),
    ("model", 3, "All hyperparameters have been tuned", _tuned),
    ("model", 4, "The impact of model staleness is known", _staleness_known),
    ("model", 5, "A simpler model is not better", _simpler),
    ("model", 6, "Model quality is sufficient on important data slices", _slices),
    ("model", 7, "The model is tested for considerations of inclusion", _inclusion),
    ("infrastructure", 1, "Training is reproducible", _reproducible),
    ("infrastructure", 2, "Model specs are unit tested", _manual("infrastructure.2", "model-unit-tests")),
    ("infrastructure", 3, "The ML pipeline is integration tested", _integration),
    ("infrastructure", 4, "Model quality is validated before serving", _validated),
    ("infrastructure", 5, "The model is debuggable", _manual("infrastructure.5", "debugging")),
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


def key(section: str, number: int) -> str:
    """A test's id: `data.6`, `infrastructure.7` (what --explain and --test take)."""
    return f"{section}.{number}"


def compute(reports: list[dict], context: dict | None = None) -> dict:
    """The scorecard from a pipeline's reports (newest first; each may carry `_path` and
    `_sha256`, the file it was read from and its digest).

    Args:
      context: what no report holds (`context` builds it): rollout_mode, settings (the
        `scorecard:` block), decisions (rollout decisions) and attestations from ML
        Metadata, metadata (the store's URL), history (the served model's), privacy (the
        scan's result), now.

    Returns:
      {"tests": [{"section", "number", "id", "title", "status", "points", "evidence"}...],
       "sections": {section: sum}, "score": the smallest sum, "runs": how many reports read}.
    """
    context = context or {}
    tests = []
    for section, number, title, test in TESTS:
        result = test(reports, context) or _result(MISSING, None, detail="no run got far enough to record it",
                                                   outcome="not run")
        tests.append({"section": section, "number": number, "id": key(section, number), "title": title,
                      "status": result["status"], "points": POINTS[result["status"]], "evidence": result["evidence"]})
    sections = {s: sum(t["points"] for t in tests if t["section"] == s) for s in SECTIONS}
    return {"tests": tests, "sections": sections, "score": min(sections.values()), "runs": len(reports),
            "computed_at": _now(context).isoformat(timespec="seconds")}


def context(config, store=None, now: dt.datetime | None = None) -> dict:
    """What the scorecard needs beyond the reports, from a pipeline config: its settings,
    the served model's history, the privacy scan (governance/privacy.py: TensorFlow) and,
    where `store` is given, the rollout decisions and attestations in ML Metadata."""
    from core.metadata_queries import rollout_decisions

    now = now or dt.datetime.now(dt.timezone.utc)
    settings = config.scorecard_settings
    rollout = config.rollout_settings
    out = {"retention_days": config.retention_settings.max_age_days, "keep_versions": config.keep_versions,
           "rollout_mode": rollout.mode, "min_labelled": getattr(rollout, "min_labelled", None),
           "metadata": config.metadata_store.url, "model": config.model_name,
           "settings": dataclasses.asdict(settings), "now": now.isoformat(timespec="seconds")}
    history = os.path.join(layout.serving_root(config.workdir), config.model_name, "history.jsonl")
    if os.path.isfile(history):
        from serving.repository import history as history_lib

        out["history"] = history_lib.read(os.path.dirname(history))
        out["history_path"] = history
        with open(history, "rb") as f:
            out["history_sha256"] = hashlib.sha256(f.read()).hexdigest()
    if store is not None:
        from ml_metadata import errors as mlmd_errors

        try:
            out["decisions"] = rollout_decisions(store, config.model_name)
        except mlmd_errors.NotFoundError:  # a store without the decision type yet: none made
            out["decisions"] = []
        out["attestations"] = attestation_lib.read(store, config.pipeline_name)
    if settings.privacy_scan:
        try:
            out["privacy"] = privacy.scan(config, now)
        except (OSError, ValueError) as e:  # an unreadable policy or span: no proof, said so
            out["privacy"] = {"ran": False, "reason": f"the scan could not run: {type(e).__name__}: {e}"}
    return out


def read_reports(pipeline_root: str) -> list[dict]:
    """Every report.json of the pipeline's runs, the newest run first (`started`), each with
    `_path` and `_sha256` (the file's digest, so evidence names exactly what was read)."""
    out = []
    for path in glob.glob(os.path.join(pipeline_root, layout.REPORT_DIR, "*", layout.REPORT_JSON)):
        try:
            with open(path, "rb") as f:
                data = f.read()
            report = json.loads(data)
        except (OSError, ValueError):
            continue
        out.append({**report, "_path": path, "_sha256": hashlib.sha256(data).hexdigest()})
    return sorted(out, key=started, reverse=True)


def started(report: dict) -> str:
    """When the run began (its earliest node's start): a report is rewritten after later
    decisions (rollout), so when it was generated does not order runs."""
    times = [str(n.get("started")) for n in (report.get("nodes") or {}).values()
             if isinstance(n, dict) and n.get("started")]
    return min(times) if times else str(report.get("generated_at") or "")


def _short(e: dict) -> str:
    if e.get("check") and e.get("run"):
        return f"run {e['run']}: {e['check']}"
    return e.get("check") or e.get("detail") or e.get("procedure") or ""


def format_text(card: dict) -> str:
    """The scorecard for a terminal: one line per test, the section sums and the score."""
    lines = [f"ML Test Score from {card['runs']} run record(s)"]
    for section in SECTIONS:
        lines.append(f"\n{section} ({card['sections'][section]:g})")
        for t in (t for t in card["tests"] if t["section"] == section):
            lines.append(f"  {t['number']}. {t['title']:<55} {t['status']:<18} {_short(t['evidence'])}")
    lines.append("\nsections: " + ", ".join(f"{s} {card['sections'][s]:g}" for s in SECTIONS)
                 + f"; final score {card['score']:g} (the smallest)")
    lines.append("how any line was reached: retrain scorecard --explain SECTION.NUMBER (e.g. data.5)")
    return "\n".join(lines)


def find(card: dict, test: str) -> dict:
    """The card's test named `data.6`, `Data 6`, `infra.7`...

    Raises:
      KeyError: no such test.
    """
    import re

    match = re.fullmatch(r"\s*([a-zA-Z]+)[\s._-]*(\d+)\s*", test or "")
    if match:
        section = {"infra": "infrastructure", "mon": "monitoring"}.get(match.group(1).lower(), match.group(1).lower())
        for t in card["tests"]:
            if t["section"] == section and t["number"] == int(match.group(2)):
                return t
    raise KeyError(f"no test {test!r}: SECTION.NUMBER, e.g. data.5 or infrastructure.7")


def explain(card: dict, test: str) -> str:
    """How to re-derive one test's status by hand from its listed evidence."""
    t = find(card, test)
    e = t["evidence"]
    lines = [f"{t['id']}: {t['title']}",
             f"{'status':<10}{t['status']} ({t['points']:g} point{'s' if t['points'] != 1 else ''})"]
    for label, field in (("check", "check"), ("run", "run"), ("outcome", "outcome"), ("threshold", "threshold"),
                         ("detail", "detail"), ("procedure", "procedure")):
        if e.get(field) not in (None, ""):
            lines.append(f"{label:<10}{e[field]}")
    if e.get("inputs"):
        lines.append("inputs")
        for item in e["inputs"]:
            lines.append("  - " + ", ".join(f"{k} {v}" for k, v in item.items() if v not in (None, "")))
    lines.append("re-derive by hand")
    steps = e.get("rederive") or ["nothing ran, so there is nothing to re-derive: the status is the absence of a"
                                  " record (see detail)"]
    lines += [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
    lines.append(f"points: automated (passing or failing) 1, manual with a valid attestation 0.5, missing 0"
                 f" ({PROCEDURES})")
    return "\n".join(lines)
