"""A persistent privacy-budget ledger: every run's spend of a sensitive dataset, never overspent.

Without a ledger the total privacy cost of relabelling, adding queries and training new students
is invisible. This module keeps, per sensitive dataset, the **events** each run spent
(:class:`pate.analysis.accountant.PrivacyEvent`: mechanism, parameters, the Renyi orders and the
per-order RDP of what was actually answered, run id, UTC time) -- never just a final epsilon -- so
that totals are recomposed exactly with :class:`pate.analysis.accountant.RdpAccountant` and
:func:`analysis.eps_from_rdp` whenever they are needed.

Symbols
-------
``Ledger``
    The SQLite ledger (one file, many datasets). ``Ledger(path)`` creates or opens it.
    ``register_identity(identity, name=)`` registers a dataset with its record keys and links it
    to every dataset sharing records; ``register_dataset(digest)`` registers one by digest alone.
    A dataset keeps the FIRST name it was registered with; a later, different ``name`` is added
    to its later names (``aliases`` in ``datasets()`` / ``summary()``), and any of its names
    resolves it (a name names one dataset only);
    ``reserve`` / ``charge`` spend; ``prior_rdp`` / ``constraints`` tell an online run what is
    already spent against each budget it is bound by; ``summary`` / ``history`` /
    ``budget_changes`` / ``audit_log`` / ``linked`` / ``overlapping`` report; ``link(a, b)``
    declares by hand that two datasets share records (e.g. one budgeted under an id digest).
``Reservation``
    An upper bound on what one run may spend, held while the run works; ``commit(events)`` turns
    it into events and releases the rest; ``release()`` gives it all back.
``Budget``
    ``(eps, delta, basis, conversion)`` of a dataset; ``basis`` is ``"data-independent"``
    (default) or ``"data-dependent"``; ``conversion`` is the RDP -> (eps, delta) conversion the
    budget is judged with, ``"classic"`` (default) or ``"tight"`` (``analysis.eps_from_rdp``).
``StoredEvent``
    A recorded ``PrivacyEvent`` with its row id, dataset, run id, time and blocks.
``ReservationInfo``
    A stored reservation (live or closed) as plain data.
``record_keys(x, y)``
    One 16-byte content key per record (dtype ``S16``), from the record's values and label only:
    ``x[i]`` flattened in C order as little-endian float32 (``-0.0`` read as ``0.0``, every NaN
    as one NaN), ``y[i]`` as int64, hashed with sha256 under a versioned tag and truncated to 128
    bits. It does not depend on row order, file path or format, array layout (``(n, 1, 8, 8)`` or
    ``(n, 64)``), float or integer width, dataset name, run folder or working directory. Values
    are compared as float32: records whose float32 values are equal are the same record
    (conservative: more sharing, never less). What is *not* the same record: rescaled,
    re-normalised or augmented values, values in another order within the record (e.g. HWC
    against CHW images), a changed label. ``legacy_record_keys`` are the keys schema <= 2 stored
    (the per-record shape hashed too).
``DatasetIdentity``
    ``(digest, record_keys, num_records, legacy_record_keys)`` of a dataset: what the ledger
    knows it by (the legacy keys link what an older ledger holds under them).
``dataset_identity(x, y)``
    The identity **every pate entry point uses** (``pate run``, ``pate budget digest --config``):
    ``record_keys`` and their ``dataset_digest``. The same records in any order, in any file, give
    the same digest.
``dataset_digest(ids)``
    The one digest definition: sha256 of the **sorted** ids under a type tag. ``ids`` are explicit
    unique record ids (integers or strings), or record keys (``S16``, a multiset: identical
    records may repeat) from ``record_keys``. ``dataset_identity`` is ``dataset_digest`` of the
    record keys.
``default_ledger_path()``
    ``$PATE_LEDGER``, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
    ``~/.local/share/pate/ledger.sqlite3``.
``SCHEMA_VERSION``
    The ``PRAGMA user_version`` this code reads and writes.
``CONVERSIONS``
    ``("classic", "tight")``: the conversions a budget may be judged with.

Accounting rules
----------------
* **One neighbouring relation: add or remove one record.** Every budget is a promise for that
  relation (``datasets.relation``, ``Budget.relation``) and every event states the relation its
  bound is for (``PrivacyEvent.relation``, in the stored payload). The ledger composes only
  add/remove events: an event stated for replace-one -- what the teacher votes of a pate-learn
  before the keyed-hash partition were (``analysis.legacy_relation`` reads an event stored
  without a relation) -- makes every charge, reservation, prior and summary touching its dataset
  fail with a ``LedgerError`` that says so and what to do (a new ledger file for new runs). A
  replace-one bound cannot be converted: that partition reshuffled the records when one was
  added, so no add/remove bound follows from it.
* Spend is judged on the **data-independent** RDP of each event by default. The data-dependent
  RDP (Papernot et al. 2018, "Scalable Private Learning with PATE", Sec. 4) depends on the votes,
  so an epsilon computed from it is not itself differentially private; a dataset may opt in with
  ``set_budget(..., data_dependent=True)`` (documented, explicit, and shown as such everywhere).
* Every epsilon of a dataset is converted from RDP with **its budget's conversion** at its
  budget's delta (``set_budget(..., conversion=)``; ``"classic"``: Mironov 2017, Prop. 3,
  the default and what is used where no budget is set; ``"tight"``: Canonne, Kamath & Steinke
  2020, Prop. 12 / Balle et al. 2020, Thm. 21, never larger than classic). Both are valid
  RDP -> (eps, delta) conversions, so judging a budget with either never understates epsilon for
  that budget's definition; the conversion is part of the budget, so a run's online aggregator
  stops on the same conversion the ledger checks its reservations with. This holds for the fits
  checks of ``reserve`` / ``charge`` / ``commit`` (each linked dataset with its own budget's
  conversion and delta), ``summary``, ``history``, ``constraints`` and the spend recorded by
  ``set_budget``.
* Events recorded with different Renyi-order grids are composed on the orders **all of them
  share**: RDP at an order is valid for that order alone, and converting with fewer orders can
  only raise epsilon, so the total is never understated. No shared order -> ``LedgerError``.
* Blocks (Sage: Lecuyer et al. 2019, "Privacy Accounting and Quality Control in the Sage
  Differentially Private ML Platform", block composition): records arriving in time blocks are
  registered as blocks; an event is charged only to the blocks the teacher ensemble was trained
  on; every block has its own composition and the dataset's loss is the **max over blocks**, so a
  new block brings fresh budget. Events recorded before any block existed are charged to every
  block, present and future (the ledger cannot know which records they used).
* Overlapping datasets (Sage-style, conservative): a dataset registered with its records
  (``register_identity``) is **linked** to every registered dataset sharing at least one record
  key (table ``links``, with the number of shared distinct records). The spend of a dataset X is
  the composition of the events and live reservations of X *and of every dataset linked to X*: a
  charge counts against every dataset it touches. An event of a linked dataset counts against
  every block of X (the ledger cannot tell which of X's blocks it touched). ``reserve``,
  ``charge`` and a reservation's ``commit`` check, in the same transaction, the budget of X and
  of every linked dataset (each on its own budget, delta, basis and items, the new spend
  included); a dataset without a budget is still limited by the budgets of its linked datasets.
  Direct links suffice: every dataset holding a record of X shares that record with X, so it is
  linked to X. ``link`` adds a link by hand (shared count unknown); links are never removed. ``prior_rdp``, ``summary`` and ``history`` include linked spend;
  ``constraints`` lists every budget a run on X must stay within. Datasets registered only by
  digest (no records) are never linked.
* Budget authority: ``set_budget`` may raise or lower a budget at any time, also after spend;
  every change (old and new eps/delta/basis/conversion, the spend at the time, an optional
  reason) is kept in the audit log and read back with ``budget_changes``.
* Reservation protocol: ``reserve`` checks, in one ``BEGIN IMMEDIATE`` transaction, that the
  committed events + every live reservation + the new upper bound fit the budget in every block
  the run touches, then records the reservation with the process id, host name and a lease.
  ``commit`` re-checks committed events + other live reservations + the realised events, so spend
  within a reservation always commits and nothing can ever overspend. Release labels only after
  ``commit`` returns. A reservation whose process is dead (same host: the pid is gone, a zombie,
  or reused) or whose lease expired (another host) is marked ``expired`` by the next writer.

Storage: SQLite in WAL mode, ``synchronous=FULL``, a busy timeout, ``PRAGMA user_version`` for
the schema and an application marker in table ``meta``. Every event and reservation row carries
the sha256 of its canonical JSON payload, checked on every read. A new ledger is built in a
temporary file and hard-linked into place, so a half-initialised ledger never exists. A
version-1 ledger is migrated in place in one transaction (the record tables and the
``datasets.conversion`` column, ``'classic'`` for every existing budget, are added and
``user_version`` bumped; every row is kept); a version-2 file written before budgets had a
conversion (no ``datasets.conversion`` column) gains the column in place the same way. A
version-1 or -2 file becomes version 3 the same way: ``identities.key_version`` (1 for every
stored identity: their keys hashed the shape) and ``datasets.relation`` (``'add-remove'``) are
added; events are not rewritten. Registering records on such a ledger also looks them up under
their legacy keys and under their legacy digest: every matching legacy record gains its current
key and the datasets are linked, so an old budget keeps binding the same records in any layout
from then on (records an old ledger holds in one layout and that are only ever seen again in
another cannot be recognised: the old keys depend on the shape). Any other file that is not a
ledger of this version is never written to. Record keys live in
``identities`` / ``records`` (indexed by key), overlap links in ``links``. A dataset's later
names live in ``dataset_names`` (its first stays in ``datasets.name``); a file without that table
gains it in place, in one transaction and without a new ``user_version`` (the table only adds),
and a dataset that an earlier pate-learn renamed after each run's data (audit action ``rename``)
gets its first name back from the audit log, the others as later names -- except a name another
dataset holds by then, which stays theirs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import pathlib
import socket
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from pate.analysis.errors import BudgetExceededError, LedgerError
from pate.analysis.validation import (check_choice, check_delta, check_int, check_orders,
                                      check_positive)

__all__ = [
    "SCHEMA_VERSION",
    "CONVERSIONS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "Budget",
    "DatasetIdentity",
    "Ledger",
    "Reservation",
    "ReservationInfo",
    "StoredEvent",
    "dataset_digest",
    "dataset_identity",
    "default_ledger_path",
    "record_keys",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3
#: The record-key version this code registers (identities.key_version); 1 = schema <= 2's keys.
KEY_VERSION = 2
#: The one neighbouring relation a budget and every event composed against it are stated for.
LEDGER_RELATION = "add-remove"
APPLICATION = "pate-learn-ledger"
DEFAULT_LEASE_SECONDS = 900.0
DEFAULT_TIMEOUT_SECONDS = 10.0
BASES = ("data-independent", "data-dependent")
CONVERSIONS = ("classic", "tight")
_HEX = frozenset("0123456789abcdef")

# The datasets.conversion column of schema version 2 (also added in place by the migrations).
_CONVERSION_COLUMN = ("conversion TEXT NOT NULL DEFAULT 'classic' "
                      "CHECK (conversion IN ('classic', 'tight'))")

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (
    digest TEXT PRIMARY KEY CHECK (length(digest) = 64),
    name TEXT UNIQUE,
    budget_eps REAL CHECK (budget_eps IS NULL OR budget_eps > 0),
    budget_delta REAL CHECK (budget_delta IS NULL OR (budget_delta > 0 AND budget_delta < 1)),
    basis TEXT NOT NULL DEFAULT 'data-independent'
        CHECK (basis IN ('data-independent', 'data-dependent')),
    created_utc TEXT NOT NULL,
    {_CONVERSION_COLUMN}
);
CREATE TABLE blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    name TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    UNIQUE (dataset, name)
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    run_id TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    reservation TEXT,
    mechanism TEXT NOT NULL,
    queries INTEGER NOT NULL,
    answered INTEGER NOT NULL,
    payload TEXT NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE INDEX events_by_dataset ON events (dataset, id);
CREATE TABLE event_blocks (
    event INTEGER NOT NULL REFERENCES events(id),
    block INTEGER NOT NULL REFERENCES blocks(id),
    PRIMARY KEY (event, block)
);
CREATE TABLE reservations (
    id TEXT PRIMARY KEY,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    run_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    pid INTEGER NOT NULL,
    process_token TEXT,
    hostname TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    lease_seconds REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'committed', 'released', 'expired')),
    closed_utc TEXT
);
CREATE INDEX reservations_by_dataset ON reservations (dataset, status);
CREATE TABLE reservation_blocks (
    reservation TEXT NOT NULL REFERENCES reservations(id),
    block INTEGER NOT NULL REFERENCES blocks(id),
    PRIMARY KEY (reservation, block)
);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT,
    time_utc TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

# Added by schema version 2 (a version-1 file is migrated by running exactly these statements,
# then adding the datasets.conversion column).
_SCHEMA_V2 = """
CREATE TABLE identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL UNIQUE REFERENCES datasets(digest),
    num_records INTEGER NOT NULL CHECK (num_records > 0),
    distinct_records INTEGER NOT NULL CHECK (distinct_records > 0),
    created_utc TEXT NOT NULL
);
CREATE TABLE records (
    key BLOB NOT NULL CHECK (length(key) = 16),
    identity INTEGER NOT NULL REFERENCES identities(id),
    PRIMARY KEY (identity, key)
) WITHOUT ROWID;
CREATE INDEX records_by_key ON records (key);
CREATE TABLE links (
    a TEXT NOT NULL REFERENCES datasets(digest),
    b TEXT NOT NULL REFERENCES datasets(digest),
    shared INTEGER CHECK (shared IS NULL OR shared > 0),  -- NULL: declared by hand (link())
    created_utc TEXT NOT NULL,
    PRIMARY KEY (a, b),
    CHECK (a < b)
);
CREATE INDEX links_by_b ON links (b);
"""

# Added by schema version 3 (each added in place to an older file that lacks it).
_SCHEMA_V3_COLUMNS = {
    ("identities", "key_version"): "INTEGER NOT NULL DEFAULT 1 CHECK (key_version IN (1, 2))",
    ("datasets", "relation"): "TEXT NOT NULL DEFAULT 'add-remove' CHECK (relation IN ('add-remove'))",
}
_SCHEMA_V3 = ";".join(f"ALTER TABLE {t} ADD COLUMN {c} {d}" for (t, c), d in _SCHEMA_V3_COLUMNS.items())

# A dataset's later names (its FIRST name stays in datasets.name; see Ledger._migrate_names,
# which adds this table in place to a file that lacks it, without changing user_version).
_SCHEMA_NAMES = """
CREATE TABLE dataset_names (
    name TEXT PRIMARY KEY,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    created_utc TEXT NOT NULL
);
CREATE INDEX dataset_names_by_dataset ON dataset_names (dataset, created_utc);
"""

_RECORD_KEY_BYTES = 16
# v2 (now): the record's values flattened in C order, whatever the array's layout.
_RECORD_TAG = b"pate-learn record flat float32-le/int64 v2\n"
# v1 (ledgers written before schema 3): the same, under the per-record shape.
_RECORD_TAG_V1 = b"pate-learn record float32-le/int64 v1\n"
_KEYS_TAG = b"pate-learn record-keys sha256/128 v1\n"


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------

def _accountant():
    """``pate.analysis.accountant`` and ``eps_from_rdp`` (imported lazily: the CLI starts fast)."""
    from pate.analysis import eps_from_rdp
    from pate.analysis.accountant import PrivacyEvent, RdpAccountant
    return PrivacyEvent, RdpAccountant, eps_from_rdp


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def _utc_from_unix(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _canonical(obj: Any) -> str:
    # repr-based float formatting round-trips float64 exactly; +inf is kept as Infinity.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_ledger_path() -> pathlib.Path:
    """Where the ledger lives unless ``--ledger`` / ``path`` says otherwise.

    ``$PATE_LEDGER`` if set, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
    ``~/.local/share/pate/ledger.sqlite3``.
    """
    env = os.environ.get("PATE_LEDGER")
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(base) / "pate" / "ledger.sqlite3"


def dataset_digest(ids: Any) -> str:
    """sha256 hex identity of a sensitive dataset from the ids of its records -- the one digest
    definition of the ledger.

    ``ids`` is a 1-D array of unique integer ids, of unique strings, or of record keys (dtype
    ``S16`` from :func:`record_keys`; a multiset: identical records may repeat). The digest does
    not depend on the order of the ids: the same records give the same dataset. Integers are
    hashed as little-endian int64, strings as length-prefixed UTF-8 and record keys as their 16
    raw bytes, each kind under its own tag, so ``[1, 2]`` and ``["1", "2"]`` are different
    datasets. Every pate entry point identifies its private data with :func:`dataset_identity`,
    i.e. ``dataset_digest(record_keys(x, y))``; explicit ids are for datasets registered by hand.
    """
    if isinstance(ids, (str, bytes)) or ids is None:
        raise TypeError(f"ids must be a 1-D array of record ids, got {type(ids).__name__}")
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ids must be a non-empty 1-D array of record ids, got shape {arr.shape}")
    h = hashlib.sha256()
    if arr.dtype.kind == "S":
        if arr.dtype.itemsize != _RECORD_KEY_BYTES:
            raise TypeError(f"byte ids must be {_RECORD_KEY_BYTES}-byte record keys (dtype "
                            f"S{_RECORD_KEY_BYTES}, from record_keys), got dtype {arr.dtype}")
        h.update(_KEYS_TAG)
        h.update(_sorted_keys(arr).tobytes())  # fixed width: the concatenation is unambiguous
        return h.hexdigest()
    if arr.dtype != np.bool_ and np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > np.iinfo(np.int64).max:
            raise ValueError("ids must fit in int64; hash larger ids as strings instead")
        values = np.sort(arr.astype("<i8"))
        if values.size > 1 and np.any(values[1:] == values[:-1]):
            dup = int(values[1:][values[1:] == values[:-1]][0])
            raise ValueError(f"ids must be unique, got the id {dup} more than once")
        h.update(b"pate-learn ids int64\n")
        h.update(values.tobytes())
    elif arr.dtype.kind in ("U", "O"):
        if arr.dtype.kind == "O" and not all(isinstance(v, str) for v in arr):
            raise TypeError("ids must be integers or strings; got an object array with other types")
        values = sorted(str(v) for v in arr)
        for a, b in zip(values, values[1:]):
            if a == b:
                raise ValueError(f"ids must be unique, got the id {a!r} more than once")
        h.update(b"pate-learn ids utf8\n")
        for v in values:
            data = v.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    else:
        raise TypeError(f"ids must be integers or strings, got dtype {arr.dtype}")
    return h.hexdigest()


def record_keys(x: Any, y: Any) -> np.ndarray:
    """One 16-byte content key per record: an ``(n,)`` array of dtype ``S16`` (module docstring).

    ``x`` is ``(n, ...)`` numeric (any dtype; compared as float32), ``y`` the ``n`` integer
    labels. Key ``i`` is the first 16 bytes of sha256(tag, ``x[i]`` flattened in C order as
    little-endian float32, ``y[i]`` as little-endian int64): the same values give the same key
    whatever the array's layout -- ``(n, 1, 8, 8)`` or ``(n, 64)``, float32 or float64, labels of
    any integer width. Use ``keys.tobytes()`` (not ``keys[i]``, which numpy strips of trailing
    zero bytes) for the raw bytes.
    """
    return _record_keys(x, y, legacy=False)[0]


def legacy_record_keys(x: Any, y: Any) -> np.ndarray:
    """The record keys ledgers of schema version <= 2 stored (the per-record shape was hashed
    too, so a reshaped copy had other keys). Only used to link those ledgers' datasets to the
    same records registered now."""
    return _record_keys(x, y, legacy=True)[1]


def _record_keys(x: Any, y: Any, *, legacy: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(keys, legacy keys or None) of ``(x, y)``, hashed in one pass over the records."""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"x must be an array of records, got {type(x).__name__}")
    xa = np.asarray(x)
    if xa.ndim < 1 or xa.shape[0] == 0:
        raise ValueError(f"x must hold at least one record (shape (n, ...)), got shape {xa.shape}")
    if xa.dtype.kind not in "biuf":
        raise TypeError(f"x must be a numeric array, got dtype {xa.dtype}")
    ya = np.asarray(y)
    if ya.ndim != 1 or ya.shape[0] != xa.shape[0]:
        raise ValueError(f"y must hold one label per record ({xa.shape[0]}), got shape {ya.shape}")
    if ya.dtype.kind in "biu":
        labels = ya.astype("<i8")
    elif ya.dtype.kind == "f" and np.all(np.isfinite(ya)) and np.all(ya == np.round(ya)):
        labels = ya.astype("<i8")
    else:
        raise TypeError(f"y must hold integer labels, got dtype {ya.dtype}; pass class indices")
    n = xa.shape[0]
    # Canonical float32: +0.0 for -0.0 (adding 0 does it), one NaN bit pattern for every NaN.
    x32 = np.ascontiguousarray(xa.reshape(n, -1), dtype="<f4") + np.float32(0.0)
    nan = np.isnan(x32)
    if nan.any():
        x32[nan] = np.float32("nan")
    base = hashlib.sha256(_RECORD_TAG)
    base_v1 = None
    if legacy:
        shape = np.asarray(xa.shape[1:], dtype="<i8")
        base_v1 = hashlib.sha256(_RECORD_TAG_V1)
        base_v1.update(len(shape).to_bytes(8, "little"))
        base_v1.update(shape.tobytes())
    row_bytes = x32.shape[1] * 4
    xv = memoryview(x32.reshape(-1).view(np.uint8))
    yv = memoryview(np.ascontiguousarray(labels).view(np.uint8))
    k = _RECORD_KEY_BYTES
    out = bytearray(n * k)
    out_v1 = bytearray(n * k) if legacy else None
    for i in range(n):
        row, label = xv[i * row_bytes:(i + 1) * row_bytes], yv[i * 8:(i + 1) * 8]
        h = base.copy()
        h.update(row)
        h.update(label)
        out[i * k:(i + 1) * k] = h.digest()[:k]
        if base_v1 is not None:
            h = base_v1.copy()
            h.update(row)
            h.update(label)
            out_v1[i * k:(i + 1) * k] = h.digest()[:k]
    keys = np.frombuffer(bytes(out), dtype=f"S{k}")
    return keys, None if out_v1 is None else np.frombuffer(bytes(out_v1), dtype=f"S{k}")


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetIdentity:
    """What the ledger knows a dataset by: ``digest`` (64 hex, :func:`dataset_digest` of the
    record keys), ``record_keys`` (``S16``, one per record, in the data's order) and
    ``num_records``. Two identities are equal when their digests are."""

    digest: str
    record_keys: np.ndarray
    num_records: int
    #: the keys ledgers of schema <= 2 stored for the same records (to link their datasets)
    legacy_record_keys: np.ndarray | None = None

    @property
    def legacy_digest(self) -> str | None:
        """The digest schema-<= 2 ledgers (and ``pate budget digest`` before them) gave these
        records, or None when the legacy keys were not computed."""
        if self.legacy_record_keys is None:
            return None
        return dataset_digest(self.legacy_record_keys)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetIdentity) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"DatasetIdentity(digest={self.digest[:16]}..., num_records={self.num_records})"


