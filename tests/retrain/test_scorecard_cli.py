"""`retrain attest` and `retrain scorecard --explain` in-process, on a fresh workdir of the
taxi pipeline: an attestation goes into ML Metadata, is listed with its age and earns its
test 0.5; what cannot be attested is exit 2."""

from __future__ import annotations

import json
import os

from core import exit_codes
from retrain import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_attest_then_the_scorecard_counts_it_and_explains_it(tmp_path, capsys):
    work = str(tmp_path / "work")
    evidence = tmp_path / "ci.log"
    evidence.write_text("make test: 14 passed in tests/pipelines/taxi")
    code, _, _ = _run(capsys, "scorecard", "--workdir", work, "--json")
    assert code == exit_codes.OK
    code, out, _ = _run(capsys, "attest", "--workdir", work, "--test", "data.7", "--by", "Ana Lima",
                        "--evidence", str(evidence), "--expires", "2099-01-01")
    assert code == exit_codes.BAD_INPUT  # more than a year ahead
    import datetime as dt

    expires = (dt.date.today() + dt.timedelta(days=90)).isoformat()
    code, out, _ = _run(capsys, "attest", "--workdir", work, "--test", "data.7", "--by", "Ana Lima",
                        "--evidence", str(evidence), "--expires", expires)
    assert code == exit_codes.OK and "data.7: attested by Ana Lima" in out
    code, out, _ = _run(capsys, "attest", "--workdir", work, "--list")
    assert code == exit_codes.OK and "data.7" in out and "valid" in out and str(evidence) in out
    code, out, _ = _run(capsys, "scorecard", "--workdir", work, "--json")
    card = json.loads(out)
    tests = {t["id"]: t for t in card["tests"]}
    assert tests["data.7"]["status"] == "manual" and tests["data.7"]["points"] == 0.5
    assert tests["data.6"]["status"] == "missing"
    # No run yet: the privacy scan ran on the taxi policy anyway (planted values, no logs).
    assert tests["data.5"]["status"] == "automated-passing", tests["data.5"]
    assert card["score"] == 0.0  # monitoring: nothing ran
    code, out, _ = _run(capsys, "scorecard", "--workdir", work, "--explain", "data.7")
    assert code == exit_codes.OK and "status    manual (0.5 points)" in out and "sha256sum" in out
    assert _run(capsys, "scorecard", "--workdir", work, "--explain", "data.9")[0] == exit_codes.BAD_INPUT
    code, _, err = _run(capsys, "attest", "--workdir", work, "--test", "model.5", "--by", "Ana",
                        "--evidence", str(evidence), "--expires", expires)
    assert code == exit_codes.BAD_INPUT and "only tests done by hand" in err
    assert _run(capsys, "attest", "--workdir", work, "--test", "data.6")[0] == exit_codes.BAD_INPUT
