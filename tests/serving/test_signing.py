"""Signed model versions (serving/repository/signing.py): a signed push verifies; a changed byte in
variables/, an added file, a missing signature and an untrusted signer are each refused by
`retrain verify` and by `retrain serve --require-signed`, while the previous version keeps
serving."""

import json
import os
import shutil
import urllib.request

import pytest

from components.atomic_pusher.executor import atomic_copy_dir
from serving.repository import signing
from tests.conftest import retrain_cli
from tests.serving import toy_model
from tests.serving.test_versions import predict, status, wait_for


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    return {"ours": signing.generate_key(str(root / "ours.pem")), "theirs": signing.generate_key(str(root / "theirs.pem"))}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("builds")
    return {v: toy_model.save(str(root / str(v)), v) for v in (1, 2, 3)}


def _pushed(build, base, version, key):
    """A version as the Pusher writes it: copied, signed in staging, renamed into place."""
    return atomic_copy_dir(build[version], str(base), version, push_info={"version": version}, sign_with=key)


def _pub(key):
    return signing.public_key_path(key.path)


def _forge(signature):
    with open(signature) as f:
        bundle = json.load(f)
    sig = bundle["dsseEnvelope"]["signatures"][0]["sig"]
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    with open(signature, "w") as f:
        json.dump(bundle, f)


def _variables_file(version_dir):
    return os.path.join(version_dir, "variables", "variables.data-00000-of-00001")


def test_a_signed_push_verifies_and_names_its_signer(build, keys, tmp_path):
    path = _pushed(build, tmp_path / "toy", 1, keys["ours"])
    info = signing.verify_version(path, [_pub(keys["ours"])])
    assert info["digest"].startswith("sha256:") and len(info["digest"]) == 71
    assert info["key_id"] == signing.key_id(keys["ours"].public_pem())
    assert info["files"] == sum(len(files) for _, _, files in os.walk(path)) - 1  # all but the signature
    assert os.path.exists(os.path.join(path, "assets.extra", "push_info.json"))  # assets.extra/ is covered too


@pytest.mark.parametrize("tamper, expected", [
    (lambda p: open(_variables_file(p), "r+b").write(b"\x00"), "changed variables/variables.data-00000-of-00001"),
    (lambda p: open(os.path.join(p, "assets.extra", "extra.txt"), "w").write("x"), "added assets.extra/extra.txt"),
    (lambda p: os.remove(os.path.join(p, "assets.extra", "push_info.json")), "missing assets.extra/push_info.json"),
    (lambda p: os.remove(os.path.join(p, signing.SIGNATURE)), "is not signed: assets.extra/model.sig is missing"),
    # Not listed in the issue, the same class: a file that cannot be hashed, a forged bundle.
    (lambda p: os.symlink("/etc/hostname", os.path.join(p, "variables", "link")), "because it is a symlink"),
    (lambda p: _forge(os.path.join(p, signing.SIGNATURE)), "InvalidSignature: the bundle was altered"),
    (lambda p: open(os.path.join(p, signing.SIGNATURE), "w").write("{"), "unreadable signature assets.extra/model.sig"),
], ids=["changed-byte", "added-file", "missing-file", "unsigned", "symlink", "forged-bundle", "unreadable-bundle"])
def test_tampered_versions_are_refused_with_the_reason(build, keys, tmp_path, tamper, expected):
    path = _pushed(build, tmp_path / "toy", 1, keys["ours"])
    tamper(path)
    with pytest.raises(signing.SignatureError, match=expected.replace(".", r"\.")):
        signing.verify_version(path, [_pub(keys["ours"])])


def test_another_signer_is_not_trusted(build, keys, tmp_path):
    path = _pushed(build, tmp_path / "toy", 1, keys["theirs"])
    with pytest.raises(signing.SignatureError, match="does not verify with the trusted key"):
        signing.verify_version(path, [_pub(keys["ours"])])
    assert signing.verify_version(path, [_pub(keys["ours"]), _pub(keys["theirs"])])["key_id"] == \
        signing.key_id(keys["theirs"].public_pem())


def test_the_governance_report_is_signed_on_its_own(build, keys, tmp_path):
    path = _pushed(build, tmp_path / "toy", 1, keys["ours"])
    staging = tmp_path / "report"
    staging.mkdir()
    (staging / "report.json").write_text('{"outcome": "pushed"}')
    signing.sign_report_folder(str(staging), keys["ours"])
    os.rename(staging, os.path.join(path, signing.REPORT_FOLDER))
    assert signing.verify_version(path, [_pub(keys["ours"])])["report"]["files"] == 1
    with open(os.path.join(path, signing.REPORT_FOLDER, "report.json"), "w") as f:
        f.write('{"outcome": "rejected"}')
    with pytest.raises(signing.SignatureError, match="governance report .* changed report.json"):
        signing.verify_version(path, [_pub(keys["ours"])])


