"""Plain data of the ledger: ``Budget``, ``StoredEvent``, ``ReservationInfo`` and ``Item`` (one
thing that counts against a budget), and the constants they are checked against."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pate.analysis.validation import check_choice

#: The one neighbouring relation a budget and every event composed against it are stated for.
LEDGER_RELATION = "add-remove"
BASES = ("data-independent", "data-dependent")
CONVERSIONS = ("classic", "tight")


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
    (``active``, ``drawn`` -- noise was drawn inside it: spent, never reclaimed --,
    ``committed``, ``released`` or ``expired``; ``stale``: active, its process gone)."""

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
class Item:
    """One thing that counts against the budget: an event or a live reservation."""

    event: Any  # PrivacyEvent
    blocks: frozenset[int]  # empty = the whole dataset (every block)
    reservation: str | None = None
    via: str | None = None  # the linked dataset it was recorded on (None: this dataset's own)