def dataset_identity(x: Any, y: Any) -> DatasetIdentity:
    """The ledger identity of the records ``(x, y)``: what every pate entry point registers and
    charges (``pate run``, ``pate budget digest --config``). Independent of row order, file,
    format, array layout (shape, float or integer width), dataset name and run folder; changes
    when any record's values or label change. It carries the legacy keys too, so that a ledger
    written before the layout-free keys links these records to what it holds under the old ones."""
    keys, legacy = _record_keys(x, y, legacy=True)
    return DatasetIdentity(dataset_digest(keys), keys, int(keys.shape[0]), legacy)


def _check_identity(identity: Any) -> DatasetIdentity:
    if not isinstance(identity, DatasetIdentity):
        raise TypeError(f"identity must be a pate.ledger.DatasetIdentity (from dataset_identity(x, y)), "
                        f"got {type(identity).__name__}")
    keys = np.asarray(identity.record_keys)
    if keys.ndim != 1 or keys.dtype != np.dtype(f"S{_RECORD_KEY_BYTES}") or keys.size == 0:
        raise ValueError(f"identity.record_keys must be a non-empty 1-D S{_RECORD_KEY_BYTES} array, "
                         f"got dtype {keys.dtype} and shape {keys.shape}")
    if identity.num_records != keys.size:
        raise ValueError(f"identity.num_records ({identity.num_records}) must equal the number of "
                         f"record keys ({keys.size})")
    if dataset_digest(keys) != identity.digest:
        raise ValueError(f"identity.digest {identity.digest!r} is not the digest of its record keys; "
                         "build identities with pate.ledger.dataset_identity(x, y)")
    legacy = identity.legacy_record_keys
    if legacy is not None and (np.asarray(legacy).dtype != keys.dtype
                               or np.asarray(legacy).shape != keys.shape):
        raise ValueError("identity.legacy_record_keys must be one S16 key per record, like "
                         "identity.record_keys; build identities with dataset_identity(x, y)")
    return identity


