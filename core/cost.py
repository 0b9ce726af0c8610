"""What a node cost to run: CPU-seconds, peak memory, accelerator-seconds and energy.

`measure()` wraps one node's execution (runner/node_runner.py) in the process that runs it:

- CPU-seconds: user + system time of this process and of the children it waited for
  (Beam's multi-processing workers, a serving check's server), from getrusage;
- peak memory: the process's high-water mark (VmHWM, reset before the node by writing 5
  to /proc/self/clear_refs, so it is this node's peak) and the largest child's;
- accelerator-seconds: wall seconds times the GPUs visible to the process, for the nodes
  that train (runner/node_runner.py ACCELERATED_NODES; 0 on CPU and for the others);
- energy, by one of two methods, named in every figure (`energy_method`):
  - `rapl`: the CPU packages' and DRAM's energy counters (Intel RAPL, powercap's
    `/sys/class/powercap/intel-rapl:*/energy_uj`) read before and after the node: the whole
    machine's CPU energy while the node ran, measured (GPUs at `GPU_WATTS` per
    accelerator-second are added, estimated);
  - `tdp-estimate`: CodeCarbon's method where no counter is readable (virtual machines,
    AMD without powercap): the CPU's thermal design power shared by its cores, times the
    CPU-seconds (`TDP_WATTS` / cores per CPU-second; CodeCarbon's default TDP, 85 W, when
    the model is unknown), plus memory at CodeCarbon's 0.375 W per GB of peak RSS for the
    wall time; GPUs at `GPU_WATTS` each per accelerator-second. An estimate, not a reading.

TensorFlow-free; reads only /proc and /sys.
"""

from __future__ import annotations

import contextlib
import glob
import os
import resource
import time
from collections.abc import Iterator

# CodeCarbon's fallback TDP for a CPU it cannot identify (watts), and its memory power.
TDP_WATTS = float(os.environ.get("RETRAIN_CPU_TDP_WATTS", "85"))
RAM_WATTS_PER_GB = 0.375
# A data-centre GPU's board power (an H100/H200 SXM is rated 700 W; we take a mid-load 300 W).
GPU_WATTS = float(os.environ.get("RETRAIN_GPU_WATTS", "300"))
RAPL_GLOB = "/sys/class/powercap/intel-rapl:*/energy_uj"
METHODS = ("rapl", "tdp-estimate")


def _rapl_files() -> list[str]:
    """The top-level RAPL domains (packages and DRAM) whose counters this process can read."""
    out = []
    for path in sorted(glob.glob(RAPL_GLOB)):
        if path.count(":") != 1:  # intel-rapl:0:1 (a core domain) is inside its package
            continue
        try:
            with open(path) as f:
                int(f.read())
            out.append(path)
        except (OSError, ValueError):
            continue
    return out


def _rapl_read(paths: list[str]) -> dict[str, int]:
    out = {}
    for path in paths:
        with open(path) as f:
            out[path] = int(f.read())
    return out


def _rapl_joules(before: dict[str, int], after: dict[str, int]) -> float:
    total = 0
    for path, start in before.items():
        end = after[path]
        if end < start:  # the counter wrapped: add its range
            with open(os.path.join(os.path.dirname(path), "max_energy_range_uj")) as f:
                end += int(f.read())
        total += end - start
    return total / 1e6


def _reset_peak() -> bool:
    """Resets this process's VmHWM (Linux 4.0+); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gpus_visible() -> int:
    """The NVIDIA GPUs this process can use (CUDA_VISIBLE_DEVICES honoured), without CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len(glob.glob("/dev/nvidia[0-9]*"))


def estimate_joules(cpu_seconds: float, wall_seconds: float, peak_rss_bytes: int, accelerator_seconds: float,
                    cores: int | None = None) -> float:
    """The `tdp-estimate` method (the module docstring): CPU share of TDP, memory, GPUs."""
    cores = cores or os.cpu_count() or 1
    return (cpu_seconds * TDP_WATTS / cores + wall_seconds * RAM_WATTS_PER_GB * peak_rss_bytes / 1e9
            + accelerator_seconds * GPU_WATTS)


@contextlib.contextmanager
def measure(accelerated: bool = True) -> Iterator[dict]:
    """Measures the block; the yielded dict is filled when it ends (even on an exception):
    cpu_seconds, peak_rss_mb, accelerator_seconds, energy_j, energy_method, wall_seconds.

    Args:
      accelerated: whether the block may use the visible GPUs (the Trainer, the Tuner):
        only then is it charged accelerator-seconds (wall time times the GPUs)."""
    figures: dict = {}
    rapl = _rapl_files()
    reset = _reset_peak()
    self0, children0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    energy0 = _rapl_read(rapl) if rapl else {}
    start = time.monotonic()
    try:
        yield figures
    finally:
        wall = time.monotonic() - start
        self1, children1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (self1.ru_utime - self0.ru_utime + self1.ru_stime - self0.ru_stime
               + children1.ru_utime - children0.ru_utime + children1.ru_stime - children0.ru_stime)
        peak = _peak_rss_bytes() if reset else 0
        if children1.ru_maxrss > children0.ru_maxrss:
            peak = max(peak, children1.ru_maxrss * 1024)
        accelerator = wall * gpus_visible() if accelerated else 0.0
        if rapl:
            joules, method = _rapl_joules(energy0, _rapl_read(rapl)) + accelerator * GPU_WATTS, "rapl"
        else:
            joules, method = estimate_joules(cpu, wall, peak, accelerator), "tdp-estimate"
        figures.update(cpu_seconds=round(cpu, 3), peak_rss_mb=round(peak / 2**20, 1) if peak else None,
                       accelerator_seconds=round(accelerator, 3), energy_j=round(joules, 1), energy_method=method,
                       wall_seconds=round(wall, 3))


def total(per_node: dict[str, dict]) -> dict | None:
    """A run's cost from its nodes' (sums; the largest peak; the methods used)."""
    nodes = {k: v for k, v in per_node.items() if v}
    if not nodes:
        return None
    peaks = [v["peak_rss_mb"] for v in nodes.values() if v.get("peak_rss_mb")]
    return {
        "cpu_seconds": round(sum(v.get("cpu_seconds") or 0 for v in nodes.values()), 3),
        "accelerator_seconds": round(sum(v.get("accelerator_seconds") or 0 for v in nodes.values()), 3),
        "energy_j": round(sum(v.get("energy_j") or 0 for v in nodes.values()), 1),
        "peak_rss_mb": max(peaks) if peaks else None,
        "energy_method": ", ".join(sorted({v.get("energy_method") for v in nodes.values() if v.get("energy_method")})),
        "nodes": nodes,
    }
