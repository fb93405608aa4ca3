"""Spending: reserving an upper bound, charging and committing events, releasing and expiring
reservations. Each runs inside the caller's write transaction (``BEGIN IMMEDIATE``), so the
budget check and the write it allows are one atomic step across processes.

Reservation protocol: ``reserve`` checks that the committed events + every live reservation + the
new upper bound fit the budget in every block the run touches, then records the reservation with
the process id, host name and a lease. ``commit`` re-checks committed events + other live
reservations + the realised events, so spend within a reservation always commits and nothing can
ever overspend. A reservation whose process is dead (same host: the pid is gone, a zombie, or
reused) or whose lease expired (another host) is marked ``expired`` by the next writer -- unless
it is ``drawn`` (:func:`mark_drawn`: its run was about to draw noise inside it): a drawn
reservation counts as spent and is never reclaimed; only its commit (the round's events) or its
forfeit (its whole bound, as an event: :func:`forfeit`) replaces it.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from typing import Any

import numpy as np

from pate.core.errors import LedgerError
from pate.ledger.audit import write_audit
from pate.ledger.blocks import block_rows
from pate.ledger.budget_checks import check_fits
from pate.ledger.dataset_registry import linked_pairs
from pate.ledger.events import accountant, event_payload, load_curve, reservation_event
from pate.ledger.formats import canonical, sha256_text, utc_now
from pate.ledger.ledger_file import LedgerFile
from pate.ledger.liveness import is_stale, process_token
from pate.ledger.recorded_spend import Item


def reconcile(ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str | None) -> list[str]:
    """Mark the live reservations (of ``digest``; None: of every dataset) whose process is dead
    ``expired``; returns their ids."""
    sql = (
        "SELECT id, dataset, run_id, pid, process_token, hostname, heartbeat, lease_seconds "
        "FROM reservations WHERE status='active'"
    )
    rows = conn.execute(
        sql + (" AND dataset=?" if digest else ""), (digest,) if digest else ()
    ).fetchall()
    expired = []
    for rid, ds, run_id, pid, token, host, beat, lease in rows:
        if is_stale(pid, token, host, beat, lease, here=ledger_file.hostname):
            conn.execute(
                "UPDATE reservations SET status='expired', closed_utc=? WHERE id=?",
                (utc_now(), rid),
            )
            write_audit(
                conn,
                ds,
                "expire-reservation",
                {
                    "reservation": rid,
                    "run_id": run_id,
                    "pid": pid,
                    "hostname": host,
                    "reason": "process gone" if host == ledger_file.hostname else "lease expired",
                },
            )
            expired.append(rid)
    return expired


def reconcile_group(ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str) -> None:
    """:func:`reconcile` ``digest`` and every dataset linked to it (every write does this first)."""
    for d in [digest] + [other for other, _ in linked_pairs(conn, digest)]:
        reconcile(ledger_file, conn, d)


def reserve(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    target: frozenset[int],
    *,
    orders: np.ndarray,
    curve: np.ndarray,
    run_id: str,
    lease: float,
) -> tuple[str, tuple[str, ...]]:
    """Check and record a reservation of ``curve`` (RDP at ``orders``) on the ``target`` blocks
    of ``digest``; returns its id and the names of its blocks."""
    rid = uuid.uuid4().hex
    payload = canonical({"orders": orders.tolist(), "rdp": curve.tolist()})
    pid = os.getpid()
    reconcile_group(ledger_file, conn, digest)
    check_fits(
        ledger_file,
        conn,
        digest,
        [Item(reservation_event(orders, curve, rid), target)],
        target,
        exclude=None,
        what=f"reserving for run {run_id}",
    )
    now = time.time()
    conn.execute(
        "INSERT INTO reservations (id, dataset, run_id, payload, sha256, pid, "
        "process_token, hostname, created_utc, heartbeat, lease_seconds, status) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')",
        (
            rid,
            digest,
            run_id,
            payload,
            sha256_text(payload),
            pid,
            process_token(pid),
            ledger_file.hostname,
            utc_now(),
            now,
            lease,
        ),
    )
    conn.executemany("INSERT INTO reservation_blocks VALUES (?, ?)", [(rid, b) for b in target])
    return rid, tuple(n for b, n in block_rows(conn, digest) if b in target)


def record(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    events: list[Any],
    target: frozenset[int],
    run_id: str,
    reservation: str | None,
) -> list[int]:
    """Check ``events`` (against everything but ``reservation``, whose bound they replace) and
    record them on the ``target`` blocks of ``digest``; returns their ids."""
    new = [Item(e, target) for e in events]
    if new:
        check_fits(
            ledger_file,
            conn,
            digest,
            new,
            target,
            exclude=reservation,
            what=f"charging {len(events)} event(s) of run {run_id}",
        )
    ids = []
    now = utc_now()
    for e in events:
        payload = event_payload(e)
        cur = conn.execute(
            "INSERT INTO events (dataset, run_id, created_utc, reservation, "
            "mechanism, queries, answered, payload, sha256) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                digest,
                run_id,
                now,
                reservation,
                e.mechanism,
                int(e.queries),
                int(e.answered),
                payload,
                sha256_text(payload),
            ),
        )
        if cur.lastrowid is None:  # sqlite3 sets it after every INSERT
            raise LedgerError(f"the ledger did not return the id of an event of {digest}")
        ids.append(cur.lastrowid)
        conn.executemany(
            "INSERT INTO event_blocks VALUES (?, ?)", [(cur.lastrowid, b) for b in target]
        )
    return ids


def commit(
    ledger_file: LedgerFile, conn: sqlite3.Connection, rid: str, events: list[Any]
) -> list[int]:
    """Record the realised ``events`` of reservation ``rid`` (live or drawn) and close it as
    committed."""
    row = conn.execute(
        "SELECT status, dataset, run_id FROM reservations WHERE id=?", (rid,)
    ).fetchone()
    if row is None:
        raise LedgerError(f"reservation {rid} is not in the ledger at {ledger_file.path}")
    status, digest, run_id = row
    if status == "committed":
        raise LedgerError(f"reservation {rid} was already committed; reserve again for more spend")
    reconcile_group(ledger_file, conn, digest)
    target = frozenset(
        r[0]
        for r in conn.execute("SELECT block FROM reservation_blocks WHERE reservation=?", (rid,))
    )
    ids = record(ledger_file, conn, digest, events, target, run_id, rid)
    conn.execute(
        "UPDATE reservations SET status='committed', closed_utc=? WHERE id=?", (utc_now(), rid)
    )
    return ids


def mark_drawn(ledger_file: LedgerFile, conn: sqlite3.Connection, rid: str) -> None:
    """Mark live reservation ``rid`` drawn, before its run draws any noise inside it: from now
    on its whole bound counts as spent, whatever happens to the process (``LedgerError`` when it
    is no longer live: then nothing may be drawn under it)."""
    row = conn.execute("SELECT status, dataset FROM reservations WHERE id=?", (rid,)).fetchone()
    if row is None or row[0] != "active":
        raise LedgerError(
            f"reservation {rid} is {'not in the ledger' if row is None else row[0]} at "
            f"{ledger_file.path}, not live: no noise may be drawn under it; reserve again"
        )
    conn.execute("UPDATE reservations SET status='drawn' WHERE id=?", (rid,))
    write_audit(conn, row[1], "draw-reservation", {"reservation": rid})


def forfeit(ledger_file: LedgerFile, conn: sqlite3.Connection, rid: str) -> list[int]:
    """Turn drawn reservation ``rid``, whose answers are lost, into one event of its whole
    bound (mechanism ``"lost-drawn-answers"``, nothing answered): the budget stays spent and the
    history shows why. Refused while another process that holds it still runs."""
    row = conn.execute(
        "SELECT status, payload, sha256, pid, process_token, hostname, heartbeat, lease_seconds "
        "FROM reservations WHERE id=?",
        (rid,),
    ).fetchone()
    if row is None or row[0] != "drawn":
        raise LedgerError(
            f"reservation {rid} is {'not in the ledger' if row is None else row[0]} at "
            f"{ledger_file.path}, not drawn: only a drawn reservation is forfeited"
        )
    pid, token, host, beat, lease = row[3:]
    mine = host == ledger_file.hostname and pid == os.getpid()
    if not mine and not is_stale(pid, token, host, beat, lease, here=ledger_file.hostname):
        raise LedgerError(
            f"reservation {rid} is held by process {pid} on {host}, which still runs (it may "
            "still keep and commit its answers); nothing was forfeited. Try again when it has "
            "finished"
        )
    orders, rdp = load_curve(rid, row[1], row[2], ledger_file.path)
    PrivacyEvent, _, _ = accountant()
    event = PrivacyEvent(
        mechanism="lost-drawn-answers",
        params={"reservation": rid},
        orders=orders,
        rdp=rdp,
        rdp_data_independent=rdp,
        queries=0,
        answered=0,
    )
    return commit(ledger_file, conn, rid, [event])


def release(ledger_file: LedgerFile, conn: sqlite3.Connection, reservation_id: str) -> bool:
    """Give back live reservation ``reservation_id``; False if it was no longer live."""
    row = conn.execute(
        "SELECT dataset, status FROM reservations WHERE id=?", (reservation_id,)
    ).fetchone()
    if row is None:
        raise ValueError(
            f"reservation {reservation_id!r} is not in the ledger at {ledger_file.path}; "
            "list live ones with `pate budget show --dataset ...`"
        )
    if row[1] != "active":
        return False
    conn.execute(
        "UPDATE reservations SET status='released', closed_utc=? WHERE id=?",
        (utc_now(), reservation_id),
    )
    write_audit(conn, row[0], "release-reservation", {"reservation": reservation_id})
    return True


def heartbeat(conn: sqlite3.Connection, reservation_id: str) -> None:
    """Renew the lease of live reservation ``reservation_id``."""
    conn.execute(
        "UPDATE reservations SET heartbeat=? WHERE id=? AND status='active'",
        (time.time(), reservation_id),
    )
