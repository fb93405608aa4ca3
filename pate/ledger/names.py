"""Dataset names: a dataset keeps the FIRST name it was registered with (``datasets.name``);
later names live in table ``dataset_names``, and any of its names resolves it (a name names one
dataset only).

A file without ``dataset_names`` gains it in place (:func:`add_names_table`); a dataset that an
earlier pate-learn renamed after each run's data (audit action ``rename``) gets its first name
back from the audit log, the others as later names -- except a name another dataset holds by
then, which stays theirs.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from pate.ledger.audit import write_audit
from pate.ledger.formats import utc_now
from pate.ledger.schema import SCHEMA_NAMES, has_names_table


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


def add_names_table(conn: sqlite3.Connection) -> dict[str, dict[str, Any]] | None:
    """Add table ``dataset_names`` in place, in the caller's write transaction (``user_version``
    is not changed: the table only adds to what a file holds); None when another process added
    it first. Earlier pate-learn versions renamed a dataset to the name of each run's data,
    recording each rename in the audit log: the first name found there is restored to
    ``datasets.name`` and the others become later names, except a name another dataset holds now
    (it stays theirs). Every other row is kept. Returns the restored names by digest."""
    restored: dict[str, dict[str, Any]] = {}
    if has_names_table(conn):
        return None
    for statement in SCHEMA_NAMES.split(";"):
        if statement.strip():
            conn.execute(statement)
    renamed = conn.execute(
        "SELECT d.digest, d.name FROM datasets d WHERE EXISTS (SELECT 1 FROM audit a "
        "WHERE a.dataset = d.digest AND a.action = 'rename') ORDER BY d.created_utc, d.digest"
    ).fetchall()
    for digest, current in renamed:
        history = _rename_history(conn, digest, current)
        names = [n for n in history if name_owner(conn, n) in (None, digest)]
        if not names or names[0] == current and len(names) == 1:
            continue
        conn.execute("UPDATE datasets SET name=? WHERE digest=?", (names[0], digest))
        now = utc_now()
        conn.executemany(
            "INSERT INTO dataset_names (name, dataset, created_utc) VALUES (?, ?, ?)",
            ((n, digest, now) for n in names[1:]),
        )
        restored[digest] = {"name": names[0], "aliases": names[1:], "was": current}
        write_audit(conn, digest, "restore-first-name", restored[digest])
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('added_dataset_names_utc', ?)", (utc_now(),))
    write_audit(
        conn,
        None,
        "migrate-schema",
        {"added": ["dataset_names"], "restored_first_names": len(restored)},
    )
    return restored


def _rename_history(conn: sqlite3.Connection, digest: str, current: str | None) -> list[str]:
    """Every name ``digest`` had, oldest first, from its ``rename`` audit rows and its name now."""
    history: list[str] = []
    for (detail,) in conn.execute(
        "SELECT detail FROM audit WHERE dataset=? AND action='rename' ORDER BY id", (digest,)
    ):
        try:
            change = json.loads(detail)
        except ValueError:
            continue  # an unreadable audit row: the names it held are not restored
        for key in ("old", "new"):
            value = change.get(key) if isinstance(change, dict) else None
            if isinstance(value, str) and value and value not in history:
                history.append(value)
    if current is not None and current not in history:
        history.append(current)
    return history
