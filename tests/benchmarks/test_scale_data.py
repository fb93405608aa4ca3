"""benchmarks/scale_data.py: the enlarged data keeps every label and the public split, and the
config it runs is the given one on that data with its own feature cache or the one given (the
benchmark itself runs on demand)."""

from __future__ import annotations

import numpy as np
import pytest

from pate.run.config import load
from pate.teachers.data import ArraySplit, PateData, load_pate_data


@pytest.fixture(scope="module")
def scale_data(load_benchmark):
    return load_benchmark("scale_data")


def _data():
    rng = np.random.default_rng(0)
    x = np.zeros((6, 1, 8, 8), dtype=np.float32)
    x[:, :, 2:6, 1:4] = rng.random((6, 1, 4, 3))
    split = lambda n: ArraySplit(x[:n], rng.integers(0, 3, n))
    return PateData(
        name="toy",
        private=split(6),
        public=split(4),
        evaluation=split(3),
        num_classes=3,
        input_shape=(1, 8, 8),
        class_names=("a", "b", "c"),
    )


def test_transformations_move_the_content_and_keep_its_mass(scale_data):
    x = _data().private.x
    flipped = scale_data.transformed(x, True, 0, 0)
    np.testing.assert_array_equal(flipped, x[..., ::-1])
    down = scale_data.transformed(x, False, 2, 0)
    np.testing.assert_array_equal(down[:, :, 2:], x[:, :, :-2])
    assert np.all(down[:, :, :2] == 0)
    np.testing.assert_allclose(down.sum(), x.sum(), rtol=1e-6)  # nothing wrapped around
    assert len({t for t in scale_data.TRANSFORMS}) == len(scale_data.TRANSFORMS)


def test_the_enlarged_npz_and_its_config(scale_data, tmp_path):
    data = _data()
    path = tmp_path / "d.npz"
    assert scale_data.enlarged_npz(data, 4, path) == 24
    loaded = load_pate_data(f"npz:{path}")
    np.testing.assert_array_equal(loaded.private.y, np.tile(data.private.y, 4))
    np.testing.assert_array_equal(loaded.private.x[:6], data.private.x)
    np.testing.assert_array_equal(loaded.public.x, data.public.x)
    assert len({loaded.private.x[i::6].tobytes() for i in range(6)}) == 6  # 4 different copies
    with pytest.raises(ValueError, match="factor"):
        scale_data.enlarged_npz(data, scale_data.MAX_FACTOR + 1, path)
    out = tmp_path / "c.toml"
    scale_data.scaled_config("fashion-mnist-class-means", path, tmp_path / "fc", out, records=24)
    config, packaged = load(out, ledger=False), load("fashion-mnist-class-means", ledger=False)
    assert config.data.name == f"npz:{path}" and config.data.records == 24
    assert config.run.feature_cache == str(tmp_path / "fc")
    assert config.aggregator == packaged.aggregator and config.knn == packaged.knn


def test_one_feature_cache_for_every_size_when_asked(scale_data, tmp_path, monkeypatch):
    import argparse

    folder = tmp_path / "x4"
    monkeypatch.delenv("PATE_FEATURE_CACHE", raising=False)
    own = argparse.Namespace(feature_cache=None)
    assert scale_data.feature_cache_dir(own, folder) == folder / "feature-cache"
    monkeypatch.setenv("PATE_FEATURE_CACHE", str(tmp_path / "env"))
    assert scale_data.feature_cache_dir(own, folder) == (tmp_path / "env").resolve()
    flag = argparse.Namespace(feature_cache=str(tmp_path / "flag"))
    assert scale_data.feature_cache_dir(flag, folder) == (tmp_path / "flag").resolve()