def _key_bytes(keys: np.ndarray) -> list[bytes]:
    """The raw 16 bytes of every record key, in order (``keys[i]`` would strip trailing zeros)."""
    raw = np.ascontiguousarray(keys).tobytes()
    k = _RECORD_KEY_BYTES
    return [raw[i:i + k] for i in range(0, len(raw), k)]


def _sorted_keys(keys: np.ndarray) -> np.ndarray:
    """Record keys as an ``(n, 2)`` big-endian uint64 array in lexicographic byte order (explicit,
    so the order never depends on how numpy compares byte strings)."""
    words = np.ascontiguousarray(keys).view(">u8").reshape(-1, 2)
    return words[np.lexsort((words[:, 1], words[:, 0]))]


def _distinct_keys(keys: np.ndarray) -> list[bytes]:
    words = _sorted_keys(keys)
    if words.shape[0] > 1:
        keep = np.ones(words.shape[0], dtype=bool)
        keep[1:] = np.any(words[1:] != words[:-1], axis=1)
        words = words[keep]
    raw = words.tobytes()
    k = _RECORD_KEY_BYTES
    return [raw[i:i + k] for i in range(0, len(raw), k)]


def _is_digest(text: str) -> bool:
    return len(text) == 64 and set(text) <= _HEX


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a Linux process, or None where /proc can't tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _process_token(pid: int) -> str | None:
    info = _proc_stat(pid)
    return None if info is None else info[1]


