"""benchmarks/gpu_end_to_end.py: what it reads from a run directory, the config copy it makes,
and, on a machine without a GPU, that a run is refused before anything is written (the GPU
runs themselves are on demand, on a lent device)."""

from __future__ import annotations

import json

import pytest
import torch

from pate.run import rundir


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("gpu_end_to_end")


def test_summary_of_a_run_directory(bench, tmp_path):
    stages = tmp_path / rundir.STAGE_DIR
    stages.mkdir(parents=True)
    peak = {"index": 0, "name": "card", "peak_allocated_bytes": 2**20, "peak_reserved_bytes": 2**21}
    (stages / "teachers.json").write_text(
        json.dumps(
            {
                "seconds": 3.5,
                "gpu_memory": [peak],
                "feature_cache": {"hits": 3, "misses": 0},
                "trainer": "vectorized",
                "device": "cuda:0",
                "teacher_accuracy_mean": 0.77,
                "plurality_accuracy": 0.83,
            }
        )
    )
    (stages / "votes.json").write_text(json.dumps({"skipped": True, "seconds": 0.0}))
    # the public report (its publishable part) is not read: the internal report is
    (tmp_path / rundir.REPORT_JSON).write_text(json.dumps({"privacy": {"eps_guarantee": 3.99}}))
    (tmp_path / rundir.REPORT_INTERNAL_JSON).write_text(
        json.dumps({"utility": {"student_accuracy": 0.8}, "privacy": {"eps_guarantee": 3.99}})
    )
    out = bench.summarise(tmp_path)
    assert out["stages"] == {
        "teachers": {
            "seconds": 3.5,
            "gpu_peak_reserved_mib": 2,
            "gpu_peak_allocated_mib": 1,
            "cache_hits": 3,
            "cache_misses": 0,
        }
    }
    assert (out["teachers_trainer"], out["student_accuracy"], out["eps_guarantee"]) == (
        "vectorized",
        0.8,
        3.99,
    )


def test_fp32_copy_sets_amp_in_the_teachers_table(bench, tmp_path):
    path = bench.config_file("fashion-mnist", "amp = false", tmp_path)
    text = open(path).read()
    assert "[teachers]\namp = false\n" in text
    assert bench.config_file("fashion-mnist", "", tmp_path) == "fashion-mnist"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_without_a_gpu_the_run_is_refused_and_nothing_written(bench, tmp_path):
    row = bench.run_one("demo", tmp_path)
    assert row["exit_status"] == 2
    assert "no CUDA GPU is available" in row["log_tail"]
    assert row["stages"] == {}
    assert not (tmp_path / "runs" / "demo").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares the CPU with a CUDA GPU")
def test_gpu_features_agree_with_the_cpu(bench):
    out = bench.front_end_agreement(rows=1024)
    assert out["rows"] == 1024 and out["max_rel_diff"] < 1e-4
