"""Attestations: a person's dated, expiring statement that a scorecard test done by hand was
done, with its evidence (a URL, or a file whose digest is kept), recorded in ML Metadata.

`retrain attest --test data.6 --by NAME --evidence URL-or-FILE --expires YYYY-MM-DD` writes
one execution of type `ScorecardAttestation` (its properties: pipeline, test, by, evidence,
evidence_sha256, attested_at, expires, note). The scorecard (governance/scorecard.py) gives
a manual test its 0.5 only for a valid attestation: the newest for the test, not expired,
and, where the evidence is a file, that file unchanged (same SHA-256). Nothing is deleted:
a later attestation of the same test supersedes an earlier one, and every one stays listed.

Needs `ml_metadata` (the TFX runtime), not TensorFlow.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import urllib.parse
from typing import Any

from core.files import sha256_file

EXECUTION_TYPE = "ScorecardAttestation"
# Tests only a person can do here (docs/guides/scorecard.md, "Tests done by hand"); rollback
# until a rollback is recorded. No automated test takes an attestation.
ATTESTABLE = {
    "data.6": "new-features", "data.7": "feature-code-tests", "infrastructure.2": "model-unit-tests",
    "infrastructure.5": "debugging", "infrastructure.7": "rollback",
}
_SECTION_ALIASES = {"infra": "infrastructure", "mon": "monitoring", "monitor": "monitoring"}
# The longest an attestation may run: a procedure done once is not done for ever.
MAX_DAYS = 366


class AttestationError(ValueError):
    """An attestation that cannot be recorded; the message says which argument and why."""


def canonical_test(text: str) -> str:
    """`data.6`, `Data 6`, `infra.7` -> the canonical `section.number`.

    Raises:
      AttestationError: not a test that takes an attestation.
    """
    match = re.fullmatch(r"\s*([a-zA-Z]+)[\s._-]*(\d+)\s*", text or "")
    if not match:
        raise AttestationError(f"--test {text!r}: expected SECTION.NUMBER, e.g. data.6")
    section = _SECTION_ALIASES.get(match.group(1).lower(), match.group(1).lower())
    out = f"{section}.{int(match.group(2))}"
    if out not in ATTESTABLE:
        raise AttestationError(f"--test {text!r}: only tests done by hand take an attestation"
                               f" ({', '.join(ATTESTABLE)}); the others are scored from the checks that ran")
    return out


def _is_url(text: str) -> bool:
    parts = urllib.parse.urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.netloc)



def _parse_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(text).strip())
    except ValueError as e:
        raise AttestationError(f"--expires {text!r}: expected a date, YYYY-MM-DD") from e


def entry(test: str, by: str, evidence: str, expires: str, note: str = "", now: dt.datetime | None = None) -> dict:
    """The attestation as it will be recorded, checked.

    Raises:
      AttestationError: an unknown test, no name, evidence that is neither an http(s) URL nor
        an existing file, an expiry date not after today or more than MAX_DAYS away.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    test = canonical_test(test)
    if not (by or "").strip():
        raise AttestationError("--by: the name of the person who attests is required")
    evidence = (evidence or "").strip()
    sha = ""
    if _is_url(evidence):
        pass
    elif evidence and os.path.isfile(evidence):
        evidence = os.path.abspath(evidence)
        sha = sha256_file(evidence)
    else:
        raise AttestationError(f"--evidence {evidence!r}: an http(s) URL or an existing file (a CI run, a"
                               " log, a signed checklist): what a reviewer opens to check the claim")
    expires_on = _parse_date(expires)
    if expires_on <= now.date():
        raise AttestationError(f"--expires {expires_on}: must be after today ({now.date()})")
    if (expires_on - now.date()).days > MAX_DAYS:
        raise AttestationError(f"--expires {expires_on}: at most {MAX_DAYS} days ahead; attest again when it runs out")
    return {"test": test, "by": by.strip(), "evidence": evidence, "evidence_sha256": sha,
            "attested_at": now.isoformat(timespec="seconds"), "expires": expires_on.isoformat(), "note": note}


def record(store, pipeline: str, values: dict) -> int:
    """Writes an attestation (`entry`'s dict) as an MLMD execution; returns its id."""
    from ml_metadata.proto import metadata_store_pb2

    from core import metadata_queries

    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=EXECUTION_TYPE))
    execution = metadata_store_pb2.Execution(type_id=type_id, last_known_state=metadata_store_pb2.Execution.COMPLETE)
    metadata_queries.set_props(execution, {"pipeline": pipeline, **values})
    [execution_id] = store.put_executions([execution])
    return execution_id


def read(store, pipeline: str) -> list[dict[str, Any]]:
    """Every attestation of a pipeline, oldest first, each with its MLMD `id`."""
    from ml_metadata import errors as mlmd_errors

    from core.metadata_queries import props

    try:
        executions = store.get_executions_by_type(EXECUTION_TYPE)
    except mlmd_errors.NotFoundError:  # a store without the type yet: none recorded
        return []
    out = []
    for execution in sorted(executions, key=lambda e: e.id):
        values = props(execution)
        if values.get("pipeline") == pipeline:
            out.append({**values, "id": execution.id})
    return out


def judge(attestation: dict, now: dt.datetime) -> dict:
    """Whether an attestation still counts now: its age in days, and `valid` with a reason.

    Expired (past its `expires` day), or a file whose content changed since (or that is
    gone), does not count."""
    attested = dt.datetime.fromisoformat(str(attestation.get("attested_at")))
    if attested.tzinfo is None:
        attested = attested.replace(tzinfo=dt.timezone.utc)
    age_days = max(0.0, (now - attested).total_seconds() / 86400)
    out = {**attestation, "age_days": round(age_days, 1)}
    expires = dt.date.fromisoformat(str(attestation.get("expires")))
    if now.date() > expires:
        return {**out, "valid": False, "why": f"expired on {expires}"}
    sha = attestation.get("evidence_sha256")
    if sha:
        path = str(attestation.get("evidence"))
        if not os.path.isfile(path):
            return {**out, "valid": False, "why": f"its evidence file {path} is gone"}
        if sha256_file(path) != sha:
            return {**out, "valid": False, "why": f"its evidence file {path} changed since (sha256 was {sha[:12]})"}
    return {**out, "valid": True, "why": f"valid until {expires}"}


def current(attestations: list[dict], test: str, now: dt.datetime) -> dict | None:
    """The newest attestation of `test`, judged (`judge`), or None."""
    mine = [a for a in attestations if a.get("test") == test]
    return judge(mine[-1], now) if mine else None


def format_list(attestations: list[dict], now: dt.datetime) -> str:
    """A table of every attestation, newest first, with its age and whether it counts."""
    if not attestations:
        return "no attestations recorded"
    lines = [f"{'id':>5}  {'test':<17} {'by':<16} {'age (days)':>10}  {'expires':<10}  status  evidence"]
    for a in reversed(attestations):
        j = judge(a, now)
        superseded = any(b["test"] == a["test"] and b["id"] > a["id"] for b in attestations)
        status = "superseded" if superseded else ("valid" if j["valid"] else "void")
        lines.append(f"{a['id']:>5}  {a['test']:<17} {str(a.get('by'))[:16]:<16} {j['age_days']:>10g}  "
                     f"{a.get('expires'):<10}  {status:<7} {a.get('evidence')}"
                     + ("" if j["valid"] else f"  ({j['why']})"))
    return "\n".join(lines)
