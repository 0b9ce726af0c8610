"""Entry point of a TFX-runtime pod: one `retrain` command, its answer left for Airflow.

    python -m task_host.pod [--reply PATH] -- <retrain arguments>

Runs `retrain <arguments>` as a child, streams its output to the pod's log (the
KubernetesPodOperator shows it in the task log), and writes the exit code, the `RESULT`
line and the last lines to PATH (default /airflow/xcom/return.json, which the operator's
xcom sidecar reads). Exits 0 once the answer is written, so a gate stop or a bad input
reaches Airflow as what it is (airflow_tfx/operators.py maps it exactly as for a local
process) instead of as "the pod failed". SIGTERM (the pod deleted, the task killed) is
passed on to the command's process group.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys

from core import results
from core.files import write_text

# A pod's answer (main() below writes it where the KubernetesPodOperator's xcom sidecar
# reads it): the command's exit code, its RESULT line and its last lines. The container
# itself exits 0 once it has written this; a pod that dies before is an infrastructure
# failure, retried as such.
POD_REPLY_PATH = "/airflow/xcom/return.json"
POD_TAIL_LINES = 20


def pod_reply(exit_code: int, result_line_text: str | None, tail: list[str]) -> dict:
    return {"exit_code": exit_code, "result_line": result_line_text, "tail": list(tail)[-POD_TAIL_LINES:]}


def read_pod_reply(reply: dict) -> tuple[int, list[str], results.NodeResult | None]:
    """(exit code, last lines, node result or None) from a pod's answer.

    Raises:
      ValueError: not a pod answer (e.g. the pod ran something else).
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("exit_code"), int):
        raise ValueError(f"not a retrain pod answer: {reply!r:.200}")
    line = reply.get("result_line")
    return reply["exit_code"], list(reply.get("tail") or []), results.parse_result_line(line) if line else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="task_host.pod", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reply", default=POD_REPLY_PATH, help="where to write the answer")
    parser.add_argument("--module", default="retrain.cli", help="the CLI module to run (tests use a stand-in)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="-- then the retrain command's arguments")
    args = parser.parse_args(argv)
    command = args.arguments[1:] if args.arguments[:1] == ["--"] else args.arguments
    if not command:
        parser.error("no retrain command given (e.g. -- node run --workdir ... --node Trainer)")
    proc = subprocess.Popen([sys.executable, "-m", args.module, *command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)

    def stop(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tail: collections.deque[str] = collections.deque(maxlen=POD_TAIL_LINES)
    result_line = None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        line = line.rstrip("\n")
        if results.parse_result_line(line) is not None:
            result_line = line
        else:
            tail.append(line)
    rc = proc.wait()
    os.makedirs(os.path.dirname(os.path.abspath(args.reply)), exist_ok=True)
    write_text(args.reply, json.dumps(pod_reply(rc, result_line, list(tail))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
