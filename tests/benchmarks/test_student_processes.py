"""benchmarks/student_processes.py: each kind of variant (threads, processes) runs a few steps in
its own child (the comparison beside neighbours runs on demand, not here)."""

from __future__ import annotations

import json

import pytest

from pate.student import parallel


def test_each_kind_of_variant_steps_idle(load_benchmark, tmp_path):
    bench = load_benchmark("student_processes")
    out = tmp_path / "result.json"
    argv = ["--steps", "2", "--rounds", "1", "--conditions", "idle", "--json", str(out)]
    # one variant of each kind (threads1 is threads2's code on one thread)
    variants = ["threads2", "processes2", "student_processes2"]
    assert bench.main([*argv, "--variants", *variants]) == 0
    result = json.loads(out.read_text())
    assert set(result["ms_per_step"]["idle"]) == set(variants)
    assert all(ms > 0 for ms in result["ms_per_step"]["idle"].values())
    assert "slowdown" not in result  # one condition: nothing to compare
    # (processes2 raises, failing main, when its two replicas end with different weights)


@pytest.mark.skipif(
    not parallel.autograd_survives_fork(), reason="one process where torch sees a GPU"
)
def test_the_memory_of_one_and_two_processes(load_benchmark, tmp_path):
    bench = load_benchmark("student_processes")
    out = tmp_path / "memory.json"
    assert bench.main(["--memory", "--steps", "2", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["at_each_epoch_end"]
    assert [s["processes"] for s in runs["processes=1"]] == [1, 1, 1]
    assert runs["processes=2"][0]["processes"] == 2  # the helper, while it trains
    assert all(s["pss_mib"] > 0 for run in runs.values() for s in run)
