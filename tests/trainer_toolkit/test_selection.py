"""Strategy and precision choice from mocked hardware and TF_CONFIG; settings validation."""

import json

import pytest

from trainer_toolkit import hardware, precision, strategy
from trainer_toolkit.hardware import Cluster, Gpu, Hardware
from trainer_toolkit.settings import TrainerSettings

A100, H200, T4, P100 = Gpu("A100", (8, 0)), Gpu("H200", (9, 0)), Gpu("T4", (7, 5)), Gpu("P100", (6, 0))
CLUSTER = Cluster(num_workers=2, task_type="worker", task_index=0)


def _tf_config(workers=2, index=1, task_type="worker"):
    return json.dumps({
        "cluster": {"worker": [f"localhost:{2000 + i}" for i in range(workers)]},
        "task": {"type": task_type, "index": index},
    })


def test_tf_config_parsing():
    assert hardware.parse_tf_config(None) is None
    assert hardware.parse_tf_config(_tf_config(workers=1, index=0)) is None  # one worker: no cluster
    cluster = hardware.parse_tf_config(_tf_config(workers=3, index=1))
    assert cluster == Cluster(num_workers=3, task_type="worker", task_index=1)
    assert not cluster.is_chief
    assert hardware.parse_tf_config(_tf_config(index=0)).is_chief
    chief = json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief", "index": 0}})
    assert hardware.parse_tf_config(chief) == Cluster(2, "chief", 0)


@pytest.mark.parametrize(
    "raw, message",
    [("{not json", "not valid JSON"), (json.dumps({"cluster": {"worker": ["a:1", "b:1"]}}), "no task"),
     (_tf_config(index=5), "not in its cluster")],
)
def test_bad_tf_config_is_named(raw, message):
    with pytest.raises(hardware.HardwareError, match=message):
        hardware.parse_tf_config(raw)


@pytest.mark.parametrize(
    "hw, name, devices",
    [
        (Hardware(), "default", ()),
        (Hardware(gpus=(A100,)), "one_device", ("/gpu:0",)),
        (Hardware(gpus=(A100, A100, A100, A100)), "mirrored", ("/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3")),
        (Hardware(gpus=(H200,), cluster=CLUSTER), "multi_worker", ("/gpu:0",)),
        (Hardware(cluster=CLUSTER), "multi_worker", ()),
    ],
)
def test_auto_strategy(hw, name, devices):
    choice = strategy.choose_strategy("auto", hw)
    assert (choice.name, choice.devices) == (name, devices)


def test_explicit_strategy_wins_and_impossible_requests_fail():
    two_cpus = Hardware(num_logical_cpus=2)
    assert strategy.choose_strategy("mirrored", two_cpus).devices == ("/cpu:0", "/cpu:1")
    assert strategy.choose_strategy("default", Hardware(gpus=(A100, A100))).name == "default"
    assert strategy.choose_strategy("one_device", two_cpus).devices == ("/cpu:0",)
    with pytest.raises(ValueError, match="multi_worker needs a TF_CONFIG"):
        strategy.choose_strategy("multi_worker", two_cpus)
    with pytest.raises(ValueError, match="'tpu_pod' is not one of"):
        strategy.choose_strategy("tpu_pod", two_cpus)


def _never():
    raise AssertionError("the bf16 probe must not run here")


@pytest.mark.parametrize(
    "hw, probe, policy",
    [
        (Hardware(gpus=(H200,)), _never, "mixed_float16"),
        (Hardware(gpus=(T4, A100)), _never, "mixed_float16"),
        (Hardware(gpus=(P100,)), _never, "float32"),  # no tensor cores
        (Hardware(gpus=(Gpu("unknown"),)), _never, "float32"),
        (Hardware(num_tpu_cores=8), _never, "mixed_bfloat16"),
        (Hardware(cpu_flags=frozenset({"avx2"})), _never, "float32"),
        (Hardware(cpu_flags=frozenset({"avx512_bf16"})), lambda: 2.2, "mixed_bfloat16"),
        (Hardware(cpu_flags=frozenset({"amx_bf16"})), lambda: 1.1, "float32"),  # measured: no gain
    ],
)
def test_auto_precision(hw, probe, policy):
    assert precision.choose_precision("auto", hw, probe_bf16_speedup=probe).policy == policy


def test_explicit_precision_wins():
    assert precision.choose_precision("float32", Hardware(gpus=(H200,)), _never).policy == "float32"
    assert precision.choose_precision("mixed_float16", Hardware(), _never).policy == "mixed_float16"
    with pytest.raises(ValueError, match="'fp8' is not one of"):
        precision.choose_precision("fp8", Hardware())


def test_settings_from_custom_config():
    s = TrainerSettings.from_custom_config({"trainer": {"strategy": "mirrored", "profile_steps": [5, 10]}})
    assert (s.strategy, s.profile_steps, s.precision) == ("mirrored", (5, 10), "auto")
    assert TrainerSettings.from_custom_config(None) == TrainerSettings()
    for bad, message in [
        ({"strategi": "auto"}, r"trainer: unknown key\(s\) strategi \(did you mean strategy\?"),
        ({"precision": "half"}, "trainer.precision"),
        ({"profile_steps": [10, 5]}, "profile_steps"),
        ({"backup_every_steps": -1}, "backup_every_steps"),
    ]:
        with pytest.raises(ValueError, match=message):
            TrainerSettings.from_custom_config({"trainer": bad})
