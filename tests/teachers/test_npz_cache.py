"""Issue #33: an ``npz:`` that cannot be memory-mapped as stored (compressed, not float32, a pool
dealt in a shuffled order) goes through the feature cache once and is mapped from there: the same
splits, the same errors, nothing decompressed twice."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from pate.analysis.errors import InputError
from pate.teachers import cached_data
from pate.teachers.data import load_pate_data
from pate.teachers.feature_cache import FeatureCache

REPO = pathlib.Path(__file__).resolve().parents[2]


def _splits(data):
    return (data.private, data.public, data.evaluation)


def _same(a, b):
    for x, y in zip(_splits(a), _splits(b)):
        np.testing.assert_array_equal(x.x, y.x)
        np.testing.assert_array_equal(x.y, y.y)
    assert (a.num_classes, a.input_shape, a.class_names) == (
        b.num_classes,
        b.input_shape,
        b.class_names,
    )


def _no_reading(monkeypatch):
    def refuse(*_args, **_kwargs):  # the member's header may be read, its rows not
        raise AssertionError("read from the archive again: the cache entry was not used")

    monkeypatch.setattr(cached_data._MemberStream, "read", refuse)


def _marks(rows, public, evaluation, seed=0):
    """Each row's split mark, shuffled: the cache writes the pool in split order."""
    marks = ["private"] * (rows - public - evaluation) + ["public"] * public
    return np.random.default_rng(seed).permutation(marks + ["evaluation"] * evaluation)


def _images(rows, dtype=np.float64, seed=0):
    x = np.random.default_rng(seed).random((rows, 1, 6, 5))
    return (x * 255).astype(dtype) if dtype == np.uint8 else x.astype(dtype)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_explicit_splits_private_is_mapped_from_the_cache(tmp_path, monkeypatch, save):
    path = tmp_path / "d.npz"
    rng = np.random.default_rng(1)
    save(
        path,
        x_private=_images(40),  # float64: mapped as stored it would still be copied as float32
        y_private=rng.integers(0, 3, 40),
        x_public=_images(12, seed=2),
        x_evaluation=_images(8, seed=3),
        y_evaluation=rng.integers(0, 3, 8),
    )
    abc = ["a", "b", "c"]
    plain = load_pate_data(f"npz:{path}", classes=abc)
    cache = FeatureCache(tmp_path / "cache")
    first = load_pate_data(f"npz:{path}", cache=cache, classes=abc)
    with monkeypatch.context() as patched:
        _no_reading(patched)
        again = FeatureCache(tmp_path / "cache")
        second = load_pate_data(f"npz:{path}", cache=again, classes=abc)
    _same(plain, first)
    _same(plain, second)
    assert not second.private.x.flags.writeable and second.public.x.flags.writeable
    assert (cache.summary()["misses"], again.summary()["hits"]) == (1, 1)
    assert [e["front_end"] for e in again.entries()] == [cached_data.NPZ_MEMBER]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_a_pool_is_written_in_split_order_and_sliced(tmp_path, monkeypatch, save, dtype):
    path = tmp_path / "pool.npz"
    marks, abcd = _marks(50, 10, 5), ["a", "b", "c", "d"]
    save(path, x=_images(50, dtype), y=np.arange(50) % 4, split=marks)
    plain = load_pate_data(f"npz:{path}", classes=abcd)
    assert [len(s) for s in _splits(plain)] == [35, 10, 5]
    np.testing.assert_array_equal(plain.public.y, (np.arange(50) % 4)[marks == "public"])
    cache = FeatureCache(tmp_path / "cache")
    first = load_pate_data(f"npz:{path}", cache=cache, classes=abcd)
    with monkeypatch.context() as patched:
        _no_reading(patched)
        second = load_pate_data(f"npz:{path}", cache=cache, classes=abcd)
    assert cache.summary()["entries"][-1] == {**cache.summary()["entries"][-1], "hit": True}
    _same(plain, first)
    _same(plain, second)
    assert not second.private.x.flags.writeable
    assert second.public.x.flags.writeable and second.evaluation.x.flags.writeable
    fronts = sorted(e["front_end"] for e in cache.entries())
    # stored uncompressed, the member is gathered from its own map; compressed, it is first
    # written out as it is read (the archive cannot be read in a shuffled order)
    expected = [cached_data.NPZ_POOL] + ([] if save is np.savez else [cached_data.NPZ_MEMBER])
    assert fronts == sorted(expected)
    np.savez(path, x=_images(50, dtype, seed=9), y=np.arange(50) % 4, split=marks)  # a miss
    edited = load_pate_data(f"npz:{path}", cache=cache, classes=abcd)
    assert not np.array_equal(edited.private.x, second.private.x)
    assert cache.summary()["entries"][-1]["hit"] is False


