"""Arrays read from files through read-only memory maps, without keeping them resident.

A large split (the private images or embeddings) is scanned as a read-only memory map of a file.
Touched pages of a map stay in the process's resident set until the map is closed, so a scan
that calls :func:`release_read` on each block it has finished keeps about one block resident
(the pages stay in the kernel's page cache, and are read again if touched again).
"""

from __future__ import annotations

import mmap
import pathlib
import struct
import zipfile
from typing import Any

import numpy as np

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local file header (30 bytes)
_LOCAL_SIGNATURE = b"PK\x03\x04"


def npz_member_map(path: str | pathlib.Path, name: str) -> np.memmap[Any, Any] | None:
    """A read-only ``numpy.memmap`` of the array ``name`` of the ``.npz`` archive ``path`` when it
    is stored uncompressed (``numpy.savez``) with a plain dtype and at least one value, else None
    (the caller reads it the usual way)."""
    path = pathlib.Path(path)
    with zipfile.ZipFile(path) as archive:
        try:
            info = archive.getinfo(f"{name}.npy")
        except KeyError:
            return None
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return None
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
        if fields[0] != _LOCAL_SIGNATURE:
            return None
        member_start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        f.seek(member_start)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            return None
        offset = f.tell()
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if dtype.hasobject or size == 0 or offset - member_start + size != info.file_size:
        return None
    mapped: np.memmap[Any, Any] = np.memmap(
        path,
        dtype=dtype,
        mode="r",
        offset=offset,
        shape=tuple(shape),
        order="F" if fortran else "C",
    )
    return mapped


def _read_only_map(block: np.ndarray) -> mmap.mmap | None:
    """The ``mmap`` of the read-only ``numpy.memmap`` ``block`` is a view of, or None."""
    base: Any = block
    while base is not None:
        if isinstance(base, np.memmap):
            found = getattr(base, "_mmap", None)
            return found if base.mode == "r" and isinstance(found, mmap.mmap) else None
        base = getattr(base, "base", None)
    return None


def release_read(block: np.ndarray) -> None:
    """Drop from the resident set the pages of the read-only memory map that the C-contiguous view
    ``block`` lies in (a no-op for any other array). Safe: the map is read-only and file-backed,
    so the values read later are the file's."""
    if not isinstance(block, np.ndarray) or block.nbytes == 0 or not block.flags.c_contiguous:
        return
    mapped = _read_only_map(block)
    if mapped is None:
        return
    start = int(np.frombuffer(mapped, dtype=np.uint8).ctypes.data)
    low = int(block.ctypes.data) - start
    if low < 0 or low + block.nbytes > len(mapped):
        return
    first = low - low % mmap.PAGESIZE
    mapped.madvise(mmap.MADV_DONTNEED, first, low + block.nbytes - first)
