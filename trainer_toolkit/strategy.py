"""Chooses the tf.distribute strategy for the hardware, and builds it."""

from __future__ import annotations

import dataclasses
from typing import Literal

from trainer_toolkit.hardware import Hardware

StrategyName = Literal["auto", "default", "one_device", "mirrored", "multi_worker"]
STRATEGY_NAMES = ("auto", "default", "one_device", "mirrored", "multi_worker")


@dataclasses.dataclass(frozen=True)
class StrategyChoice:
    name: str  # one of STRATEGY_NAMES other than "auto"
    devices: tuple[str, ...]  # the devices of this worker's replicas ("" = TF's default)
    reason: str


def choose_strategy(requested: str, hw: Hardware) -> StrategyChoice:
    """Picks the strategy: multi-worker when TF_CONFIG names a cluster, mirrored over
    several GPUs, one device on a single GPU, TF's default strategy on CPU.

    An explicit request wins; "mirrored" on a machine without GPUs mirrors over the
    logical CPU devices (how the CPU tests exercise it).

    Raises:
      ValueError: unknown name, or a request the hardware cannot satisfy.
    """
    if requested not in STRATEGY_NAMES:
        raise ValueError(f"trainer.strategy: {requested!r} is not one of {list(STRATEGY_NAMES)}")
    gpus = tuple(f"/gpu:{i}" for i in range(len(hw.gpus)))
    cpus = tuple(f"/cpu:{i}" for i in range(hw.num_logical_cpus))
    if requested == "auto":
        if hw.cluster is not None:
            return StrategyChoice("multi_worker", gpus, f"TF_CONFIG names {hw.cluster.num_workers} workers")
        if len(gpus) > 1:
            return StrategyChoice("mirrored", gpus, f"{len(gpus)} GPUs")
        if len(gpus) == 1:
            return StrategyChoice("one_device", gpus, "one GPU")
        return StrategyChoice("default", (), "no GPU")
    if requested == "multi_worker":
        if hw.cluster is None:
            raise ValueError("trainer.strategy: multi_worker needs a TF_CONFIG naming 2 or more workers")
        return StrategyChoice("multi_worker", gpus, "requested in config")
    if requested == "mirrored":
        return StrategyChoice("mirrored", gpus or cpus, "requested in config")
    if requested == "one_device":
        return StrategyChoice("one_device", gpus[:1] or ("/cpu:0",), "requested in config")
    return StrategyChoice("default", (), "requested in config")


def create_strategy(choice: StrategyChoice):
    """The tf.distribute strategy object for a choice (imports TensorFlow).

    A MultiWorkerMirroredStrategy must be created before any other TF op of the process.
    """
    import tensorflow as tf

    if choice.name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if choice.name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(choice.devices))
    if choice.name == "one_device":
        return tf.distribute.OneDeviceStrategy(choice.devices[0])
    return tf.distribute.get_strategy()
