"""A traffic simulator for rollouts: replays examples as keyed requests through a server on
this machine, then writes their delayed labels as a feedback file.

Loopback only and bounded: it refuses any host but 127.0.0.1/localhost/::1, stops after
`limit` requests or `max_seconds`, whichever comes first. Requests are REST `:predict`
calls of one serialized tf.Example each (`{"instances": [{"b64": ...}]}`) with an
`X-Request-Id`, so the server's split and request log see exactly what clients send.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from rollout import feedback
from serving.server.routing import HEADER

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class NotLoopback(ValueError):
    """The simulator sends to this machine only."""


@dataclasses.dataclass
class Replay:
    sent: int
    failed: int
    seconds: float
    keys: list[str]
    errors: list[str]


def _check_loopback(url: str) -> None:
    host = urllib.parse.urlparse(url).hostname
    if host not in LOOPBACK:
        raise NotLoopback(f"the simulator sends to this machine only, not to {host!r}")


def replay(url: str, model: str, examples: Sequence[bytes], key_prefix: str, limit: int | None = None,
           max_seconds: float = 300.0, concurrency: int = 8, label: str | None = None) -> Replay:
    """Sends each example (up to `limit`) once; keys are `<key_prefix>-<i>`.

    `label` addresses a version label instead of the split (a version-addressed client).

    Raises:
      NotLoopback: `url` is not on this machine.
    """
    _check_loopback(url)
    count = len(examples) if limit is None else min(limit, len(examples))
    target = f"{url.rstrip('/')}/v1/models/{model}" + (f"/labels/{label}" if label else "") + ":predict"
    deadline = time.monotonic() + max_seconds
    keys = [f"{key_prefix}-{i}" for i in range(count)]
    failed, errors, sent = [0], [], [0]
    lock = threading.Lock()
    start = time.monotonic()

    def send(i: int) -> None:
        if time.monotonic() > deadline:
            return
        body = json.dumps({"instances": [{"b64": base64.b64encode(examples[i]).decode()}]}).encode()
        request = urllib.request.Request(target, data=body, headers={HEADER: keys[i], "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
            with lock:
                sent[0] += 1
        except (urllib.error.URLError, OSError) as e:
            with lock:
                failed[0] += 1
                if len(errors) < 5:
                    errors.append(f"{keys[i]}: {e}")

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(send, range(count)))
    return Replay(sent[0], failed[0], time.monotonic() - start, keys[: sent[0] + failed[0]], errors)


def write_feedback(folder: str, name: str, keys: Sequence[str], labels: Sequence[float],
                   delay_seconds: float = 3600.0, now: float | None = None) -> str:
    """One feedback file with a label per key, known `delay_seconds` after now."""
    if len(keys) != len(labels):
        raise ValueError(f"{len(keys)} keys but {len(labels)} labels")
    when = (time.time() if now is None else now) + delay_seconds
    path = os.path.join(folder, f"{name}.jsonl")
    feedback.write(path, [{"request_key": k, "label": float(v), "time": when} for k, v in zip(keys, labels)])
    return path
