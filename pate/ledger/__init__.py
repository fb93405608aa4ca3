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
* **One neighbouring relation: add or remove one record.** Every budget is a promise for that
  relation (``datasets.relation``, ``Budget.relation``) and every event states the relation its
  bound is for (``PrivacyEvent.relation``, in the stored payload). The ledger composes only
  add/remove events: an event stated for replace-one makes every charge, reservation, prior and
  summary touching its dataset fail with a ``LedgerError`` (a sum of bounds for different
  relations bounds neither); a stored event without a relation is refused as malformed, never
  given one.
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
  or reused) or whose lease expired (another host) is marked ``expired`` by the next writer --
  unless it is ``drawn``: a run marks its reservation drawn before drawing any noise inside it,
  and from then on it counts as spent (everywhere committed events count) and is never
  reclaimed; only its commit or forfeit closes it. A crash can lose budget, never leave answers
  uncharged.
* Keying (``keying``): every ledger has a 32-byte secret from ``os.urandom`` in its key file
  ``<ledger>.key`` (0600, created with the ledger). Record keys are stored as HMAC-SHA256(secret,
  key)[:16] and a dataset's id is HMAC-SHA256(secret, tag + its digest), so the ledger file alone
  is no membership oracle. A digest given by hand is keyed the same way. A ledger whose key file
  is missing (or is another ledger's) is refused; a new key is never made for an existing
  ledger. Reports name a dataset by its name, never by a digest or id.

Storage: SQLite in WAL mode, ``synchronous=FULL``, a busy timeout, ``PRAGMA user_version`` for
the schema and an application marker in table ``meta``. Every event and reservation row carries
the sha256 of its canonical JSON payload, checked on every read. A new ledger is built in a
temporary file and hard-linked into place, so a half-initialised ledger never exists. A file that
is not a ledger of this schema version is never written to: an older one (a pre-release
pate-learn's) is refused with its version named, and new runs take a new ledger file. Record keys
live in ``identities`` / ``records`` (indexed by key), overlap links in ``links``. A dataset's
later names live in ``dataset_names`` (its first stays in ``datasets.name``).

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