def test_keys_come_from_the_environment_the_config_or_a_generated_demo_key(keys, tmp_path, monkeypatch):
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    demo = signing.resolve_key(None, str(tmp_path / "work"))
    assert demo.path == str(tmp_path / "work" / signing.DEMO_KEY) and oct(os.stat(demo.path).st_mode)[-3:] == "600"
    assert signing.resolve_key(None, str(tmp_path / "work")).public_pem() == demo.public_pem()  # made once
    assert signing.resolve_key(keys["ours"].path, str(tmp_path / "work")).path == keys["ours"].path
    monkeypatch.setenv(signing.KEY_ENV, keys["theirs"].path)
    assert signing.resolve_key(keys["ours"].path, str(tmp_path / "work")).path == keys["theirs"].path
    monkeypatch.setenv(signing.KEY_ENV, str(tmp_path / "nope.pem"))
    with pytest.raises(signing.SigningKeyError, match="nope.pem not found"):
        signing.resolve_key(None, str(tmp_path / "work"))
    with pytest.raises(FileExistsError):
        signing.generate_key(keys["ours"].path)


def test_runs_starting_at_once_on_a_fresh_workdir_share_one_demo_key(tmp_path, monkeypatch):
    import concurrent.futures

    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    work = str(tmp_path / "work")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        keys = list(pool.map(lambda _: signing.resolve_key(None, work).public_pem(), range(8)))
    assert len(set(keys)) == 1
    with open(signing.trusted_key_for(None, work), "rb") as f:
        assert f.read() == keys[0]  # the public key matches the private key that won
    assert [n for n in os.listdir(tmp_path / "work" / "keys") if n.startswith(".")] == []  # no temp files left


def test_retrain_verify_exit_codes(build, keys, tmp_path):
    base = tmp_path / "work" / "serving" / "toy"
    good = _pushed(build, base, 1, keys["ours"])
    bad = _pushed(build, base, 2, keys["ours"])
    open(_variables_file(bad), "r+b").write(b"\x00")
    common = ["--workdir", str(tmp_path / "work"), "--trusted-key", _pub(keys["ours"])]
    ok = retrain_cli("verify", "--path", good, *common)
    assert ok.returncode == 0 and "1: verified sha256:" in ok.stdout, ok.stderr
    both = retrain_cli("verify", "--model", "toy", "--json", *common)
    assert both.returncode == 1, both.stderr
    rows = {r["version"]: r for r in json.loads(both.stdout)["versions"]}
    assert rows["1"]["verified"] and not rows["2"]["verified"] and "changed variables/" in rows["2"]["error"]
    missing = retrain_cli("verify", "--model", "toy", "--version", "9", *common)
    assert missing.returncode == 2 and "version 9 of model 'toy' not found" in missing.stderr


def test_require_signed_refuses_tampered_versions_and_keeps_serving_the_previous(build, keys, tmp_path, serve_in_process):
    base = tmp_path / "toy"
    _pushed(build, base, 1, keys["ours"])
    server = serve_in_process("--model-name", "toy", "--model-base-path", str(base), "--poll-seconds", "0.2",
                          "--require-signed", "--trusted-key", _pub(keys["ours"]))
    assert predict(server.url, "toy", 1.0) == 1.0
    # A version copied in without a signature (e.g. by hand), then one whose weights changed.
    shutil.copytree(build[2], base / "2")
    assert wait_for(lambda: status(server.url, "toy").get(2, {}).get("state") == "END")
    assert "refused" in status(server.url, "toy")[2]["status"]["error_message"]
    assert status(server.url, "toy")[2]["status"]["error_code"] == "FAILED_PRECONDITION"
    assert predict(server.url, "toy", 1.0) == 1.0  # version 1 still answers
    shutil.rmtree(base / "2")
    path = _pushed(build, base, 3, keys["ours"])
    original = open(_variables_file(path), "rb").read()
    open(_variables_file(path), "r+b").write(b"\x00")
    assert wait_for(lambda: status(server.url, "toy").get(3, {}).get("state") == "END")
    assert "changed variables/" in status(server.url, "toy")[3]["status"]["error_message"]
    assert predict(server.url, "toy", 1.0) == 1.0
    metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    assert 'retrain_serving_signature_refusals_total{model="toy",version="3"} 1.0' in metrics
    # Put right: tried again when its files change, and served.
    open(_variables_file(path), "wb").write(original)
    assert wait_for(lambda: status(server.url, "toy").get(3, {}).get("state") == "AVAILABLE")


def test_require_signed_needs_a_trusted_key(tmp_path):
    proc = retrain_cli("serve", "--model-name", "toy", "--model-base-path", str(tmp_path), "--require-signed",
                       "--trusted-key", str(tmp_path / "absent.pem"), timeout=120)
    assert proc.returncode == 2 and "trusted key" in proc.stderr and "absent.pem not found" in proc.stderr
