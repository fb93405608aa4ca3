"""The on-disk feature cache: hits and misses, keys, damaged and foreign entries rebuilt,
concurrent writers, owner-only folder, and the front-end reading through it."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pate.teachers import feature_cache, features, public_embedding
from pate.teachers.data import ArraySplit, PateData


def _images(n, side=8, seed=0):
    return np.random.default_rng(seed).random((n, 1, side, side)).astype(np.float32)


def _double(block):
    return np.asarray(block, dtype=np.float32) * 2.0


def _key(x, **settings):
    return feature_cache.EntryKey.of(
        x, front_end="double", settings=settings or {"factor": 2}, output_shape=np.shape(x)[1:]
    )


def _entry_dirs(root):
    return sorted(p.name for p in pathlib.Path(root).iterdir())


def test_a_miss_writes_the_entry_and_a_later_lookup_hits(tmp_path):
    x = _images(40)
    cache = feature_cache.FeatureCache(tmp_path / "cache")
    first = features.scatter_features(x, cache=cache)
    assert first.hit is False and np.array_equal(first.array, features.scatter(x))
    # another cache object (another run) on the same folder reads it back, not recomputing it
    again = feature_cache.FeatureCache(tmp_path / "cache")
    second = features.scatter_features(x, cache=again)
    assert second.hit is True and isinstance(second.array, np.memmap)
    assert np.array_equal(second.array, first.array)
    assert not second.array.flags.writeable  # a cache entry is never written through a reader
    assert cache.summary()["misses"] == 1 and again.summary()["hits"] == 1
    assert _entry_dirs(tmp_path / "cache") == [
        feature_cache.EntryKey.of(
            x, front_end="scatternet", settings=features.SCATTER_SETTINGS, output_shape=(81, 2, 2)
        ).name
    ]


def test_chunks_read_the_entry_a_block_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 7)  # entries are written 7 rows at a time, too
    x = _images(30)
    cached = features.scatter_features(x, cache=feature_cache.FeatureCache(tmp_path))
    blocks = list(cached.chunks(8))
    assert [len(b) for b in blocks] == [8, 8, 8, 6]
    assert np.array_equal(np.concatenate(blocks), features.scatter(x))
    with pytest.raises(ValueError, match="rows"):
        next(cached.chunks(0))


def test_the_key_changes_with_the_data_the_settings_the_shape_and_the_format(monkeypatch):
    x = _images(10)
    base = _key(x).name
    changed = x.copy()
    changed[3, 0, 2, 2] += 1e-6  # one value of one record
    assert _key(changed).name != base
    assert _key(x[::-1]).name != base  # rows are positional
    assert _key(x[:9]).name != base
    assert _key(x, factor=3).name != base
    assert _key(x.reshape(10, 1, 4, 16)).name != base  # the same bytes, another image shape
    assert (
        feature_cache.EntryKey.of(
            x, front_end="other", settings={"factor": 2}, output_shape=(1, 8, 8)
        ).name
        != base
    )
    monkeypatch.setattr(feature_cache, "FORMAT", feature_cache.FORMAT + 1)
    assert _key(x).name != base
    monkeypatch.undo()
    assert _key(x.astype(np.float64)).name == base  # the same float32 values: the same features


def _damage_checksum(folder):
    path = folder / "features.npy"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))


def _truncate(folder):
    path = folder / "features.npy"
    path.write_bytes(path.read_bytes()[:-4])


def _foreign_key(folder):
    meta = json.loads((folder / "entry.json").read_text())
    meta["key"]["input_sha256"] = "0" * 64  # an entry of other data copied under this name
    (folder / "entry.json").write_text(json.dumps(meta))


def _garbage_sidecar(folder):
    (folder / "entry.json").write_bytes(b"\x00not json")


def _no_sidecar(folder):
    (folder / "entry.json").unlink()


def _wrong_shape(folder):
    np.save(folder / "features.npy", np.zeros((3, 2), dtype=np.float32))


def _no_checksum(folder):
    meta = json.loads((folder / "entry.json").read_text())
    del meta["sha256"]
    (folder / "entry.json").write_text(json.dumps(meta))


def _older_entry(folder):
    """An entry of a blake2b checksum (not this format's: rebuilt, never trusted)."""
    meta = json.loads((folder / "entry.json").read_text())
    del meta["sha256"]
    meta["blake2b"] = hashlib.blake2b(
        (folder / "features.npy").read_bytes(), digest_size=32
    ).hexdigest()
    (folder / "entry.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage",
    [
        _damage_checksum,
        _truncate,
        _foreign_key,
        _garbage_sidecar,
        _no_sidecar,
        _wrong_shape,
        _no_checksum,
        _older_entry,
    ],
)
def test_a_damaged_or_foreign_entry_is_rebuilt_never_trusted(tmp_path, damage, caplog):
    x = _images(12)
    key = _key(x)
    cache = feature_cache.FeatureCache(tmp_path)
    cache.features(key, x, _double)
    damage(tmp_path / key.name)
    calls = []

    def counting(block):
        calls.append(len(block))
        return _double(block)

    with caplog.at_level("WARNING", logger="pate.teachers.feature_cache"):
        again = cache.features(key, x, counting)
    assert again.hit is False and sum(calls) == 12  # recomputed
    assert np.array_equal(again.array, x * 2)
    assert "is not used and is rebuilt" in caplog.text
    assert cache.features(key, x, counting).hit is True  # the rebuilt entry is good
    assert _entry_dirs(tmp_path) == [key.name]  # nothing left aside


def test_an_entry_of_other_data_under_this_name_is_refused(tmp_path):
    """A folder copied from another entry (another data's features) under this key's name."""
    x, other = _images(12), _images(12, seed=1)
    cache = feature_cache.FeatureCache(tmp_path)
    cache.features(_key(other), other, _double)
    os.rename(tmp_path / _key(other).name, tmp_path / _key(x).name)
    got = cache.features(_key(x), x, _double)
    assert got.hit is False and np.array_equal(got.array, x * 2)


def test_two_threads_computing_one_entry_agree_and_leave_one_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 4)
    x = _images(16)
    key = _key(x)
    barrier = threading.Barrier(2)
    results, errors = [None, None], []

    def slow(block):
        time.sleep(0.02)
        return _double(block)

    def work(i):
        try:
            barrier.wait(timeout=30)
            results[i] = feature_cache.FeatureCache(tmp_path).features(key, x, slow)
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for r in results:
        assert np.array_equal(r.array, x * 2)
    assert _entry_dirs(tmp_path) == [key.name]  # one entry, no temporary folder left


