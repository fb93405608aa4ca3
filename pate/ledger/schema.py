"""The on-disk schema of the ledger: its DDL, the version checks and the in-place migrations.

``SCHEMA_VERSION`` is the ``PRAGMA user_version`` this code reads and writes; table ``meta``
holds the application marker. A version-1 file gains the record and link tables (``_SCHEMA_V2``)
and ``datasets.conversion``; a version-1 or -2 file gains ``identities.key_version`` and
``datasets.relation`` (``_SCHEMA_V3_COLUMNS``); table ``dataset_names`` is added in place
without a new ``user_version`` (:mod:`pate.ledger.names` restores first names then). The
functions here run inside the caller's transaction (:class:`pate.ledger.store.Store`).
"""

from __future__ import annotations

import pathlib
import sqlite3

from pate.core.errors import LedgerError
from pate.ledger.audit import write_audit
from pate.ledger.formats import utc_now
from pate.ledger.keying import key_check
from pate.ledger.rekey import convert

SCHEMA_VERSION = 4
APPLICATION = "pate-learn-ledger"

# The datasets.conversion column of schema version 2 (also added in place by the migrations).
_CONVERSION_COLUMN = (
    "conversion TEXT NOT NULL DEFAULT 'classic' CHECK (conversion IN ('classic', 'tight'))"
)

# Schema 4 adds 'drawn': noise was drawn inside the reservation, so it counts as spent and is never
# reclaimed (only its commit replaces it with the round's events).
_STATUS_COLUMN = (
    "status TEXT NOT NULL CHECK (status IN ('active', 'drawn', 'committed', 'released', 'expired'))"
)

_RESERVATIONS = f"""CREATE TABLE {{table}} (
    id TEXT PRIMARY KEY,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    run_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    pid INTEGER NOT NULL,
    process_token TEXT,
    hostname TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    lease_seconds REAL NOT NULL,
    {_STATUS_COLUMN},
    closed_utc TEXT
);
"""

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (
    digest TEXT PRIMARY KEY CHECK (length(digest) = 64),
    name TEXT UNIQUE,
    budget_eps REAL CHECK (budget_eps IS NULL OR budget_eps > 0),
    budget_delta REAL CHECK (budget_delta IS NULL OR (budget_delta > 0 AND budget_delta < 1)),
    basis TEXT NOT NULL DEFAULT 'data-independent'
        CHECK (basis IN ('data-independent', 'data-dependent')),
    created_utc TEXT NOT NULL,
    {_CONVERSION_COLUMN}
);
CREATE TABLE blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    name TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    UNIQUE (dataset, name)
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    run_id TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    reservation TEXT,
    mechanism TEXT NOT NULL,
    queries INTEGER NOT NULL,
    answered INTEGER NOT NULL,
    payload TEXT NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE INDEX events_by_dataset ON events (dataset, id);
CREATE TABLE event_blocks (
    event INTEGER NOT NULL REFERENCES events(id),
    block INTEGER NOT NULL REFERENCES blocks(id),
    PRIMARY KEY (event, block)
);
{_RESERVATIONS.format(table="reservations")}CREATE INDEX reservations_by_dataset ON reservations (dataset, status);
CREATE TABLE reservation_blocks (
    reservation TEXT NOT NULL REFERENCES reservations(id),
    block INTEGER NOT NULL REFERENCES blocks(id),
    PRIMARY KEY (reservation, block)
);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT,
    time_utc TEXT NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

# Added by schema version 2 (a version-1 file is migrated by running exactly these statements,
# then adding the datasets.conversion column).
_SCHEMA_V2 = """
CREATE TABLE identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL UNIQUE REFERENCES datasets(digest),
    num_records INTEGER NOT NULL CHECK (num_records > 0),
    distinct_records INTEGER NOT NULL CHECK (distinct_records > 0),
    created_utc TEXT NOT NULL
);
CREATE TABLE records (
    key BLOB NOT NULL CHECK (length(key) = 16),
    identity INTEGER NOT NULL REFERENCES identities(id),
    PRIMARY KEY (identity, key)
) WITHOUT ROWID;
CREATE INDEX records_by_key ON records (key);
CREATE TABLE links (
    a TEXT NOT NULL REFERENCES datasets(digest),
    b TEXT NOT NULL REFERENCES datasets(digest),
    shared INTEGER CHECK (shared IS NULL OR shared > 0),  -- NULL: declared by hand (link())
    created_utc TEXT NOT NULL,
    PRIMARY KEY (a, b),
    CHECK (a < b)
);
CREATE INDEX links_by_b ON links (b);
"""

# Added by schema version 3 (each added in place to an older file that lacks it).
_SCHEMA_V3_COLUMNS = {
    ("identities", "key_version"): "INTEGER NOT NULL DEFAULT 1 CHECK (key_version IN (1, 2))",
    (
        "datasets",
        "relation",
    ): "TEXT NOT NULL DEFAULT 'add-remove' CHECK (relation IN ('add-remove'))",
}
_SCHEMA_V3 = ";".join(
    f"ALTER TABLE {t} ADD COLUMN {c} {d}" for (t, c), d in _SCHEMA_V3_COLUMNS.items()
)

# A dataset's later names (its FIRST name stays in datasets.name; see
# pate.ledger.names.add_names_table, which adds this table in place to a file that lacks it,
# without changing user_version).
SCHEMA_NAMES = """
CREATE TABLE dataset_names (
    name TEXT PRIMARY KEY,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    created_utc TEXT NOT NULL
);
CREATE INDEX dataset_names_by_dataset ON dataset_names (dataset, created_utc);
"""


