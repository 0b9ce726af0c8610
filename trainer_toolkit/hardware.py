"""What a training process runs on: GPUs, TPUs, CPU instruction sets and the TF_CONFIG cluster."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any


class HardwareError(ValueError):
    """The environment describes an impossible set-up (e.g. a malformed TF_CONFIG)."""


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    # (major, minor), e.g. (9, 0) for an H100/H200, (8, 0) for an A100; None if unknown.
    compute_capability: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The multi-worker cluster a TF_CONFIG names, and this process' place in it."""

    num_workers: int
    task_type: str
    task_index: int

    @property
    def is_chief(self) -> bool:
        # TF's convention: an explicit "chief" task, else worker 0.
        return self.task_type == "chief" or (self.task_type == "worker" and self.task_index == 0)


@dataclasses.dataclass(frozen=True)
class Hardware:
    gpus: tuple[Gpu, ...] = ()
    num_tpu_cores: int = 0
    cpu_flags: frozenset[str] = frozenset()
    num_logical_cpus: int = 1
    cluster: Cluster | None = None


def parse_tf_config(raw: str | None) -> Cluster | None:
    """The cluster of a TF_CONFIG value; None when it names no multi-worker cluster.

    Raises:
      HardwareError: TF_CONFIG is not JSON or lacks the task entry for its cluster.
    """
    if not raw:
        return None
    try:
        value: Mapping[str, Any] = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HardwareError(f"TF_CONFIG is not valid JSON: {e}") from e
    cluster = value.get("cluster") or {}
    workers = sum(len(cluster.get(kind, [])) for kind in ("chief", "worker"))
    if workers < 2:
        return None
    task = value.get("task") or {}
    if "type" not in task or "index" not in task:
        raise HardwareError("TF_CONFIG names a cluster but no task {type, index} for this process")
    if task["type"] not in cluster or task["index"] >= len(cluster[task["type"]]):
        raise HardwareError(f"TF_CONFIG task {task} is not in its cluster {sorted(cluster)}")
    return Cluster(num_workers=workers, task_type=task["type"], task_index=int(task["index"]))


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass  # not Linux: no flags means no bf16 auto-choice, which is the safe default
    return frozenset()


def detect() -> Hardware:
    """Inspects this process' devices (imports TensorFlow; starts none of its runtime).

    Raises:
      HardwareError: a malformed TF_CONFIG.
    """
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(
            Gpu(
                name=details.get("device_name", device.name),
                compute_capability=details.get("compute_capability"),
            )
        )
    # Physical devices and logical configurations only: listing logical devices would
    # start TF's runtime, after which a MultiWorkerMirroredStrategy can no longer be made.
    [cpu] = tf.config.list_physical_devices("CPU")[:1]
    return Hardware(
        gpus=tuple(gpus),
        num_tpu_cores=len(tf.config.list_physical_devices("TPU")),
        cpu_flags=cpu_flags(),
        num_logical_cpus=len(tf.config.get_logical_device_configuration(cpu) or [cpu]),
        cluster=parse_tf_config(os.environ.get("TF_CONFIG")),
    )


def enable_gpu_memory_growth() -> int:
    """Lets several jobs share a card: TF allocates GPU memory as needed, not all at start.

    Must run before anything touches a GPU. Returns the number of GPUs changed.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            # Already initialised by this process (a second job in one process): the
            # setting it started with stays.
            return 0
    return len(gpus)
