"""Dataset identity: one 16-byte content key per record, and the one digest definition.

``record_keys(x, y)`` hashes each record's values (float32, C order, whatever the array's
layout) and label; ``dataset_digest`` is the sha256 of sorted ids or record keys;
``unit_identity(unit_ids)`` keys each row by its privacy unit (a person) instead;
``private_identity(data)`` is what every pate entry point registers and charges (the people's
when the data has an id column, else the records'); a ledger stores them only keyed with its
secret (:mod:`pate.ledger.keying`), never as such.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.mapped import release_read
from pate.core.partition import as_ids

#: The record-key definition this code registers (``identities.key_version``; the tag below).
KEY_VERSION = 2
RECORD_KEY_BYTES = 16
HEX_DIGITS = frozenset("0123456789abcdef")

# The record's values flattened in C order, whatever the array's layout.
_RECORD_TAG = b"pate-learn record flat float32-le/int64 v2\n"
_KEYS_TAG = b"pate-learn record-keys sha256/128 v1\n"
# A privacy unit's id as UTF-8 text (an integer id as its decimal digits).
_UNIT_TAG = b"pate-learn unit id utf8 v1\n"


def dataset_digest(ids: Any) -> str:
    """The sha256 hex digest of a dataset from the ids of its records, in any order -- the one
    digest definition of the ledger (docs/ledger.md). ``ids``: a 1-D array of unique integers, of
    unique strings, or of record keys (``S16`` from :func:`record_keys`; a multiset), each kind
    hashed under its own tag."""
    if isinstance(ids, (str, bytes)) or ids is None:
        raise InputTypeError(f"ids must be a 1-D array of record ids, got {type(ids).__name__}")
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"ids must be a non-empty 1-D array of record ids, got shape {arr.shape}")
    h = hashlib.sha256()
    if arr.dtype.kind == "S":
        if arr.dtype.itemsize != RECORD_KEY_BYTES:
            raise InputTypeError(
                f"byte ids must be {RECORD_KEY_BYTES}-byte record keys (dtype "
                f"S{RECORD_KEY_BYTES}, from record_keys), got dtype {arr.dtype}"
            )
        h.update(_KEYS_TAG)
        h.update(_sorted_keys(arr).tobytes())  # fixed width: the concatenation is unambiguous
        return h.hexdigest()
    if arr.dtype != np.bool_ and np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > np.iinfo(np.int64).max:
            raise InputError("ids must fit in int64; hash larger ids as strings instead")
        values = np.sort(arr.astype("<i8"))
        repeated = values[1:][values[1:] == values[:-1]]
        if repeated.size:
            raise InputError(f"ids must be unique, got the id {int(repeated[0])} more than once")
        h.update(b"pate-learn ids int64\n")
        h.update(values.tobytes())
    elif arr.dtype.kind in ("U", "O"):
        if arr.dtype.kind == "O" and not all(isinstance(v, str) for v in arr):
            raise InputTypeError(
                "ids must be integers or strings; got an object array with other types"
            )
        texts = sorted(str(v) for v in arr)
        for a, b in zip(texts, texts[1:]):
            if a == b:
                raise InputError(f"ids must be unique, got the id {a!r} more than once")
        h.update(b"pate-learn ids utf8\n")
        for v in texts:
            data = v.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    else:
        raise InputTypeError(f"ids must be integers or strings, got dtype {arr.dtype}")
    return h.hexdigest()


def record_keys(x: Any, y: Any) -> np.ndarray:
    """One 16-byte content key per record, an ``(n,)`` array of dtype ``S16`` (docs/ledger.md):
    the first 16 bytes of sha256(tag, ``x[i]`` flattened in C order as little-endian float32,
    ``y[i]`` as little-endian int64), whatever the array's layout or dtype. ``keys.tobytes()``
    gives the raw bytes (``keys[i]`` strips trailing zero bytes).
    """
    if x is None or isinstance(x, (str, bytes)):
        raise InputTypeError(f"x must be an array of records, got {type(x).__name__}")
    xa = np.asarray(x)
    if xa.ndim < 1 or xa.shape[0] == 0:
        raise InputError(f"x must hold at least one record (shape (n, ...)), got shape {xa.shape}")
    if xa.dtype.kind not in "biuf":
        raise InputTypeError(f"x must be a numeric array, got dtype {xa.dtype}")
    ya = np.asarray(y)
    if ya.ndim != 1 or ya.shape[0] != xa.shape[0]:
        raise InputError(f"y must hold one label per record ({xa.shape[0]}), got shape {ya.shape}")
    integral = ya.dtype.kind == "f" and np.all(np.isfinite(ya)) and np.all(ya == np.round(ya))
    if ya.dtype.kind not in "biu" and not integral:
        raise InputTypeError(
            f"y must hold integer labels, got dtype {ya.dtype}; pass class indices"
        )
    return _hash_records(xa.reshape(xa.shape[0], -1), ya.astype("<i8"))


#: Bytes of records converted to canonical float32 at a time by :func:`_hash_records` (a copy of
#: the whole split would double the memory the data takes).
_BLOCK_BYTES = 1 << 24


def _hash_records(flat: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The record keys of the ``(n, d)`` records ``flat`` and their int64 ``labels``."""
    n = flat.shape[0]
    base = hashlib.sha256(_RECORD_TAG)
    row_bytes = flat.shape[1] * 4
    # numpy's stubs give ndarray the buffer protocol (``__buffer__``) from Python 3.12 only
    yv = memoryview(np.ascontiguousarray(labels).view(np.uint8))  # type: ignore[arg-type]
    k = RECORD_KEY_BYTES
    out = bytearray(n * k)
    step = max(1, _BLOCK_BYTES // max(1, row_bytes))  # rows converted at a time, not all
    for start in range(0, n, step):
        # Canonical float32: +0.0 for -0.0 (adding 0 does it), one NaN bit pattern for every NaN.
        x32 = np.ascontiguousarray(flat[start : start + step], dtype="<f4") + np.float32(0.0)
        release_read(flat[start : start + step])  # a memory-mapped split: not kept resident
        nan = np.isnan(x32)
        if nan.any():
            x32[nan] = np.float32("nan")
        xv = memoryview(x32.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        for j in range(x32.shape[0]):
            i = start + j
            row, label = xv[j * row_bytes : (j + 1) * row_bytes], yv[i * 8 : (i + 1) * 8]
            h = base.copy()
            h.update(row)
            h.update(label)
            out[i * k : (i + 1) * k] = h.digest()[:k]
    return np.frombuffer(bytes(out), dtype=f"S{k}")


@dataclasses.dataclass(frozen=True)
class DatasetIdentity:
    """What the ledger knows a dataset by: ``digest`` (64 hex, :func:`dataset_digest` of the
    record keys), ``record_keys`` (``S16``, one per record, in the data's order) and
    ``num_records``. Two identities are equal when their digests are. The repr shows no digest:
    it is a hash of the records (a membership test for whoever sees it)."""

    digest: str = dataclasses.field(repr=False)
    record_keys: np.ndarray = dataclasses.field(compare=False, repr=False)
    num_records: int = dataclasses.field(compare=False)


def dataset_identity(x: Any, y: Any) -> DatasetIdentity:
    """The ledger identity of the records ``(x, y)``: what every pate entry point registers and
    charges (``pate run``, ``pate budget digest --config``). Independent of row order, file,
    format, array layout (shape, float or integer width), dataset name and run folder; changes
    when any record's values or label change."""
    keys = record_keys(x, y)
    return DatasetIdentity(dataset_digest(keys), keys, int(keys.shape[0]))


def unit_identity(unit_ids: Any) -> DatasetIdentity:
    """The ledger identity of private rows known by their privacy unit (a person: the table's id
    column): one record key per person, the first 16 bytes of sha256(tag, the unit id as UTF-8
    text), so nothing of a row counts but whose it is. The same people re-encoded, with columns
    or rows of theirs added or dropped, or reordered are the same dataset; people added or
    removed link to it (shared keys). ``unit_ids``: a 1-D array of integer or string ids, one per
    row; an integer id and its decimal text are the same person (conservative: more sharing)."""
    ids = as_ids(unit_ids, "unit_ids")
    if ids.size == 0:
        raise InputError("unit_ids is empty: one privacy-unit id per private row is needed")
    texts = ids.astype(str)
    blank = np.flatnonzero(np.char.strip(texts) == "")
    if blank.size:
        raise InputError(
            f"unit_ids[{int(blank[0])}] is empty ({str(texts[blank[0]])!r}): every private row "
            "needs the id of its person; fill the id column or drop the row"
        )
    unit_keys = [
        hashlib.sha256(_UNIT_TAG + unit.encode("utf-8")).digest()[:RECORD_KEY_BYTES]
        for unit in np.unique(texts).tolist()
    ]
    keys = np.asarray(unit_keys, dtype=f"S{RECORD_KEY_BYTES}")  # one per person
    return DatasetIdentity(dataset_digest(keys), keys, int(keys.shape[0]))


def private_identity(data: Any) -> DatasetIdentity:
    """The ledger identity of the private split of ``data`` (a ``PateData``) that every pate entry
    point registers and charges: its people's, :func:`unit_identity` of ``data.unit_ids``, when
    the data names them (an id column), else its records', :func:`dataset_identity`."""
    if data.unit_ids is None:
        return dataset_identity(data.private.x, data.private.y)
    if len(data.unit_ids) != len(data.private.y):
        raise InputError(
            f"unit_ids holds {len(data.unit_ids)} ids but the private split has "
            f"{len(data.private.y)} rows: one privacy-unit id per private row is needed"
        )
    return unit_identity(data.unit_ids)


def identity_note(by_people: bool) -> str:
    """The report's sentence on what the ledger knows the private records by: their people's ids
    (``by_people``: an id column), else their values."""
    if by_people:
        return (
            "The ledger knows these private records by (keyed hashes of) their people's ids: the "
            "same people re-encoded (standardised, rescaled, one-hot encoded, a column added or "
            "dropped, rows reordered) spend from the same budget, and a table sharing people "
            "with this one is linked to it."
        )
    return (
        "The ledger knows these private records by their values: a re-encoded copy of them "
        "(standardised, rescaled, one-hot encoded, a column added or dropped) is a new dataset "
        "to the ledger, with a budget of its own. Name an id column (id= / [data] id) to bind "
        "the budget to the people instead."
    )


def check_identity(identity: Any) -> DatasetIdentity:
    """``identity`` if it is a consistent :class:`DatasetIdentity`, else a typed error naming it."""
    if not isinstance(identity, DatasetIdentity):
        raise InputTypeError(
            f"identity must be a pate.ledger.DatasetIdentity (from dataset_identity(x, y)), "
            f"got {type(identity).__name__}"
        )
    keys = np.asarray(identity.record_keys)
    if keys.ndim != 1 or keys.dtype != np.dtype(f"S{RECORD_KEY_BYTES}") or keys.size == 0:
        raise InputError(
            f"identity.record_keys must be a non-empty 1-D S{RECORD_KEY_BYTES} array, "
            f"got dtype {keys.dtype} and shape {keys.shape}"
        )
    if identity.num_records != keys.size:
        raise InputError(
            f"identity.num_records ({identity.num_records}) must equal the number of "
            f"record keys ({keys.size})"
        )
    if dataset_digest(keys) != identity.digest:
        raise InputError(
            f"identity.digest {identity.digest!r} is not the digest of its record keys; "
            "build identities with pate.ledger.dataset_identity(x, y)"
        )
    return identity


def key_bytes(keys: np.ndarray) -> list[bytes]:
    """The raw 16 bytes of every record key, in order (``keys[i]`` would strip trailing zeros)."""
    raw = np.ascontiguousarray(keys).tobytes()
    k = RECORD_KEY_BYTES
    return [raw[i : i + k] for i in range(0, len(raw), k)]


def _sorted_keys(keys: np.ndarray) -> np.ndarray:
    """Record keys as an ``(n, 2)`` big-endian uint64 array in lexicographic byte order (explicit,
    so the order never depends on how numpy compares byte strings)."""
    words = np.ascontiguousarray(keys).view(">u8").reshape(-1, 2)
    return words[np.lexsort((words[:, 1], words[:, 0]))]


def distinct_keys(keys: np.ndarray) -> list[bytes]:
    """The raw bytes of each distinct record key, in lexicographic byte order."""
    words = _sorted_keys(keys)
    keep = np.ones(words.shape[0], dtype=bool)
    keep[1:] = np.any(words[1:] != words[:-1], axis=1)
    return key_bytes(words[keep])


def is_digest(text: str) -> bool:
    """Whether ``text`` is a 64-character lower-case sha256 hex digest."""
    return len(text) == 64 and set(text) <= HEX_DIGITS
