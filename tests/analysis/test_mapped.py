"""pate.analysis.mapped: npz members memory-mapped, and pages of a scan released."""

from __future__ import annotations

import numpy as np
import pytest

from pate.analysis.mapped import npz_member_map, release_read


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.fixture
def archive(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.random((300, 1, 7, 7), dtype=np.float32),
        "y": rng.integers(0, 10, 300),
        "f": np.asfortranarray(rng.random((5, 3))),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path, arrays


def test_members_are_mapped_with_the_values_numpy_reads(archive):
    path, arrays = archive
    for name in ("x", "y", "f"):
        mapped = npz_member_map(path, name)
        assert isinstance(mapped, np.memmap) and mapped.mode == "r"
        assert mapped.dtype == arrays[name].dtype and mapped.shape == arrays[name].shape
        np.testing.assert_array_equal(mapped, arrays[name])
    assert npz_member_map(path, "f").flags.f_contiguous
    with pytest.raises(ValueError):  # read-only
        npz_member_map(path, "x")[0, 0, 0, 0] = 1.0


def test_what_cannot_be_mapped_is_none(archive, tmp_path):
    path, arrays = archive
    assert npz_member_map(path, "empty") is None
    assert npz_member_map(path, "absent") is None
    compressed = tmp_path / "c.npz"
    np.savez_compressed(compressed, x=arrays["x"])
    assert npz_member_map(compressed, "x") is None


def test_a_large_member_in_a_zip64_archive(tmp_path):
    # numpy writes members with zip64 extras in the local header (force_zip64 for big arrays)
    import zipfile

    x = np.arange(5000, dtype=np.float64).reshape(50, 100)
    path = tmp_path / "z.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, x)
    np.testing.assert_array_equal(npz_member_map(path, "x"), x)


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="no madvise")
def test_release_read_drops_the_pages_a_scan_touched(tmp_path):
    x = np.random.default_rng(1).random((2048, 16384), dtype=np.float32)  # 128 MiB
    path = tmp_path / "big.npz"
    np.savez(path, x=x)
    del x
    mapped = np.ascontiguousarray(npz_member_map(path, "x"), dtype=np.float32)  # no copy
    before = _resident_mib()
    total = 0.0
    for i in range(0, len(mapped), 128):
        total += float(mapped[i : i + 128].sum())
        release_read(mapped[i : i + 128])
    released = _resident_mib() - before
    for i in range(0, len(mapped), 128):
        total -= float(mapped[i : i + 128].sum())
    kept = _resident_mib() - before
    assert total == 0.0  # the values read after a release are the file's
    assert released < 32 and kept > 96, (released, kept)
    release_read(mapped)
    assert _resident_mib() - before < 32


def test_release_read_leaves_other_arrays_alone(tmp_path):
    a = np.arange(10_000, dtype=np.float64)
    release_read(a)  # anonymous memory: never advised (its values would be lost)
    assert a[-1] == 9999.0
    path = tmp_path / "w.npy"
    np.save(path, a)
    writable = np.load(path, mmap_mode="c")  # copy-on-write: modified pages must stay
    writable[0] = -1.0
    release_read(writable)
    assert writable[0] == -1.0
    release_read(a[::2])  # not contiguous: ignored
    release_read(np.zeros(0))
