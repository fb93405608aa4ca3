"""Files of pate-learn: atomic writers (a kill -9 at any moment leaves the old file or the new
one, never half; a full disk, a read-only file system or missing rights raise ``RunDirError``
naming the file), readers that never unpickle and name the file on every failure
(``FileNotFoundError``, ``CorruptFileError``), and output folders checked before any work. No
torch import. The contract of each: docs/pipeline.md ("Files")."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import secrets
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
from numpy.lib.npyio import NpzFile

from pate.analysis.errors import CorruptFileError, InputTypeError
from pate.analysis.mapped import npz_member_map
from pate.core.errors import RunDirError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_save_npy",
    "atomic_savez",
    "atomic_writer",
    "naming_write_errors",
    "read_json",
    "load_npy",
    "load_npz",
    "ensure_writable_dir",
    "check_writable_dir",
]


# A write that fails for want of room or rights: what to do about it (an expected error).
_NO_ROOM = "free space on that file system (or raise the quota) and run the command again"
WRITE_ERRNOS = {
    getattr(errno, name): advice
    for name, advice in (
        ("ENOSPC", _NO_ROOM),
        ("EDQUOT", _NO_ROOM),
        ("EFBIG", _NO_ROOM),
        ("EROFS", "the file system is read-only: write to another folder"),
        ("EACCES", "fix the folder's permissions or write to another folder"),
        ("EPERM", "fix the folder's permissions or write to another folder"),
    )
    if hasattr(errno, name)
}

#: A file or folder path as the writers here take it.
PathArg = str | os.PathLike[str]


@contextlib.contextmanager
def naming_write_errors(path: PathArg) -> Iterator[None]:
    """Inside it, an ``OSError`` of a full disk (``ENOSPC``, ``EDQUOT``, ``EFBIG``), a read-only
    file system or missing rights while writing ``path`` becomes a :class:`RunDirError` naming
    the file, the cause and what to do (the ``pate`` command: one line, exit 2); any other
    error passes unchanged."""
    try:
        yield
    except OSError as exc:
        advice = WRITE_ERRNOS.get(exc.errno)
        if advice is None or exc.errno is None:  # (no errno: never one of WRITE_ERRNOS)
            raise
        raise RunDirError(
            f"cannot write {path}: {exc.strerror or exc} "
            f"({errno.errorcode[exc.errno]}); {advice} (nothing half-written was "
            "left; a stopped run continues where it stopped: the same `pate run` "
            "command with --resume, or the same pate.fit call with resume=True)",
            path=path,
        ) from exc


def atomic_write_bytes(path: PathArg, data: bytes) -> pathlib.Path:
    with atomic_writer(path) as fh:
        fh.write(data)
    return pathlib.Path(path)


@contextlib.contextmanager
def atomic_writer(path: PathArg) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into, a piece at a time (a large output
    that is never held whole); on leaving the block it is fsynced and renamed over ``path``,
    and on an error removed (the common part of every atomic writer here)."""
    path = pathlib.Path(path)
    with naming_write_errors(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # the original error says more than the cleanup's
                os.unlink(tmp)
            raise
        fsync_dir(path.parent)


def fsync_dir(folder: pathlib.Path) -> None:
    """Make a rename in ``folder`` durable (POSIX: fsync the directory); a failure raises, so
    that a caller never takes a write for durable when it may not be."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows: the rename is as durable as it gets
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: PathArg, obj: Any) -> pathlib.Path:
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def atomic_save_npy(path: PathArg, array: npt.ArrayLike) -> pathlib.Path:
    with atomic_writer(path) as fh:
        np.save(fh, np.asarray(array), allow_pickle=False)
    return pathlib.Path(path)


def atomic_savez(path: PathArg, **arrays: npt.ArrayLike) -> pathlib.Path:
    """An ``.npz`` of plain arrays; object arrays (which numpy would pickle) are refused, so no
    run directory ever holds a pickle."""
    objects = sorted(k for k, a in arrays.items() if np.asarray(a).dtype.hasobject)
    if objects:
        raise InputTypeError(
            f"atomic_savez: {', '.join(objects)} would be pickled (object dtype); "
            "save plain numeric or string arrays"
        )
    with atomic_writer(path) as fh:
        # numpy's stub matches ``**arrays`` against savez's ``allow_pickle: bool`` too
        np.savez(fh, **arrays)  # type: ignore[arg-type]
    return pathlib.Path(path)


def _check_path(path: Any, name: str = "path") -> pathlib.Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(
            f"{name} must be a file path (str or os.PathLike), got {type(path).__name__}"
        )
    return pathlib.Path(path)


def _label(path: pathlib.Path, what: str | None) -> str:
    return f"{path} ({what})" if what else str(path)


@contextlib.contextmanager
def _reading(path: pathlib.Path, what: str | None) -> Iterator[None]:
    """A missing ``path`` raises ``FileNotFoundError`` naming it, a folder ``CorruptFileError``."""
    try:
        yield
    except FileNotFoundError:
        raise FileNotFoundError(f"file not found: {_label(path, what)}") from None
    except IsADirectoryError:
        raise CorruptFileError(
            f"{_label(path, what)} is a directory, not a file", path=path
        ) from None


def read_json(path: Any, *, what: str | None = None) -> Any:
    """The JSON document in ``path``; missing: ``FileNotFoundError`` naming it (and ``what``, a
    description of the file); invalid JSON or not text: ``CorruptFileError``."""
    path = _check_path(path)
    with _reading(path, what):
        data = path.read_bytes()
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(
            f"{_label(path, what)} is not valid JSON: {exc.msg} at line {exc.lineno} column "
            f"{exc.colno} (the file is damaged or was not written by pate-learn; re-create it)",
            path=path,
        ) from None
    except UnicodeDecodeError as exc:
        raise CorruptFileError(
            f"{_label(path, what)} is not a JSON text file ({exc.reason} at byte {exc.start}); "
            "re-create it",
            path=path,
        ) from None


# What numpy raises on a damaged file (OSError is narrowed to the non-filesystem ones below).
_NUMPY_CORRUPT = (ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError, OSError)


def _np_load(path: pathlib.Path, what: str | None) -> np.ndarray | NpzFile:
    with _reading(path, what):
        try:
            loaded: np.ndarray | NpzFile = np.load(path, allow_pickle=False)
            return loaded
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            raise
        except _NUMPY_CORRUPT as exc:
            raise _corrupt(path, what, exc) from None


def _corrupt(path: pathlib.Path, what: str | None, exc: BaseException) -> CorruptFileError:
    kind = ".npz archive" if path.suffix == ".npz" else ".npy array"
    detail = str(exc) or type(exc).__name__
    if "pickle" in detail:
        # numpy says "pickled data" for anything without a NumPy or zip header
        try:
            with open(path, "rb") as fh:
                magic = fh.read(6)
        except OSError:
            magic = b""
        detail = (
            "it holds pickled (object) data, which pate-learn never loads"
            if magic.startswith(b"\x93NUMPY") or magic.startswith(b"\x80")
            else "it has no NumPy .npy/.npz header"
        )
    return CorruptFileError(
        f"{_label(path, what)} is not a readable {kind} ({detail}); the file is "
        "truncated, damaged or of another format: re-create it",
        path=path,
    )


def load_npy(path: Any, *, what: str | None = None) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` (``allow_pickle=False``); missing:
    ``FileNotFoundError``; truncated, garbage, pickled or an ``.npz``: ``CorruptFileError``."""
    path = _check_path(path)
    out = _np_load(path, what)
    if not isinstance(out, np.ndarray):
        out.close()
        raise CorruptFileError(
            f"{_label(path, what)} is an .npz archive, not a .npy array", path=path
        )
    return out


def load_npz(
    path: Any, *, what: str | None = None, mapped: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` archive ``path``, as a dict, read eagerly (errors as :func:`load_npy`); the
    members named in ``mapped`` as read-only memory maps where they are stored uncompressed
    (:func:`pate.analysis.mapped.npz_member_map`: a large member read a block at a time by
    whoever scans it, not held), the others read."""
    path = _check_path(path)
    archive = _np_load(path, what)
    if isinstance(archive, np.ndarray):
        raise CorruptFileError(
            f"{_label(path, what)} is a .npy array, not an .npz archive", path=path
        )
    try:
        with archive:
            out: dict[str, np.ndarray] = {}
            for name in archive.files:
                member = npz_member_map(path, name) if name in mapped else None
                out[name] = archive[name] if member is None else member
            return out
    except PermissionError:
        raise
    except _NUMPY_CORRUPT as exc:
        raise _corrupt(path, what, exc) from None


def ensure_writable_dir(path: Any, *, flag: str | None) -> pathlib.Path:
    """Create the folder ``path`` if needed and check that a file can be created in it, before any
    work; else ``RunDirError`` naming the path and ``flag`` (None: "output directory")."""
    folder = _check_path(path, flag or "path")
    label = f"{flag} {folder}" if flag else f"output directory {folder}"
    if folder.exists() and not folder.is_dir():
        raise RunDirError(
            f"{label} exists and is not a directory; choose a directory path",
            path=folder,
            flag=flag,
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(
            f"{label}: cannot create the directory ({exc.strerror or exc}); "
            "choose a path you can write to",
            path=folder,
            flag=flag,
        ) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".pate-write-check.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RunDirError(
            f"{label} is not writable ({exc.strerror or exc}); choose a directory "
            "you can write to or fix its permissions",
            path=folder,
            flag=flag,
        ) from None
    return folder


def check_writable_dir(path: Any, *, label: str) -> pathlib.Path:
    """Refuse (``RunDirError`` naming ``label`` and the path) a folder that could not be created
    or written, touching nothing: the folder, else its nearest existing parent, must be a
    directory this process may write to and enter (``os.access``). Returns the folder."""
    folder = _check_path(path, label)
    where = folder
    while not where.exists() and where.parent != where:
        where = where.parent
    if not where.is_dir():
        raise RunDirError(
            f"{label} {folder}: {where} is not a directory, so nothing can be written there; "
            "choose another path or move that file away",
            path=folder,
        )
    if not os.access(where, os.W_OK | os.X_OK):
        raise RunDirError(
            f"{label} {folder} is not writable (no permission to write in {where}, or a "
            "read-only file system); choose a directory you can write to or fix its permissions",
            path=folder,
        )
    return folder


@contextlib.contextmanager
def staged_folder(
    target: pathlib.Path,
    tag: str,
    *,
    recheck: Callable[[], None],
    rename_error: Callable[[OSError], Exception],
) -> Iterator[pathlib.Path]:
    """A new folder beside ``target`` (``.<name>.<tag>-<hex>``) for the body to fill, then
    ``recheck()`` and a rename onto ``target`` (missing or an empty folder; a failure raises
    ``rename_error(exc)``); when anything fails the staged folder is removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{tag}-{secrets.token_hex(6)}"
    staging.mkdir()
    try:
        yield staging
        recheck()
        try:
            os.rename(staging, target)
        except OSError as exc:
            raise rename_error(exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
