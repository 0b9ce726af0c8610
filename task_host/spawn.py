"""Start a warm TFX runtime and wait until it answers; stop it (scripts, tests, benchmarks).

    proc = spawn.start_warm_runtime(sock, python=".venv/bin/python", log="server.log")
    ...
    spawn.stop(proc)

The runtime runs in its own process group (`start_new_session`), so `stop` ends it and every
command it forked. scripts/airflow.sh does the same in shell, with `--ping`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from core import project
from task_host import client

REPO = project.ROOT


class NotReady(RuntimeError):
    """The warm runtime exited or did not answer in time; carries the end of its log."""


def start_warm_runtime(socket_path: str, python: str = sys.executable, args: Sequence[str] = (),
                       env: Mapping[str, str] | None = None, cwd: str = REPO, log: str | None = None,
                       timeout_s: float = 300.0, poll_s: float = 0.5) -> subprocess.Popen:
    """`python -m task_host.warm_server --socket SOCKET ARGS`, once its ping answers.

    Raises:
      NotReady: it exited first or did not answer within `timeout_s` (then it is stopped).
    """
    out = open(log, "w") if log else subprocess.DEVNULL
    try:
        proc = subprocess.Popen([python, "-m", "task_host.warm_server", "--socket", socket_path, *args], cwd=cwd,
                                env=dict(os.environ if env is None else env), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        if log:
            out.close()
    deadline = time.monotonic() + timeout_s
    while client.ping(socket_path) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            why = "exited" if proc.poll() is not None else f"did not answer in {timeout_s:.0f} s"
            stop(proc)
            tail = open(log, encoding="utf-8", errors="replace").read()[-3000:] if log else ""
            raise NotReady(f"the warm TFX runtime at {socket_path} {why}" + (f":\n{tail}" if tail else ""))
        time.sleep(poll_s)
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """SIGTERM to the runtime's process group (its forked commands too); SIGKILL after `timeout_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout_s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
