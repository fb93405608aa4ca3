"""A persistent privacy-budget ledger: every run's spend of a sensitive dataset, never overspent.

Without a ledger the total privacy cost of relabelling, adding queries and training new students
is invisible. This package keeps, per sensitive dataset, the **events** each run spent
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
    ``dataset_id(identity)`` is the id the ledger keeps those records under (keyed with the
    ledger's secret: see "Keying" below);
    ``reserve`` / ``charge`` spend; ``prior_rdp`` / ``constraints`` tell an online run what is
    already spent against each budget it is bound by; ``summary`` / ``history`` /
    ``budget_changes`` / ``audit_log`` / ``linked`` / ``overlapping`` report; ``link(a, b)``
    declares by hand that two datasets share records (e.g. one budgeted under an id digest).
``Reservation``
    An upper bound on what one run may spend, held while the run works; ``mark_drawn()`` (before
    any noise is drawn inside it) makes it spent and never reclaimed; ``commit(events)`` turns it
    into events and releases the rest; ``release()`` gives a live one back
    (``Ledger.commit(id, events)`` / ``Ledger.forfeit(id)`` close a drawn one after a crash).
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
    against CHW images), a changed label.
``DatasetIdentity``
    ``(digest, record_keys, num_records)`` of a dataset: what the ledger knows it by.
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
    The ``PRAGMA user_version`` this code reads and writes (4); a file of any other version is
    refused with a ``LedgerError`` naming both versions, never converted.
``CONVERSIONS``
    ``("classic", "tight")``: the conversions a budget may be judged with.

Accounting rules
----------------
docs/ledger.md states them: one neighbouring relation (add or remove one record; an event of
another is never composed, a stored event without one is refused as malformed), spend judged on
the data-independent RDP unless a budget opts in, each budget's own RDP -> (eps, delta)
conversion, composition on the Renyi orders every event shares, Sage blocks (the loss is the max
over blocks), overlapping datasets linked by shared record keys (a charge counts against every
dataset it touches), budget changes kept in the audit log, the reservation protocol (drawn
reservations are spent, never reclaimed), the keyed ids (``keying``) and the storage (SQLite,
WAL, checksummed payloads, ``SCHEMA_VERSION`` only: any other version is refused, named).

Modules
-------
The package is split along the ledger's seams; every name above is importable from
``pate.ledger`` itself, which is the only import callers need. Within the package the modules
import each other one way (no cycles), from ``ledger`` down to ``formats``.

``ledger``           ``Ledger`` and ``Reservation``: argument checks, one transaction per call.
``ledger_file``      the file and its connection: creation, opening, schema and key checks,
                     transactions (``LedgerFile``).
``schema``           the DDL and the version check (``SCHEMA_VERSION``).
``names``            a dataset's first and later names (table ``dataset_names``).
``identity``         record keys, ``dataset_digest``, ``DatasetIdentity`` / ``dataset_identity``.
``keying``           the ledger's secret (its key file) and the keyed record keys and dataset ids.
``dataset_registry`` resolving, registering, records, links and each dataset's budget row.
``blocks``           Sage blocks.
``events``           events and reservation curves as stored (payloads, checksums).
``recorded_spend``   committed events and live reservations read back (``StoredEvent``,
                     ``ReservationInfo``); what counts against a dataset (``Item``).
``composition``      shared orders, composition per block, prior RDP.
``budget``           a dataset's ``Budget`` and the bases, conversions and relation it takes.
``budget_checks``    whether new spend fits every budget it touches; setting a budget.
``spending``         reserve, mark drawn, charge, commit, forfeit, release, expire.
``summaries``        ``summary`` and ``history``.
``liveness``         whether a reservation's process still runs.
``audit``            the audit log.
``formats``          UTC timestamps, canonical JSON and its checksums.
``validation``       checks of caller input.
"""

from pate.ledger.budget import CONVERSIONS, Budget
from pate.ledger.identity import DatasetIdentity, dataset_digest, dataset_identity, record_keys
from pate.ledger.ledger import DEFAULT_LEASE_SECONDS, Ledger, Reservation
from pate.ledger.ledger_file import DEFAULT_TIMEOUT_SECONDS, default_ledger_path
from pate.ledger.recorded_spend import ReservationInfo, StoredEvent
from pate.ledger.schema import SCHEMA_VERSION

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