_WRITER = """
import sys, time
import numpy as np
from pate.teachers import feature_cache
feature_cache.CHUNK_ROWS = 8
x = np.arange(64 * 5, dtype=np.float32).reshape(64, 5)
key = feature_cache.EntryKey.of(x, front_end="double", settings={"factor": 2}, output_shape=(5,))
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
def slow(block):
    time.sleep(0.01)
    return block * 2.0
got = feature_cache.FeatureCache(sys.argv[1]).features(key, x, slow)
assert np.array_equal(got.array, x * 2)
print("hit" if got.hit else "miss")
"""


def test_two_processes_writing_one_entry_both_get_it(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(pathlib.Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path / "c"), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(o.strip() in ("hit", "miss") for o, _ in outs)
    x = np.arange(64 * 5, dtype=np.float32).reshape(64, 5)
    assert _entry_dirs(tmp_path / "c") == [_key(x).name]
    assert feature_cache.FeatureCache(tmp_path / "c").features(_key(x), x, _double).hit is True


def test_the_folder_is_owner_only(tmp_path, caplog):
    x = _images(5)
    feature_cache.FeatureCache(tmp_path / "new" / "cache").features(_key(x), x, _double)
    assert stat.S_IMODE((tmp_path / "new" / "cache").stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with caplog.at_level("WARNING", logger="pate.teachers.feature_cache"):
        feature_cache.FeatureCache(shared).features(_key(x), x, _double)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700 and "readable by others" in caplog.text


def test_a_file_where_the_folder_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "cache").write_text("not a folder")
    x = _images(3)
    with pytest.raises(OSError, match="cache"):
        feature_cache.FeatureCache(tmp_path / "cache").features(_key(x), x, _double)


def test_entries_and_clear(tmp_path):
    cache = feature_cache.FeatureCache(tmp_path / "c")
    assert cache.entries() == [] and cache.clear() == (0, 0)
    x = _images(6)
    cache.features(_key(x), x, _double)
    (tmp_path / "c" / ".tmp-interrupted").mkdir()
    rows = cache.entries()
    assert [(r["front_end"], r["rows"], r["state"]) for r in rows] == [
        (None, None, "temporary"),
        ("double", 6, "ok"),
    ]
    size = sum(f.stat().st_size for f in (tmp_path / "c" / _key(x).name).iterdir())
    assert rows[1]["bytes"] == size
    _truncate(tmp_path / "c" / _key(x).name)
    assert cache.entries()[1]["state"] == "damaged"
    assert cache.clear() == (2, size - 4)
    assert not (tmp_path / "c").exists()


def test_resolve_root(tmp_path, monkeypatch):
    monkeypatch.delenv(feature_cache.ENV, raising=False)
    assert feature_cache.resolve_root(None, runs_root=tmp_path) == tmp_path / ".feature-cache"
    assert feature_cache.resolve_root(True, runs_root=tmp_path) == tmp_path / ".feature-cache"
    assert feature_cache.resolve_root(False, runs_root=tmp_path) is None
    assert (
        feature_cache.resolve_root(str(tmp_path / "mine"), runs_root=tmp_path) == tmp_path / "mine"
    )
    monkeypatch.setenv(feature_cache.ENV, str(tmp_path / "env"))
    assert feature_cache.resolve_root(None, runs_root=tmp_path) == tmp_path / "env"
    assert (
        feature_cache.resolve_root(str(tmp_path / "mine"), runs_root=tmp_path) == tmp_path / "mine"
    )
    monkeypatch.setenv(feature_cache.ENV, "off")
    assert feature_cache.resolve_root(None, runs_root=tmp_path) is None
    with pytest.raises(TypeError, match="feature_cache"):
        feature_cache.resolve_root(3, runs_root=tmp_path)


def test_using_sets_the_cache_of_the_front_end(tmp_path):
    cache = feature_cache.FeatureCache(tmp_path)
    assert feature_cache.active() is None
    with feature_cache.using(cache):
        assert feature_cache.active() is cache
        assert features.scatter_features(_images(4)).hit is False
    assert feature_cache.active() is None and cache.summary()["misses"] == 1
    with pytest.raises(TypeError, match="FeatureCache"), feature_cache.using("folder"):
        pass


def _data(n_private=40, n_public=30, n_eval=10):
    rng = np.random.default_rng(5)
    split = lambda n, s: ArraySplit(_images(n, seed=s), rng.integers(0, 3, n))
    return PateData(
        name="toy",
        private=split(n_private, 1),
        public=split(n_public, 2),
        evaluation=split(n_eval, 3),
        num_classes=3,
        input_shape=(1, 8, 8),
    )


def test_feature_data_through_the_cache_is_what_it_computes_without(tmp_path, monkeypatch):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 16)
    data = _data()
    plain = features.feature_data(data, "scatternet")
    cache = feature_cache.FeatureCache(tmp_path)
    for expect_hits in (0, 3):
        cached = features.feature_data(data, "scatternet", cache=cache)
        for name in ("public", "private", "evaluation"):
            np.testing.assert_array_equal(getattr(cached, name).x, getattr(plain, name).x)
        assert cache.summary()["hits"] == expect_hits
    # the statistics are the public split's alone, as before the cache
    raw = features.scatter(data.public.x).astype(np.float64)
    mean = raw.mean(axis=(0, 2, 3))
    np.testing.assert_allclose(
        cached.private.x[:, :, 0, 0],
        (features.scatter(data.private.x)[:, :, 0, 0] - mean) / (raw.std(axis=(0, 2, 3)) + 1e-6),
        rtol=1e-4,
        atol=1e-4,
    )


