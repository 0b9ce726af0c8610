"""The warm TFX runtime's protocol (TF-free: the Airflow side speaks it through task_host/client.py).

A warm runtime (`python -m task_host.warm_server`, in the TFX runtime) has TensorFlow, TFX,
Beam, TFDV and TFMA imported once and runs each `retrain ...` command in a fresh forked
child: its own process (group), memory and crash, started in well under a second instead of
the ~15 s of imports a cold interpreter pays.

One request per connection on a Unix socket:
  client -> server  a 1-byte message carrying the write end of the output pipe (SCM_RIGHTS;
                    two pipes where the client reads stderr apart: stdout's, then stderr's),
                    then a frame {module, argv, env, cwd, python, fingerprint}: `python -m module argv`
  server -> client  {"pid": N} (the command's process group) or {"refused": reason},
                    later {"exit": code} (negative: killed by that signal, as subprocess says)
  closing the connection before the exit frame kills the command's process group.
A frame is a 4-byte big-endian length and that much JSON.

The server refuses a request whose code fingerprint differs from the code it imported (and
restarts itself when the files changed), whose interpreter is not its own, or whose
import-time environment (TF_*, CUDA_*, ...) differs from its own: those are read once, at
import, so a fork would silently run with the server's values. A refused or unanswered
request is run cold by the caller; `start` returns None for it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

SOCKET_ENV = "RETRAIN_WARM_SOCKET"
# Read by TensorFlow, CUDA, XLA, BLAS/OpenMP, Arrow, gRPC or Python when they are imported.
IMPORT_TIME_ENV_PREFIXES = ("TF_", "CUDA_", "XLA_", "KERAS_", "OMP_", "MKL_", "OPENBLAS_", "ARROW_", "GRPC_",
                            "LD_", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONWARNINGS")
_HEADER = struct.Struct(">I")
_MAX_FRAME = 16 * 1024 * 1024


class ProtocolError(RuntimeError):
    """The other side sent something that is not a frame of this protocol."""


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV_PREFIXES)}


def env_difference(ours: Mapping[str, str], theirs: Mapping[str, str]) -> list[str]:
    """Import-time variables whose values differ (names only: values may be secrets)."""
    a, b = import_time_env(ours), import_time_env(theirs)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
    body = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            if got:
                raise ProtocolError(f"connection closed inside a frame ({got} of {n} bytes)")
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict | None:
    """The next frame, or None when the other side closed the connection."""
    header = _recv_exactly(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > _MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes (at most {_MAX_FRAME})")
    body = _recv_exactly(sock, size)
    if body is None:
        raise ProtocolError("connection closed before a frame's body")
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ProtocolError("a frame is a JSON object")
    return message


def send_fds(sock: socket.socket, fds: Sequence[int]) -> None:
    socket.send_fds(sock, [b"F"], list(fds))


def recv_fds(sock: socket.socket) -> tuple[int, int]:
    """(stdout's fd, stderr's fd): the same fd where the client sent one pipe."""
    msg, fds, _, _ = socket.recv_fds(sock, 1, 2)
    if msg != b"F" or len(fds) not in (1, 2):
        for fd in fds:
            os.close(fd)
        raise ProtocolError("a request starts with the output pipe(s)")
    return fds[0], fds[-1]
