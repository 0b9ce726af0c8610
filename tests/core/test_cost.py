"""What a node costs (core/cost.py): CPU-seconds of the process and its children, its own
peak memory, and energy by RAPL or by the documented TDP estimate, named."""

import subprocess
import sys
import time

import pytest

from core import cost


def test_cpu_memory_and_children_are_measured_and_the_energy_method_is_named(monkeypatch):
    monkeypatch.setattr(cost, "RAPL_GLOB", "/nonexistent/energy_uj")  # no counters: the estimate
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with cost.measure() as spent:
        block = bytearray(200 * 2**20)  # 200 MB touched: the peak must see it
        block[:: 4096] = b"x" * len(block[:: 4096])
        total = sum(i * i for i in range(3_000_000))  # CPU in this process
        subprocess.run([sys.executable, "-c", "sum(i*i for i in range(3_000_000))"], check=True)  # and a child's
    assert total > 0 and len(block) == 200 * 2**20
    assert spent["cpu_seconds"] > 0.2 and spent["wall_seconds"] > 0
    assert spent["peak_rss_mb"] >= 200
    assert spent["accelerator_seconds"] == 0
    assert spent["energy_method"] == "tdp-estimate"
    expected = cost.estimate_joules(spent["cpu_seconds"], spent["wall_seconds"], spent["peak_rss_mb"] * 2**20, 0)
    assert spent["energy_j"] == pytest.approx(expected, rel=0.01, abs=0.2) and spent["energy_j"] > 0


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_the_peak_is_this_blocks_and_not_the_process_lifetimes():
    big = bytearray(300 * 2**20)
    big[:: 4096] = b"y" * len(big[:: 4096])
    del big  # the process's lifetime peak is now 300 MB above what it holds
    before = _rss_mb()
    with cost.measure() as spent:
        pass
    assert spent["peak_rss_mb"] < before + 100  # reset before the block: the 300 MB are not counted


def test_only_the_training_nodes_are_charged_the_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(cost, "RAPL_GLOB", "/nonexistent/energy_uj")
    with cost.measure(accelerated=True) as trainer:
        time.sleep(0.05)
    with cost.measure(accelerated=False) as other:
        time.sleep(0.05)
    # The figures are published rounded (seconds to 1 ms, joules to 0.1 J): compared within that
    # (two GPUs over 0.0504 s are 0.101 s, beside a wall time rounded to 0.050 s).
    assert trainer["accelerator_seconds"] == pytest.approx(2 * trainer["wall_seconds"], abs=0.0015)
    assert trainer["energy_j"] + 0.05 >= (trainer["accelerator_seconds"] - 0.0005) * cost.GPU_WATTS
    assert other["accelerator_seconds"] == 0 and other["energy_j"] < 10


def test_known_answers_of_the_estimate_and_of_rapl_counters(tmp_path, monkeypatch):
    # 85 W over 2 cores: 42.5 J per CPU-second; 1 GB for 10 s at 0.375 W/GB; a GPU-second at 300 W.
    assert cost.estimate_joules(2.0, 10.0, 10**9, 1.0, cores=2) == pytest.approx(2 * 42.5 + 3.75 + 300)
    domain = tmp_path / "intel-rapl:0"
    domain.mkdir()
    (domain / "energy_uj").write_text("1000000")
    (domain / "max_energy_range_uj").write_text("2000000")
    monkeypatch.setattr(cost, "RAPL_GLOB", str(tmp_path / "intel-rapl:*" / "energy_uj"))
    with cost.measure() as spent:
        (domain / "energy_uj").write_text("500000")  # wrapped: 1.0 J to the top, then 0.5 J
    assert spent["energy_method"] == "rapl" and spent["energy_j"] == pytest.approx(1.5)


def test_a_run_total_sums_its_nodes_and_names_the_methods():
    nodes = {"Trainer": {"cpu_seconds": 10.0, "accelerator_seconds": 0.0, "energy_j": 400.0, "peak_rss_mb": 900.0,
                         "energy_method": "tdp-estimate"},
             "Evaluator": {"cpu_seconds": 5.5, "accelerator_seconds": 0.0, "energy_j": 200.0, "peak_rss_mb": 1200.0,
                           "energy_method": "tdp-estimate"},
             "ImportSchemaGen": None}
    total = cost.total(nodes)
    assert total["cpu_seconds"] == 15.5 and total["energy_j"] == 600.0 and total["peak_rss_mb"] == 1200.0
    assert total["energy_method"] == "tdp-estimate" and set(total["nodes"]) == {"Trainer", "Evaluator"}
    assert cost.total({}) is None