def test_the_public_front_end_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(feature_cache, "CHUNK_ROWS", 16)
    data = _data()
    cache = feature_cache.FeatureCache(tmp_path)
    front, public = public_embedding.PublicFrontEnd.fit_transform(
        data.public.x, features="scatternet", dims=8, cache=cache
    )
    plain, plain_public = public_embedding.PublicFrontEnd.fit_transform(
        data.public.x, features="scatternet", dims=8
    )
    np.testing.assert_array_equal(public, plain_public)
    np.testing.assert_array_equal(
        front.embed(data.private.x, cache=cache), plain.embed(data.private.x)
    )
    assert cache.summary()["misses"] == 2
    again, _ = public_embedding.PublicFrontEnd.fit_transform(
        data.public.x, features="scatternet", dims=8, cache=cache
    )
    np.testing.assert_array_equal(again.pca.axes, front.pca.axes)
    assert cache.summary()["hits"] == 1
    # the chunked axes are the public SVD's (up to sign and rounding)
    st = features.Standardizer.fit(features.scatter(data.public.x))
    svd = public_embedding.PublicPCA.fit(st.transform(features.scatter(data.public.x)), dims=8)
    np.testing.assert_allclose(np.abs(svd.axes @ front.pca.axes.T), np.eye(8), atol=1e-6)


