"""Dataset names: a dataset keeps the FIRST name it was registered with (``datasets.name``);
later names live in table ``dataset_names``, and any of its names resolves it (a name names one
dataset only).
"""

from __future__ import annotations

import sqlite3

from pate.ledger.audit import write_audit
from pate.ledger.formats import utc_now


def name_owner(conn: sqlite3.Connection, name: str) -> str | None:
    """The digest of the dataset that ``name`` names (first or later name), or None."""
    row = (
        conn.execute("SELECT digest FROM datasets WHERE name=?", (name,)).fetchone()
        or conn.execute("SELECT dataset FROM dataset_names WHERE name=?", (name,)).fetchone()
    )
    return None if row is None else row[0]


def add_name(conn: sqlite3.Connection, digest: str, name: str, *, first: str) -> None:
    """One more name of ``digest`` (already checked free); its first name ``first`` stays."""
    conn.execute(
        "INSERT INTO dataset_names (name, dataset, created_utc) VALUES (?, ?, ?)",
        (name, digest, utc_now()),
    )
    write_audit(conn, digest, "add-name", {"name": name, "first": first})


def aliases(conn: sqlite3.Connection, digest: str) -> list[str]:
    """The later names of ``digest``, oldest first."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT name FROM dataset_names WHERE dataset=? ORDER BY created_utc, rowid", (digest,)
        )
    ]


def first_name(conn: sqlite3.Connection, digest: str) -> str | None:
    """The first name of ``digest`` (``datasets.name``; None when it has none)."""
    name: str | None = conn.execute(
        "SELECT name FROM datasets WHERE digest=?", (digest,)
    ).fetchone()[0]
    return name
