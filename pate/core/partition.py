"""Split the sensitive records into disjoint teacher shards.

Neighbouring relation: add or remove one record
-----------------------------------------------
PATE's guarantee (Papernot et al., ICLR 2017, 2018) rests on each sensitive item influencing at
most one teacher, so that a neighbouring dataset changes at most one vote. Every guarantee here
is for *adding or removing* one record, so the partition must be **stable** under that change:
a record's teacher is decided by the record alone, ``blake2b(record key, key=K) mod
num_teachers``, with K a 32-byte key fixed before any record is read (the run's ``"partition"``
key, :mod:`pate.core.keys`). Adding a record puts it into one shard and moves no other; removing
one takes it out of its shard: one teacher's training set changes, the number of teachers does
not, and so one vote at most moves -- the histogram change every bound of
:mod:`pate.analysis.rdp` assumes. Identical records share a key, hence a shard; that is still
one record added or removed.

With ``mode="unit"`` the hash is of the unit id: adding, removing or changing any records of one
privacy unit changes one teacher, so the guarantee is per *unit* (user-level DP), which implies
the record-level one. ``Partition.neighbouring_relation`` states which one holds.

Shard sizes are about N/T +- sqrt(N/T); a shard left empty is refused (``PartitionError``):
docs/aggregators.md. No class-balanced ("stratified") mode: it is not stable under adding a record.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_choice, check_int, describe
from pate.core.errors import PartitionError
from pate.core.io import atomic_savez, load_npz
from pate.core.rng import check_rng

__all__ = [
    "Partition",
    "partition_random",
    "partition_by_unit",
    "teacher_of",
    "check_partition",
    "ids_digest",
    "MODES",
    "PARTITION_FILENAME",
    "RELATION",
]

MODES = ("random", "unit")
PARTITION_FILENAME = "partition.npz"
#: The neighbouring relation the partition is stable under (module docstring).
RELATION = "add-remove"
_FORMAT_VERSION = 2  # any other version is refused, never read
_KEY_BYTES = 32


# --------------------------------------------------------------------------- ids and digests


def as_ids(ids: Any, name: str) -> np.ndarray:
    """A 1-D array of integer or string ids (no floats, no objects, no missing values)."""
    if isinstance(ids, (str, bytes)) or ids is None:
        raise InputTypeError(
            f"{name} must be a 1-D array of integer or string ids, got {describe(ids)}"
        )
    arr = np.asarray(ids)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)  # an empty list
    if arr.dtype == object:
        items = arr.ravel().tolist()
        if items and all(isinstance(x, str) for x in items):
            arr = np.asarray(items, dtype=str).reshape(arr.shape)
        elif items and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items
        ):
            arr = np.asarray(items, dtype=np.int64).reshape(arr.shape)
        else:
            raise InputTypeError(
                f"{name} must hold integers or strings (not a mix), got an object "
                "array with other values (e.g. None or floats); map them to ids first"
            )
    if arr.ndim != 1:
        raise InputError(f"{name} must be 1-D (one id per record), got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "US":
        return arr.astype(str)
    raise InputTypeError(
        f"{name} must hold integer or string ids, got dtype {arr.dtype}; float ids are "
        "refused because they compare ambiguously (e.g. 1.0 vs 1.0000001)"
    )


def ids_digest(ids: Any) -> str:
    """sha256 hex fingerprint of an id array *in its order* (int ids hashed as int64 little-endian,
    str as UTF-8), used only to check that a saved partition matches its records and their order.
    Not a dataset identity: the privacy ledger identifies data with
    ``pate.ledger.dataset_identity(x, y)`` (order-independent, from the records' content)."""
    arr = as_ids(ids, "ids")
    h = hashlib.sha256()
    if np.issubdtype(arr.dtype, np.integer):
        h.update(b"pate-ids:int64:%d:" % arr.size)
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    else:
        h.update(b"pate-ids:str:%d:" % arr.size)
        for item in arr:
            data = str(item).encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True, eq=False)
