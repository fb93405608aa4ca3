"""A persistent privacy-budget ledger: every run's spend of a sensitive dataset, never overspent.

Per sensitive dataset the ledger keeps the **events** each run spent
(:class:`pate.analysis.accountant.PrivacyEvent`) -- never just a final epsilon -- and recomposes
totals with :class:`pate.analysis.accountant.RdpAccountant` and :func:`analysis.eps_from_rdp`
whenever they are needed. docs/ledger.md states its accounting rules and describes every name of
``__all__``; ``pate.ledger`` is the only import callers need.

Modules (each imports only modules listed after it):
``ledger``           ``Ledger`` and ``Reservation``: argument checks, one transaction per call.
``validation``       checks of caller input.
``summaries``        ``summary`` and ``history``.
``spending``         reserve, mark drawn, charge, commit, forfeit, release, expire.
``budget_checks``    whether new spend fits every budget it touches; setting a budget; its changes.
``composition``      shared orders, composition per block, prior RDP, epsilon on a budget.
``recorded_spend``   events and reservations as stored and read back; process liveness.
``dataset_registry`` resolving and registering datasets; names, records, links, blocks, ``Budget``.
``ledger_file``      the file: schema, opening and checks, transactions, text formats, audit rows.
``keying``           the ledger's secret (its key file), keyed record keys and dataset ids.
``identity``         record and unit keys, ``dataset_digest``, ``DatasetIdentity``, ``private_identity``.
"""

from pate.ledger.dataset_registry import CONVERSIONS, Budget
from pate.ledger.identity import (
    DatasetIdentity,
    dataset_digest,
    dataset_identity,
    identity_note,
    private_identity,
    record_keys,
    unit_identity,
)
from pate.ledger.ledger import DEFAULT_LEASE_SECONDS, Ledger, Reservation
from pate.ledger.ledger_file import DEFAULT_TIMEOUT_SECONDS, SCHEMA_VERSION, default_ledger_path
from pate.ledger.recorded_spend import ReservationInfo, StoredEvent

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
    "identity_note",
    "private_identity",
    "record_keys",
    "unit_identity",
]
