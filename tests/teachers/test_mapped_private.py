"""The private images of an ``npz:`` file memory-mapped, not held (issue #33): the same values,
record keys and feature-cache key as the file read whole, and the scans that read them all
(the input checks, the ledger's record keys, the cache key) keep only a block resident."""

from __future__ import annotations

import numpy as np
import pytest

from pate.ledger.identity import dataset_identity
from pate.teachers import feature_cache, features
from pate.teachers.data import load_pate_data


def _arrays(n_private, side=8, seed=0):
    rng = np.random.default_rng(seed)
    images = lambda n: rng.random((n, 1, side, side)).astype(np.float32)
    labels = lambda n: rng.integers(0, 3, n)
    return {
        "x_private": images(n_private),
        "y_private": labels(n_private),
        "x_public": images(40),
        "y_public": labels(40),
        "x_evaluation": images(10),
        "y_evaluation": labels(10),
    }


def _mapped_base(x):
    base = x
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    return base


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_the_private_images_are_the_files_values(tmp_path, save):
    arrays = _arrays(120)
    path = tmp_path / "d.npz"
    save(path, **arrays)
    data = load_pate_data(f"npz:{path}")
    np.testing.assert_array_equal(data.private.x, arrays["x_private"])
    assert data.private.x.dtype == np.float32 and data.private.x.flags.c_contiguous
    mapped = _mapped_base(data.private.x)
    if save is np.savez:  # stored: mapped read-only; compressed: read as before
        assert mapped is not None and mapped.mode == "r"
    else:
        assert mapped is None
    assert _mapped_base(data.public.x) is None  # small splits are read
    held = dataset_identity(arrays["x_private"], arrays["y_private"])
    assert dataset_identity(data.private.x, data.private.y).digest == held.digest
    assert feature_cache.input_digest(data.private.x) == feature_cache.input_digest(
        arrays["x_private"]
    )


def test_a_bad_value_in_a_mapped_split_is_refused(tmp_path):
    from pate.analysis.errors import InputError

    arrays = _arrays(30)
    arrays["x_private"][17, 0, 2, 3] = np.nan
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError, match="private split.*row 17"):
        load_pate_data(f"npz:{path}")


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_the_scans_of_a_mapped_split_keep_a_block_resident(tmp_path):
    """Loading (the checks), the record keys and the feature-cache key of 96 MiB of private
    images: the resident set grows by much less than the images."""
    arrays = _arrays(24_000, side=32, seed=1)  # 24000 x 1 x 32 x 32 float32 = 94 MiB
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    del arrays
    before = _resident_mib()
    data = load_pate_data(f"npz:{path}")
    identity = dataset_identity(data.private.x, data.private.y)
    key = feature_cache.EntryKey.of(
        data.private.x, front_end="t", settings={}, output_shape=features.feature_shape((1, 32, 32))
    )
    grown = _resident_mib() - before
    assert identity.num_records == 24_000 and key.rows == 24_000
    assert grown < 48, grown
