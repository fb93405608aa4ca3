"""The private split's features streamed from the feature cache (issue #33): rows read on
demand are the rows of the held array, the memory a read takes is bounded by the rows asked for,
and teachers trained a chunk at a time on streamed rows are the teachers trained on held ones."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from pate.teachers import chunks, ensemble, feature_cache, public_embedding
from pate.teachers import features as teacher_features
from pate.teachers.data import ArraySplit, PateData


def _images(n, side=8, seed=0):
    return np.random.default_rng(seed).random((n, 1, side, side)).astype(np.float32)


def _data(n_private=60, n_public=30, n_eval=12):
    rng = np.random.default_rng(7)
    split = lambda n, s: ArraySplit(_images(n, seed=s), rng.integers(0, 3, n))
    return PateData(
        name="toy",
        private=split(n_private, 1),
        public=split(n_public, 2),
        evaluation=split(n_eval, 3),
        num_classes=3,
        input_shape=(1, 8, 8),
    )


def _doubled(tmp_path, x):
    key = feature_cache.EntryKey.of(
        x, front_end="double", settings={"factor": 2}, output_shape=np.shape(x)[1:]
    )
    return feature_cache.FeatureCache(tmp_path).features(key, x, lambda b: np.asarray(b) * 2.0)


def test_take_reads_the_rows_asked_for_in_their_order(tmp_path, monkeypatch):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 7)
    x = _images(50)
    cached = _doubled(tmp_path, x)
    assert cached.path is not None
    rows = np.array([49, 3, 4, 5, 0, 3, 17, 48, 49, 20, 21])  # runs, repeats, any order
    np.testing.assert_array_equal(cached.take(rows), x[rows] * 2.0)
    np.testing.assert_array_equal(cached.take(np.arange(50)), x * 2.0)
    assert cached.take(np.array([], dtype=np.int64)).shape == (0, 1, 8, 8)
    held = feature_cache.CachedFeatures(x * 2.0, None, 0.0)  # no cache: rows of the array
    np.testing.assert_array_equal(held.take(rows), x[rows] * 2.0)
    with pytest.raises(ValueError, match=r"rows must lie in \[0, 50\), got 0..50"):
        cached.take(np.array([0, 50]))
    with pytest.raises(TypeError, match="rows must be a 1-D array of row indices"):
        cached.take(np.array([0.5]))


def test_take_holds_only_the_rows_asked_for(tmp_path):
    x = _images(4000, side=16)  # 1 KiB a row: 4 MB of features
    cached = _doubled(tmp_path, x)
    whole = x.nbytes
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        part = cached.take(np.arange(0, 4000, 80))  # 50 rows spread over the file
        _, peak_take = tracemalloc.get_traced_memory()
        del part
        tracemalloc.reset_peak()
        held = np.array(cached.array)  # the whole-array path
        _, peak_whole = tracemalloc.get_traced_memory()
        del held
    finally:
        tracemalloc.stop()
    assert peak_whole >= whole
    assert peak_take < whole / 40, (peak_take, whole)


@pytest.mark.parametrize("use_cache", [True, False])
def test_feature_rows_are_feature_data_bit_for_bit(tmp_path, monkeypatch, use_cache):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 16)
    data = _data()
    held = teacher_features.feature_data(
        data, "scatternet"
    )  # no cache: every split computed and held
    cache = feature_cache.FeatureCache(tmp_path) if use_cache else None
    rows = teacher_features.feature_rows(data, "scatternet", cache=cache)
    assert isinstance(rows.private, teacher_features.FeatureRows) and isinstance(
        held.private, ArraySplit
    )
    assert (rows.private.raw.path is not None) is use_cache
    assert rows.private.shape == held.private.x.shape and len(rows.private) == 60
    order = np.random.default_rng(0).permutation(60)
    np.testing.assert_array_equal(rows.private.take(order), held.private.x[order])
    np.testing.assert_array_equal(rows.private.split().x, held.private.x)
    np.testing.assert_array_equal(rows.private.y, held.private.y)
    for name in ("public", "evaluation"):
        np.testing.assert_array_equal(getattr(rows, name).x, getattr(held, name).x)
    assert rows.input_shape == held.input_shape == (81, 2, 2)
    assert teacher_features.feature_rows(data, "none") is data


@pytest.mark.parametrize("trainer", ["sequential", "vectorized"])
def test_teachers_on_streamed_rows_are_the_teachers_on_held_features(
    tmp_path, monkeypatch, trainer
):
    data = _data()
    shards = np.array_split(np.random.default_rng(1).permutation(60), 6)
    seeds = [11, 12, 13, 14, 15, 16]
    recipe = dict(model="linear", epochs=3, lr=1e-2, batch_size=4, device="cpu", trainer=trainer)
    # held: the features computed and held whole, the teachers trained on them as raw inputs
    held = ensemble.train_teachers(
        teacher_features.feature_data(data, "scatternet"),
        shards,
        seeds,
        ensemble.TeacherConfig(features="none", **recipe),
        progress=False,
    )
    # streamed: read from the cache, two teachers' rows at a time (10 rows of 1296 bytes each)
    monkeypatch.setattr(chunks, "PRIVATE_CHUNK_BYTES", 2 * 10 * 81 * 2 * 2 * 4)
    taken = []
    real_take = teacher_features.FeatureRows.take
    monkeypatch.setattr(
        teacher_features.FeatureRows,
        "take",
        lambda self, r: taken.append(len(r)) or real_take(self, r),
    )
    with feature_cache.using(feature_cache.FeatureCache(tmp_path / "cache")):
        streamed = ensemble.train_teachers(
            data,
            shards,
            seeds,
            ensemble.TeacherConfig(features="scatternet", **recipe),
            out_dir=tmp_path / "teachers",
            progress=False,
        )
    assert json.loads((tmp_path / "teachers" / "state.json").read_text())["chunk_size"] == 2
    assert taken == [20, 20, 20]  # each chunk read its two shards' rows, never the split
    np.testing.assert_array_equal(streamed.public_predictions, held.public_predictions)
    np.testing.assert_array_equal(streamed.eval_predictions, held.eval_predictions)
    np.testing.assert_array_equal(streamed.teacher_accuracy, held.teacher_accuracy)


def test_streamed_rows_are_standardised_in_place(tmp_path):
    x = _images(3000, side=16)
    raw = _doubled(tmp_path, x)
    rows = teacher_features.FeatureRows(
        raw, teacher_features.Standardizer.fit(raw), np.zeros(3000, dtype=np.int64)
    )
    picked = np.arange(0, 3000, 2)
    np.testing.assert_array_equal(rows.take(picked), rows.standardizer.transform(x[picked] * 2.0))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = rows.take(picked)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.2 * out.nbytes  # one array of the rows, no temporaries beside it


def test_the_public_axes_are_the_top_eigenvectors_of_the_full_decomposition():
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((300, 40)) @ rng.standard_normal((40, 40))
    pca = public_embedding.PublicPCA.fit_blocks(
        (rows[i : i + 64] for i in range(0, 300, 64)), dims=12
    )
    mean = rows.mean(axis=0)
    _, vectors = np.linalg.eigh(rows.T @ rows / 300 - np.outer(mean, mean))
    full = vectors[:, ::-1][:, :12].T
    np.testing.assert_allclose(np.abs(np.sum(pca.axes * full, axis=1)), 1.0, atol=1e-9)
    np.testing.assert_allclose(pca.mean, mean, atol=1e-12)
    assert pca.axes.shape == (12, 40) and pca.axes.flags.c_contiguous


def test_the_private_embedding_is_written_into_one_array(tmp_path, monkeypatch):
    """PublicFrontEnd.embed of ScatterNet features fills one (N, dims) array block by block:
    the same rows as stacking the blocks, without holding every block beside the result."""
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 16)
    data = _data(n_private=200)
    cache = feature_cache.FeatureCache(tmp_path)
    front, _ = public_embedding.PublicFrontEnd.fit_transform(
        data.public.x, features="scatternet", dims=8, cache=cache
    )
    blocks = [
        front.pca.project(front.standardizer.transform(b))
        for b in teacher_features.scatter_features(data.private.x, cache=cache).chunks()
    ]
    embedded = front.embed(data.private.x, cache=cache)
    assert embedded.dtype == np.float32 and embedded.shape == (200, 8)
    np.testing.assert_array_equal(embedded, np.concatenate(blocks))
    assert front.embed(data.private.x[:0], cache=None).shape == (0, 8)


@pytest.mark.parametrize("features", ["scatternet", "none"])
def test_embed_blocks_are_the_rows_of_embed(tmp_path, monkeypatch, features):
    """PublicFrontEnd.embed_blocks (what the votes stage writes out a block at a time) gives
    the rows of embed, in order: bit for bit for ScatterNet features, with or without a cache;
    to float rounding for the plain PCA (projected a block of rows at a time)."""
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 16)
    monkeypatch.setattr(public_embedding, "KERNEL_CHUNK", 24)
    data = _data(n_private=100)
    for cache in (feature_cache.FeatureCache(tmp_path), None):
        front, _ = public_embedding.PublicFrontEnd.fit_transform(
            data.public.x, features=features, dims=6, cache=cache
        )
        blocks = list(front.embed_blocks(data.private.x, cache=cache))
        assert all(b.dtype == np.float32 and b.shape[1] == 6 for b in blocks)
        assert cache is not None or len(blocks) > 1
        held = front.embed(data.private.x, cache=cache)
        if features == "scatternet":
            np.testing.assert_array_equal(np.concatenate(blocks), held)
        else:
            np.testing.assert_allclose(np.concatenate(blocks), held, rtol=1e-6, atol=1e-6)


def test_embed_blocks_of_a_table_kernel_map_are_the_rows_of_embed(monkeypatch):
    monkeypatch.setattr(public_embedding, "KERNEL_CHUNK", 24)
    rng = np.random.default_rng(3)
    public, private = rng.random((80, 5)), rng.random((70, 5))
    front, _ = public_embedding.PublicFrontEnd.fit_transform(public, features="kernel", dims=4)
    blocks = list(front.embed_blocks(private))
    assert len(blocks) == 3
    np.testing.assert_array_equal(np.concatenate(blocks), front.embed(private))
