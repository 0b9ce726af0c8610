"""Signed model versions (OpenSSF `model-signing`, key-based: no transparency log to reach).

A pushed version carries `assets.extra/model.sig`: a Sigstore bundle whose DSSE payload is
an in-toto statement listing the SHA-256 of every file of the version folder (the
SavedModel, `variables/`, `assets/`, every `assets.extra/` file) except the signature
itself and `assets.extra/governance/`. That folder holds the governance report, written
after the push (it records this signature's digest), and is signed on its own with the
same key (`assets.extra/governance/report.sig`) before it is renamed into place, so every
file of a served version is covered and neither appears half-signed.

Verification re-hashes the folder and compares it with the signed manifest: a changed
byte, an added file and a missing file are each named. Keys are elliptic-curve PEM files;
the signer is named by the SHA-256 of its PEM public key (the bundle's key hint).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import tempfile

from core import files, layout
from core.errors import BadInput
from core.settings import Settings

logger = logging.getLogger(__name__)

SIGNATURE = os.path.join("assets.extra", "model.sig")
REPORT_FOLDER = os.path.join("assets.extra", layout.REPORT_DIR)  # where governance/report.py copies it
REPORT_SIGNATURE = "report.sig"
# The demo key, generated on first use under the workdir (never in the repository).
DEMO_KEY = os.path.join("keys", "model-signing.pem")
KEY_ENV = "RETRAIN_SIGNING_KEY"
PASSWORD_ENV = "RETRAIN_SIGNING_KEY_PASSWORD"


@dataclasses.dataclass(frozen=True)
class SigningSettings(Settings):
    """The `signing:` block: the Pusher signs every pushed version and the serving check
    verifies before it loads. `key`: the private key's PEM path (relative to the config
    file); $RETRAIN_SIGNING_KEY wins over it, and with neither a demo key is generated under
    <workdir>/keys/ on first use."""

    # Sign every pushed version (and verify before loading).
    enabled: bool = True
    # The private key's PEM path; $RETRAIN_SIGNING_KEY wins; neither: a demo key under <workdir>/keys/.
    key: str | None = None


class SignatureError(RuntimeError):
    """A version that is unsigned, signed by an untrusted key, or not what was signed."""


class SigningKeyError(BadInput):
    """A configured signing or trusted key that cannot be used."""


@dataclasses.dataclass(frozen=True)
class SigningKey:
    """A private key (PEM) and its password, if any."""

    path: str
    password: str | None = None

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        with open(self.path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), self.password.encode() if self.password else None)
        return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(public_pem: bytes) -> str:
    """The signer's name: SHA-256 of the PEM public key, as model-signing's bundle `hint`."""
    from cryptography.hazmat.primitives import serialization

    pem = serialization.load_pem_public_key(public_pem).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def generate_key(path: str) -> SigningKey:
    """Writes a new P-256 private key (mode 0600) and its public key (`<path>.pub`).

    Raises:
      FileExistsError: a key is already there (made first by another process: two runs
        starting at once on a fresh workdir both get the one that won).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if os.path.exists(path):
        raise FileExistsError(f"{path} already exists; not overwriting a key")
    key = ec.generate_private_key(ec.SECP256R1())
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        os.chmod(tmp, 0o600)
        os.link(tmp, path)  # fails if a key appeared meanwhile: never two different keys
    finally:
        os.unlink(tmp)
    _write_public(SigningKey(path))
    return SigningKey(path)


def _write_public(key: SigningKey) -> str:
    """`<private>.pub`, derived from the private key (rewritten if it does not match)."""
    pub, pem = public_key_path(key.path), key.public_pem()
    try:
        with open(pub, "rb") as f:
            if f.read() == pem:
                return pub
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(pub)), prefix=".pub-")
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(tmp, 0o644)
    os.rename(tmp, pub)
    return pub


def public_key_path(private_key_path: str) -> str:
    return private_key_path + ".pub"


def resolve_key(configured: str | None, workdir: str) -> SigningKey:
    """The key a push signs with: $RETRAIN_SIGNING_KEY, else the config's `signing.key`,
    else the demo key under the workdir (generated on first use). The password, if any,
    comes only from $RETRAIN_SIGNING_KEY_PASSWORD.

    Raises:
      SigningKeyError: a configured key file that does not exist.
    """
    path = os.environ.get(KEY_ENV) or configured
    password = os.environ.get(PASSWORD_ENV) or None
    if path:
        if not os.path.isfile(path):
            raise SigningKeyError(f"signing key {path} not found (from {'$' + KEY_ENV if os.environ.get(KEY_ENV) else 'signing.key'})")
        return SigningKey(path, password)
    demo = os.path.join(workdir, DEMO_KEY)
    if not os.path.exists(demo):
        logger.warning("no signing key configured: generating the demo key %s (set %s or signing.key in production)",
                       demo, KEY_ENV)
        try:
            generate_key(demo)
        except FileExistsError:
            pass  # another process made it first
    return SigningKey(demo, password)


def trusted_key_for(configured: str | None, workdir: str) -> str:
    """The public key that verifies what `resolve_key` signs (`<private>.pub`, derived
    from the private key)."""
    return _write_public(resolve_key(configured, workdir))


