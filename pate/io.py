"""Atomic files: a kill -9 at any moment leaves either the old file or the new one, never half.

Every output of pate-learn (partitions, votes, labels, summaries, checkpoints, reports) is written
through these helpers: write a temporary file in the same directory, fsync, then ``os.replace``.
No torch import here (``teachers.checkpoint`` adds the torch-specific ones).
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import tempfile

import numpy as np

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_save_npy", "atomic_savez"]


def atomic_write_bytes(path, data: bytes) -> pathlib.Path:
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_json(path, obj) -> pathlib.Path:
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def atomic_save_npy(path, array) -> pathlib.Path:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return atomic_write_bytes(path, buffer.getvalue())


def atomic_savez(path, **arrays) -> pathlib.Path:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return atomic_write_bytes(path, buffer.getvalue())