def _process_alive(pid: int, token: str | None) -> bool:
    """Whether process ``pid`` (started at ``token``) still runs on this host.

    Unsure means alive: a reservation is only given back when its process is certainly gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return True
    info = _proc_stat(pid)
    if info is None:
        return True
    state, start = info
    if state in ("Z", "X"):  # zombie or dead: it will never commit
        return False
    if token is not None and start != token:  # pid reused by another process
        return False
    return True


# --------------------------------------------------------------------------------------------
# plain data
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Budget:
    """The privacy budget of one dataset: total ``eps`` at ``delta``, judged on ``basis`` RDP
    converted to (eps, delta) with ``conversion`` (``"classic"`` or ``"tight"``)."""

    eps: float
    delta: float
    basis: str = "data-independent"
    conversion: str = "classic"
    #: the neighbouring relation the budget is a promise for (the only one: add/remove)
    relation: str = LEDGER_RELATION

    def __post_init__(self) -> None:
        check_choice(self.conversion, "conversion", CONVERSIONS)
        check_choice(self.relation, "relation", (LEDGER_RELATION,))

    @property
    def data_dependent(self) -> bool:
        return self.basis == "data-dependent"


@dataclasses.dataclass(frozen=True)
class StoredEvent:
    """A ``PrivacyEvent`` as recorded: row ``id``, ``dataset`` digest, ``run_id``, ``time_utc``,
    ``blocks`` (names; empty = charged to the whole dataset) and the ``event`` itself."""

    id: int
    dataset: str
    run_id: str
    time_utc: str
    blocks: tuple[str, ...]
    reservation: str | None
    event: Any


@dataclasses.dataclass(frozen=True)
class ReservationInfo:
    """A stored reservation: its upper-bound RDP curve, owner process and ``status``
    (``active``, ``committed``, ``released`` or ``expired``)."""

    id: str
    dataset: str
    run_id: str
    orders: np.ndarray
    rdp: np.ndarray
    blocks: tuple[str, ...]
    pid: int
    hostname: str
    created_utc: str
    heartbeat_utc: str
    lease_seconds: float
    status: str
    closed_utc: str | None


@dataclasses.dataclass
class _Item:
    """One thing that counts against the budget: an event or a live reservation."""

    event: Any                 # PrivacyEvent
    blocks: frozenset[int]     # empty = the whole dataset (every block)
    reservation: str | None = None
    via: str | None = None     # the linked dataset it was recorded on (None: this dataset's own)


# --------------------------------------------------------------------------------------------
# the ledger
# --------------------------------------------------------------------------------------------

class Ledger:
    """A privacy-budget ledger in one SQLite file.

    Parameters
    ----------
    path : str or path-like, optional
        The ledger file; default :func:`default_ledger_path`.
    create : bool
        Create the file (and its folder) when it does not exist. With ``False`` a missing
        ledger raises ``LedgerError`` and nothing is written to disk.
    timeout : float
        Seconds to wait for another process's write lock before raising ``LedgerError``.

    A ``Ledger`` holds one connection: use it from one thread, and open a new ``Ledger`` in each
    process (connections must not cross ``fork``). It is a context manager that closes itself.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        if path is None:
            path = default_ledger_path()
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a file path, got {type(path).__name__}")
        if not isinstance(create, bool):
            raise TypeError(f"create must be True or False, got {create!r}")
        self.timeout = check_positive(timeout, "timeout")
        self.path = pathlib.Path(path).expanduser()
        self._hostname = socket.gethostname()
        self._conn: sqlite3.Connection | None = None
        if self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a folder; pass the path of a file "
                              "such as ledger.sqlite3 inside it")
        if not self.path.exists():
            if not create:
                raise LedgerError(f"no ledger at {self.path}; create one with `pate budget set "
                                  f"--dataset DIGEST --eps E --delta D --ledger {self.path}`")
            self._create_file()
        self._conn = self._connect()
        try:
            self._check_schema()
        except BaseException:
            self.close()
            raise

    # ---- file and connection ------------------------------------------------------------

    def _create_file(self) -> None:
        """Build the schema in a temporary file, then hard-link it into place (never over a file)."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
        except OSError as exc:
            raise LedgerError(f"cannot create a ledger at {self.path}: {exc}") from exc
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript("BEGIN;" + _SCHEMA + _SCHEMA_V2 + _SCHEMA_NAMES + _SCHEMA_V3
                                   + ";COMMIT;")
                conn.execute("INSERT INTO meta VALUES ('application', ?)", (APPLICATION,))
                conn.execute("INSERT INTO meta VALUES ('created_utc', ?)", (_utc_now(),))
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            finally:
                conn.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created it first: use theirs
            except OSError:
                # no hard links on this filesystem: rename, but never over an existing file
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except (OSError, sqlite3.Error) as exc:  # sqlite3: e.g. a full disk ("disk I/O error")
            raise LedgerError(f"cannot create a ledger at {self.path}: {exc}; check that its "
                              "file system has free space and is writable, or choose another "
                              "--ledger") from exc
        finally:
            for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)

    def _connect(self) -> sqlite3.Connection:
        uri = "file:" + _uri_path(self.path) + "?mode=rw"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger at {self.path}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            conn.close()
            raise self._translate(exc) from exc
        return conn

    def _check_schema(self) -> None:
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            app = None
            if "meta" in tables:
                row = self._conn.execute("SELECT value FROM meta WHERE key='application'").fetchone()
                app = row[0] if row else None
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        if app != APPLICATION:
            raise LedgerError(
                f"{self.path} exists but is not a pate-learn ledger (user_version {version}, "
                f"tables {sorted(tables) or 'none'}); it was left untouched. Pass another path "
                "with --ledger or set PATE_LEDGER.")
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger at {self.path} has schema version {version}, written by a newer "
                f"pate-learn (this one reads version {SCHEMA_VERSION}); upgrade pate-learn. "
                "The file was left untouched.")
        if version not in (1, 2, SCHEMA_VERSION):
            raise LedgerError(
                f"the ledger at {self.path} has unknown schema version {version} (expected "
                f"{SCHEMA_VERSION}); the file was left untouched.")
        if version < SCHEMA_VERSION or not self._has_current_columns():
            self._migrate()
        if not self._has_names_table():
            self._migrate_names()
        try:
            mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                self._conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _has_current_columns(self) -> bool:
        """Whether every column the current schema added to older tables is there."""
        try:
            have = {(t, r[1]) for t in ("datasets", "identities")
                    for r in self._conn.execute(f"PRAGMA table_info({t})")}
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        return ("datasets", "conversion") in have and set(_SCHEMA_V3_COLUMNS) <= have

    def _migrate(self) -> None:
        """Version 1 or 2 -> 3, in place and in one transaction: add the record and link tables
        (version 1), the conversion column (``'classic'`` for every dataset: what their budgets
        were judged with so far; also for a version-2 file written before it), then (version
        < 3) ``identities.key_version`` (1 for every stored identity: their keys include the
        records' shape) and ``datasets.relation`` (``'add-remove'``: what every budget is
        judged for from now on), and bump ``user_version``. Every existing row is kept; events
        are not rewritten: an event stored without a relation is read with the one it was
        analysed under (``analysis.legacy_relation``), and the ledger refuses to compose a
        replace-one event with anything (:func:`_check_relations`). Another process may have
        migrated first."""
        added: list[str] = []
        with self._txn(write=True) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (1, 2, SCHEMA_VERSION):
                raise LedgerError(f"the ledger at {self.path} changed to schema version {version} "
                                  f"while being migrated (expected 1 or {SCHEMA_VERSION}); "
                                  "the file was left untouched.")
            if version == 1:
                for statement in _SCHEMA_V2.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                added.append("identities, records, links")
            columns = {r[1] for r in conn.execute("PRAGMA table_info(datasets)")}
            if not columns:
                raise LedgerError(f"the ledger at {self.path} has no datasets table; it was left "
                                  "untouched. Restore it from a backup.")
            if "conversion" not in columns:
                conn.execute(f"ALTER TABLE datasets ADD COLUMN {_CONVERSION_COLUMN}")
                added.append("datasets.conversion")
            for (table, column), decl in _SCHEMA_V3_COLUMNS.items():
                if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                    added.append(f"{table}.{column}")
            if added:
                if version == 1:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_to_2_utc', ?)",
                                 (_utc_now(),))
                if version < 3:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_to_3_utc', ?)",
                                 (_utc_now(),))
                if "datasets.conversion" in added:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('added_conversion_utc', ?)",
                                 (_utc_now(),))
                self._audit(conn, None, "migrate-schema",
                            {"from": version, "to": SCHEMA_VERSION, "added": added})
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        if added:
            logger.info("migrated the ledger at %s from schema version %d to %d (added %s)",
                        self.path, version, SCHEMA_VERSION, "; ".join(added))

    # ---- dataset names: the first is kept, later ones are listed (table dataset_names) ---------

    def _has_names_table(self) -> bool:
        try:
            return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                                      "name='dataset_names'").fetchone() is not None
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _migrate_names(self) -> None:
        """Add table ``dataset_names`` in place, in one transaction (``user_version`` is not
        changed: the table only adds to what a file holds; another process may have added it
        first). Earlier pate-learn versions renamed a dataset to the name of each run's data,
        recording each rename in the audit log: the first name found there is restored to
        ``datasets.name`` and the others become later names, except a name another dataset
        holds now (it stays theirs). Every other row is kept."""
        restored: dict[str, dict] = {}
        with self._txn(write=True) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                            "name='dataset_names'").fetchone():
                return
            for statement in _SCHEMA_NAMES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            renamed = conn.execute(
                "SELECT d.digest, d.name FROM datasets d WHERE EXISTS (SELECT 1 FROM audit a "
                "WHERE a.dataset = d.digest AND a.action = 'rename') ORDER BY d.created_utc, d.digest"
            ).fetchall()
            for digest, current in renamed:
                history: list[str] = []
                for (detail,) in conn.execute("SELECT detail FROM audit WHERE dataset=? AND "
                                              "action='rename' ORDER BY id", (digest,)):
                    try:
                        change = json.loads(detail)
                    except ValueError:
                        continue  # an unreadable audit row: the names it held are not restored
                    for key in ("old", "new"):
                        value = change.get(key) if isinstance(change, dict) else None
                        if isinstance(value, str) and value and value not in history:
                            history.append(value)
                if current is not None and current not in history:
                    history.append(current)
                names = [n for n in history if self._name_owner(conn, n) in (None, digest)]
                if not names or names[0] == current and len(names) == 1:
                    continue
                conn.execute("UPDATE datasets SET name=? WHERE digest=?", (names[0], digest))
                now = _utc_now()
                conn.executemany("INSERT INTO dataset_names (name, dataset, created_utc) "
                                 "VALUES (?, ?, ?)", ((n, digest, now) for n in names[1:]))
                restored[digest] = {"name": names[0], "aliases": names[1:], "was": current}
                self._audit(conn, digest, "restore-first-name", restored[digest])
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('added_dataset_names_utc', ?)",
                         (_utc_now(),))
            self._audit(conn, None, "migrate-schema", {"added": ["dataset_names"],
                                                       "restored_first_names": len(restored)})
        logger.info("added table dataset_names to the ledger at %s (restored the first name of %d "
                    "renamed dataset(s))", self.path, len(restored))

    @staticmethod
    def _name_owner(conn: sqlite3.Connection, name: str) -> str | None:
        """The digest of the dataset that ``name`` names (first or later name), or None."""
        row = conn.execute("SELECT digest FROM datasets WHERE name=?", (name,)).fetchone() or \
            conn.execute("SELECT dataset FROM dataset_names WHERE name=?", (name,)).fetchone()
        return None if row is None else row[0]

    def _add_name(self, conn: sqlite3.Connection, digest: str, name: str, *, first: str) -> None:
        """One more name of ``digest`` (already checked free); its first name ``first`` stays."""
        conn.execute("INSERT INTO dataset_names (name, dataset, created_utc) VALUES (?, ?, ?)",
                     (name, digest, _utc_now()))
        self._audit(conn, digest, "add-name", {"name": name, "first": first})

    @staticmethod
    def _aliases(conn: sqlite3.Connection, digest: str) -> list[str]:
        """The later names of ``digest``, oldest first."""
        return [r[0] for r in conn.execute("SELECT name FROM dataset_names WHERE dataset=? "
                                           "ORDER BY created_utc, rowid", (digest,))]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def _translate(self, exc: sqlite3.Error) -> LedgerError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return LedgerError(
                f"the ledger at {self.path} is locked by another process (waited {self.timeout:g} s: "
                f"{text}); nothing was written. Retry when the other run has finished its "
                "transaction, or pass a longer timeout.")
        if "malformed" in text or "not a database" in text or (
                type(exc) is sqlite3.DatabaseError):
            return LedgerError(
                f"the ledger at {self.path} is unreadable ({text}); it was left untouched. Do not "
                "delete it: check it with `sqlite3 PATH 'PRAGMA integrity_check'` and restore it "
                "from a backup if needed.")
        if "disk is full" in text or "disk I/O error" in text or "readonly" in text:
            return LedgerError(  # SQLite's words for a full disk (ENOSPC) or a read-only one
                f"ledger operation on {self.path} failed: {text}; the transaction was rolled "
                "back (nothing recorded). Free space on its file system (or make it writable) "
                "and run the command again")
        return LedgerError(f"ledger operation on {self.path} failed: {text}")

    @contextlib.contextmanager
    def _txn(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` (a writer; serialises every read-then-write of
        budget across processes) or ``BEGIN`` (a consistent read snapshot)."""
        if self._conn is None:
            raise LedgerError(f"the ledger at {self.path} is closed; open a new Ledger")
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        try:
            yield conn
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc) from exc
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._translate(exc) from exc

    def _audit(self, conn: sqlite3.Connection, dataset: str | None, action: str, detail: dict) -> None:
        conn.execute("INSERT INTO audit (dataset, time_utc, action, detail) VALUES (?, ?, ?, ?)",
                     (dataset, _utc_now(), action, _canonical(detail)))

    # ---- datasets -----------------------------------------------------------------------

    def _resolve(self, conn: sqlite3.Connection, dataset: Any) -> str:
        if not isinstance(dataset, str) or not dataset:
            raise TypeError(f"dataset must be a digest or a name (a non-empty string), got {dataset!r}")
        key = dataset.strip()
        row = conn.execute("SELECT digest FROM datasets WHERE digest=? OR name=?", (key.lower(), key)
                           ).fetchone() or conn.execute(
            "SELECT dataset FROM dataset_names WHERE name=?", (key,)).fetchone()
        if row:
            return row[0]
        low = key.lower()
        if len(low) >= 8 and set(low) <= _HEX:
            rows = conn.execute("SELECT digest FROM datasets WHERE digest LIKE ?", (low + "%",)).fetchall()
            if len(rows) == 1:
                return rows[0][0]
            if len(rows) > 1:
                raise ValueError(f"dataset prefix {dataset!r} matches {len(rows)} datasets; "
                                 "give more digits of the digest")
        raise LedgerError(f"dataset {dataset!r} is not in the ledger at {self.path}; register it with "
                          f"`pate budget set --dataset DIGEST --eps E --delta D --name NAME --ledger "
                          f"{self.path}`, DIGEST from `pate budget digest --config CONFIG` (list "
                          "known ones with `pate budget list`)")

    def resolve(self, dataset: str) -> str:
        """The digest of ``dataset`` given as a digest, a name or a unique digest prefix (>= 8)."""
        with self._txn(write=False) as conn:
            return self._resolve(conn, dataset)

    def register_dataset(self, digest: str, *, name: str | None = None) -> str:
        """Add a dataset by its sha256 ``digest`` (idempotent); optionally give it a ``name``:
        its first name, or, if it has one already, one more name that resolves it (the first is
        kept). A name that names another dataset is refused (``ValueError``), before any write."""
        digest = _check_digest(digest)
        name = _check_name(name, "name")
        with self._txn(write=True) as conn:
            self._register(conn, digest, name)
        return digest

    def _register(self, conn: sqlite3.Connection, digest: str, name: str | None) -> None:
        """Add ``digest`` (with ``name``), or give a registered dataset ``name``: its first name
        if it has none, else one more of its names (the first is kept, :meth:`_add_name`)."""
        row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
        owner = None
        if name is not None:
            owner = self._name_owner(conn, name)
            if owner is not None and owner != digest:
                raise ValueError(f"name {name!r} already names dataset {owner[:12]}...; "
                                 "choose another name")
            if _is_digest(name.lower()):
                raise ValueError(f"name {name!r} looks like a digest; choose a readable name")
        if row is None:
            conn.execute("INSERT INTO datasets (digest, name, created_utc) VALUES (?, ?, ?)",
                         (digest, name, _utc_now()))
            self._audit(conn, digest, "register", {"name": name})
        elif name is not None and owner is None:
            if row[0] is None:
                conn.execute("UPDATE datasets SET name=? WHERE digest=?", (name, digest))
                self._audit(conn, digest, "name", {"name": name})
            else:
                self._add_name(conn, digest, name, first=row[0])

    def register_identity(self, identity: DatasetIdentity, *, name: str | None = None) -> str:
        """Register a dataset with its records (idempotent) and return its digest.

        Stores the record keys of ``identity`` (from :func:`dataset_identity`) and links the
        dataset to every registered dataset sharing at least one record key; from then on their
        spend counts against each other (module docstring). A dataset already registered by
        digest alone (e.g. ``pate budget set --dataset DIGEST``) keeps its budget and events and
        gains its records. ``name`` as in :meth:`register_dataset`.
        """
        identity = _check_identity(identity)
        name = _check_name(name, "name")
        with self._txn(write=True) as conn:
            self._register(conn, identity.digest, name)
            if conn.execute("SELECT 1 FROM identities WHERE dataset=?", (identity.digest,)).fetchone():
                return identity.digest
            keys = _distinct_keys(identity.record_keys)
            cur = conn.execute("INSERT INTO identities (dataset, num_records, distinct_records, "
                               "created_utc, key_version) VALUES (?, ?, ?, ?, ?)",
                               (identity.digest, identity.num_records, len(keys), _utc_now(),
                                KEY_VERSION))
            iid = int(cur.lastrowid)
            conn.executemany("INSERT INTO records (key, identity) VALUES (?, ?)",
                             ((k, iid) for k in keys))
            by_legacy_digest = self._upgrade_legacy(conn, identity)
            shared = conn.execute(
                "SELECT i.dataset, count(*) FROM records r1 JOIN records r2 "
                "ON r2.key = r1.key AND r2.identity <> r1.identity "
                "JOIN identities i ON i.id = r2.identity WHERE r1.identity = ? "
                "GROUP BY i.dataset ORDER BY i.dataset", (iid,)).fetchall()
            found = {other for other, _ in shared}
            shared += [(other, identity.num_records) for other in by_legacy_digest
                       if other not in found]
            now = _utc_now()
            for other, count in shared:
                a, b = sorted((identity.digest, other))
                conn.execute("INSERT OR REPLACE INTO links (a, b, shared, created_utc) VALUES (?, ?, ?, ?)",
                             (a, b, int(count), now))
                self._audit(conn, identity.digest, "link", {"dataset": other, "shared_records": count})
                self._audit(conn, other, "link", {"dataset": identity.digest, "shared_records": count})
            self._audit(conn, identity.digest, "register-records",
                        {"num_records": identity.num_records, "distinct_records": len(keys),
                         "linked": [o for o, _ in shared]})
        if shared:
            logger.info("dataset %s shares records with %d registered dataset(s); their spend "
                        "counts against each other", identity.digest[:12], len(shared))
        return identity.digest

    def _upgrade_legacy(self, conn: sqlite3.Connection, identity: DatasetIdentity) -> list[str]:
        """Link what a ledger of schema <= 2 holds under the legacy record keys to ``identity``.

        Every record of a legacy identity that ``identity`` holds too (found by its legacy key)
        gains its current key, so that it links to ``identity`` -- and to any later copy of
        the same records in any layout -- like a record registered now. Returns the datasets
        registered under ``identity``'s legacy digest (by digest alone, e.g. ``pate budget set
        --dataset`` with the digest an older ``pate budget digest`` printed): they are linked
        too. A legacy dataset whose records are only ever seen again in another layout than
        the one the old ledger hashed cannot be recognised (the old keys include the shape)."""
        legacy = identity.legacy_record_keys
        if legacy is None:
            return []
        by_digest = [r[0] for r in conn.execute("SELECT digest FROM datasets WHERE digest=? AND "
                                                "digest<>?", (identity.legacy_digest,
                                                              identity.digest))]
        if not conn.execute("SELECT 1 FROM identities WHERE key_version < ? LIMIT 1",
                            (KEY_VERSION,)).fetchone():
            return by_digest
        current = {bytes(k): bytes(c) for k, c in zip(
            _key_bytes(legacy), _key_bytes(identity.record_keys))}
        old_keys = list(current)
        upgraded = []
        for start in range(0, len(old_keys), 500):
            chunk = old_keys[start:start + 500]
            for key, iid in conn.execute(
                    "SELECT r.key, r.identity FROM records r JOIN identities i ON i.id = r.identity "
                    "WHERE i.key_version < ? AND r.key IN (" + ",".join("?" * len(chunk)) + ")",
                    (KEY_VERSION, *chunk)):
                upgraded.append((current[bytes(key)], int(iid)))
        conn.executemany("INSERT OR IGNORE INTO records (key, identity) VALUES (?, ?)", upgraded)
        return by_digest

    def overlapping(self, identity: DatasetIdentity) -> list[dict]:
        """Registered datasets that share records with ``identity`` (read only; nothing is
        registered): the dataset with the same digest first if registered (``"same": True``, also
        when it was registered by digest alone), then every dataset holding at least one of its
        record keys, with ``shared_records`` (distinct), ``num_records`` and ``budget``."""
        identity = _check_identity(identity)
        keys = _distinct_keys(identity.record_keys)
        key_sets = [keys]
        if identity.legacy_record_keys is not None:  # what a schema <= 2 ledger holds them as
            key_sets.append(_distinct_keys(identity.legacy_record_keys))
        counts: dict[str, int] = {}
        with self._txn(write=False) as conn:
            for key_set in key_sets:
                found: dict[str, int] = {}
                for start in range(0, len(key_set), 500):
                    chunk = key_set[start:start + 500]
                    for ds, count in conn.execute(
                            "SELECT i.dataset, count(*) FROM records r JOIN identities i "
                            "ON i.id = r.identity WHERE r.key IN (" + ",".join("?" * len(chunk))
                            + ") GROUP BY i.dataset", chunk):
                        found[ds] = found.get(ds, 0) + int(count)
                for ds, count in found.items():  # a legacy dataset may hold both kinds of key
                    counts[ds] = max(counts.get(ds, 0), count)
            legacy_digest = identity.legacy_digest
            if legacy_digest is not None and conn.execute(
                    "SELECT 1 FROM datasets WHERE digest=?", (legacy_digest,)).fetchone():
                counts[legacy_digest] = max(counts.get(legacy_digest, 0), len(keys))
            if conn.execute("SELECT 1 FROM datasets WHERE digest=?", (identity.digest,)).fetchone():
                counts.setdefault(identity.digest, 0)
            out = []
            for ds in sorted(counts, key=lambda d: (d != identity.digest, -counts[d], d)):
                budget = self._budget(conn, ds)
                row = conn.execute("SELECT num_records FROM identities WHERE dataset=?", (ds,)).fetchone()
                out.append({"dataset": ds, "name": conn.execute(
                                "SELECT name FROM datasets WHERE digest=?", (ds,)).fetchone()[0],
                            "same": ds == identity.digest,
                            "shared_records": len(keys) if ds == identity.digest else counts[ds],
                            "num_records": None if row is None else int(row[0]),
                            "budget": None if budget is None else dataclasses.asdict(budget)})
        return out

    def linked(self, dataset: str) -> list[dict]:
        """The datasets linked to ``dataset`` (sharing records with it): digest, name, number of
        shared distinct records and budget."""
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            out = []
            for other, shared in self._linked(conn, digest):
                budget = self._budget(conn, other)
                out.append({"dataset": other, "name": conn.execute(
                                "SELECT name FROM datasets WHERE digest=?", (other,)).fetchone()[0],
                            "shared_records": shared,
                            "budget": None if budget is None else dataclasses.asdict(budget)})
            return out

    def link(self, dataset: str, other: str, *, reason: str | None = None) -> None:
        """Declare by hand that ``dataset`` and ``other`` share records (idempotent), e.g. a
        dataset whose budget was set under an id digest, or one an older pate-learn registered
        under another digest, and the identity ``pate run`` registers now. From then on their
        spend counts against each other exactly as for datasets linked by their record keys.
        Links are never removed (that could only understate spend)."""
        if reason is not None and (not isinstance(reason, str) or not reason.strip()):
            raise TypeError(f"reason must be a non-empty string or None, got {reason!r}")
        with self._txn(write=True) as conn:
            a, b = self._resolve(conn, dataset), self._resolve(conn, other)
            if a == b:
                raise ValueError(f"dataset {dataset!r} and other {other!r} are the same dataset "
                                 f"({a[:12]}...); link two different datasets")
            lo, hi = sorted((a, b))
            if conn.execute("SELECT 1 FROM links WHERE a=? AND b=?", (lo, hi)).fetchone():
                return
            conn.execute("INSERT INTO links (a, b, shared, created_utc) VALUES (?, ?, NULL, ?)",
                         (lo, hi, _utc_now()))
            for x, y in ((a, b), (b, a)):
                self._audit(conn, x, "link", {"dataset": y, "shared_records": None, "by_hand": True,
                                              "reason": reason})

    @staticmethod
    def _linked(conn: sqlite3.Connection, digest: str) -> list[tuple[str, int | None]]:
        return sorted(conn.execute("SELECT b, shared FROM links WHERE a=? "
                                   "UNION ALL SELECT a, shared FROM links WHERE b=?",
                                   (digest, digest)).fetchall())

    def datasets(self) -> list[dict]:
        """Every dataset: digest, name (the first it was registered with), ``aliases`` (its
        later names, oldest first), budget (``budget_eps``, ``budget_delta``, ``basis``,
        ``conversion``), number of events, number of records (``None`` when registered by digest
        alone) and the digests of the datasets linked to it."""
        with self._txn(write=False) as conn:
            rows = conn.execute(
                "SELECT d.digest, d.name, d.budget_eps, d.budget_delta, d.basis, d.created_utc, "
                "(SELECT count(*) FROM events e WHERE e.dataset=d.digest), "
                "(SELECT num_records FROM identities i WHERE i.dataset=d.digest), d.conversion "
                "FROM datasets d ORDER BY d.created_utc").fetchall()
            links = {r[0]: [d for d, _ in self._linked(conn, r[0])] for r in rows}
            aliases = {r[0]: self._aliases(conn, r[0]) for r in rows}
        return [{"digest": r[0], "name": r[1], "aliases": aliases[r[0]], "budget_eps": r[2],
                 "budget_delta": r[3], "basis": r[4], "conversion": r[8], "created_utc": r[5],
                 "events": r[6], "records": r[7], "linked": links[r[0]]} for r in rows]

    def set_budget(self, dataset: str, *, eps: float, delta: float, data_dependent: bool = False,
                   conversion: str = "classic", name: str | None = None,
                   reason: str | None = None) -> Budget:
        """Set the total budget ``(eps, delta)`` of ``dataset`` (registered here if it is a new
        digest). ``data_dependent=True`` judges spend on the realised data-dependent RDP, whose
        epsilon is *not* differentially private itself (Papernot et al. 2018); the default
        judges it on the data-independent RDP. ``conversion`` (``"classic"`` or ``"tight"``) is
        the RDP -> (eps, delta) conversion every epsilon of this dataset is judged with (module
        docstring); a run's ``[privacy] conversion`` must be the same. Raising a budget that was
        already spent, or lowering it below what was spent (no further spend then succeeds), or
        changing its conversion, is allowed: it is the data owner's decision. Every change is kept
        in the audit log with the old and new budget, the spend at the time and ``reason``; read
        them with :meth:`budget_changes`."""
        eps = check_positive(eps, "eps")
        conversion = check_choice(conversion, "conversion", CONVERSIONS)
        delta = check_delta(delta, "delta")
        if not isinstance(data_dependent, bool):
            raise TypeError(f"data_dependent must be True or False, got {data_dependent!r}")
        name = _check_name(name, "name")
        if reason is not None and (not isinstance(reason, str) or not reason.strip()):
            raise TypeError(f"reason must be a non-empty string or None, got {reason!r}")
        basis = BASES[1] if data_dependent else BASES[0]
        with self._txn(write=True) as conn:
            if isinstance(dataset, str) and _is_digest(dataset.strip().lower()):
                digest = dataset.strip().lower()
                self._register(conn, digest, name)
            else:
                digest = self._resolve(conn, dataset)
                if name is not None:
                    self._register(conn, digest, name)
            old = conn.execute("SELECT budget_eps, budget_delta, basis, conversion FROM datasets "
                               "WHERE digest=?", (digest,)).fetchone()
            conn.execute("UPDATE datasets SET budget_eps=?, budget_delta=?, basis=?, conversion=? "
                         "WHERE digest=?", (eps, delta, basis, conversion, digest))
            budget = Budget(eps, delta, basis, conversion)
            events, _ = self._view(conn, digest)
            spent = self._worst_eps(conn, digest, events, budget) if events else 0.0
            self._audit(conn, digest, "set-budget",
                        {"eps": eps, "delta": delta, "basis": basis, "conversion": conversion,
                         "previous": {"eps": old[0], "delta": old[1], "basis": old[2],
                                      "conversion": None if old[0] is None else old[3]},
                         "spent_eps": spent, "reason": reason})
        if old[0] is not None and spent > 0:
            logger.warning("budget of dataset %s changed from eps=%g to eps=%g after eps=%.4g was "
                           "spent (recorded in the audit log)", digest[:12], old[0], eps, spent)
        return budget

    def budget_changes(self, dataset: str) -> list[dict]:
        """Every budget change of ``dataset``, oldest first: ``time_utc``, the new ``eps``,
        ``delta``, ``basis``, ``conversion``, the ``previous`` budget (``None`` for the first),
        ``change`` (``"initial"``, ``"raised"``, ``"lowered"`` or ``"unchanged"``, on eps at equal
        delta, basis and conversion, else ``"changed"``), ``spent_eps`` at the time (``None`` for
        changes recorded before schema version 2) and ``reason``. Changes recorded before budgets
        had a conversion read as ``"classic"`` (what they were judged with). A report shows these
        next to the spend."""
        out = []
        for row in self.audit_log(dataset):
            if row["action"] != "set-budget":
                continue
            d = row["detail"]
            prev = d.get("previous") or {}
            conversion = d.get("conversion") or "classic"
            previous = None if prev.get("eps") is None else {
                "eps": prev["eps"], "delta": prev["delta"], "basis": prev["basis"],
                "conversion": prev.get("conversion") or "classic"}
            if previous is None:
                change = "initial"
            elif (previous["delta"] != d["delta"] or previous["basis"] != d["basis"]
                  or previous["conversion"] != conversion):
                change = "changed"
            else:
                change = ("raised" if d["eps"] > previous["eps"] else
                          "lowered" if d["eps"] < previous["eps"] else "unchanged")
            out.append({"time_utc": row["time_utc"], "eps": d["eps"], "delta": d["delta"],
                        "basis": d["basis"], "conversion": conversion, "previous": previous,
                        "change": change,
                        "spent_eps": d.get("spent_eps"), "reason": d.get("reason")})
        return out

    def budget(self, dataset: str) -> Budget | None:
        """The budget of ``dataset``; ``None`` when none was set (spend is then recorded, unlimited)."""
        with self._txn(write=False) as conn:
            return self._budget(conn, self._resolve(conn, dataset))

    @staticmethod
    def _budget(conn: sqlite3.Connection, digest: str) -> Budget | None:
        row = conn.execute("SELECT budget_eps, budget_delta, basis, conversion, relation "
                           "FROM datasets WHERE digest=?", (digest,)).fetchone()
        if row is None or row[0] is None:
            return None
        return Budget(float(row[0]), float(row[1]), row[2], row[3], row[4])

    def _name(self, conn: sqlite3.Connection, digest: str) -> str:
        row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
        return row[0] if row and row[0] else digest[:12]

    # ---- blocks (Sage) -------------------------------------------------------------------

    def add_block(self, dataset: str, name: str) -> None:
        """Register a time block of records of ``dataset`` (Sage). It starts with fresh budget."""
        name = _check_name(name, "block")
        if name is None:
            raise TypeError("block must be a non-empty string, got None")
        with self._txn(write=True) as conn:
            digest = self._resolve(conn, dataset)
            if conn.execute("SELECT 1 FROM blocks WHERE dataset=? AND name=?", (digest, name)).fetchone():
                raise ValueError(f"block {name!r} is already registered for dataset "
                                 f"{self._name(conn, digest)}; choose a new name for new records")
            conn.execute("INSERT INTO blocks (dataset, name, created_utc) VALUES (?, ?, ?)",
                         (digest, name, _utc_now()))
            self._audit(conn, digest, "add-block", {"block": name})

    def blocks(self, dataset: str) -> list[str]:
        """Names of the registered blocks of ``dataset``, oldest first."""
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            return [r[1] for r in self._block_rows(conn, digest)]

    @staticmethod
    def _block_rows(conn: sqlite3.Connection, digest: str) -> list[tuple[int, str]]:
        return conn.execute("SELECT id, name FROM blocks WHERE dataset=? ORDER BY id", (digest,)).fetchall()

    def _target_blocks(self, conn: sqlite3.Connection, digest: str, blocks: Any) -> frozenset[int]:
        rows = self._block_rows(conn, digest)
        by_name = {name: bid for bid, name in rows}
        if blocks is None:
            return frozenset(by_name.values())
        if isinstance(blocks, str) or not isinstance(blocks, Iterable):
            raise TypeError(f"blocks must be a list of block names or None, got {blocks!r}")
        names = list(blocks)
        if not names:
            raise ValueError("blocks must name at least one block (None charges every block)")
        unknown = [b for b in names if b not in by_name]
        if unknown:
            raise ValueError(f"blocks {unknown!r} are not registered for dataset "
                             f"{self._name(conn, digest)} (registered: {sorted(by_name) or 'none'}); "
                             "register them with Ledger.add_block / `pate budget add-block`")
        return frozenset(by_name[b] for b in names)

    # ---- reading events and reservations ------------------------------------------------

    def _load_event(self, row: Sequence[Any]) -> Any:
        PrivacyEvent, _, _ = _accountant()
        from pate.analysis.accountant import legacy_relation
        event_id, payload, digest = row[0], row[1], row[2]
        if _sha256(payload) != digest:
            raise LedgerError(f"event {event_id} in the ledger at {self.path} fails its checksum "
                              "(the file was altered or damaged); the ledger was left untouched -- "
                              "restore it from a backup")
        d = json.loads(payload)
        # an event stored before events carried a relation: the one it was analysed under
        relation = d.get("relation") or legacy_relation(d["mechanism"])
        return PrivacyEvent(mechanism=d["mechanism"], params=d["params"],
                            orders=np.asarray(d["orders"], dtype=np.float64),
                            rdp=np.asarray(d["rdp"], dtype=np.float64),
                            rdp_data_independent=np.asarray(d["rdp_data_independent"], dtype=np.float64),
                            queries=int(d["queries"]), answered=int(d["answered"]),
                            relation=relation)

    def _load_items(self, conn: sqlite3.Connection, digest: str, *, exclude: str | None = None
                    ) -> tuple[list[_Item], list[_Item]]:
        """(committed events, live reservations other than ``exclude``) of a dataset."""
        links: dict[int, set[int]] = {}
        for ev, blk in conn.execute("SELECT eb.event, eb.block FROM event_blocks eb JOIN events e "
                                    "ON e.id = eb.event WHERE e.dataset=?", (digest,)):
            links.setdefault(ev, set()).add(blk)
        events = [_Item(self._load_event(r), frozenset(links.get(r[0], ())))
                  for r in conn.execute("SELECT id, payload, sha256 FROM events WHERE dataset=? "
                                        "ORDER BY id", (digest,))]
        res_links: dict[str, set[int]] = {}
        for rid, blk in conn.execute("SELECT rb.reservation, rb.block FROM reservation_blocks rb "
                                     "JOIN reservations r ON r.id = rb.reservation "
                                     "WHERE r.dataset=? AND r.status='active'", (digest,)):
            res_links.setdefault(rid, set()).add(blk)
        live = []
        for row in conn.execute("SELECT id, payload, sha256, pid, process_token, hostname, heartbeat, "
                                "lease_seconds FROM reservations WHERE dataset=? AND status='active' "
                                "ORDER BY created_utc", (digest,)):
            if row[0] == exclude or self._stale(row[3], row[4], row[5], row[6], row[7]):
                continue
            orders, rdp = self._load_curve(row[0], row[1], row[2])
            live.append(_Item(_reservation_event(orders, rdp, row[0]),
                              frozenset(res_links.get(row[0], ())), reservation=row[0]))
        return events, live

    def _view(self, conn: sqlite3.Connection, digest: str, exclude: str | None = None,
              cache: dict | None = None) -> tuple[list[_Item], list[_Item]]:
        """(events, live reservations) that count against ``digest``: its own (with their blocks)
        and those of every dataset linked to it (each charged to every block: ``blocks`` empty)."""
        cache = {} if cache is None else cache

        def raw(d: str) -> tuple[list[_Item], list[_Item]]:
            if d not in cache:
                cache[d] = self._load_items(conn, d, exclude=exclude)
            return cache[d]

        own_events, own_live = raw(digest)
        events, live = list(own_events), list(own_live)
        for other, _ in self._linked(conn, digest):
            linked_events, linked_live = raw(other)
            events += [_Item(it.event, frozenset(), it.reservation, other) for it in linked_events]
            live += [_Item(it.event, frozenset(), it.reservation, other) for it in linked_live]
        return events, live

    def _load_curve(self, rid: str, payload: str, digest: str) -> tuple[np.ndarray, np.ndarray]:
        if _sha256(payload) != digest:
            raise LedgerError(f"reservation {rid} in the ledger at {self.path} fails its checksum "
                              "(the file was altered or damaged); restore it from a backup")
        d = json.loads(payload)
        return np.asarray(d["orders"], dtype=np.float64), np.asarray(d["rdp"], dtype=np.float64)

    def _stale(self, pid: int, token: str | None, hostname: str, heartbeat: float,
               lease: float, now: float | None = None) -> bool:
        if hostname == self._hostname:
            return not _process_alive(int(pid), token)
        return (time.time() if now is None else now) > heartbeat + lease

    def events(self, dataset: str, *, run_id: str | None = None) -> list[StoredEvent]:
        """The recorded events of ``dataset`` (optionally one run's), oldest first."""
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            return self._stored_events(conn, digest, run_id)

    def _stored_events(self, conn: sqlite3.Connection, digest: str, run_id: str | None = None
                       ) -> list[StoredEvent]:
        names = dict(self._block_rows(conn, digest))
        links: dict[int, list[str]] = {}
        for ev, blk in conn.execute("SELECT eb.event, eb.block FROM event_blocks eb JOIN events e "
                                    "ON e.id = eb.event WHERE e.dataset=? ORDER BY eb.block", (digest,)):
            links.setdefault(ev, []).append(names[blk])
        sql = ("SELECT id, payload, sha256, run_id, created_utc, reservation FROM events "
               "WHERE dataset=?")
        params: tuple = (digest,)
        if run_id is not None:
            sql += " AND run_id=?"
            params += (run_id,)
        return [StoredEvent(r[0], digest, r[3], r[4], tuple(links.get(r[0], ())), r[5],
                            self._load_event(r))
                for r in conn.execute(sql + " ORDER BY id", params)]

    def reservations(self, dataset: str, *, live_only: bool = True) -> list[ReservationInfo]:
        """Reservations of ``dataset``: the live ones (default) or all, oldest first."""
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            return self._reservation_infos(conn, digest, live_only)

    def _reservation_infos(self, conn, digest, live_only) -> list[ReservationInfo]:
        names = dict(self._block_rows(conn, digest))
        links: dict[str, list[str]] = {}
        for rid, blk in conn.execute("SELECT rb.reservation, rb.block FROM reservation_blocks rb "
                                     "JOIN reservations r ON r.id = rb.reservation WHERE r.dataset=? "
                                     "ORDER BY rb.block", (digest,)):
            links.setdefault(rid, []).append(names[blk])
        out = []
        for r in conn.execute("SELECT id, run_id, payload, sha256, pid, process_token, hostname, "
                              "created_utc, heartbeat, lease_seconds, status, closed_utc "
                              "FROM reservations WHERE dataset=? ORDER BY created_utc", (digest,)):
            status = r[10]
            if status == "active" and self._stale(r[4], r[5], r[6], r[8], r[9]):
                status = "stale"
            if live_only and status != "active":
                continue
            orders, rdp = self._load_curve(r[0], r[2], r[3])
            out.append(ReservationInfo(r[0], digest, r[1], orders, rdp, tuple(links.get(r[0], ())),
                                       r[4], r[6], r[7], _utc_from_unix(r[8]), r[9], status, r[11]))
        return out

    # ---- reconciliation -----------------------------------------------------------------

    def reconcile(self, dataset: str | None = None) -> list[str]:
        """Mark reservations of crashed runs ``expired`` (their process is gone, or -- for runs on
        other hosts -- their lease ran out); returns their ids. Every write does this first."""
        with self._txn(write=True) as conn:
            digest = None if dataset is None else self._resolve(conn, dataset)
            return self._reconcile(conn, digest)

    def _reconcile_group(self, conn: sqlite3.Connection, digest: str) -> None:
        for d in [digest] + [other for other, _ in self._linked(conn, digest)]:
            self._reconcile(conn, d)

    def _reconcile(self, conn: sqlite3.Connection, digest: str | None) -> list[str]:
        sql = ("SELECT id, dataset, run_id, pid, process_token, hostname, heartbeat, lease_seconds "
               "FROM reservations WHERE status='active'")
        rows = conn.execute(sql + (" AND dataset=?" if digest else ""), (digest,) if digest else ()
                            ).fetchall()
        expired = []
        for rid, ds, run_id, pid, token, host, beat, lease in rows:
            if self._stale(pid, token, host, beat, lease):
                conn.execute("UPDATE reservations SET status='expired', closed_utc=? WHERE id=?",
                             (_utc_now(), rid))
                self._audit(conn, ds, "expire-reservation",
                            {"reservation": rid, "run_id": run_id, "pid": pid, "hostname": host,
                             "reason": "process gone" if host == self._hostname else "lease expired"})
                expired.append(rid)
        return expired

    # ---- accounting ---------------------------------------------------------------------

    def _compose(self, items: Sequence[_Item], grid: np.ndarray, data_dependent: bool) -> np.ndarray:
        _, RdpAccountant, _ = _accountant()
        acc = RdpAccountant(orders=grid).compose(*[_restrict(it.event, grid) for it in items])
        return np.asarray(acc.rdp(data_dependent=data_dependent), dtype=np.float64)

    @staticmethod
    def _scopes(items: Sequence[_Item], all_blocks: Iterable[int], target: frozenset[int] | None
                ) -> list[tuple[int | None, list[_Item]]]:
        """Per block, the items charged to it (whole-dataset items count in every block)."""
        blocks = sorted(all_blocks) if target is None else sorted(target)
        if not blocks:
            return [(None, list(items))]
        return [(b, [it for it in items if not it.blocks or b in it.blocks]) for b in blocks]

    def _worst_eps(self, conn: sqlite3.Connection, digest: str, items: Sequence[_Item],
                   budget: Budget, target: frozenset[int] | None = None) -> float:
        """The worst-block epsilon of ``items`` on ``budget``'s basis at its delta, converted
        with its conversion."""
        _, _, eps_from_rdp = _accountant()
        grid = _shared_grid([it.event for it in items], self.path)
        names = dict(self._block_rows(conn, digest))
        worst = 0.0
        for _, scoped in self._scopes(items, names, target or None):
            if scoped:
                total = self._compose(scoped, grid, budget.data_dependent)
                worst = max(worst, float(eps_from_rdp(total, orders=grid, delta=budget.delta,
                                                      conversion=budget.conversion)[0]))
        return worst

    def _check_fits(self, conn: sqlite3.Connection, digest: str, new: Sequence[_Item],
                    target: frozenset[int], *, exclude: str | None, what: str) -> None:
        """Refuse (``BudgetExceededError``) ``new`` items on ``digest`` unless they fit the budget
        of ``digest`` (in the ``target`` blocks) and of every dataset linked to it (every block)."""
        cache: dict = {}
        for d, shared in [(digest, None)] + self._linked(conn, digest):
            events, live = self._view(conn, d, exclude, cache)
            if d == digest:
                self._check_one(conn, d, events + live, list(new), target, what=what)
            else:
                moved = [_Item(it.event, frozenset(), it.reservation, digest) for it in new]
                self._check_one(conn, d, events + live, moved, frozenset(), what=what,
                                origin=digest, shared=shared)

    def _check_one(self, conn: sqlite3.Connection, digest: str, existing: list[_Item],
                   new: list[_Item], target: frozenset[int], *, what: str,
                   origin: str | None = None, shared: int | None = None) -> None:
        # Even without a budget, refuse what could never be composed with the rest.
        grid = _shared_grid([it.event for it in existing + new], self.path)
        budget = self._budget(conn, digest)
        if budget is None:
            return
        _, _, eps_from_rdp = _accountant()
        names = dict(self._block_rows(conn, digest))
        worst = None
        for block, items in self._scopes(existing + new, names, target or None):
            total = self._compose(items, grid, budget.data_dependent)
            eps, _ = eps_from_rdp(total, orders=grid, delta=budget.delta,
                                  conversion=budget.conversion)
            if float(eps) > budget.eps and (worst is None or float(eps) > worst[1]):
                worst = (block, float(eps))
        if worst is None:
            return
        worst_spent = self._worst_eps(conn, digest, existing, budget, target) if existing else 0.0
        alone = self._compose(new, grid, budget.data_dependent) if new else None
        requested = float(eps_from_rdp(alone, orders=grid, delta=budget.delta,
                                       conversion=budget.conversion)[0]) if new else 0.0
        remaining = max(0.0, budget.eps - worst_spent)
        label = self._name(conn, digest)
        where = "" if worst[0] is None else f" in block {names[worst[0]]!r}"
        if origin is None:
            head = f"{what} on dataset {label} would bring its spend{where}"
        else:
            head = (f"{what} on dataset {self._name(conn, origin)} would bring the spend of dataset "
                    f"{label}, which shares "
                    f"{'records (linked by hand)' if shared is None else f'{shared} record(s)'} "
                    f"with it,{where}")
        raise BudgetExceededError(
            f"{head} to eps={worst[1]:.4g} > budget eps={budget.eps:g} of {label} "
            f"(delta={budget.delta:g}, {budget.basis} RDP, {budget.conversion} conversion); this "
            f"request alone "
            f"costs eps={requested:.4g}, remaining: eps={remaining:.4g} (committed events + live "
            f"reservations, of {label} and of the datasets sharing records with it). Nothing was "
            f"recorded. See `pate budget show --dataset {label} --ledger {self.path}`.",
            requested=requested, remaining=remaining)

    def prior_rdp(self, dataset: str, *, orders: Any, blocks: Sequence[str] | None = None,
                  include_reservations: bool = True, exclude_reservation: str | None = None,
                  data_dependent: bool | None = None) -> np.ndarray:
        """The RDP already spent on ``dataset`` at ``orders`` -- what an online aggregator adds its
        own cost to (``OnlineAggregator(..., prior_rdp=...)``) so that it stops before the budget.

        Composes the committed events and (by default) the other live reservations of every
        block in ``blocks`` (default: all) and returns the element-wise max over those blocks, an
        upper bound on each block's curve. The events and live reservations of every dataset
        linked to ``dataset`` (sharing records with it) count in every block. This is the prior
        against ``dataset``'s own budget; :meth:`constraints` gives one per linked budget too. Orders of ``orders`` that some recorded event lacks
        get ``+inf`` (nothing can be claimed there). ``data_dependent`` defaults to the dataset's
        budget basis (data-independent when no budget is set).
        """
        orders = _check_grid(orders, "orders")
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            target = self._target_blocks(conn, digest, blocks)
            return self._prior(conn, digest, orders, target, include_reservations,
                               exclude_reservation, data_dependent)

    def constraints(self, dataset: str, *, orders: Any, blocks: Sequence[str] | None = None,
                    exclude_reservation: str | None = None) -> list[dict]:
        """Every budget a run on ``dataset`` must stay within, each with what is already spent
        against it: the budget of ``dataset`` itself (if set) and of every linked dataset that
        has one. Each entry: ``dataset`` (digest), ``name``, ``budget`` (:class:`Budget`),
        ``shared_records`` (``None`` for ``dataset`` itself), ``linked`` (bool) and ``prior_rdp``
        at ``orders`` on that budget's basis (committed events and other live reservations; see
        :meth:`prior_rdp`). A run's own RDP ``r`` fits when, for every entry,
        ``eps_from_rdp(prior_rdp + r, orders=orders, delta=budget.delta,
        conversion=budget.conversion) <= budget.eps`` (each budget with its own delta and
        conversion, exactly as :meth:`reserve` checks it)."""
        orders = _check_grid(orders, "orders")
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            target = self._target_blocks(conn, digest, blocks)
            out = []
            for d, shared in [(digest, None)] + self._linked(conn, digest):
                budget = self._budget(conn, d)
                if budget is None:
                    continue
                prior = self._prior(conn, d, orders, target if d == digest else frozenset(), True,
                                    exclude_reservation, budget.data_dependent)
                out.append({"dataset": d, "name": conn.execute(
                                "SELECT name FROM datasets WHERE digest=?", (d,)).fetchone()[0],
                            "budget": budget, "shared_records": shared, "linked": d != digest,
                            "prior_rdp": prior})
            return out

    def _prior(self, conn, digest, orders, target, include_reservations, exclude, data_dependent):
        if data_dependent is None:
            budget = self._budget(conn, digest)
            data_dependent = bool(budget and budget.data_dependent)
        events, live = self._view(conn, digest, exclude)
        items = events + (live if include_reservations else [])
        out = np.zeros(orders.shape, dtype=np.float64)
        if not items:
            return out
        _check_relations([it.event for it in items], self.path)
        common = set(orders.tolist())
        for it in items:
            common &= set(np.asarray(it.event.orders, dtype=np.float64).tolist())
        present = np.array([o in common for o in orders.tolist()])
        out[~present] = np.inf
        if not present.any():
            return out
        grid = orders[present]
        names = dict(self._block_rows(conn, digest))
        curve = np.zeros(grid.shape)
        for _, scoped in self._scopes(items, names, target or None):
            if scoped:
                curve = np.maximum(curve, self._compose(scoped, grid, data_dependent))
        out[present] = curve
        return out

    # ---- spending -----------------------------------------------------------------------

    def reserve(self, dataset: str, *, orders: Any, rdp: Any, run_id: str | None = None,
                blocks: Sequence[str] | None = None,
                lease_seconds: float = DEFAULT_LEASE_SECONDS) -> "Reservation":
        """Reserve an upper bound ``rdp`` (per order of ``orders``) on what a run may spend -- e.g.
        the data-independent cost of the most queries it may ask -- before it spends anything.

        Atomically checks committed events + live reservations + this bound against the budget in
        every block in ``blocks`` (default: every registered block) and raises
        ``BudgetExceededError`` (nothing recorded) if it does not fit. The reservation belongs to
        this process (pid, host); it stays live while the process runs on this host, or until
        ``lease_seconds`` after the last ``heartbeat()`` as seen from other hosts.
        """
        orders = _check_grid(orders, "orders")
        curve = _check_curve(rdp, orders, "rdp")
        run_id = _check_run_id(run_id)
        lease = check_positive(lease_seconds, "lease_seconds")
        rid = uuid.uuid4().hex
        payload = _canonical({"orders": orders.tolist(), "rdp": curve.tolist()})
        pid = os.getpid()
        with self._txn(write=True) as conn:
            digest = self._resolve(conn, dataset)
            target = self._target_blocks(conn, digest, blocks)
            self._reconcile_group(conn, digest)
            self._check_fits(conn, digest, [_Item(_reservation_event(orders, curve, rid), target)],
                             target, exclude=None, what=f"reserving for run {run_id}")
            now = time.time()
            conn.execute("INSERT INTO reservations (id, dataset, run_id, payload, sha256, pid, "
                         "process_token, hostname, created_utc, heartbeat, lease_seconds, status) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')",
                         (rid, digest, run_id, payload, _sha256(payload), pid, _process_token(pid),
                          self._hostname, _utc_now(), now, lease))
            conn.executemany("INSERT INTO reservation_blocks VALUES (?, ?)", [(rid, b) for b in target])
            block_names = tuple(n for b, n in self._block_rows(conn, digest) if b in target)
        return Reservation(self, rid, digest, run_id, orders, curve, block_names)

    def charge(self, dataset: str, events: Sequence[Any], *, run_id: str | None = None,
               blocks: Sequence[str] | None = None) -> list[int]:
        """Check and record ``events`` in one transaction (no reservation). Raises
        ``BudgetExceededError`` and records nothing if they do not fit. Returns the event ids."""
        events = _check_events(events)
        run_id = _check_run_id(run_id)
        with self._txn(write=True) as conn:
            digest = self._resolve(conn, dataset)
            target = self._target_blocks(conn, digest, blocks)
            self._reconcile_group(conn, digest)
            return self._record(conn, digest, events, target, run_id, None)

    def _record(self, conn, digest, events, target, run_id, reservation) -> list[int]:
        new = [_Item(e, target) for e in events]
        if new:
            self._check_fits(conn, digest, new, target, exclude=reservation,
                             what=f"charging {len(events)} event(s) of run {run_id}")
        ids = []
        now = _utc_now()
        for e in events:
            payload = _event_payload(e)
            cur = conn.execute("INSERT INTO events (dataset, run_id, created_utc, reservation, "
                               "mechanism, queries, answered, payload, sha256) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (digest, run_id, now, reservation, e.mechanism, int(e.queries),
                                int(e.answered), payload, _sha256(payload)))
            ids.append(int(cur.lastrowid))
            conn.executemany("INSERT INTO event_blocks VALUES (?, ?)",
                             [(cur.lastrowid, b) for b in target])
        return ids

    def _commit_reservation(self, res: "Reservation", events: list[Any]) -> list[int]:
        with self._txn(write=True) as conn:
            row = conn.execute("SELECT status FROM reservations WHERE id=?", (res.id,)).fetchone()
            if row is None:
                raise LedgerError(f"reservation {res.id} is not in the ledger at {self.path}")
            if row[0] == "committed":
                raise LedgerError(f"reservation {res.id} was already committed; reserve again for "
                                  "more spend")
            self._reconcile_group(conn, res.dataset)
            target = frozenset(r[0] for r in conn.execute(
                "SELECT block FROM reservation_blocks WHERE reservation=?", (res.id,)))
            ids = self._record(conn, res.dataset, events, target, res.run_id, res.id)
            conn.execute("UPDATE reservations SET status='committed', closed_utc=? WHERE id=?",
                         (_utc_now(), res.id))
            return ids

    def release(self, reservation_id: str) -> bool:
        """Give back a live reservation (nothing spent). Returns False if it was no longer live."""
        if not isinstance(reservation_id, str) or not reservation_id:
            raise TypeError(f"reservation_id must be a non-empty string, got {reservation_id!r}")
        with self._txn(write=True) as conn:
            row = conn.execute("SELECT dataset, status FROM reservations WHERE id=?",
                               (reservation_id,)).fetchone()
            if row is None:
                raise ValueError(f"reservation {reservation_id!r} is not in the ledger at {self.path}; "
                                 "list live ones with `pate budget show --dataset ...`")
            if row[1] != "active":
                return False
            conn.execute("UPDATE reservations SET status='released', closed_utc=? WHERE id=?",
                         (_utc_now(), reservation_id))
            self._audit(conn, row[0], "release-reservation", {"reservation": reservation_id})
            return True

    def _heartbeat(self, reservation_id: str) -> None:
        with self._txn(write=True) as conn:
            conn.execute("UPDATE reservations SET heartbeat=? WHERE id=? AND status='active'",
                         (time.time(), reservation_id))

    # ---- reports ------------------------------------------------------------------------

    def summary(self, dataset: str) -> dict:
        """Everything ``pate budget show`` prints, as JSON-able data (a pipeline report can embed
        it): budget, spent epsilon (committed; worst block) on the budget's basis and on both RDP
        kinds, spent + reserved, remaining, per-block spend, live reservations, event counts.

        Spend includes the events and live reservations of the datasets linked to this one
        (``linked_events`` counts those events); ``linked`` lists those datasets with their own
        budget and remaining, ``remaining_effective`` is the least remaining epsilon over this
        dataset's and the linked budgets (each at its own delta) and ``limited_by`` the digest
        it comes from; ``budget_changes`` lists every budget change (:meth:`budget_changes`).
        Every epsilon is converted with its budget's conversion (``budget["conversion"]``; each
        linked dataset's with its own)."""
        _, _, eps_from_rdp = _accountant()
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            budget = self._budget(conn, digest)
            cache: dict = {}
            events, live = self._view(conn, digest, None, cache)
            names = dict(self._block_rows(conn, digest))
            infos = self._reservation_infos(conn, digest, live_only=False)
            name = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()[0]
            aliases = self._aliases(conn, digest)
            runs = conn.execute("SELECT count(DISTINCT run_id) FROM events WHERE dataset=?",
                                (digest,)).fetchone()[0]
            records = conn.execute("SELECT num_records FROM identities WHERE dataset=?",
                                   (digest,)).fetchone()
            linked = []
            for other, shared in self._linked(conn, digest):
                other_budget = self._budget(conn, other)
                other_events, other_live = self._view(conn, other, None, cache)
                both = other_events + other_live
                reserved = None if other_budget is None else (
                    self._worst_eps(conn, other, both, other_budget) if both else 0.0)
                linked.append({
                    "dataset": other, "shared_records": shared,
                    "name": conn.execute("SELECT name FROM datasets WHERE digest=?",
                                         (other,)).fetchone()[0],
                    "budget": None if other_budget is None else dataclasses.asdict(other_budget),
                    "events": sum(1 for it in other_events if it.via is None),
                    "live_reservations": sum(1 for it in other_live if it.via is None),
                    "spent_and_reserved": reserved,
                    "remaining": None if reserved is None else max(0.0, other_budget.eps - reserved)})
        delta = budget.delta if budget else None
        conversion = budget.conversion if budget else "classic"
        dd_basis = bool(budget and budget.data_dependent)
        own = [it for it in events if it.via is None]
        out: dict[str, Any] = {
            "dataset": digest, "name": name, "aliases": aliases, "ledger": str(self.path),
            "records": None if records is None else int(records[0]),
            "budget": None if budget is None else dataclasses.asdict(budget),
            "events": len(own), "linked_events": len(events) - len(own), "runs": runs,
        }
        all_items = events + live
        grid = _shared_grid([it.event for it in all_items], self.path) if all_items else None
        out["orders"] = None if grid is None else {"count": int(grid.size), "min": float(grid.min()),
                                                   "max": float(grid.max())}

        def eps_of(items, data_dependent):
            if not items or delta is None:
                return 0.0 if not items else None
            return float(eps_from_rdp(self._compose(items, grid, data_dependent), orders=grid,
                                      delta=delta, conversion=conversion)[0])

        blocks = []
        worst = {"spent": 0.0, "spent_data_independent": 0.0, "spent_data_dependent": 0.0,
                 "spent_and_reserved": 0.0}
        for block, _ in self._scopes(all_items, names, None):
            scoped_events = [it for it in events if block is None or not it.blocks or block in it.blocks]
            scoped_live = [it for it in live if block is None or not it.blocks or block in it.blocks]
            row = {"block": None if block is None else names[block],
                   "events": len(scoped_events),
                   "spent_data_independent": eps_of(scoped_events, False),
                   "spent_data_dependent": eps_of(scoped_events, True),
                   "spent_and_reserved": eps_of(scoped_events + scoped_live, dd_basis)}
            row["spent"] = row["spent_data_dependent" if dd_basis else "spent_data_independent"]
            for key in worst:
                if row[key] is not None and worst[key] is not None:
                    worst[key] = max(worst[key], row[key])
                else:
                    worst[key] = None
            blocks.append(row)
        out.update(worst)
        out["remaining"] = None if budget is None or worst["spent_and_reserved"] is None else \
            max(0.0, budget.eps - worst["spent_and_reserved"])
        out["blocks"] = blocks if names else []
        out["reservations"] = [
            {"id": r.id, "run_id": r.run_id, "status": r.status, "pid": r.pid, "hostname": r.hostname,
             "created_utc": r.created_utc, "heartbeat_utc": r.heartbeat_utc,
             "blocks": list(r.blocks),
             "eps_alone": None if delta is None else float(
                 eps_from_rdp(r.rdp, orders=r.orders, delta=delta, conversion=conversion)[0])}
            for r in infos if r.status in ("active", "stale")]
        out["linked"] = linked
        candidates = ([(out["remaining"], digest)] if out["remaining"] is not None else []) + \
            [(row["remaining"], row["dataset"]) for row in linked if row["remaining"] is not None]
        least = min(candidates, default=None)
        out["remaining_effective"] = None if least is None else least[0]
        out["limited_by"] = None if least is None else least[1]
        out["budget_changes"] = self.budget_changes(digest)
        return out

    def history(self, dataset: str) -> list[dict]:
        """One row per event, oldest first: run, time, mechanism, queries, answered, blocks, the
        event's own epsilon and the cumulative epsilon (worst block) after it, both on the budget's
        basis at the budget's delta with the budget's conversion (epsilons are ``None`` when no
        budget is set).

        Events of linked datasets (sharing records with this one) are listed too, with their
        ``dataset`` digest and ``linked: True``; they count in every block."""
        _, _, eps_from_rdp = _accountant()
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            budget = self._budget(conn, digest)
            stored = self._stored_events(conn, digest)
            for other, _ in self._linked(conn, digest):
                stored += self._stored_events(conn, other)
            names = dict(self._block_rows(conn, digest))
        stored.sort(key=lambda s: s.id)
        rows = [{"id": s.id, "dataset": s.dataset, "linked": s.dataset != digest, "run_id": s.run_id,
                 "time_utc": s.time_utc, "mechanism": s.event.mechanism,
                 "params": s.event.params, "queries": int(s.event.queries),
                 "answered": int(s.event.answered),
                 "blocks": [] if s.dataset != digest else list(s.blocks), "reservation": s.reservation,
                 "eps": None, "cumulative_eps": None} for s in stored]
        if not stored or budget is None:
            return rows
        grid = _shared_grid([s.event for s in stored], self.path)
        dd = budget.data_dependent
        per_event = np.stack([_restrict(s.event, grid).rdp if dd else
                              _restrict(s.event, grid).rdp_data_independent for s in stored])
        alone, _ = eps_from_rdp(per_event, orders=grid, delta=budget.delta,
                                conversion=budget.conversion)
        by_name = {n: b for b, n in names.items()}
        block_ids = [frozenset(by_name[n] for n in s.blocks) if s.dataset == digest else frozenset()
                     for s in stored]
        scopes = sorted(names) or [None]
        cumulative = np.full(len(stored), 0.0)
        for block in scopes:
            mask = np.array([block is None or not b or block in b for b in block_ids], dtype=float)
            # Prefix compositions, each one recomposed with the accountant at the points it changes.
            prefix = np.cumsum(per_event * mask[:, None], axis=0)
            eps_prefix, _ = eps_from_rdp(prefix, orders=grid, delta=budget.delta,
                                         conversion=budget.conversion)
            eps_prefix = np.where(np.cumsum(mask) > 0, eps_prefix, 0.0)
            cumulative = np.maximum(cumulative, eps_prefix)
        for row, a, c in zip(rows, np.atleast_1d(alone), cumulative):
            row["eps"], row["cumulative_eps"] = float(a), float(c)
        return rows

    def audit_log(self, dataset: str) -> list[dict]:
        """Budget changes, registrations, record links, block registrations and reservation
        expiries/releases, oldest first."""
        with self._txn(write=False) as conn:
            digest = self._resolve(conn, dataset)
            rows = conn.execute("SELECT time_utc, action, detail FROM audit WHERE dataset=? ORDER BY id",
                                (digest,)).fetchall()
        return [{"time_utc": t, "action": a, "detail": json.loads(d)} for t, a, d in rows]


