"""pate.io: atomic writers never pickle; readers name the file and say what is wrong."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pate.analysis.errors import CorruptFileError
from pate.io import atomic_savez, load_npy, load_npz


def test_atomic_savez_refuses_object_arrays(tmp_path):
    with pytest.raises(TypeError, match="would be pickled"):
        atomic_savez(tmp_path / "x.npz", ok=np.arange(3), bad=np.array([object()], dtype=object))
    assert not (tmp_path / "x.npz").exists()
    atomic_savez(tmp_path / "y.npz", ok=np.arange(3), names=np.array(["a", "b"]))
    assert sorted(load_npz(tmp_path / "y.npz")) == ["names", "ok"]


def test_a_file_without_a_numpy_header_is_not_called_a_pickle(tmp_path):
    (tmp_path / "garbage.npy").write_bytes(b"not numpy at all")
    with pytest.raises(CorruptFileError, match="no NumPy .npy/.npz header") as info:
        load_npy(tmp_path / "garbage.npy", what="--votes")
    assert "garbage.npy" in str(info.value)
    (tmp_path / "pickled.npy").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CorruptFileError, match="pickled"):
        load_npy(tmp_path / "pickled.npy")
