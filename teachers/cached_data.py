"""The user's data files through the feature cache: what cannot be memory-mapped as stored is
written once, a chunk at a time, into a :class:`pate.teachers.feature_cache.FeatureCache` entry
as float32 rows and mapped from there (docs/feature_cache.md, "pate.teachers.cached_data").
"""

from __future__ import annotations

import hashlib
import pathlib
import zipfile
from collections.abc import Callable

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.mapped import npz_member_map
from pate.teachers.data_checks import check_features
from pate.teachers.feature_cache import (
    CachedFeatures,
    EntryKey,
    FeatureCache,
    file_digest,
    pread_rows,
)

DECODED_IMAGES = "decoded-images"
NPZ_MEMBER = "npz-member"
NPZ_POOL = "npz-pool-order"
CONVERTED = "converted"


def decoded_images(
    cache: FeatureCache,
    folder,
    digests: list[bytes],
    *,
    mode: str,
    size: tuple[int, int],
    decode: Callable[[object, np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """The images of an image ``folder`` decoded by ``decode(folder, rows, out)``: a read-only
    memory map of the entry (``digests``: the files' sha256, in row order)."""
    h = hashlib.sha256(b"pate-learn image folder files v1\0")
    for d in digests:
        h.update(d)
    shape = (1 if mode == "L" else 3, int(size[0]), int(size[1]))
    key = EntryKey(
        front_end=DECODED_IMAGES,
        # what the decoding does besides the files: torchvision's Resize (bilinear, antialiased)
        settings={"mode": mode, "resize": "bilinear-antialias", "scale": "uint8/255"},
        input_shape=(),
        output_shape=shape,
        rows=len(digests),
        digest=h.hexdigest(),
    )
    rows = np.arange(len(digests))
    entry = cache.features(
        key, rows, lambda block: decode(folder, block, np.empty((len(block), *shape), np.float32))
    )
    return entry.array


def converted_rows(
    cache: FeatureCache,
    x: np.ndarray,
    convert: Callable[[np.ndarray], np.ndarray],
    *,
    digest: str,
    settings: dict,
) -> np.ndarray:
    """``convert(x)`` (a row-wise conversion to float32, e.g. uint8 images to ``[0, 1]``) as a
    read-only memory map of a cache entry, converted a chunk of rows at a time on a miss;
    ``digest`` identifies the files ``x`` was read from, ``settings`` what ``convert`` does."""
    return cache.features(_rows_key(CONVERTED, settings, x.shape, digest), x, convert).array


def _rows_key(front_end: str, settings: dict, shape: tuple, digest: str) -> EntryKey:
    """The entry of ``shape[0]`` rows of ``shape[1:]``, converted row by row (same shape)."""
    row_shape = tuple(int(s) for s in shape[1:])
    return EntryKey(front_end, dict(settings), row_shape, row_shape, int(shape[0]), digest)


class _MemberStream:
    """The rows of an ``.npz`` member read in order from the archive (decompressed as read)."""

    def __init__(self, path: pathlib.Path, name: str) -> None:
        self._zip = zipfile.ZipFile(path)
        self._file = self._zip.open(f"{name}.npy")
        version = np.lib.format.read_magic(self._file)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        self.shape, self.fortran, self.dtype = read_header(self._file)
        self.row_shape = tuple(self.shape[1:])
        self._row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.next_row = 0

    def read(self, rows: int) -> np.ndarray:
        data = self._file.read(rows * self._row_bytes)
        if len(data) != rows * self._row_bytes:
            raise InputError(f"the member ended at row {self.next_row} of {self.shape[0]}")
        self.next_row += rows
        return np.frombuffer(data, dtype=self.dtype).reshape((rows, *self.row_shape))

    def close(self) -> None:
        self._file.close()
        self._zip.close()


def _checked(block: np.ndarray, source: Callable[[], np.ndarray], what: str) -> np.ndarray:
    """``block`` as float32, after refusing a value that is not finite as float32 by checking
    the whole ``source()`` (its message names the file's row, as without a cache)."""
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(block, dtype=np.float32)
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        check_features(source(), what)
        raise RuntimeError(f"{what}: a non-finite value was found, then not; a bug in pate-learn")
    return out


def npz_rows(
    cache: FeatureCache,
    path: pathlib.Path,
    name: str,
    *,
    order: np.ndarray | None = None,
    what: str,
) -> np.ndarray | None:
    """The member ``name`` of the archive ``path`` as float32 rows (in ``order``: row ``j`` is
    the member's row ``order[j]``; None: the file's order) through a cache entry, as a read-only
    memory map; None where the member is no array of rows of numbers (the caller reads it the
    usual way and refuses what it must). ``what`` names the member in messages."""
    header = _MemberStream(path, name)  # the member's layout
    header.close()
    shape, fortran, dtype = tuple(header.shape), header.fortran, header.dtype
    if len(shape) < 2 or dtype.kind not in "biuf" or fortran or shape[0] == 0:
        return None
    if order is not None and len(order) != shape[0]:
        return None  # x and y disagree: the usual reader says so
    digest = file_digest(path)
    mapped = npz_member_map(path, name)
    if order is None or mapped is None:
        member = _stream_entry(cache, path, name, shape, dtype, digest, what)
        if order is None:
            return member.array
        source, stored_at = member.array, (member.path, member.array.offset)
    else:
        source, stored_at = mapped, (path, mapped.offset)
    rows = np.asarray(order, dtype=np.int64)

    def gather(block: np.ndarray) -> np.ndarray:
        picked = pread_rows(*stored_at, source.dtype, source.shape[1:], block)
        return _checked(picked, lambda: source, what)

    # the order itself, not its name: another dealing of the rows is another entry
    order_sha256 = hashlib.sha256(np.ascontiguousarray(rows, dtype="<i8").tobytes()).hexdigest()
    settings = {"member": name, "order_sha256": order_sha256, "dtype": "float32"}
    return cache.features(_rows_key(NPZ_POOL, settings, shape, digest), rows, gather).array


def _stream_entry(cache, path, name, shape, dtype, digest, what) -> CachedFeatures:
    """The member in the file's order as float32 (an entry written from the archive's stream)."""
    key = _rows_key(NPZ_MEMBER, {"member": name, "dtype": "float32"}, shape, digest)
    stream: _MemberStream | None = None

    def whole() -> np.ndarray:  # the usual way, for the error message of a bad value
        with np.load(path, allow_pickle=False) as npz:
            return npz[name]

    def read(block: np.ndarray) -> np.ndarray:
        nonlocal stream
        if stream is None:
            stream = _MemberStream(path, name)
        if int(block[0]) != stream.next_row:
            raise RuntimeError(f"{what}: rows asked out of order; a bug in pate-learn")
        return _checked(stream.read(len(block)), whole, what)

    try:
        return cache.features(key, np.arange(shape[0]), read)
    finally:
        if stream is not None:
            stream.close()
