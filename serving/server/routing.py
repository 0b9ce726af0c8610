"""Request keys, the canary split and how a request was routed (TF-free: the rollout
controller uses the same rules).

A request's key is its `X-Request-Id` header (gRPC: `x-request-id` metadata), else the hex
SHA-256 of its body (REST: the JSON bytes; gRPC: the serialized request). Under a canary
rollout a request that names neither a version nor a label goes to the canary when its
key's SHA-256, read as a fraction of 2^64, is below the canary's share: a client that sends
the same key always reaches the same version. The examples of a request are keyed
`<key>` (one example) or `<key>/<i>` (the i-th of several, from 0), which is how delayed
labels name them (rollout/feedback.py).

How a request was routed is in its request log, in TF Serving's own field: the logged
request's `model_spec` keeps what the client named (REST: the URL's `/versions/N` or
`/labels/L`, as TF Serving's REST handler fills it; gRPC: the request as sent). `route`
reads it back: `version`, `label`, or `split` (named neither: the split chose, or, with no
canary under test, the newest version answered).
"""

from __future__ import annotations

import hashlib

HEADER = "X-Request-Id"
GRPC_METADATA = "x-request-id"
MAX_KEY_BYTES = 256
SPLIT, LABEL, VERSION = "split", "label", "version"
ROUTES = (SPLIT, LABEL, VERSION)


def request_key(given: str | bytes | None, body: bytes) -> str:
    """The key of a request: the given id (trimmed, at most 256 bytes), else the body's hash."""
    if isinstance(given, bytes):
        given = given.decode("utf-8", "replace")
    if given is not None and given.strip():
        return given.strip()[:MAX_KEY_BYTES]
    return hashlib.sha256(body).hexdigest()


def example_keys(key: str, count: int) -> list[str]:
    """The keys of a request's examples."""
    return [key] if count == 1 else [f"{key}/{i}" for i in range(count)]


def key_fraction(key: str) -> float:
    """A request key's place in [0, 1): its SHA-256's first 8 bytes over 2^64."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()[:8], "big") / 2.0 ** 64


def to_canary(key: str, share: float) -> bool:
    """Whether a request key falls in the canary's share."""
    return key_fraction(key) < share


def route(model_spec) -> str:
    """How a request whose ModelSpec (as the client sent it) is `model_spec` was routed:
    `version`, `label` or `split`."""
    if model_spec.HasField("version"):
        return VERSION
    return LABEL if model_spec.version_label else SPLIT
