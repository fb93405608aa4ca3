"""Blocks (Sage: Lecuyer et al. 2019, block composition): records arriving in time blocks are
registered as blocks; an event is charged only to the blocks the teacher ensemble was trained
on, every block has its own composition and a dataset's loss is the max over its blocks, so a new
block brings fresh budget. Events recorded before any block existed count in every block."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from pate.ledger.audit import write_audit
from pate.ledger.dataset_registry import label
from pate.ledger.formats import utc_now


def add_block(conn: sqlite3.Connection, digest: str, name: str) -> None:
    """Register block ``name`` of dataset ``digest`` (a name not registered for it yet)."""
    if conn.execute("SELECT 1 FROM blocks WHERE dataset=? AND name=?", (digest, name)).fetchone():
        raise ValueError(
            f"block {name!r} is already registered for dataset "
            f"{label(conn, digest)}; choose a new name for new records"
        )
    conn.execute(
        "INSERT INTO blocks (dataset, name, created_utc) VALUES (?, ?, ?)",
        (digest, name, utc_now()),
    )
    write_audit(conn, digest, "add-block", {"block": name})


def block_rows(conn: sqlite3.Connection, digest: str) -> list[tuple[int, str]]:
    """(id, name) of every block of ``digest``, oldest first."""
    return conn.execute(
        "SELECT id, name FROM blocks WHERE dataset=? ORDER BY id", (digest,)
    ).fetchall()


def target_blocks(conn: sqlite3.Connection, digest: str, blocks: Any) -> frozenset[int]:
    """The ids of the blocks named ``blocks`` (None: every block) of ``digest``."""
    rows = block_rows(conn, digest)
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
        raise ValueError(
            f"blocks {unknown!r} are not registered for dataset "
            f"{label(conn, digest)} (registered: {sorted(by_name) or 'none'}); "
            "register them with Ledger.add_block / `pate budget add-block`"
        )
    return frozenset(by_name[b] for b in names)
