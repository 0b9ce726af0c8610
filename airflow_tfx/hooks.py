"""`TfxRuntimeHook`: how a `retrain` command runs in the TFX runtime, for any task.

Airflow's convention (as in its providers): a hook owns the connection to an outside
system, operators only hold their templated fields and call it. The outside system here
is the TFX runtime, another Python (locally the project's `.venv`, in production the
container image). The hook
- builds the command (`RETRAIN_TFX_PYTHON -m retrain.cli ...`, blank optional options
  dropped);
- hands the command ML Metadata's URL and password from the `retrain_metadata` Airflow
  connection, in its environment only (never on its command line, which the log shows);
- runs it forked by the warm TFX runtime where one answers (no ~15 s of imports), else in
  a cold interpreter, in its own process group either way;
- streams its lines to the task log and returns (exit code, lines, the `RESULT` line);
- stops the whole group on a timeout or kill.
The pod execution (airflow_tfx/pods.py) runs the same command through
KubernetesPodOperator, whose own hook talks to the cluster.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import urllib.parse
from collections.abc import Sequence
from typing import Any, NamedTuple

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_tfx.compiled_dag import REPO
from core import metadata
from core.results import NodeResult, parse_result_line
from task_host import client as warm

# Which interpreter runs TFX work: read when a task runs, never at DAG-parse time.
TFX_PYTHON_ENV = "RETRAIN_TFX_PYTHON"
DEFAULT_TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
# ML Metadata's URL with its password, when the deployment keeps it in an Airflow
# connection (else the worker's RETRAIN_METADATA_URL / RETRAIN_METADATA_PASSWORD apply).
METADATA_CONN_ID = "retrain_metadata"


class CommandRun(NamedTuple):
    """What a finished command left: its exit code, its output lines (the `RESULT` line
    taken out) and that line's node result, if it printed one."""

    rc: int
    lines: list[str]
    result: NodeResult | None


def tfx_entrypoint() -> list[str]:
    """The command prefix that runs the `retrain` CLI in the TFX runtime."""
    return [os.environ.get(TFX_PYTHON_ENV, DEFAULT_TFX_PYTHON), "-m", "retrain.cli"]


def drop_empty_options(args: Sequence[str]) -> list[str]:
    """Removes `--flag ""` pairs, so templated optional Params can be left blank."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and args[i + 1] in ("", "None"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


class TfxRuntimeHook(BaseHook):
    """Runs `retrain` commands in the TFX runtime for one task (see the module's doc).

    Args:
      entrypoint: the command prefix (default: `tfx_entrypoint()`, read when the task runs).
      task_log: where the command's lines go (the task's logger; the hook's own otherwise).
    """

    conn_name_attr = "metadata_conn_id"
    default_conn_name = METADATA_CONN_ID
    hook_name = "TFX runtime (retrain)"

    def __init__(self, entrypoint: Sequence[str] | None = None, task_log: Any = None,
                 metadata_conn_id: str = METADATA_CONN_ID):
        super().__init__()
        self.entrypoint = list(entrypoint) if entrypoint else None
        self.metadata_conn_id = metadata_conn_id
        self._task_log = task_log
        self._proc: subprocess.Popen | warm.WarmProcess | None = None

    @property
    def task_log(self):
        return self._task_log or self.log

    def get_conn(self) -> dict[str, str]:
        """The TFX runtime's metadata settings from the connection, if any (an environment)."""
        try:
            conn = self.get_connection(self.metadata_conn_id)
        except AirflowNotFoundException:
            return {}
        # Built from the fields (the URI scheme depends on which providers are installed).
        user = urllib.parse.quote(conn.login or "", safe="")
        password = urllib.parse.quote(conn.password or "", safe="")
        where = f"{conn.host}:{conn.port or 3306}" if conn.host else ""
        query = f"?socket={urllib.parse.quote(conn.extra_dejson['socket'])}" if conn.extra_dejson.get("socket") else ""
        return {metadata.URL_ENV: f"mysql://{user}:{password}@{where}/{conn.schema}{query}"}

    def command(self, arguments: Sequence[str]) -> list[str]:
        return (self.entrypoint or tfx_entrypoint()) + drop_empty_options(arguments)

    def run(self, arguments: Sequence[str]) -> CommandRun:
        """Runs `retrain <arguments>`, streaming its lines to the task log."""
        cmd = self.command(arguments)
        log = self.task_log
        log.info("TFX runtime: %s", shlex.join(cmd))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.get_conn()}
        self._proc = warm.start(cmd, env, REPO, say=log.warning)
        if self._proc is not None:
            log.info("warm TFX runtime: started as process group %d", self._proc.pid)
        else:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                cwd=REPO, start_new_session=True, env=env,
            )
        lines, result = [], None
        try:
            for line in self._proc.stdout:
                line = line.rstrip("\n")
                parsed = parse_result_line(line)
                if parsed is not None:
                    result = parsed
                else:
                    lines.append(line)
                    log.info("%s", line)
            rc = self._proc.wait()
        except BaseException:  # timeout (AirflowTaskTimeout) or kill: stop the whole group
            self.kill()
            raise
        return CommandRun(rc, lines, result)

    def kill(self) -> None:
        """Stops the running command's process group (SIGTERM, then SIGKILL after 10 s)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self.task_log.warning("Stopping the TFX runtime process group %d", proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
