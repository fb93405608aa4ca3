"""knn_embeddings.npz written a block of private rows at a time (issue #33): the arrays numpy
reads back are those np.savez wrote of the held embeddings, and the aggregate stage maps the
private ones instead of reading them."""

from __future__ import annotations

import numpy as np
import pytest

from pate.core.io import load_npz
from pate.run.stages.votes import _save_embeddings


def _embeddings(n=50, dims=4):
    rng = np.random.default_rng(5)
    public = rng.random((12, dims)).astype(np.float32)
    private = rng.random((n, dims)).astype(np.float32)
    return public, private, rng.integers(0, 3, n)


def test_the_file_holds_the_arrays_np_savez_would(tmp_path):
    public, private, labels = _embeddings()
    path = tmp_path / "knn_embeddings.npz"
    blocks = (private[i : i + 16] for i in range(0, len(private), 16))
    rows = _save_embeddings(
        path,
        public=public,
        private_blocks=blocks,
        private_rows=len(private),
        private_labels=labels,
        num_classes=3,
    )
    assert rows == 50
    reference = tmp_path / "savez.npz"
    np.savez(
        reference, public=public, private=private, private_labels=labels, num_classes=np.int64(3)
    )
    with np.load(path) as got, np.load(reference) as want:
        assert got.files == want.files
        for name in want.files:
            assert got[name].dtype == want[name].dtype
            np.testing.assert_array_equal(got[name], want[name])
    loaded = load_npz(path, mapped=("private",))
    assert isinstance(loaded["private"], np.memmap) and loaded["private"].mode == "r"
    np.testing.assert_array_equal(loaded["private"], private)
    assert not isinstance(loaded["public"], np.memmap)
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    "blocks, rows, message",
    [
        (lambda p: [p[:10]], 50, "gave 10 private embeddings for 50"),
        (lambda p: [p[:, :3]], 50, "of shape"),
    ],
)
def test_a_front_end_that_gives_other_rows_leaves_no_file(tmp_path, blocks, rows, message):
    public, private, labels = _embeddings()
    path = tmp_path / "knn_embeddings.npz"
    with pytest.raises(RuntimeError, match=message):
        _save_embeddings(
            path,
            public=public,
            private_blocks=blocks(private),
            private_rows=rows,
            private_labels=labels,
            num_classes=3,
        )
    assert not path.exists() and not list(tmp_path.iterdir())
