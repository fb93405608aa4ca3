"""benchmarks/student_processes.py: every variant runs a few steps in its own child (the
comparison beside neighbours runs on demand, not here)."""

from __future__ import annotations

import json


def test_every_variant_steps_idle(load_benchmark, tmp_path):
    bench = load_benchmark("student_processes")
    out = tmp_path / "result.json"
    argv = ["--steps", "2", "--rounds", "1", "--conditions", "idle", "--json", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result["ms_per_step"]["idle"]) == set(bench.VARIANTS)
    assert all(ms > 0 for ms in result["ms_per_step"]["idle"].values())
    assert "slowdown" not in result  # one condition: nothing to compare
    # (processes2 raises, failing main, when its two replicas end with different weights)
