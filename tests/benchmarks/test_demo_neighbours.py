"""benchmarks/demo_neighbours.py: its slowdowns and, once committed, its results file (the
side-by-side runs of make demo's job run on demand, not here)."""

from __future__ import annotations

import json
import pathlib

import pytest

RESULTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: Every committed side-by-side run (``demo_neighbours.json`` and one per commit measured).
RESULTS = sorted(RESULTS_DIR.glob("demo_neighbours*.json"))


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


def test_the_runs_get_the_chosen_wait_policy_and_no_thread_settings_of_the_caller(
    bench, monkeypatch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("GOMP_SPINCOUNT", "7")
    passive = bench.run_env("/cache")
    assert "OMP_NUM_THREADS" not in passive and "GOMP_SPINCOUNT" not in passive
    assert passive["PATE_FEATURE_CACHE"] == "/cache"  # pate then sets its own (passive) policy
    spin = bench.run_env(None, wait="spin30k")
    assert spin["GOMP_SPINCOUNT"] == "30000" and "PATE_FEATURE_CACHE" not in spin
    assert bench.run_env(None, wait="active")["OMP_WAIT_POLICY"] == "ACTIVE"
    with pytest.raises(ValueError, match="wait must be 'passive' or one of"):
        bench.run_env(None, wait="spinning")


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_the_committed_results_are_consistent(bench, path):
    result = json.loads(path.read_text())
    assert result["slowdown_vs_idle"] == bench.slowdowns(result["runs"])
    for run in result["runs"].values():
        assert run["wall_seconds"] > 0 and run["peak_rss_mib"] > 0
        assert run["eps_guarantee"] <= 4.0 + 1e-9 and 0 < run["student_accuracy"] <= 1
        assert set(run["stages"]) >= {"partition", "teachers", "votes", "aggregate", "student"}
    assert result["commit"] and result["command"]


def test_the_a_b_pairs_alternate_old_and_new():
    """benchmarks/results/demo_idle_ab_*.json (idle) and demo_busy1_ab_*.json (one busy core):
    runs of two checkouts taking turns; the ratio is the new runs' total time over the old
    runs'."""
    paths = sorted(RESULTS_DIR.glob("demo_*_ab_*.json"))
    assert {p.name.split("_ab_")[0] for p in paths} >= {"demo_idle", "demo_busy1"}
    for path in paths:
        result = json.loads(path.read_text())
        sides = [run["side"] for run in result["runs"]]
        assert sides == ["old", "new"] * (len(sides) // 2) and sides
        total = {s: sum(r["wall_seconds"] for r in result["runs"] if r["side"] == s) for s in sides}
        assert result["ratio_new_over_old"] == round(total["new"] / total["old"], 3)
