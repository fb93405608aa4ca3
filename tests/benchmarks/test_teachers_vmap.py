"""benchmarks/teachers_vmap.py's FLOP count and --flops report (the benchmark itself runs on
demand, not here; nothing here asserts a time or a rate)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    pytest.importorskip("torch")
    return load_benchmark("teachers_vmap")


def test_work_flops_match_a_hand_count_of_cnn28(bench, one_torch_thread):
    # Per image, 2 FLOPs per multiply-add: forward conv1 28*28*16*9, conv2 14*14*32*16*9,
    # fc1 1568*128, fc2 128*10; backward = the weight gradients of all four plus the input
    # gradients of all but conv1 (the images need none).
    conv1, conv2, fc1, fc2 = (
        2 * 28 * 28 * 16 * 9,
        2 * 14 * 14 * 32 * 16 * 9,
        2 * 1568 * 128,
        2 * 128 * 10,
    )
    forward = conv1 + conv2 + fc1 + fc2
    step = forward + conv1 + 2 * (conv2 + fc1 + fc2)
    # Shards of 40 and 33 items, batch 16: full batches plus short last ones (8 and 1 items).
    flops = bench.work_flops(
        "cnn28", (1, 28, 28), 10, [40, 33], batch_size=16, epochs=3, predicted_items=5
    )
    assert flops["training"] == 3 * (40 + 33) * step
    assert flops["prediction"] == 2 * 5 * forward
    assert flops["total"] == flops["training"] + flops["prediction"]


def test_flops_report_in_json(bench, tmp_path, one_torch_thread, capsys):
    out = tmp_path / "bench.json"
    assert (
        bench.main(
            [
                "--data",
                "digits",
                "--model",
                "cnn8",
                "--teachers",
                "4",
                "--per-teacher",
                "50",
                "--epochs",
                "1",
                "--public-size",
                "100",
                "--threads",
                "1",
                "--skip-sequential",
                "--flops",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["flops_total"] == res["flops_training"] + res["flops_prediction"] > 0
    assert res["matmul_peak_gflops"] > 0
    for name in ("vectorized", "loop"):  # the timed trainers (the sequential one was skipped)
        assert res[f"{name}_gflops"] > 0
        assert res[f"{name}_percent_of_peak"] == pytest.approx(
            100 * res[f"{name}_gflops"] / res["matmul_peak_gflops"], abs=0.1
        )
    assert "sequential_gflops" not in res
    assert res["percent_of_peak_needed_for_5x"] == pytest.approx(
        5 * res["loop_percent_of_peak"], abs=0.5
    )
    assert "a 5x speed-up over the plain loop would need" in capsys.readouterr().out