class Reservation:
    """A live upper bound on one run's spend (see :meth:`Ledger.reserve`).

    Use it as a context manager: leaving the block without ``commit`` releases it (also on an
    exception). ``prior_rdp(orders)`` is what the run's online aggregator must add its own cost to.
    """

    def __init__(self, ledger: Ledger, rid: str, dataset: str, run_id: str, orders: np.ndarray,
                 rdp: np.ndarray, blocks: tuple[str, ...]) -> None:
        self.ledger = ledger
        self.id = rid
        self.dataset = dataset
        self.run_id = run_id
        self.orders = orders
        self.rdp = rdp
        self.blocks = blocks
        self.closed = False

    def __repr__(self) -> str:
        return f"Reservation(id={self.id!r}, run_id={self.run_id!r}, dataset={self.dataset[:12]!r})"

    @property
    def budget(self) -> Budget | None:
        return self.ledger.budget(self.dataset)

    def prior_rdp(self, orders: Any = None) -> np.ndarray:
        """RDP already spent or reserved by *others* in this run's blocks (element-wise max over
        blocks) at ``orders`` (default: the reservation's orders)."""
        return self.ledger.prior_rdp(self.dataset, orders=self.orders if orders is None else orders,
                                     blocks=list(self.blocks) or None, exclude_reservation=self.id)

    def constraints(self, orders: Any = None) -> list[dict]:
        """Every budget this run must stay within (:meth:`Ledger.constraints`), others' spend as
        prior, at ``orders`` (default: the reservation's orders)."""
        return self.ledger.constraints(self.dataset, orders=self.orders if orders is None else orders,
                                       blocks=list(self.blocks) or None, exclude_reservation=self.id)

    def heartbeat(self) -> None:
        """Renew the lease (only needed for runs that other hosts might otherwise reclaim)."""
        self.ledger._heartbeat(self.id)

    def commit(self, events: Sequence[Any]) -> list[int]:
        """Record the run's realised ``events`` and release the rest of the reservation, atomically.
        Spend within the reservation always fits; beyond it, it must fit the remaining budget or
        ``BudgetExceededError`` is raised, nothing is recorded and the reservation stays live.
        Release answers only after this returns."""
        if self.closed:
            raise LedgerError(f"reservation {self.id} is already closed; reserve again for more spend")
        events = _check_events(events)
        ids = self.ledger._commit_reservation(self, events)
        self.closed = True
        return ids

    def release(self) -> None:
        """Give the whole reservation back (nothing spent)."""
        if not self.closed:
            self.ledger.release(self.id)
            self.closed = True

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.closed:
            with contextlib.suppress(LedgerError):
                self.release()


