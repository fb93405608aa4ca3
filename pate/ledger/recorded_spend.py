"""Reading spend back: the committed events and live reservations of a dataset (each checked
against its checksum), what counts against a dataset's budget -- its own items and those of
every dataset linked to it -- and the ``StoredEvent`` / ``ReservationInfo`` reports of them, and
``Item``: one thing that counts against a budget."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

import numpy as np

from pate.ledger.blocks import block_rows
from pate.ledger.dataset_registry import linked_pairs
from pate.ledger.events import load_curve, load_event, reservation_event
from pate.ledger.formats import utc_from_unix
from pate.ledger.ledger_file import LedgerFile
from pate.ledger.liveness import is_stale


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


def load_items(
    ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str, *, exclude: str | None = None
) -> tuple[list[Item], list[Item]]:
    """(committed events and drawn reservations -- spent --, live reservations) of a dataset,
    without reservation ``exclude``."""
    links: dict[int, set[int]] = {}
    for ev, blk in conn.execute(
        "SELECT eb.event, eb.block FROM event_blocks eb JOIN events e "
        "ON e.id = eb.event WHERE e.dataset=?",
        (digest,),
    ):
        links.setdefault(ev, set()).add(blk)
    events = [
        Item(load_event(r, ledger_file.path), frozenset(links.get(r[0], ())))
        for r in conn.execute(
            "SELECT id, payload, sha256 FROM events WHERE dataset=? ORDER BY id", (digest,)
        )
    ]
    res_links: dict[str, set[int]] = {}
    for rid, blk in conn.execute(
        "SELECT rb.reservation, rb.block FROM reservation_blocks rb "
        "JOIN reservations r ON r.id = rb.reservation "
        "WHERE r.dataset=? AND r.status IN ('active', 'drawn')",
        (digest,),
    ):
        res_links.setdefault(rid, set()).add(blk)
    live: list[Item] = []
    for row in conn.execute(
        "SELECT id, payload, sha256, pid, process_token, hostname, heartbeat, "
        "lease_seconds, status FROM reservations WHERE dataset=? "
        "AND status IN ('active', 'drawn') ORDER BY created_utc",
        (digest,),
    ):
        drawn = row[8] == "drawn"  # noise drawn inside it: spent, whatever became of its run
        if row[0] == exclude or (
            not drawn
            and is_stale(row[3], row[4], row[5], row[6], row[7], here=ledger_file.hostname)
        ):
            continue
        orders, rdp = load_curve(row[0], row[1], row[2], ledger_file.path)
        item = Item(
            reservation_event(orders, rdp, row[0]),
            frozenset(res_links.get(row[0], ())),
            reservation=row[0],
        )
        (events if drawn else live).append(item)
    return events, live


#: (events, live reservations) of each dataset already read, by digest (:func:`view`)
ViewCache = dict[str, tuple[list[Item], list[Item]]]


def view(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    exclude: str | None = None,
    cache: ViewCache | None = None,
) -> tuple[list[Item], list[Item]]:
    """(events, live reservations) that count against ``digest``: its own (with their blocks)
    and those of every dataset linked to it (each charged to every block: ``blocks`` empty)."""
    cache = {} if cache is None else cache

    def raw(d: str) -> tuple[list[Item], list[Item]]:
        if d not in cache:
            cache[d] = load_items(ledger_file, conn, d, exclude=exclude)
        return cache[d]

    own_events, own_live = raw(digest)
    events, live = list(own_events), list(own_live)
    for other, _ in linked_pairs(conn, digest):
        linked_events, linked_live = raw(other)
        events += [Item(it.event, frozenset(), it.reservation, other) for it in linked_events]
        live += [Item(it.event, frozenset(), it.reservation, other) for it in linked_live]
    return events, live


def stored_events(
    ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str, run_id: str | None = None
) -> list[StoredEvent]:
    """The recorded events of ``digest`` (optionally one run's), oldest first."""
    names = dict(block_rows(conn, digest))
    links: dict[int, list[str]] = {}
    for ev, blk in conn.execute(
        "SELECT eb.event, eb.block FROM event_blocks eb JOIN events e "
        "ON e.id = eb.event WHERE e.dataset=? ORDER BY eb.block",
        (digest,),
    ):
        links.setdefault(ev, []).append(names[blk])
    sql = "SELECT id, payload, sha256, run_id, created_utc, reservation FROM events WHERE dataset=?"
    params: tuple[str, ...] = (digest,)
    if run_id is not None:
        sql += " AND run_id=?"
        params += (run_id,)
    return [
        StoredEvent(
            r[0],
            digest,
            r[3],
            r[4],
            tuple(links.get(r[0], ())),
            r[5],
            load_event(r, ledger_file.path),
        )
        for r in conn.execute(sql + " ORDER BY id", params)
    ]


def reservation_infos(
    ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str, live_only: bool
) -> list[ReservationInfo]:
    """The reservations of ``digest`` (those that count against the budget -- active and drawn
    -- only, or all), oldest first; an active one whose process is dead reads as ``"stale"``."""
    names = dict(block_rows(conn, digest))
    links: dict[str, list[str]] = {}
    for rid, blk in conn.execute(
        "SELECT rb.reservation, rb.block FROM reservation_blocks rb "
        "JOIN reservations r ON r.id = rb.reservation WHERE r.dataset=? "
        "ORDER BY rb.block",
        (digest,),
    ):
        links.setdefault(rid, []).append(names[blk])
    out = []
    for r in conn.execute(
        "SELECT id, run_id, payload, sha256, pid, process_token, hostname, "
        "created_utc, heartbeat, lease_seconds, status, closed_utc "
        "FROM reservations WHERE dataset=? ORDER BY created_utc",
        (digest,),
    ):
        status = r[10]
        if status == "active" and is_stale(r[4], r[5], r[6], r[8], r[9], here=ledger_file.hostname):
            status = "stale"
        if live_only and status not in ("active", "drawn"):
            continue
        orders, rdp = load_curve(r[0], r[2], r[3], ledger_file.path)
        out.append(
            ReservationInfo(
                r[0],
                digest,
                r[1],
                orders,
                rdp,
                tuple(links.get(r[0], ())),
                r[4],
                r[6],
                r[7],
                utc_from_unix(r[8]),
                r[9],
                status,
                r[11],
            )
        )
    return out
