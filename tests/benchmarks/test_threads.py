"""benchmarks/threads.py: its ratios, its environment and one short child measurement (the
side-by-side timing itself runs on demand, not here)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("threads")


def test_ratios_are_per_policy_against_idle_and_per_condition_against_old(bench):
    rate = {
        "student": {
            "old": {"idle": 10.0, "busy1": 2.0, "torch2": 1.0},
            "new": {"idle": 20.0, "busy1": 10.0, "torch2": 5.0},
            "new-1": {"idle": 10.0, "busy1": 5.0, "torch2": 4.0},
        }
    }
    out = bench.ratios(rate)
    assert out["slowdown_vs_idle"]["student"]["old"] == {"idle": 1.0, "busy1": 5.0, "torch2": 10.0}
    assert out["slowdown_vs_idle"]["student"]["new"] == {"idle": 1.0, "busy1": 2.0, "torch2": 4.0}
    assert out["speedup_vs_old"]["student"]["new"] == {"idle": 2.0, "busy1": 5.0, "torch2": 5.0}
    assert out["speedup_vs_old"]["student"]["new-1"]["torch2"] == 4.0
    against_new = bench.ratios(
        {"student": {"new": {"idle": 20.0}, "spin30k": {"idle": 25.0}}}, base="new"
    )
    assert against_new["speedup_vs_new"]["student"] == {
        "new": {"idle": 1.0},
        "spin30k": {"idle": 1.25},
    }


def test_it_refuses_a_set_omp_num_threads(bench, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--out", str(tmp_path / "t.json")])
    assert exc.value.code == 2 and "unset OMP_NUM_THREADS" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_the_children_get_torch_defaults(bench, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    env = bench._clean_env("old")
    assert not set(bench.THREAD_VARIABLES) & set(env)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(bench.ROOT)
    # the spinning policies bring their own wait settings, which pate keeps
    assert bench._clean_env("spin30k")["GOMP_SPINCOUNT"] == "30000"
    assert bench._clean_env("spin300k")["GOMP_SPINCOUNT"] == "300000"
    assert bench._clean_env("active")["OMP_WAIT_POLICY"] == "ACTIVE"
    assert "OMP_WAIT_POLICY" not in bench._clean_env("new")


@pytest.mark.parametrize("workload", ["student", "student28"])
def test_a_child_measures_with_the_new_policy(bench, workload):
    pytest.importorskip("torch")
    result = bench._time("new", workload, 2, 0.5)
    assert result["steps"] >= 1 and result["steps_per_s"] > 0
    from pate.core.threads import usable_cpus

    # the child runs what pate chose, from the usable CPUs (lowered only by the machine's load at
    # that moment), never the caller's OMP_NUM_THREADS=1
    choice = result["choice"]
    assert result["threads"] == choice["count"]
    assert choice["cpus"] == usable_cpus()[0] and choice["source"] != "env"
    if choice["source"] != "busy":
        assert choice["count"] == choice["cpus"]