def build_new(conn: sqlite3.Connection, secret: bytes) -> None:
    """Build the current schema in the empty database of ``conn`` (an autocommit connection),
    keyed with ``secret`` (the ledger's key file, :mod:`pate.ledger.keying`)."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript("BEGIN;" + _SCHEMA + _SCHEMA_V2 + SCHEMA_NAMES + _SCHEMA_V3 + ";COMMIT;")
    conn.execute("INSERT INTO meta VALUES ('application', ?)", (APPLICATION,))
    conn.execute("INSERT INTO meta VALUES ('created_utc', ?)", (utc_now(),))
    conn.execute("INSERT INTO meta VALUES ('key_check', ?)", (key_check(secret),))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def read_state(conn: sqlite3.Connection) -> tuple[int, set[str], str | None]:
    """(``user_version``, table names, application marker or None) of the file of ``conn``."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    app = None
    if "meta" in tables:
        row = conn.execute("SELECT value FROM meta WHERE key='application'").fetchone()
        app = row[0] if row else None
    return version, tables, app


def check_state(path: pathlib.Path, version: int, tables: set[str], app: str | None) -> None:
    """Refuse (``LedgerError``; the file is left untouched) a file that is not a pate-learn
    ledger, or one of a schema version this code cannot read or migrate."""
    if app != APPLICATION:
        raise LedgerError(
            f"{path} exists but is not a pate-learn ledger (user_version {version}, "
            f"tables {sorted(tables) or 'none'}); it was left untouched. Pass another path "
            "with --ledger or set PATE_LEDGER."
        )
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger at {path} has schema version {version}, written by a newer "
            f"pate-learn (this one reads version {SCHEMA_VERSION}); upgrade pate-learn. "
            "The file was left untouched."
        )
    if version not in (1, 2, 3, SCHEMA_VERSION):
        raise LedgerError(
            f"the ledger at {path} has unknown schema version {version} (expected "
            f"{SCHEMA_VERSION}); the file was left untouched."
        )


def has_current_columns(conn: sqlite3.Connection) -> bool:
    """Whether every column the current schema added to older tables is there."""
    have = {
        (t, r[1])
        for t in ("datasets", "identities")
        for r in conn.execute(f"PRAGMA table_info({t})")
    }
    return ("datasets", "conversion") in have and set(_SCHEMA_V3_COLUMNS) <= have


def has_names_table(conn: sqlite3.Connection) -> bool:
    """Whether the file holds table ``dataset_names``."""
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='dataset_names'"
        ).fetchone()
        is not None
    )


def migrate(conn: sqlite3.Connection, path: pathlib.Path, secret: bytes) -> tuple[int, list[str]]:
    """Version 1, 2 or 3 -> 4, in place, in the caller's write transaction: add the record and link
    tables (version 1), the conversion column (``'classic'`` for every dataset: what their
    budgets were judged with so far; also for a version-2 file written before it), then (version
    < 3) ``identities.key_version`` (1 for every stored identity: their keys include the
    records' shape) and ``datasets.relation`` (``'add-remove'``: what every budget is judged
    for from now on), then (version < 4) the reservation status ``'drawn'`` and the keying of
    every stored record key and dataset id with ``secret`` (:func:`pate.ledger.rekey.convert`:
    the unkeyed ones are gone afterwards), and bump ``user_version``. Every budget, event and
    name is kept; events are not
    rewritten: an event stored without a relation is read with the one it was analysed under
    (``analysis.legacy_relation``), and the ledger refuses to compose a replace-one event with
    anything (:func:`pate.ledger.composition.check_relations`). Another process may have
    migrated first. Returns (the version found, what was added)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in (1, 2, 3, SCHEMA_VERSION):
        raise LedgerError(
            f"the ledger at {path} changed to schema version {version} "
            f"while being migrated (expected 1 to {SCHEMA_VERSION}); "
            "the file was left untouched."
        )
    added = _add_missing(conn, version, path)
    if version < 4:
        added += convert(conn, secret, _RESERVATIONS)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('key_check', ?)", (key_check(secret),))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_to_4_utc', ?)", (utc_now(),))
    if added:
        if version == 1:
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('migrated_to_2_utc', ?)", (utc_now(),)
            )
        if version < 3:
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('migrated_to_3_utc', ?)", (utc_now(),)
            )
        if "datasets.conversion" in added:
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('added_conversion_utc', ?)", (utc_now(),)
            )
        write_audit(
            conn, None, "migrate-schema", {"from": version, "to": SCHEMA_VERSION, "added": added}
        )
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return version, added


def _add_missing(conn: sqlite3.Connection, version: int, path: pathlib.Path) -> list[str]:
    """Add the tables and columns a file of schema ``version`` lacks; returns what was added."""
    added: list[str] = []
    if version == 1:
        for statement in _SCHEMA_V2.split(";"):
            if statement.strip():
                conn.execute(statement)
        added.append("identities, records, links")
    columns = {r[1] for r in conn.execute("PRAGMA table_info(datasets)")}
    if not columns:
        raise LedgerError(
            f"the ledger at {path} has no datasets table; it was left "
            "untouched. Restore it from a backup."
        )
    if "conversion" not in columns:
        conn.execute(f"ALTER TABLE datasets ADD COLUMN {_CONVERSION_COLUMN}")
        added.append("datasets.conversion")
    for (table, column), decl in _SCHEMA_V3_COLUMNS.items():
        if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            added.append(f"{table}.{column}")
    return added
