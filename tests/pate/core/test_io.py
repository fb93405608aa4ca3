"""pate.core.io: atomic writers never pickle; readers name the file and say what is wrong."""

from __future__ import annotations

import errno
import pickle

import numpy as np
import pytest

from pate.analysis.errors import CorruptFileError
from pate.core.errors import RunDirError
from pate.core.io import atomic_savez, load_npy, load_npz


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


def test_a_full_disk_names_the_file_and_how_to_continue_in_both_front_ends(tmp_path):
    """pate.core.io.naming_write_errors: the message names the file, the cause and what to do, and
    how a stopped run continues from the command line and from Python."""
    from pate.core.io import naming_write_errors

    target = tmp_path / "labels.npy"
    with pytest.raises(RunDirError) as caught:
        with naming_write_errors(target):
            raise OSError(errno.ENOSPC, "No space left on device")
    text = str(caught.value)
    assert str(target) in text and "ENOSPC" in text and "free space" in text
    assert "nothing half-written was left" in text
    assert "`pate run` command with --resume" in text and "pate.fit call with resume=True" in text
    with pytest.raises(KeyError):  # any other error passes unchanged
        with naming_write_errors(target):
            raise KeyError("x")


def test_check_writable_dir_touches_nothing_and_names_what_is_in_the_way(tmp_path, monkeypatch):
    """pate.core.io.check_writable_dir: a folder to be created is checked where it would be
    created; a file on its way is refused naming the label and the path; nothing is created and
    no folder's modification time changes."""
    import os

    from pate.core.io import check_writable_dir

    before = tmp_path.stat().st_mtime_ns
    assert (
        check_writable_dir(tmp_path / "new" / "run", label="--run-dir") == tmp_path / "new" / "run"
    )
    assert list(tmp_path.iterdir()) == [] and tmp_path.stat().st_mtime_ns == before
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(RunDirError, match=r"--run-dir .*file/run: .*file is not a directory"):
        check_writable_dir(tmp_path / "file" / "run", label="--run-dir")
    # a folder this process may not write to (checked with os.access: root writes anywhere)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(RunDirError, match=r"the run's folder .*private is not writable"):
        check_writable_dir(tmp_path / "private", label="the run's folder")


def test_a_staged_folder_is_renamed_into_place_or_removed(tmp_path):
    from pate.core.io import staged_folder

    target = tmp_path / "out"
    with staged_folder(target, "t", recheck=lambda: None, rename_error=RuntimeError) as staging:
        (staging / "a.txt").write_text("a")
    assert (target / "a.txt").read_text() == "a" and sorted(tmp_path.iterdir()) == [target]
    failed = tmp_path / "failed"
    with pytest.raises(ValueError, match="half-made"):
        with staged_folder(failed, "t", recheck=lambda: None, rename_error=RuntimeError) as st:
            (st / "b.txt").write_text("b")
            raise ValueError("half-made")
    assert sorted(tmp_path.iterdir()) == [target]  # nothing of the failed one is left