class Partition:
    """A split of N sensitive records among ``num_teachers`` disjoint shards: ``assignment``
    (N,) int64 read-only, every record's teacher; ``mode`` (:data:`MODES`); ``seed`` of the run
    that built it (None: secure / unseeded); ``ids_digest`` the sha256 hex of the ids it was
    built for (the unit ids in unit mode, else the record ids, ``arange(N)`` unless given),
    verified by ``Partition.load(path, ids=...)``; ``unit_ids`` (N,) (unit mode only)."""

    assignment: np.ndarray
    num_teachers: int
    mode: str
    seed: int | None
    ids_digest: str
    unit_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        num_teachers = check_int(self.num_teachers, "num_teachers", minimum=1)
        check_choice(self.mode, "mode", MODES)
        if self.seed is not None:
            check_int(self.seed, "seed", minimum=0)
        if not isinstance(self.ids_digest, str) or len(self.ids_digest) != 64:
            raise InputError(
                f"ids_digest must be a sha256 hex string, got {describe(self.ids_digest)}"
            )
        assignment = np.asarray(self.assignment)
        if assignment.ndim != 1 or not np.issubdtype(assignment.dtype, np.integer):
            raise InputTypeError(
                f"assignment must be a 1-D integer array, got {describe(assignment)}"
            )
        assignment = assignment.astype(np.int64, copy=True)
        if assignment.size and (assignment.min() < 0 or assignment.max() >= num_teachers):
            raise PartitionError(
                f"assignment holds teacher indices outside [0, {num_teachers}) "
                f"(min {int(assignment.min())}, max {int(assignment.max())})"
            )
        assignment.setflags(write=False)
        object.__setattr__(self, "assignment", assignment)
        object.__setattr__(self, "num_teachers", num_teachers)
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
        unit_ids = self.unit_ids
        if self.mode == "unit" and unit_ids is None:
            raise InputError("unit_ids is required when mode='unit'")
        if unit_ids is not None:
            unit_ids = as_ids(unit_ids, "unit_ids").copy()
            if unit_ids.shape != assignment.shape:
                raise InputError(
                    f"unit_ids must have one id per record ({assignment.size}), got {unit_ids.size}"
                )
            unit_ids.setflags(write=False)
            object.__setattr__(self, "unit_ids", unit_ids)

    # -- views
    @property
    def num_records(self) -> int:
        return int(self.assignment.size)

    @property
    def shards(self) -> list[np.ndarray]:
        """Sorted record indices of each teacher (a list of ``num_teachers`` int64 arrays)."""
        order = np.argsort(self.assignment, kind="stable")
        bounds = np.cumsum(self.shard_sizes)[:-1]
        return [s.astype(np.int64) for s in np.split(order, bounds)]

    @property
    def shard_sizes(self) -> np.ndarray:
        """(num_teachers,) number of records per teacher."""
        return np.bincount(self.assignment, minlength=self.num_teachers).astype(np.int64)

    @property
    def relation(self) -> str:
        """The neighbouring relation the split is stable under: ``"add-remove"``."""
        return RELATION

    @property
    def neighbouring_relation(self) -> str:
        """Which neighbouring datasets the PATE guarantee is stated for, in words."""
        if self.mode == "unit":
            return (
                "unit-level: datasets differing by all the records of one privacy unit (a "
                "person, e.g. one patient) added or removed; each unit's teacher is a keyed hash "
                "of its id, so exactly one teacher's shard changes"
            )
        return (
            "record-level: datasets differing by one record added or removed; each record's "
            "teacher is a keyed hash of the record, so exactly one teacher's shard changes"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        same_units = (self.unit_ids is None and other.unit_ids is None) or (
            self.unit_ids is not None
            and other.unit_ids is not None
            and np.array_equal(self.unit_ids, other.unit_ids)
        )
        return (
            self.num_teachers == other.num_teachers
            and self.mode == other.mode
            and self.seed == other.seed
            and self.ids_digest == other.ids_digest
            and np.array_equal(self.assignment, other.assignment)
            and same_units
        )

    def __repr__(self) -> str:
        return (
            f"Partition(mode={self.mode!r}, num_teachers={self.num_teachers}, "
            f"num_records={self.num_records}, seed={self.seed}, "
            f"ids_digest={self.ids_digest[:12]}...)"
        )

    # -- persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the partition to ``path`` (npz) atomically: temp file + ``os.replace``."""
        path = Path(path)
        if path.suffix != ".npz":
            raise InputError(f"path must end in .npz, got {str(path)!r}")
        if not path.parent.is_dir():
            raise FileNotFoundError(
                f"directory {str(path.parent)!r} does not exist; create it first"
            )
        arrays: dict[str, npt.ArrayLike] = {
            "format_version": np.int64(_FORMAT_VERSION),
            "assignment": self.assignment,
            "num_teachers": np.int64(self.num_teachers),
            "mode": np.str_(self.mode),
            "seed": np.int64(-1 if self.seed is None else self.seed),
            "ids_digest": np.str_(self.ids_digest),
        }
        if self.unit_ids is not None:
            arrays["unit_ids"] = self.unit_ids
        return atomic_savez(path, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, ids: Any = None) -> Partition:
        """Read a partition written by :meth:`save`; with ``ids`` (the unit ids in unit mode, else
        the record ids) verify it was built for them, else ``PartitionError``: the data changed."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no partition at {str(path)!r}; run `pate partition` first")
        fields = load_npz(path, what="a partition")
        required = {"format_version", "assignment", "num_teachers", "mode", "seed", "ids_digest"}
        missing = required - set(fields)
        if missing:
            raise PartitionError(
                f"{str(path)!r} is not a partition file: missing {sorted(missing)}"
            )
        if int(fields["format_version"]) != _FORMAT_VERSION:
            raise PartitionError(
                f"{str(path)!r} has format version {int(fields['format_version'])}; this "
                f"pate-learn reads version {_FORMAT_VERSION} only: start a new run directory"
            )
        seed = int(fields["seed"])
        try:
            partition = cls(
                assignment=fields["assignment"],
                num_teachers=int(fields["num_teachers"]),
                mode=str(fields["mode"]),
                seed=None if seed < 0 else seed,
                ids_digest=str(fields["ids_digest"]),
                unit_ids=fields.get("unit_ids"),
            )
        except (TypeError, ValueError) as exc:
            raise PartitionError(f"{str(path)!r} holds an invalid partition: {exc}") from None
        check_partition(partition, partition.num_records)
        if ids is not None:
            given = as_ids(ids, "ids")
            if given.size != partition.num_records:
                raise PartitionError(
                    f"ids has {given.size} entries but the partition at {str(path)!r} covers "
                    f"{partition.num_records} records; the data changed: re-run `pate partition`"
                )
            digest = ids_digest(given)
            if digest != partition.ids_digest:
                raise PartitionError(
                    f"the partition at {str(path)!r} was built for other ids (digest "
                    f"{partition.ids_digest[:12]}..., given {digest[:12]}...); the data changed "
                    "since the split: re-run `pate partition` on the current data"
                )
        return partition


# --------------------------------------------------------------------------- checks


def check_partition(partition: Partition, num_records: int) -> None:
    """Prove that ``partition`` splits ``num_records`` records into non-empty shards with, in
    unit mode, every privacy unit in one shard; else ``PartitionError``."""
    num_records = check_int(num_records, "num_records", minimum=1)
    assignment = partition.assignment
    if assignment.size != num_records:
        raise PartitionError(
            f"the partition covers {assignment.size} records, expected "
            f"{num_records}; re-run `pate partition` on the current data"
        )
    sizes = partition.shard_sizes
    if np.any(sizes == 0):
        raise PartitionError(
            f"teacher {int(np.argmin(sizes))} has an empty shard; use fewer teachers"
        )
    if partition.unit_ids is None:
        return
    _, inverse = np.unique(partition.unit_ids, return_inverse=True)
    lo = np.full(inverse.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(inverse.max() + 1, -1, dtype=np.int64)
    np.minimum.at(lo, inverse, assignment)
    np.maximum.at(hi, inverse, assignment)
    split = lo != hi
    if np.any(split):
        raise PartitionError(
            f"{int(split.sum())} privacy unit(s) are spread over several shards; "
            "in unit mode all records of a unit must go to one teacher"
        )


def _check_teachers(num_teachers: Any, available: int, what: str) -> int:
    count = check_int(num_teachers, "num_teachers", minimum=1)
    if count > available:
        raise PartitionError(
            f"num_teachers={count} is more than the {available} {what}; "
            f"every teacher needs at least one: use at most {available} teachers"
        )
    return count


def _digest_for(record_ids: Any, num_records: int) -> str:
    if record_ids is None:
        return ids_digest(np.arange(num_records, dtype=np.int64))
    ids = as_ids(record_ids, "record_ids")
    if ids.size != num_records:
        raise InputError(f"record_ids must have one id per record ({num_records}), got {ids.size}")
    if np.unique(ids).size != ids.size:
        raise InputError("record_ids must be unique (one id per record)")
    return ids_digest(ids)


# --------------------------------------------------------------------------- builders


def teacher_of(items: Sequence[bytes], *, num_teachers: int, key: bytes) -> np.ndarray:
    """The teacher of each item: ``blake2b(item, key=key, digest_size=8) mod num_teachers``, an
    (n,) int64 array. An item's teacher depends on the item and the key alone, never on the
    other items (module docstring); the modulo bias is below num_teachers / 2**64."""
    num_teachers = check_int(num_teachers, "num_teachers", minimum=1)
    if not isinstance(key, bytes) or not 16 <= len(key) <= 64:
        raise InputTypeError(f"key must be 16 to 64 bytes, got {describe(key)}")
    out = np.empty(len(items), dtype=np.uint64)
    for i, item in enumerate(items):
        out[i] = int.from_bytes(hashlib.blake2b(item, key=key, digest_size=8).digest(), "little")
    return (out % np.uint64(num_teachers)).astype(np.int64)


def _draw_key(rng: Any, key: bytes | None = None) -> bytes:
    """The partition's hash key: ``key`` when given (a run's, :mod:`pate.core.keys`), else
    drawn from ``rng``, before any record is looked at."""
    if (rng is None) == (key is None):
        raise InputTypeError("give the partition key (key=) or a random stream to draw it (rng=)")
    if key is not None:
        return key
    rng = check_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng.bytes(_KEY_BYTES)
    return os.urandom(_KEY_BYTES)  # a SecureGenerator: OS entropy, like its variates


def _check_record_keys(record_keys: Any) -> list[bytes]:
    arr = np.asarray(record_keys)
    if arr.ndim != 1 or arr.dtype.kind != "S" or arr.size == 0:
        raise InputTypeError(
            "record_keys must be a non-empty 1-D bytes array (the S16 keys of "
            f"pate.ledger.record_keys(x, y)), got {describe(arr)}"
        )
    raw, width = np.ascontiguousarray(arr).tobytes(), arr.dtype.itemsize
    return [raw[i : i + width] for i in range(0, len(raw), width)]


def _unit_bytes(ids: np.ndarray) -> list[bytes]:
    if np.issubdtype(ids.dtype, np.integer):
        return [b"i" + int(v).to_bytes(8, "little", signed=True) for v in ids.tolist()]
    return [b"s" + str(v).encode("utf-8") for v in ids.tolist()]


def _no_empty_shard(assignment: np.ndarray, num_teachers: int, what: str) -> None:
    sizes = np.bincount(assignment, minlength=num_teachers)
    if np.any(sizes == 0):
        per_teacher = assignment.size / num_teachers
        suggest = max(1, assignment.size // 20)
        raise PartitionError(
            f"teacher {int(np.argmin(sizes))} of {num_teachers} got no {what[:-1]} (the split "
            f"hashes each {what[:-1]} to a teacher; {per_teacher:.3g} {what} per teacher); use "
            f"fewer teachers, e.g. num_teachers <= {suggest} for about 20 {what} each"
        )


def partition_random(
    record_keys: Any,
    *,
    num_teachers: int,
    rng: Any = None,
    key: bytes | None = None,
    seed: int | None = None,
    record_ids: Any = None,
) -> Partition:
    """Record i goes to ``teacher_of(record_keys[i])`` (the (N,) S16 keys of
    ``pate.ledger.record_keys(x, y)``) under ``key`` (16 to 64 bytes) or a 32-byte key drawn from
    ``rng``, exactly one of the two; ``seed``: the seed ``rng`` came from, for the audit trail;
    ``record_ids``: the ids of the digest (``arange(N)`` by default)."""
    keys = _check_record_keys(record_keys)
    num_records = len(keys)
    num_teachers = _check_teachers(num_teachers, num_records, "records")
    digest = _digest_for(record_ids, num_records)
    assignment = teacher_of(keys, num_teachers=num_teachers, key=_draw_key(rng, key))
    _no_empty_shard(assignment, num_teachers, "records")
    return Partition(
        assignment=assignment,
        num_teachers=num_teachers,
        mode="random",
        seed=seed,
        ids_digest=digest,
    )


def partition_by_unit(
    unit_ids: Any,
    *,
    num_teachers: int,
    rng: Any = None,
    key: bytes | None = None,
    seed: int | None = None,
) -> Partition:
    """All records of one privacy unit (patient, user) go to one teacher, ``teacher_of`` its id
    (keys as :func:`partition_random`); shard sizes follow the unit sizes (balancing would move
    other units when one is added)."""
    ids = as_ids(unit_ids, "unit_ids")
    if ids.size == 0:
        raise InputError("unit_ids is empty; there are no records to split")
    units, inverse = np.unique(ids, return_inverse=True)
    num_teachers = _check_teachers(num_teachers, units.size, "privacy units")
    unit_teacher = teacher_of(
        _unit_bytes(units), num_teachers=num_teachers, key=_draw_key(rng, key)
    )
    _no_empty_shard(unit_teacher, num_teachers, "units")
    return Partition(
        assignment=unit_teacher[inverse.reshape(-1)],
        num_teachers=num_teachers,
        mode="unit",
        seed=seed,
        ids_digest=ids_digest(ids),
        unit_ids=ids,
    )