def test_front_end_device_selects_its_own_cache_entries():
    """Issue #33: the ScatterNet front-end computes on the run's device (features.computing_on);
    features computed on a GPU are cached under their own key (they agree with the CPU's to
    float32 rounding, not bit for bit), and the CPU's key is the one it always was."""
    assert features._scatter_settings() == features.SCATTER_SETTINGS
    with features.computing_on("cuda:0"):
        assert features._scatter_settings() == {**features.SCATTER_SETTINGS, "device": "cuda"}
        with features.computing_on("cpu"):
            assert features._scatter_settings() == features.SCATTER_SETTINGS
    assert features._scatter_settings() == features.SCATTER_SETTINGS
    x = np.zeros((2, 1, 8, 8), dtype=np.float32)
    cpu = feature_cache.EntryKey.of(
        x, front_end="scatternet", settings=features._scatter_settings(), output_shape=(81, 2, 2)
    )
    with features.computing_on("cuda"):
        gpu = feature_cache.EntryKey.of(
            x,
            front_end="scatternet",
            settings=features._scatter_settings(),
            output_shape=(81, 2, 2),
        )
    assert cpu.name != gpu.name


def test_pread_rows_reads_any_dtype_in_any_order_with_repeats(tmp_path):
    from pate.teachers.feature_cache import pread_rows

    x = np.arange(7 * 2 * 3, dtype=np.uint8).reshape(7, 2, 3)
    path = tmp_path / "a.bin"
    path.write_bytes(b"HEADER" + x.tobytes())
    rows = np.array([5, 0, 1, 2, 5, 6, 3])
    got = pread_rows(path, 6, np.dtype(np.uint8), (2, 3), rows)
    np.testing.assert_array_equal(got, x[rows])
    assert pread_rows(path, 6, np.dtype(np.uint8), (2, 3), np.array([], int)).shape == (0, 2, 3)
    with pytest.raises(OSError, match="short read at row 7"):
        pread_rows(path, 6, np.dtype(np.uint8), (2, 3), np.array([7]))
