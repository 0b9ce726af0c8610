"""Runs a command and measures its whole process tree: wall time, CPU, peak memory, per node.

Memory is sampled every `interval` seconds over the command and every descendant (Beam
workers, ingestion workers, the serving check's server): the sum of RSS, and the sum of
PSS (shared pages counted once across processes, so forked or library-sharing workers are
not double counted). The `retrain run` progress lines ("[ 5/15] StatisticsGen ...")
say which node runs, so each node gets its own peak.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

_PROGRESS = re.compile(r"^\[\s*\d+/\d+\] (\S+)")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def _tree(root: int) -> list[int]:
    tree, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += tree.get(pid, [])
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of one process (0, 0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return 0, 0
    values = dict(re.findall(r"^(Rss|Pss):\s+(\d+) kB", text, re.M))
    return int(values.get("Rss", 0)) * 1024, int(values.get("Pss", 0)) * 1024


class Measured:
    def __init__(self):
        self.peak_rss = self.peak_pss = 0
        self.node_peak: dict[str, int] = {}
        self.node_cpu: dict[str, float] = {}
        self.lines: list[str] = []
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.returncode = None


def run(cmd: list[str], cwd: str, env: dict | None = None, interval: float = 0.5, echo=None) -> Measured:
    """Runs `cmd` to completion, sampling its process tree; stdout and stderr are kept."""
    m = Measured()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    current = {"node": "(start)"}
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss = pss = 0
            for pid in _tree(proc.pid):
                r, p = _memory(pid)
                rss, pss = rss + r, pss + p
            m.peak_rss, m.peak_pss = max(m.peak_rss, rss), max(m.peak_pss, pss)
            node = current["node"]
            m.node_peak[node] = max(m.node_peak.get(node, 0), pss)
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # The progress line of a node is written when it starts and ended when it ends: read
    # what arrives, not whole lines.
    pending = ""
    while chunk := os.read(proc.stdout.fileno(), 65536):
        pending += chunk.decode(errors="replace")
        *complete, pending = pending.split("\n")
        for line in complete:
            m.lines.append(line + "\n")
            if echo:
                echo(line + "\n")
        match = _PROGRESS.match(pending) or (_PROGRESS.match(complete[-1]) if complete else None)
        if match:
            current["node"] = match.group(1)
    if pending:
        m.lines.append(pending)
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    m.returncode = os.waitstatus_to_exitcode(status)
    m.seconds = time.monotonic() - start
    # wait4's usage covers the root and every descendant it (or they) waited for.
    m.cpu_seconds = usage.ru_utime + usage.ru_stime
    return m