# --------------------------------------------------------------------------------------------
# validation and conversion
# --------------------------------------------------------------------------------------------

def _uri_path(path: pathlib.Path) -> str:
    from urllib.parse import quote
    return quote(str(path.absolute()), safe="/")


def _check_digest(digest: Any) -> str:
    if not isinstance(digest, str) or not _is_digest(digest.strip().lower()):
        raise ValueError(f"digest must be a 64-character sha256 hex string, got {digest!r}; print "
                         "the one `pate run` uses with `pate budget digest --config CONFIG` (or "
                         "compute pate.ledger.dataset_identity(x, y).digest)")
    return digest.strip().lower()


def _check_name(name: Any, what: str) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > 200:
        raise ValueError(f"{what} must be at most 200 characters, got {len(name)}")
    return name.strip()


def _check_run_id(run_id: Any) -> str:
    if run_id is None:
        return uuid.uuid4().hex
    if not isinstance(run_id, str) or not run_id.strip():
        raise TypeError(f"run_id must be a non-empty string or None, got {run_id!r}")
    return run_id


def _check_grid(orders: Any, name: str) -> np.ndarray:
    arr = check_orders(orders, name)
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must not repeat an order")
    return arr


def _check_curve(rdp: Any, orders: np.ndarray, name: str) -> np.ndarray:
    try:
        arr = np.asarray(rdp, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of RDP values, one per order") from None
    if arr.shape != orders.shape:
        raise ValueError(f"{name} must have one value per order {orders.shape}, got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0 (or +inf) at every order, got NaN or a negative value")
    return arr


def _check_events(events: Any) -> list[Any]:
    PrivacyEvent, _, _ = _accountant()
    if isinstance(events, PrivacyEvent):
        events = [events]
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(f"events must be a list of pate.analysis.accountant.PrivacyEvent, got "
                        f"{type(events).__name__}")
    out = list(events)
    for i, e in enumerate(out):
        if not isinstance(e, PrivacyEvent):
            raise TypeError(f"events[{i}] must be an pate.analysis.accountant.PrivacyEvent, got "
                            f"{type(e).__name__}")
        orders = _check_grid(e.orders, f"events[{i}].orders")
        _check_curve(e.rdp, orders, f"events[{i}].rdp")
        _check_curve(e.rdp_data_independent, orders, f"events[{i}].rdp_data_independent")
        q = check_int(e.queries, f"events[{i}].queries", minimum=0)
        a = check_int(e.answered, f"events[{i}].answered", minimum=0)
        if a > q:
            raise ValueError(f"events[{i}].answered ({a}) must not exceed queries ({q})")
        try:
            _event_payload(e)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"events[{i}].params must be JSON-serialisable: {exc}") from None
    return out


