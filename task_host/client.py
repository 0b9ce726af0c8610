"""The warm TFX runtime's client (TF-free: Airflow's operators, the tests and the benchmarks
use it): `ping` a server, `start` a command in it (a `subprocess.Popen`-like WarmProcess),
or None where the command must run cold (refused, or no server). The wire format is
task_host/protocol.py's."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from core import source_hash
from task_host.protocol import (
    SOCKET_ENV,
    ProtocolError,
    recv_frame,
    send_fds,
    send_frame,
)


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

    def __init__(self, sock: socket.socket, pid: int, stdout: IO[str] | None, stderr: IO[str] | None = None):
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

    def send_signal(self, sig: int) -> None:
        """To the command's process group (what it started goes too)."""
        if self.returncode is None:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

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
    output: IO | None = None,
) -> WarmProcess | None:
    """Starts `cmd` (`<tfx python> -m retrain.cli ...`) in the warm runtime; None where there
    is none, or it refused (then `say` says why and the caller runs the command cold).
    Only `python -m MODULE` commands can run warm; the server says which modules it runs.
    With `output` (an open file), the command writes stdout and stderr there, as
    `Popen(stdout=output, stderr=STDOUT)` would, instead of to the WarmProcess's pipe."""
    path = socket_path if socket_path is not None else env.get(SOCKET_ENV)
    if not path or len(cmd) < 3 or cmd[1] != "-m" or not os.path.exists(path):
        return None
    request = {"module": cmd[2], "argv": list(cmd[3:]), "python": cmd[0], "env": dict(env), "cwd": cwd,
               "fingerprint": source_hash.runtime_fingerprint(repo)}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if output is not None:
        output.flush()
        pipes = [(-1, os.dup(output.fileno()))]  # no read end: the file is the output
    else:
        pipes = [os.pipe() for _ in range(2 if separate_stderr else 1)]

    def close_read_ends() -> None:
        for read_end, _ in pipes:
            if read_end >= 0:
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
    if output is not None:
        return WarmProcess(sock, int(reply["pid"]), None)
    streams = [os.fdopen(read_end, "r", buffering=1, errors="replace") for read_end, _ in pipes]
    return WarmProcess(sock, int(reply["pid"]), streams[0], streams[1] if separate_stderr else None)
