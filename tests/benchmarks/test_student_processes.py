"""benchmarks/student_processes.py: each kind of variant (threads, processes) runs a few steps in
its own child (the comparison beside neighbours runs on demand, not here)."""

from __future__ import annotations

import json


def test_each_kind_of_variant_steps_idle(load_benchmark, tmp_path):
    bench = load_benchmark("student_processes")
    out = tmp_path / "result.json"
    argv = ["--steps", "2", "--rounds", "1", "--conditions", "idle", "--json", str(out)]
    # one variant of each kind (threads1 is threads2's code on one thread)
    assert bench.main([*argv, "--variants", "threads2", "processes2"]) == 0
    result = json.loads(out.read_text())
    assert set(result["ms_per_step"]["idle"]) == {"threads2", "processes2"}
    assert all(ms > 0 for ms in result["ms_per_step"]["idle"].values())
    assert "slowdown" not in result  # one condition: nothing to compare
    # (processes2 raises, failing main, when its two replicas end with different weights)