def _event_payload(e: Any) -> str:
    return _canonical({
        "mechanism": str(e.mechanism), "params": e.params,
        "orders": np.asarray(e.orders, dtype=np.float64).tolist(),
        "rdp": np.asarray(e.rdp, dtype=np.float64).tolist(),
        "rdp_data_independent": np.asarray(e.rdp_data_independent, dtype=np.float64).tolist(),
        "queries": int(e.queries), "answered": int(e.answered), "relation": str(e.relation)})


def _reservation_event(orders: np.ndarray, rdp: np.ndarray, rid: str) -> Any:
    """A reservation as a PrivacyEvent, so it composes through the accountant like any event."""
    PrivacyEvent, _, _ = _accountant()
    return PrivacyEvent(mechanism="reservation", params={"reservation": rid},
                        orders=np.asarray(orders, dtype=np.float64), rdp=np.asarray(rdp, dtype=np.float64),
                        rdp_data_independent=np.asarray(rdp, dtype=np.float64), queries=0, answered=0)


def _check_relations(events: Sequence[Any], path: Any) -> None:
    """Refuse (``LedgerError``) to compose events stated for another neighbouring relation than
    the ledger's (add/remove): a sum of bounds for different relations bounds neither, and a
    replace-one bound cannot be turned into an add/remove one (the partition those events came
    from moved most records when one was added)."""
    other = [e for e in events if e.relation != LEDGER_RELATION]
    if other:
        mechanisms = sorted({e.mechanism for e in other})
        raise LedgerError(
            f"the ledger at {path} holds {len(other)} event(s) ({', '.join(mechanisms)}) on these "
            f"records that were analysed for replace-one neighbours (teacher votes recorded by a "
            f"pate-learn whose partition reshuffled the records when one was added); pate-learn "
            f"now states every guarantee for adding or removing one record, and the two cannot "
            f"be composed without understating epsilon. Nothing was recorded. Keep that ledger "
            f"for the old runs and give new runs a new ledger file (--ledger FILE, [privacy] "
            f"ledger or PATE_LEDGER)")


def _shared_grid(events: Sequence[Any], path: Any) -> np.ndarray:
    """The Renyi orders every event has (sorted); LedgerError when there is none or when the
    events are stated for another relation than the ledger's (:func:`_check_relations`)."""
    if not events:
        raise LedgerError("internal: no events to compose")
    _check_relations(events, path)
    common = set(np.asarray(events[0].orders, dtype=np.float64).tolist())
    for e in events[1:]:
        common &= set(np.asarray(e.orders, dtype=np.float64).tolist())
    if not common:
        raise LedgerError(
            f"the events of this dataset in the ledger at {path} share no Renyi order, so they "
            "cannot be composed without understating epsilon; record events on a common order grid "
            "(e.g. analysis.DEFAULT_ORDERS)")
    return np.array(sorted(common), dtype=np.float64)


def _restrict(event: Any, grid: np.ndarray) -> Any:
    """``event`` with its RDP curves restricted to the orders of ``grid`` (all present)."""
    orders = np.asarray(event.orders, dtype=np.float64)
    if orders.shape == grid.shape and np.array_equal(orders, grid):
        return event
    return event.on_orders(grid)
