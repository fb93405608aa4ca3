"""benchmarks/demo_neighbours.py: its slowdowns and, once committed, its results file (the
side-by-side runs of make demo's job run on demand, not here)."""

from __future__ import annotations

import json
import pathlib

import pytest

RESULTS = (
    pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "demo_neighbours.json"
)


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("demo_neighbours")


def test_slowdowns_are_wall_times_over_the_idle_run(bench):
    runs = {
        "idle": {"wall_seconds": 100.0},
        "busy1": {"wall_seconds": 150.0},
        "torch2": {"wall_seconds": 320.0},
    }
    assert bench.slowdowns(runs) == {"idle": 1.0, "busy1": 1.5, "torch2": 3.2}
    assert bench.slowdowns({"busy1": {"wall_seconds": 1.0}}) == {"busy1": None}
    assert bench.CONDITIONS == ("idle", "busy1", "torch2") and bench.BARS == {
        "busy1": 2.0,
        "torch2": 3.0,
    }


@pytest.mark.skipif(not RESULTS.exists(), reason="no committed results")
def test_the_committed_results_are_consistent(bench):
    result = json.loads(RESULTS.read_text())
    assert result["slowdown_vs_idle"] == bench.slowdowns(result["runs"])
    for run in result["runs"].values():
        assert run["wall_seconds"] > 0 and run["peak_rss_mib"] > 0
        assert run["eps_guarantee"] <= 4.0 + 1e-9 and 0 < run["student_accuracy"] <= 1
        assert set(run["stages"]) >= {"partition", "teachers", "votes", "aggregate", "student"}
