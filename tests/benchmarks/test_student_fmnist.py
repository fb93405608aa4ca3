"""benchmarks/student_fmnist.py: the label corruption and the argument checks (the benchmark
itself runs on demand, not here)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("student_fmnist")


def test_noisy_labels_flip_to_another_class_only_on_the_first_k(bench):
    y = np.random.default_rng(0).integers(0, 10, size=2000)
    labels = bench.noisy_labels(y, k=1500, noise=0.3, num_classes=10, seed=0)
    assert np.all(labels[1500:] == -1)
    flipped = labels[:1500] != y[:1500]
    assert 0.25 < flipped.mean() < 0.35
    assert np.all((labels[:1500] >= 0) & (labels[:1500] < 10))
    assert np.array_equal(
        bench.noisy_labels(y, k=1500, noise=0.0, num_classes=10, seed=0)[:1500], y[:1500]
    )


def test_labels_from_a_directory_without_labels_stops_before_any_work(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--labels-from", str(tmp_path)])
    assert exc.value.code == 2 and "has no labels.npy" in capsys.readouterr().err
    np.save(tmp_path / "labels.npy", np.full(10, -1, dtype=np.int64))
    with pytest.raises(SystemExit):
        bench.main(["--labels-from", str(tmp_path)])
    assert "answered items" in capsys.readouterr().err


def test_gpu_driver_plans_steps_from_time_and_drops_settings_from_the_end(load_benchmark):
    gpu = load_benchmark("student_gpu")
    settings = [("a", [], 1.0), ("ceiling", [], 0.2), ("b", [], 1.0), ("c", [], 1.0)]
    chosen, steps = gpu.plan(
        settings, per_step=0.04, budget_seconds=360, min_steps=2000, max_steps=20000
    )
    # 0.85 x 360 s / (0.04 s x 3.2 FixMatch steps) = 2390 >= 2000: all four, 2300 steps each.
    assert [n for n, *_ in chosen] == ["a", "ceiling", "b", "c"] and steps == 2300
    chosen, steps = gpu.plan(
        settings, per_step=0.04, budget_seconds=200, min_steps=2000, max_steps=20000
    )
    # 200 s: 1328 steps for four, 1931 for three, 3541 for two -> "b" and "c" dropped.
    assert [n for n, *_ in chosen] == ["a", "ceiling"] and steps == 3500
    chosen, steps = gpu.plan(
        settings, per_step=0.001, budget_seconds=360, min_steps=2000, max_steps=5000
    )
    assert len(chosen) == 4 and steps == 5000


def test_gpu_driver_refuses_an_unknown_true_of_name_before_any_work(
    load_benchmark, tmp_path, capsys
):
    gpu = load_benchmark("student_gpu")
    with pytest.raises(SystemExit) as exc:
        gpu.main(
            ["--out", str(tmp_path / "out"), "--labels", f"eps1={tmp_path}", "--true-of", "eps2"]
        )
    assert exc.value.code == 2 and "--true-of 'eps2'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_gpu_driver_trains_released_labels_with_fixmatch_or_supervised(load_benchmark):
    gpu = load_benchmark("student_gpu")
    name, extra, cost = gpu.labelled_setting("cm-eps1", "runs/x", "released", "fixmatch")
    assert (name, cost) == ("cm-eps1", 1.0)
    assert extra[:4] == ["--labels-from", "runs/x", "--label-sets", "released"]
    assert extra[extra.index("--methods") + 1] == "fixmatch" and "--unlabeled-ratio" in extra
    name, extra, cost = gpu.labelled_setting("cm-eps1", "runs/x", "true", "supervised")
    assert cost == gpu.SUPERVISED_COST < 1 and extra[3] == "true"
    assert extra[extra.index("--methods") + 1] == "supervised"
    assert extra[extra.index("--batch-size") + 1] == "128"


def test_soft_targets_need_a_class_means_run_and_a_positive_temperature(bench, tmp_path, capsys):
    """Refused before torch or the data is loaded."""
    with pytest.raises(SystemExit) as exc:
        bench.main(["--soft-targets", "10"])
    assert (
        exc.value.code == 2 and "needs --labels-from a class-means run" in capsys.readouterr().err
    )
    np.save(tmp_path / "labels.npy", np.array([0, 1, -1], dtype=np.int64))
    with pytest.raises(SystemExit):  # a teacher run: no label_scores.npy
        bench.main(["--labels-from", str(tmp_path), "--soft-targets", "10"])
    assert "label_scores.npy" in capsys.readouterr().err
    np.save(tmp_path / "label_scores.npy", np.zeros((3, 10)))
    with pytest.raises(SystemExit):
        bench.main(["--labels-from", str(tmp_path), "--soft-targets", "0"])
    assert "temperature > 0, got 0.0" in capsys.readouterr().err
    np.save(tmp_path / "label_scores.npy", np.zeros((2, 10)))
    with pytest.raises(SystemExit):
        bench.main(["--labels-from", str(tmp_path), "--soft-targets", "10"])
    assert "not one row per label" in capsys.readouterr().err
