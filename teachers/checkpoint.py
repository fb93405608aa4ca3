"""Atomic files for teacher training: a kill -9 at any moment leaves either the old or the new file.

Symbols
-------
``atomic_write_bytes(path, data)``, ``atomic_write_json(path, obj)``,
``atomic_torch_save(path, obj)``, ``atomic_savez(path, **arrays)``
    Write to a temporary file in the same directory, fsync, then ``os.replace`` (the torch-free
    ones are :mod:`pate.io`'s, re-exported here).
``load_torch(path)``
    ``torch.load`` of a checkpoint written by this package (``weights_only=True``: no code runs).
"""

from __future__ import annotations

import io
import pathlib

from pate.io import atomic_savez, atomic_write_bytes, atomic_write_json

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_torch_save", "atomic_savez",
           "load_torch"]


def atomic_torch_save(path, obj) -> pathlib.Path:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_torch(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)
