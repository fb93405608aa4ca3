"""Spend as the ledger stores it and reads it back: an event as the canonical JSON of its
``to_dict()`` with its sha256, a reservation's upper-bound curve read back as an event (so it
composes like one); each checksum is checked on every read (``LedgerError``, the file left
untouched). A dataset's spend reads as ``StoredEvent`` / ``ReservationInfo``, and counts against
budgets as ``Item``: its own and that of every dataset linked to it.

A reservation counts while its process can still commit it: on its own host the process is
checked directly (gone, a zombie, or its pid reused: dead); one of another host is live until its
lease runs out after its last heartbeat. Unsure means alive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.core.errors import LedgerError
from pate.ledger.dataset_registry import block_names, linked_pairs
from pate.ledger.ledger_file import LedgerConnection, sha256_text, utc_from_unix


@dataclasses.dataclass(frozen=True)
class StoredEvent:
    """A ``PrivacyEvent`` as recorded: row ``id``, ``dataset`` digest, ``run_id``, ``time_utc``,
    ``blocks`` (names; empty = charged to the whole dataset), the ``reservation`` it was
    committed under and the ``event`` itself."""

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
    """One thing that counts against a budget: an event or a live reservation."""

    event: Any  # PrivacyEvent
    blocks: frozenset[int]  # empty = the whole dataset (every block)
    reservation: str | None = None
    via: str | None = None  # the linked dataset it was recorded on (None: this dataset's own)


def reservation_event(
    orders: np.ndarray, rdp: np.ndarray, rid: str, mechanism: str = "reservation"
) -> PrivacyEvent:
    """Reservation ``rid``'s bound ``rdp`` at ``orders`` as a ``PrivacyEvent`` of ``mechanism``
    (nothing answered), so it composes through the accountant like any event."""
    return PrivacyEvent(mechanism, {"reservation": rid}, orders, rdp, rdp, queries=0, answered=0)


def checked_payload(conn: LedgerConnection, what: str, payload: str, checksum: str) -> Any:
    """The JSON ``payload`` of ``what`` (an event or a reservation), its checksum verified."""
    if sha256_text(payload) != checksum:
        raise LedgerError(
            f"{what} in the ledger at {conn.path} fails its checksum "
            "(the file was altered or damaged); the ledger was left untouched -- "
            "restore it from a backup"
        )
    return json.loads(payload)


def load_event(conn: LedgerConnection, event_id: int, payload: str, checksum: str) -> Any:
    """The ``PrivacyEvent`` of event row ``event_id``, its checksum verified."""
    try:
        return PrivacyEvent.from_dict(checked_payload(conn, f"event {event_id}", payload, checksum))
    except (ValueError, TypeError) as exc:  # e.g. no relation: never guessed
        raise LedgerError(
            f"event {event_id} in the ledger at {conn.path} is malformed ({exc}); the ledger was "
            "left untouched -- restore it from a backup"
        ) from None


def load_curve(
    conn: LedgerConnection, rid: str, payload: str, checksum: str
) -> tuple[np.ndarray, np.ndarray]:
    """(orders, rdp) of reservation ``rid``, its checksum verified."""
    d = checked_payload(conn, f"reservation {rid}", payload, checksum)
    return np.asarray(d["orders"], dtype=np.float64), np.asarray(d["rdp"], dtype=np.float64)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a Linux process, or None where /proc can't tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return (fields[0], fields[19]) if len(fields) >= 20 else None


def process_token(pid: int) -> str | None:
    """The start time of process ``pid`` (told apart from a later process given the same pid)."""
    info = _proc_stat(pid)
    return None if info is None else info[1]


def process_alive(pid: int, token: str | None) -> bool:
    """Whether process ``pid`` (started at ``token``) still runs on this host; unsure: True."""
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
    # a zombie or dead process will never commit; another start time: the pid was reused
    return state not in ("Z", "X") and (token is None or start == token)


def is_stale(conn: LedgerConnection, holder: Iterable[Any]) -> bool:
    """Whether the reservation held by ``holder`` -- its (pid, process token, hostname,
    heartbeat, lease seconds) -- is dead as seen from this host."""
    pid, token, hostname, heartbeat, lease = holder
    if hostname == conn.hostname:
        return not process_alive(int(pid), token)
    return bool(time.time() > heartbeat + lease)


#: the columns of a reservation's holder, as :func:`is_stale` reads them
HOLDER_COLUMNS = "pid, process_token, hostname, heartbeat, lease_seconds"


def _block_names_of(conn: LedgerConnection, digest: str, owner: str) -> dict[Any, list[str]]:
    """The block names of every event (``owner="event"``) or reservation of ``digest``."""
    names = block_names(conn, digest)
    out: dict[Any, list[str]] = {}
    for key, block in conn.execute(
        f"SELECT l.{owner}, l.block FROM {owner}_blocks l JOIN {owner}s t ON t.id = l.{owner} "
        "WHERE t.dataset=? ORDER BY l.block",
        (digest,),
    ):
        out.setdefault(key, []).append(names[block])
    return out


def stored_events(
    conn: LedgerConnection, digest: str, run_id: str | None = None
) -> list[StoredEvent]:
    """The recorded events of ``digest`` (optionally one run's), oldest first."""
    blocks = _block_names_of(conn, digest, "event")
    sql = "SELECT id, payload, sha256, run_id, created_utc, reservation FROM events WHERE dataset=?"
    params = (digest,) if run_id is None else (digest, run_id)
    rows = conn.execute(sql + ("" if run_id is None else " AND run_id=?") + " ORDER BY id", params)
    return [
        StoredEvent(
            r[0], digest, r[3], r[4], tuple(blocks.get(r[0], ())), r[5], load_event(conn, *r[:3])
        )
        for r in rows.fetchall()
    ]


def reservation_infos(
    conn: LedgerConnection, digest: str, live_only: bool
) -> list[ReservationInfo]:
    """The reservations of ``digest`` (those that count against the budget -- active and drawn
    -- only, or all), oldest first; an active one whose process is dead reads as ``"stale"``."""
    blocks = _block_names_of(conn, digest, "reservation")
    out = []
    for r in conn.execute(
        f"SELECT id, run_id, payload, sha256, {HOLDER_COLUMNS}, created_utc, status, closed_utc "
        "FROM reservations WHERE dataset=? ORDER BY created_utc",
        (digest,),
    ).fetchall():
        status = "stale" if r[10] == "active" and is_stale(conn, r[4:9]) else r[10]
        if live_only and status not in ("active", "drawn"):
            continue
        orders, rdp = load_curve(conn, r[0], r[2], r[3])
        info = (r[0], digest, r[1], orders, rdp, tuple(blocks.get(r[0], ())), r[4], r[6], r[9])
        out.append(ReservationInfo(*info, utc_from_unix(r[7]), r[8], status, r[11]))
    return out


def load_items(
    conn: LedgerConnection, digest: str, exclude: str | None = None
) -> tuple[list[Item], list[Item]]:
    """(committed events and drawn reservations -- spent --, live reservations) of a dataset,
    without reservation ``exclude``."""
    ids = {name: bid for bid, name in block_names(conn, digest).items()}
    events = [
        Item(s.event, frozenset(ids[b] for b in s.blocks)) for s in stored_events(conn, digest)
    ]
    live: list[Item] = []
    for r in reservation_infos(conn, digest, live_only=True):
        if r.id != exclude:
            event = reservation_event(r.orders, r.rdp, r.id)
            item = Item(event, frozenset(ids[b] for b in r.blocks), reservation=r.id)
            (events if r.status == "drawn" else live).append(item)
    return events, live


#: (events, live reservations) of each dataset already read, by digest (:func:`view`)
ViewCache = dict[str, tuple[list[Item], list[Item]]]


def view(
    conn: LedgerConnection,
    digest: str,
    exclude: str | None = None,
    cache: ViewCache | None = None,
) -> tuple[list[Item], list[Item]]:
    """(events, live reservations) that count against ``digest``: its own (with their blocks)
    and those of every dataset linked to it (each charged to every block: ``blocks`` empty)."""
    cache = {} if cache is None else cache
    for d in [digest] + [other for other, _ in linked_pairs(conn, digest)]:
        if d not in cache:
            cache[d] = load_items(conn, d, exclude)
    events, live = list(cache[digest][0]), list(cache[digest][1])
    for other, _ in linked_pairs(conn, digest):
        events += [Item(it.event, frozenset(), it.reservation, other) for it in cache[other][0]]
        live += [Item(it.event, frozenset(), it.reservation, other) for it in cache[other][1]]
    return events, live
