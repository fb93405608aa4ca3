"""Atomic files for teacher training: a kill -9 at any moment leaves either the old or the new file.

Symbols
-------
``atomic_write_bytes(path, data)``, ``atomic_write_json(path, obj)``,
``atomic_torch_save(path, obj)``, ``atomic_savez(path, **arrays)``
    Write to a temporary file in the same directory, fsync, then ``os.replace``.
``load_torch(path)``
    ``torch.load`` of a checkpoint written by this package (``weights_only=True``: no code runs).
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import tempfile

import numpy as np

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_torch_save", "atomic_savez",
           "load_torch"]


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


def atomic_torch_save(path, obj) -> pathlib.Path:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def atomic_savez(path, **arrays) -> pathlib.Path:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return atomic_write_bytes(path, buffer.getvalue())


def load_torch(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)
