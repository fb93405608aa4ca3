"""The on-disk schema of the ledger: its DDL and the version check.

``SCHEMA_VERSION`` is the ``PRAGMA user_version`` this code reads and writes; table ``meta``
holds the application marker and the check value of the ledger's key (:mod:`pate.ledger.keying`).
A file of any other version is refused, never converted: version 4 is the first format
pate-learn released. The functions here run inside the caller's transaction
(:class:`pate.ledger.ledger_file.LedgerFile`).
"""

from __future__ import annotations

import pathlib
import sqlite3

from pate.core.errors import LedgerError
from pate.ledger.formats import utc_now
from pate.ledger.keying import key_check

SCHEMA_VERSION = 4
APPLICATION = "pate-learn-ledger"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (
    digest TEXT PRIMARY KEY CHECK (length(digest) = 64),
    name TEXT UNIQUE,
    budget_eps REAL CHECK (budget_eps IS NULL OR budget_eps > 0),
    budget_delta REAL CHECK (budget_delta IS NULL OR (budget_delta > 0 AND budget_delta < 1)),
    basis TEXT NOT NULL DEFAULT 'data-independent'
        CHECK (basis IN ('data-independent', 'data-dependent')),
    created_utc TEXT NOT NULL,
    conversion TEXT NOT NULL DEFAULT 'classic' CHECK (conversion IN ('classic', 'tight')),
    relation TEXT NOT NULL DEFAULT 'add-remove' CHECK (relation IN ('add-remove'))
);
CREATE TABLE dataset_names (  -- a dataset's later names (its first stays in datasets.name)
    name TEXT PRIMARY KEY,
    dataset TEXT NOT NULL REFERENCES datasets(digest),
    created_utc TEXT NOT NULL
);
CREATE INDEX dataset_names_by_dataset ON dataset_names (dataset, created_utc);
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
-- 'drawn': noise was drawn inside the reservation, so it counts as spent and is never
-- reclaimed (only its commit replaces it with the round's events)
CREATE TABLE reservations (
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
    status TEXT NOT NULL CHECK (status IN ('active', 'drawn', 'committed', 'released', 'expired')),
    closed_utc TEXT
);
CREATE INDEX reservations_by_dataset ON reservations (dataset, status);
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
-- the keyed record keys of each dataset registered with its records (key_version: the
-- record-key definition they were made with, pate.ledger.identity.KEY_VERSION)
CREATE TABLE identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL UNIQUE REFERENCES datasets(digest),
    num_records INTEGER NOT NULL CHECK (num_records > 0),
    distinct_records INTEGER NOT NULL CHECK (distinct_records > 0),
    created_utc TEXT NOT NULL,
    key_version INTEGER NOT NULL CHECK (key_version = 2)
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


def build_new(conn: sqlite3.Connection, secret: bytes) -> None:
    """Build the current schema in the empty database of ``conn`` (an autocommit connection),
    keyed with ``secret`` (the ledger's key file, :mod:`pate.ledger.keying`)."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript("BEGIN;" + _SCHEMA + ";COMMIT;")
    conn.execute("INSERT INTO meta VALUES ('application', ?)", (APPLICATION,))
    conn.execute("INSERT INTO meta VALUES ('created_utc', ?)", (utc_now(),))
    conn.execute("INSERT INTO meta VALUES ('key_check', ?)", (key_check(secret),))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def check_version(conn: sqlite3.Connection, path: pathlib.Path) -> None:
    """Refuse (``LedgerError``; the file is left untouched) a file that is not a pate-learn
    ledger, or a ledger of another schema version than :data:`SCHEMA_VERSION` (an older one is
    never converted: it predates the first released format)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    row = None
    if "meta" in tables:
        row = conn.execute("SELECT value FROM meta WHERE key='application'").fetchone()
    if row is None or row[0] != APPLICATION:
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
    if version != SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger at {path} has schema version {version}, written by a pre-release "
            f"pate-learn; this one reads schema version {SCHEMA_VERSION} only and converts no "
            "older ledger. The file was left untouched: start a new ledger for new runs "
            "(--ledger FILE, [privacy] ledger or PATE_LEDGER) and keep the old file with the "
            "pate-learn that wrote it."
        )
