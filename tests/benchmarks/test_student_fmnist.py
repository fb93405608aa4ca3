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
    assert np.array_equal(bench.noisy_labels(y, k=1500, noise=0.0, num_classes=10, seed=0)[:1500], y[:1500])


def test_labels_from_a_directory_without_labels_stops_before_any_work(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--labels-from", str(tmp_path)])
    assert exc.value.code == 2 and "has no labels.npy" in capsys.readouterr().err
    np.save(tmp_path / "labels.npy", np.full(10, -1, dtype=np.int64))
    with pytest.raises(SystemExit):
        bench.main(["--labels-from", str(tmp_path)])
    assert "answered items" in capsys.readouterr().err
