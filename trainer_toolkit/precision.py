"""Chooses the Keras mixed-precision policy for the hardware, and applies it.

float16 needs tensor cores (compute capability 7.0+) to be fast; bfloat16 is fast on TPUs
and on CPUs with AMX or AVX512-BF16, but on a CPU only for models with enough matrix work,
so there it is chosen only when a quick matmul probe on this machine shows a gain.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from trainer_toolkit.hardware import Hardware

PRECISION_NAMES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# bf16 must beat float32 by this factor on the probe to be worth the casts around it.
_MIN_BF16_SPEEDUP = 1.3


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    policy: str  # a Keras policy name: float32, mixed_float16 or mixed_bfloat16
    reason: str


def choose_precision(
    requested: str,
    hw: Hardware,
    probe_bf16_speedup: Callable[[], float] | None = None,
) -> PrecisionChoice:
    """Picks the policy: mixed_float16 on GPUs of compute capability 7.0+, mixed_bfloat16
    on TPUs or on bf16-capable CPUs where the probe measures a gain, float32 otherwise.

    Args:
      requested: "auto" or a policy name (an explicit policy wins).
      hw: the hardware.
      probe_bf16_speedup: measures bf16/float32 speed on this CPU (called only when the
        CPU has bf16 instructions and there is no accelerator).

    Raises:
      ValueError: unknown name.
    """
    if requested not in PRECISION_NAMES:
        raise ValueError(f"trainer.precision: {requested!r} is not one of {list(PRECISION_NAMES)}")
    if requested != "auto":
        return PrecisionChoice(requested, "requested in config")
    if hw.num_tpu_cores:
        return PrecisionChoice("mixed_bfloat16", "TPU")
    if hw.gpus:
        capabilities = [g.compute_capability for g in hw.gpus]
        if all(c is not None and c >= (7, 0) for c in capabilities):
            return PrecisionChoice("mixed_float16", f"GPU compute capability {min(capabilities)}")
        return PrecisionChoice("float32", f"GPU compute capability {capabilities} below 7.0")
    bf16_flags = sorted(hw.cpu_flags & _BF16_CPU_FLAGS)
    if not bf16_flags:
        return PrecisionChoice("float32", "CPU without bf16 instructions")
    if probe_bf16_speedup is None:
        return PrecisionChoice("float32", f"CPU has {', '.join(bf16_flags)}; not measured")
    speedup = probe_bf16_speedup()
    if speedup >= _MIN_BF16_SPEEDUP:
        return PrecisionChoice("mixed_bfloat16", f"CPU {', '.join(bf16_flags)}: bf16 matmul {speedup:.2f}x float32")
    return PrecisionChoice("float32", f"CPU {', '.join(bf16_flags)}: bf16 matmul only {speedup:.2f}x float32")


def probe_cpu_bf16_speedup(size: int = 512, repeats: int = 20) -> float:
    """float32 time / bfloat16 time of a square matmul on this CPU (about a second)."""
    import tensorflow as tf

    def timed(dtype) -> float:
        a = tf.random.stateless_normal((size, size), seed=(1, 2), dtype=tf.float32)
        a = tf.cast(a, dtype)
        matmul = tf.function(lambda x: tf.linalg.matmul(x, x))
        matmul(a).numpy()  # trace and warm up
        start = time.perf_counter()
        for _ in range(repeats):
            result = matmul(a)
        result.numpy()
        return time.perf_counter() - start

    with tf.device("/cpu:0"):
        return timed(tf.float32) / timed(tf.bfloat16)


def apply_policy(policy: str) -> None:
    """Sets the global Keras policy (before the model is built)."""
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy(policy)
