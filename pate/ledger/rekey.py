"""The one conversion of a ledger of schema <= 3 to schema 4, in the caller's write transaction:
every stored record key and every dataset id keyed with the ledger's secret
(:mod:`pate.ledger.keying`), and the reservation status ``'drawn'`` added.

A dataset id ``d`` becomes ``keyed_digest(secret, d)`` in every table that names it (and in the
audit log's details); a record key ``k`` becomes ``keyed_keys(secret, [k])``. Afterwards no
unkeyed record key or dataset digest is left in the file. Budgets, events, reservations, names,
blocks and links are kept, under the new ids.
"""

from __future__ import annotations

import re
import sqlite3

from pate.ledger.keying import keyed_digest, keyed_keys

#: (table, column) of every dataset id stored outside table ``datasets`` (links: rebuilt).
_DATASET_COLUMNS = (
    ("blocks", "dataset"),
    ("events", "dataset"),
    ("reservations", "dataset"),
    ("identities", "dataset"),
    ("dataset_names", "dataset"),
    ("audit", "dataset"),
)
_HEX64 = re.compile(r"[0-9a-f]{64}")


def convert(conn: sqlite3.Connection, secret: bytes, reservations_ddl: str) -> list[str]:
    """Key every dataset id and record key of the file with ``secret`` and rebuild table
    ``reservations`` with ``reservations_ddl`` (a ``CREATE TABLE {table}`` statement whose status
    allows ``'drawn'``); returns what was changed."""
    conn.execute("PRAGMA defer_foreign_keys=ON")  # ids change in every table within this commit
    _rebuild_reservations(conn, reservations_ddl)
    ids = {old: keyed_digest(secret, old) for (old,) in conn.execute("SELECT digest FROM datasets")}
    for old, new in ids.items():
        conn.execute("UPDATE datasets SET digest=? WHERE digest=?", (new, old))
        for table, column in _DATASET_COLUMNS:
            conn.execute(f"UPDATE {table} SET {column}=? WHERE {column}=?", (new, old))
    links = conn.execute("SELECT a, b, shared, created_utc FROM links").fetchall()
    conn.execute("DELETE FROM links")
    conn.executemany(
        "INSERT INTO links (a, b, shared, created_utc) VALUES (?, ?, ?, ?)",
        [(*sorted((ids.get(a, a), ids.get(b, b))), shared, t) for a, b, shared, t in links],
    )
    for row_id, detail in conn.execute("SELECT id, detail FROM audit").fetchall():
        keyed = _HEX64.sub(lambda m: ids.get(m.group(0), m.group(0)), detail)
        if keyed != detail:
            conn.execute("UPDATE audit SET detail=? WHERE id=?", (keyed, row_id))
    records = conn.execute("SELECT key, identity FROM records").fetchall()
    conn.execute("DELETE FROM records")
    stored = keyed_keys(secret, [bytes(key) for key, _ in records])
    conn.executemany(
        "INSERT OR IGNORE INTO records (key, identity) VALUES (?, ?)",
        [(key, identity) for key, (_, identity) in zip(stored, records)],
    )
    return [
        "reservations.status 'drawn'",
        f"keyed ids of {len(ids)} dataset(s) and {len(records)} record key(s)",
    ]


def _rebuild_reservations(conn: sqlite3.Connection, ddl: str) -> None:
    """Table ``reservations`` again, under ``ddl``, with every row (SQLite cannot change a CHECK
    in place). The rows of ``reservation_blocks`` that refer to it are set aside meanwhile, so
    that no foreign key ever points nowhere."""
    blocks = conn.execute("SELECT reservation, block FROM reservation_blocks").fetchall()
    conn.execute("DELETE FROM reservation_blocks")
    conn.execute(ddl.format(table="reservations_v4"))
    conn.execute("INSERT INTO reservations_v4 SELECT * FROM reservations")
    conn.execute("DROP TABLE reservations")
    conn.execute("ALTER TABLE reservations_v4 RENAME TO reservations")
    conn.execute("CREATE INDEX reservations_by_dataset ON reservations (dataset, status)")
    conn.executemany("INSERT INTO reservation_blocks VALUES (?, ?)", blocks)