def _message(name, **kwargs):
    with pytest.raises((InputError, ValueError)) as caught:
        load_pate_data(name, **kwargs)
    return str(caught.value)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_bad_values_get_the_same_message_and_leave_no_entry(tmp_path, save):
    x = _images(30)
    x[7, 0, 2, 3] = 1e39  # beyond float32's range
    pool = tmp_path / "pool.npz"
    marks = _marks(30, 5, 5)
    save(pool, x=x, y=np.arange(30) % 3, split=marks)
    splits = tmp_path / "splits.npz"
    save(
        splits,
        x_private=x,
        y_private=np.arange(30) % 3,
        x_public=_images(5),
        x_evaluation=_images(4),
        y_evaluation=np.arange(4) % 3,
    )
    labels = tmp_path / "labels.npz"
    y = np.where(np.arange(30) == 3, 2.5, np.arange(30) % 3)
    save(labels, x=_images(30), y=y, split=marks)
    short = tmp_path / "short.npz"
    save(short, x=_images(30), y=np.arange(29) % 3, split=marks[:29])
    cache = FeatureCache(tmp_path / "cache")
    for path, match in (
        (pool, r"row 7, .*beyond float32's range"),
        (splits, r"private split \(x_private\): row 7, .*beyond float32's range"),
        (labels, r"row 3 is 2\.5"),
        (short, "x has 30 rows but y has 29"),
    ):
        sizes = {"classes": ["a", "b", "c"]} if path == splits else {}
        without = _message(f"npz:{path}", **sizes)
        within = _message(f"npz:{path}", cache=cache, **sizes)
        assert within == without
        assert re.search(match, within), within
    assert [e for e in cache.entries() if e["front_end"] == cached_data.NPZ_POOL] == []
    assert not [e for e in cache.entries() if e["state"] != "ok"]


def test_a_run_reads_an_npz_pool_through_the_cache_beside_it(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits

    from pate.run.config import load
    from pate.run.pipeline import Pipeline

    monkeypatch.delenv("PATE_FEATURE_CACHE", raising=False)
    digits = load_digits()
    path = tmp_path / "digits.npz"
    marks = _marks(len(digits.target), 359, 179)
    np.savez_compressed(path, x=digits.images[:, None] / 16.0, y=digits.target, split=marks)

    def config(run: str):
        return load(
            REPO / "configs" / "digits.toml",
            run_dir=str(tmp_path / "runs" / run),
            ledger=False,
            overrides={
                "data": {"name": f"npz:{path}", "records": 1250},
                "aggregator": {"noise_seed": 0, "queries": 300},
            },
        )

    Pipeline(config("a"), progress=False).run(until="partition")
    cache = FeatureCache(tmp_path / "runs" / ".feature-cache")
    assert sorted(e["front_end"] for e in cache.entries()) == [
        cached_data.NPZ_MEMBER,
        cached_data.NPZ_POOL,
    ]
    with monkeypatch.context() as patched:
        _no_reading(patched)
        second = Pipeline(config("b"), progress=False)
        second.run(until="partition")
    assert not second.ctx.data.private.x.flags.writeable
    assert len(second.ctx.data.private) == len(digits.target) - 359 - 179  # 20 % / 10 %


def test_another_order_is_another_entry(tmp_path):
    path = tmp_path / "pool.npz"
    x = _images(20, np.float32)
    np.savez(path, x=x, y=np.arange(20) % 2)
    cache = FeatureCache(tmp_path / "cache")
    orders = (np.arange(20)[::-1], np.random.default_rng(0).permutation(20))
    for order in orders:
        rows = cached_data.npz_rows(cache, path, "x", order=order, what="x")
        np.testing.assert_array_equal(rows, x[order])
    assert [e["hit"] for e in cache.summary()["entries"]] == [False, False]