def _sign(folder: str, signature: str, key: SigningKey, ignore: list[str]) -> dict:
    from model_signing import hashing, signing

    os.makedirs(os.path.dirname(signature), exist_ok=True)
    hashing_config = hashing.Config().set_ignored_paths(paths=[signature, *ignore], ignore_git_paths=False)
    signing.Config().use_elliptic_key_signer(private_key=key.path, password=key.password) \
        .set_hashing_config(hashing_config).sign(folder, signature)
    return describe(signature)


def sign_version(version_dir: str, key: SigningKey) -> dict:
    """Signs every file of a version folder (not its governance report folder); returns
    {"digest", "key_id", "files", "path"}. Run it before the folder becomes visible."""
    folder = os.path.abspath(version_dir)
    return _sign(folder, os.path.join(folder, SIGNATURE), key, [os.path.join(folder, REPORT_FOLDER)])


def sign_report_folder(folder: str, key: SigningKey) -> dict:
    """Signs a governance report folder (before it is renamed into a served version)."""
    folder = os.path.abspath(folder)
    return _sign(folder, os.path.join(folder, REPORT_SIGNATURE), key, [])


def describe(signature_path: str) -> dict:
    """What a signature file says, unverified: the manifest digest, the signer and the files."""
    with open(signature_path, encoding="utf-8") as f:
        bundle = json.load(f)
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    return {
        "digest": "sha256:" + statement["subject"][0]["digest"]["sha256"],
        "key_id": bundle.get("verificationMaterial", {}).get("publicKey", {}).get("hint", ""),
        "files": len(statement["predicate"]["resources"]),
        "path": signature_path,
    }


def differences(folder: str, signature: str) -> list[str]:
    """What differs from the signed manifest: changed, added and missing files, by name."""
    with open(signature, encoding="utf-8") as f:
        statement = json.loads(base64.b64decode(json.load(f)["dsseEnvelope"]["payload"]))
    signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    ignored = set(statement["predicate"]["serialization"].get("ignore_paths", []))
    actual = {}
    for root, dirs, names in os.walk(folder):
        rel_root = os.path.relpath(root, folder)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_root, d)) not in ignored]
        for name in names:
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel not in ignored:
                actual[rel] = files.sha256_file(os.path.join(root, name))
    out = [f"changed {n}" for n in sorted(signed.keys() & actual.keys()) if signed[n] != actual[n]]
    out += [f"added {n}" for n in sorted(actual.keys() - signed.keys())]
    out += [f"missing {n}" for n in sorted(signed.keys() - actual.keys())]
    return out


def _verify(folder: str, signature: str, trusted: list[str], what: str) -> dict:
    """The signer is found by the bundle's key hint among the trusted keys, then the bundle
    is verified with that key and the files re-hashed: each failure says which it was (an
    untrusted signer, a bad or unreadable signature, files that differ, a file that cannot
    be hashed such as a symlink)."""
    from model_signing import verifying

    rel = os.path.relpath(signature, folder)
    if not os.path.isfile(signature):
        raise SignatureError(f"{what} {folder} is not signed: {rel} is missing")
    try:
        info = describe(signature)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SignatureError(f"{what} {folder}: unreadable signature {rel}: {type(e).__name__}: {e}") from None
    by_id = {}
    for public_key in trusted:
        with open(public_key, "rb") as f:
            by_id[key_id(f.read())] = public_key
    public_key = by_id.get(info["key_id"])
    if public_key is None:
        raise SignatureError(f"{what} {folder}: signed by key {info['key_id'][:16]}, which does not verify with the "
                             f"trusted key(s) {', '.join(trusted)}")
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=public_key).verify(folder, signature)
    except ValueError as e:
        if "Signature mismatch" in str(e):
            found = "; ".join(differences(folder, signature)) or str(e)
            raise SignatureError(f"{what} {folder} does not match its signature: {found}") from None
        raise SignatureError(f"{what} {folder} does not verify: {e}") from None
    except Exception as e:  # noqa: BLE001  a forged or corrupted bundle: the library's own words
        reason = str(e) or "the bundle was altered, or not made with this key"
        raise SignatureError(f"{what} {folder} does not verify with {public_key}: {type(e).__name__}: {reason}") from None
    return {**info, "trusted_key": public_key}


def verify_version(version_dir: str, trusted: list[str]) -> dict:
    """Checks a version folder, and its governance report folder if it has one, against
    their signatures and the trusted public keys; returns the model signature's details.

    Raises:
      SignatureError: unsigned, an untrusted signer, or a file changed, added or missing.
    """
    if not trusted:
        raise SigningKeyError("no trusted public key given")
    for public_key in trusted:
        if not os.path.isfile(public_key):
            raise SigningKeyError(f"trusted key {public_key} not found")
    folder = os.path.abspath(version_dir)
    info = _verify(folder, os.path.join(folder, SIGNATURE), trusted, "version")
    report = os.path.join(folder, REPORT_FOLDER)
    if os.path.isdir(report):
        info["report"] = _verify(report, os.path.join(report, REPORT_SIGNATURE), trusted, "governance report")
    return info


def stamp(version_dir: str) -> tuple:
    """Changes when any file of the folder does (a refused version is tried again then)."""
    out = []
    for root, _, names in os.walk(version_dir):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            out.append((os.path.relpath(os.path.join(root, name), version_dir), st.st_mtime_ns, st.st_size))
    return tuple(sorted(out))
