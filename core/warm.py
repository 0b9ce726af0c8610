"""The warm TFX runtime's protocol and its client (TF-free: the Airflow side uses it).

A warm runtime (`python -m retrain.warm_runtime`, in the TFX runtime) has TensorFlow, TFX,
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
import select
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from core import source_hash

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


def ping(path: str, timeout_s: float = 2.0) -> dict | None:
    """The server's {"fingerprint", "pid", "ready_s", ...}, or None where none answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            send_frame(sock, {"ping": True})
            return recv_frame(sock)
    except (OSError, ProtocolError, ValueError):
        return None


class WarmProcess:
    """A command running in the warm runtime, used like `subprocess.Popen` (text stdout, and
    stderr merged into it unless started with `separate_stderr`): `pid` is its process
    group, `poll()`/`wait()`/`communicate()` as Popen's."""

    def __init__(self, sock: socket.socket, pid: int, stdout: IO[str], stderr: IO[str] | None = None):
        self._sock = sock
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def _read_exit(self, timeout_s: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        ready, _, _ = select.select([self._sock], [], [], timeout_s)
        if not ready:
            return None
        try:
            message = recv_frame(self._sock)
        except (OSError, ProtocolError, ValueError):
            message = None
        # No exit frame: the server's side of this command is gone; report it as killed.
        self.returncode = int(message["exit"]) if message and "exit" in message else -9
        self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._read_exit(0)

    def wait(self, timeout: float | None = None) -> int:
        rc = self._read_exit(timeout)
        if rc is None:
            raise subprocess.TimeoutExpired("warm runtime command", timeout)
        return rc

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """(stdout, stderr) once the command ends; past `timeout` its process group is killed
        and TimeoutExpired raised, as `subprocess.run` does."""
        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        texts: list[str] = ["" for _ in streams]

        def drain(i: int) -> None:
            texts[i] = streams[i].read()

        readers = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(len(streams))]
        for r in readers:
            r.start()
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, 9)
            except ProcessLookupError:
                pass
            raise
        for r in readers:
            r.join()
        for stream in streams:
            stream.close()
        return texts[0], (texts[1] if self.stderr is not None else None)


def start(
    cmd: Sequence[str], env: Mapping[str, str], cwd: str, *, socket_path: str | None = None,
    say: Callable[[str], None] = lambda _msg: None, repo: str = source_hash.REPO, separate_stderr: bool = False,
) -> WarmProcess | None:
    """Starts `cmd` (`<tfx python> -m retrain.cli ...`) in the warm runtime; None where there
    is none, or it refused (then `say` says why and the caller runs the command cold).
    Only `python -m MODULE` commands can run warm; the server says which modules it runs."""
    path = socket_path if socket_path is not None else env.get(SOCKET_ENV)
    if not path or len(cmd) < 3 or cmd[1] != "-m" or not os.path.exists(path):
        return None
    request = {"module": cmd[2], "argv": list(cmd[3:]), "python": cmd[0], "env": dict(env), "cwd": cwd,
               "fingerprint": source_hash.runtime_fingerprint(repo)}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pipes = [os.pipe() for _ in range(2 if separate_stderr else 1)]

    def close_read_ends() -> None:
        for read_end, _ in pipes:
            os.close(read_end)

    try:
        sock.settimeout(5.0)
        sock.connect(path)
        send_fds(sock, [write_end for _, write_end in pipes])
        send_frame(sock, request)
        reply = recv_frame(sock)
    except (OSError, ProtocolError, ValueError) as e:
        sock.close()
        close_read_ends()
        say(f"warm TFX runtime at {path} did not answer ({e}); starting a cold process")
        return None
    finally:
        for _, write_end in pipes:
            os.close(write_end)
    if not reply or "pid" not in reply:
        sock.close()
        close_read_ends()
        say(f"warm TFX runtime refused: {(reply or {}).get('refused', 'no answer')}; starting a cold process")
        return None
    sock.settimeout(None)
    streams = [os.fdopen(read_end, "r", buffering=1, errors="replace") for read_end, _ in pipes]
    return WarmProcess(sock, int(reply["pid"]), streams[0], streams[1] if separate_stderr else None)
