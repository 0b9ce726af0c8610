"""The test suite's budget, measured as CI meets it: `make test` in a fresh clone of a commit.

Clones the repository at COMMIT (default HEAD) into a scratch folder, runs `make test` there
(set-up of the three environments, Debian's packages, templates, services, then the lanes)
and prints what the issue's budget is about:

- wall time of the whole `make test`, and of each lane (pytest's own figure per lane);
- the machine's busy CPU-seconds over the run, read from /proc/stat: it counts what
  `time` misses, the daemons a test starts in their own session (Airflow standalone and
  cluster, their tasks, the database servers), so run nothing else meanwhile;
- the tests passed and failed per lane, and the slowest tests (pytest --durations).

    python3 benchmarks/suite/run.py [--commit SHA] [--keep] [--top 25]

Exit status: that of `make test`. The clone is removed unless --keep; its log is kept
beside it (the path is printed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LANE = re.compile(r"^\[(?P<lane>[\w-]+)\] =+ (?P<summary>.*) in (?P<secs>[\d.]+)s")
DURATION = re.compile(r"^\[(?P<lane>[\w-]+)\] (?P<secs>[\d.]+)s (?P<phase>call|setup|teardown) +(?P<test>\S.*)$")


def busy_cpu_seconds() -> float:
    """The machine's busy CPU time so far (every core, every process), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = (fields + [0] * 7)[:7]  # steal: another guest's, not ours
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def counts(summary: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its venvs make a second run a rerun)")
    parser.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list")
    args = parser.parse_args()

    commit = subprocess.run(["git", "-C", REPO, "rev-parse", args.commit], capture_output=True, text=True,
                            check=True).stdout.strip()
    clone = tempfile.mkdtemp(prefix="suite-")
    # Readable by others, as a clone in the open is: the database servers run as their own
    # users (postgres) and keep their data under the clone's .services/.
    os.chmod(clone, 0o755)
    log_path = clone.rstrip("/") + ".log"
    subprocess.run(["git", "clone", "-q", REPO, clone], check=True)
    subprocess.run(["git", "-C", clone, "checkout", "-q", commit], check=True)
    print(f"make test at {commit[:10]} in {clone} (log: {log_path})", file=sys.stderr)
    cpu0, t0 = busy_cpu_seconds(), time.monotonic()
    with open(log_path, "w", buffering=1) as log:  # line by line: `tail -f` shows the lanes as they go
        proc = subprocess.Popen(["make", "test", "PYTEST_ARGS=--durations=0"], cwd=clone, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lanes: dict[str, tuple[float, str]] = {}
        for line in proc.stdout:
            log.write(line)
            match = LANE.match(line.strip())
            if match:
                lanes[match["lane"]] = (float(match["secs"]), match["summary"])
                print(f"  {match['lane']}: {match['summary']} in {float(match['secs']):.0f} s "
                      f"({(time.monotonic() - t0) / 60:.1f} min in)", file=sys.stderr)
        rc = proc.wait()
    wall, cpu = time.monotonic() - t0, busy_cpu_seconds() - cpu0

    durations = []
    with open(log_path) as f:
        for line in f:
            match = DURATION.match(line.rstrip())
            if match:
                durations.append((float(match["secs"]), match["lane"], match["phase"], match["test"]))
    durations.sort(reverse=True)
    total = {}
    for _, summary in lanes.values():
        for word, n in counts(summary).items():
            total[word] = total.get(word, 0) + n

    print(f"commit {commit[:10]}  make test exit {rc}")
    print(f"wall {wall / 60:.1f} min ({wall:.0f} s); machine busy {cpu:.0f} CPU-s on {os.cpu_count()} cores "
          f"({cpu / wall / os.cpu_count():.0%} of them)")
    print("tests " + ", ".join(f"{n} {w}" for w, n in sorted(total.items())))
    for lane, (secs, summary) in sorted(lanes.items()):
        print(f"  lane {lane:<8} {secs:7.0f} s  {summary}")
    print(f"slowest {min(args.top, len(durations))} (lane, phase, seconds):")
    for secs, lane, phase, test in durations[: args.top]:
        print(f"  {secs:7.1f}  {lane:<8} {phase:<8} {test}")
    if not args.keep:  # `make test` stopped the clone's database servers, whatever its result
        shutil.rmtree(clone, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
