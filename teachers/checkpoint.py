"""Atomic, code-free checkpoint files for teacher training (the torch-free writers:
:mod:`pate.core.io`): a kill -9 leaves the old or the new file; torch checkpoints are read with
``weights_only=True`` and scikit-learn chunks are ``.npz`` read with ``allow_pickle=False``, so
a file planted in a run directory cannot run code when it is read.
"""

from __future__ import annotations

import io
import pathlib
import pickle
import struct
import zipfile
import zlib

import numpy as np

from pate.analysis.errors import CorruptFileError
from pate.core.io import atomic_write_bytes

__all__ = [
    "atomic_torch_save",
    "load_torch",
    "load_plain_npz",
    "CheckpointError",
]


class CheckpointError(CorruptFileError):
    """A checkpoint in a run directory is missing, damaged, foreign or from another run: the
    message names the file and says what to delete; attribute ``path`` (a string) names it too."""


def _default_remedy(path: pathlib.Path) -> str:
    return f"delete {str(path.parent)!r} (or use a new --run-dir) and train the teachers again"


def atomic_torch_save(path, obj) -> pathlib.Path:
    """``torch.save`` to a temporary file in the same directory, fsync, then ``os.replace``."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_torch(path, *, remedy: str | None = None):
    """``torch.load(path, map_location="cpu", weights_only=True)``: no code runs. A missing,
    damaged or foreign file raises :class:`CheckpointError`; ``remedy`` (a sentence) replaces
    the default advice of deleting the directory holding it."""
    import torch

    path = pathlib.Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        pickle.UnpicklingError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        struct.error,
        zipfile.BadZipFile,
    ) as exc:
        # weights_only=True refuses anything but tensors and plain containers
        # (pickle.UnpicklingError "Weights only load failed"); a truncated file is a RuntimeError;
        # a damaged pickle inside the archive can fail in the unpickler itself (e.g. KeyError of
        # a memo index it never stored).
        raise CheckpointError(
            f"checkpoint {str(path)!r} cannot be read as a pate-learn checkpoint "
            f"({type(exc).__name__}: {_first_line(exc)}); it is missing, damaged or was not "
            f"written by pate-learn. {(remedy or _default_remedy(path)).rstrip('.')}.",
            path=path,
        ) from None


def load_plain_npz(path, *, keys, remedy: str | None = None) -> dict:
    """The arrays of an ``.npz`` read with ``allow_pickle=False``; it must hold exactly ``keys``,
    each a plain numeric array. Anything else raises :class:`CheckpointError`."""
    path = pathlib.Path(path)
    keys = set(keys)
    advice = (remedy or _default_remedy(path)).rstrip(".")

    def fail(why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {str(path)!r} {why}; {advice}.", path=path)

    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise fail("is missing") from None
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as exc:
        raise fail(
            f"is not a readable .npz of plain arrays ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise fail(f"is a single .npy array, not an .npz archive holding {sorted(keys)}")
    with loaded:
        if set(loaded.files) != keys:
            raise fail(f"holds arrays {sorted(loaded.files)}, expected {sorted(keys)}")
        try:
            arrays = {k: loaded[k] for k in sorted(keys)}
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
            # an object array needs pickles: refused by allow_pickle=False, never unpickled
            raise fail(
                f"holds an array that is damaged or not plain numbers "
                f"({type(exc).__name__}: {_first_line(exc)})"
            ) from None
    for k, a in arrays.items():
        if a.dtype.hasobject or a.dtype.kind not in "biuf":
            raise fail(f"array {k!r} has dtype {a.dtype}, expected plain numbers")
    return arrays


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no details"
