"""Spending: reserve, charge, commit, mark drawn, forfeit, release and expire reservations, each
inside the caller's write transaction (``BEGIN IMMEDIATE``): the budget check and the write it
allows are one atomic step across processes.

The reservation protocol is docs/ledger.md's: ``commit`` re-checks with the realised events in
place of the bound, so spend within a reservation always commits and nothing can overspend; a
``drawn`` reservation (:func:`mark_drawn`) is spent and never reclaimed, only its commit or its
forfeit (its whole bound as an event) closes it.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import numpy as np

from pate.analysis.errors import InputError
from pate.core.errors import LedgerError
from pate.ledger.budget_checks import check_fits
from pate.ledger.dataset_registry import block_names, linked_pairs
from pate.ledger.ledger_file import LedgerConnection, canonical, sha256_text, utc_now, write_audit
from pate.ledger.recorded_spend import (
    HOLDER_COLUMNS,
    Item,
    is_stale,
    load_curve,
    process_token,
    reservation_event,
)


def reconcile(conn: LedgerConnection, digests: list[str] | None) -> list[str]:
    """Mark the live reservations (of ``digests``; None: of every dataset) whose process is dead
    ``expired``; returns their ids."""
    rows = conn.execute(
        f"SELECT id, dataset, run_id, {HOLDER_COLUMNS} FROM reservations WHERE status='active'"
    ).fetchall()
    expired = []
    for rid, ds, run_id, *holder in rows:
        if (digests is None or ds in digests) and is_stale(conn, holder):
            conn.execute(
                "UPDATE reservations SET status='expired', closed_utc=? WHERE id=?",
                (utc_now(), rid),
            )
            pid, host = holder[0], holder[2]
            reason = "process gone" if host == conn.hostname else "lease expired"
            detail = {"reservation": rid, "run_id": run_id, "pid": pid, "hostname": host}
            write_audit(conn, ds, "expire-reservation", detail | {"reason": reason})
            expired.append(rid)
    return expired


def reconcile_group(conn: LedgerConnection, digest: str) -> None:
    """:func:`reconcile` ``digest`` and every dataset linked to it (every write does this first)."""
    reconcile(conn, [digest] + [other for other, _ in linked_pairs(conn, digest)])


def reserve(
    conn: LedgerConnection,
    digest: str,
    target: frozenset[int],
    curve: tuple[np.ndarray, np.ndarray],
    run_id: str,
    lease: float,
) -> tuple[str, tuple[str, ...]]:
    """Check and record a reservation of ``curve`` (orders, RDP) on the ``target`` blocks of
    ``digest``; returns its id and the names of its blocks."""
    rid, pid = uuid.uuid4().hex, os.getpid()
    orders, rdp = curve
    payload = canonical({"orders": orders.tolist(), "rdp": rdp.tolist()})
    reconcile_group(conn, digest)
    item = Item(reservation_event(orders, rdp, rid), target)
    check_fits(conn, digest, [item], target, exclude=None, what=f"reserving for run {run_id}")
    conn.execute(
        "INSERT INTO reservations (id, dataset, run_id, payload, sha256, created_utc, status, "
        f"{HOLDER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?)",
        (rid, digest, run_id, payload, sha256_text(payload), utc_now())
        + (pid, process_token(pid), conn.hostname, time.time(), lease),
    )
    conn.executemany("INSERT INTO reservation_blocks VALUES (?, ?)", [(rid, b) for b in target])
    return rid, tuple(n for b, n in block_names(conn, digest).items() if b in target)


def record(
    conn: LedgerConnection,
    digest: str,
    events: list[Any],
    target: frozenset[int],
    run_id: str,
    reservation: str | None,
) -> list[int]:
    """Check ``events`` (against everything but ``reservation``, whose bound they replace) and
    record them on the ``target`` blocks of ``digest``; returns their ids."""
    if events:
        what = f"charging {len(events)} event(s) of run {run_id}"
        new = [Item(e, target) for e in events]
        check_fits(conn, digest, new, target, exclude=reservation, what=what)
    ids, now = [], utc_now()
    for e in events:
        payload = canonical(e.to_dict())
        cur = conn.execute(
            "INSERT INTO events (dataset, run_id, created_utc, reservation, "
            "mechanism, queries, answered, payload, sha256) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (digest, run_id, now, reservation, e.mechanism, int(e.queries), int(e.answered))
            + (payload, sha256_text(payload)),
        )
        if cur.lastrowid is None:  # sqlite3 sets it after every INSERT
            raise LedgerError(f"the ledger did not return the id of an event of {digest}")
        ids.append(cur.lastrowid)
        conn.executemany(
            "INSERT INTO event_blocks VALUES (?, ?)", [(cur.lastrowid, b) for b in target]
        )
    return ids


def commit(conn: LedgerConnection, rid: str, events: list[Any]) -> list[int]:
    """Record the realised ``events`` of reservation ``rid`` (live or drawn) and close it as
    committed."""
    row = conn.execute(
        "SELECT status, dataset, run_id FROM reservations WHERE id=?", (rid,)
    ).fetchone()
    if row is None:
        raise LedgerError(f"reservation {rid} is not in the ledger at {conn.path}")
    status, digest, run_id = row
    if status == "committed":
        raise LedgerError(f"reservation {rid} was already committed; reserve again for more spend")
    reconcile_group(conn, digest)
    blocks = conn.execute("SELECT block FROM reservation_blocks WHERE reservation=?", (rid,))
    ids = record(conn, digest, events, frozenset(r[0] for r in blocks), run_id, rid)
    conn.execute(
        "UPDATE reservations SET status='committed', closed_utc=? WHERE id=?", (utc_now(), rid)
    )
    return ids


def mark_drawn(conn: LedgerConnection, rid: str) -> None:
    """Mark live reservation ``rid`` drawn, before its run draws any noise inside it: from now
    on its whole bound counts as spent, whatever happens to the process (``LedgerError`` when it
    is no longer live: then nothing may be drawn under it)."""
    row = conn.execute("SELECT status, dataset FROM reservations WHERE id=?", (rid,)).fetchone()
    if row is None or row[0] != "active":
        raise LedgerError(
            f"reservation {rid} is {'not in the ledger' if row is None else row[0]} at "
            f"{conn.path}, not live: no noise may be drawn under it; reserve again"
        )
    conn.execute("UPDATE reservations SET status='drawn' WHERE id=?", (rid,))
    write_audit(conn, row[1], "draw-reservation", {"reservation": rid})


def forfeit(conn: LedgerConnection, rid: str) -> list[int]:
    """Turn drawn reservation ``rid``, whose answers are lost, into one event of its whole
    bound (mechanism ``"lost-drawn-answers"``, nothing answered): the budget stays spent and the
    history shows why. Refused while another process that holds it still runs."""
    row = conn.execute(
        f"SELECT status, payload, sha256, {HOLDER_COLUMNS} FROM reservations WHERE id=?", (rid,)
    ).fetchone()
    if row is None or row[0] != "drawn":
        raise LedgerError(
            f"reservation {rid} is {'not in the ledger' if row is None else row[0]} at "
            f"{conn.path}, not drawn: only a drawn reservation is forfeited"
        )
    pid, host = row[3], row[5]
    mine = host == conn.hostname and pid == os.getpid()
    if not mine and not is_stale(conn, row[3:]):
        raise LedgerError(
            f"reservation {rid} is held by process {pid} on {host}, which still runs (it may "
            "still keep and commit its answers); nothing was forfeited. Try again when it has "
            "finished"
        )
    orders, rdp = load_curve(conn, rid, row[1], row[2])
    return commit(conn, rid, [reservation_event(orders, rdp, rid, "lost-drawn-answers")])


def release(conn: LedgerConnection, rid: str) -> bool:
    """Give back live reservation ``rid``; False if it was no longer live."""
    row = conn.execute("SELECT dataset, status FROM reservations WHERE id=?", (rid,)).fetchone()
    if row is None:
        raise InputError(
            f"reservation {rid!r} is not in the ledger at {conn.path}; "
            "list live ones with `pate budget show --dataset ...`"
        )
    if row[1] != "active":
        return False
    conn.execute(
        "UPDATE reservations SET status='released', closed_utc=? WHERE id=?", (utc_now(), rid)
    )
    write_audit(conn, row[0], "release-reservation", {"reservation": rid})
    return True


def heartbeat(conn: LedgerConnection, rid: str) -> None:
    """Renew the lease of live reservation ``rid``."""
    conn.execute(
        "UPDATE reservations SET heartbeat=? WHERE id=? AND status='active'", (time.time(), rid)
    )
