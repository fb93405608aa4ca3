"""The ledger file: its schema (``SCHEMA_VERSION``), creation, opening with the version and key
checks, transactions and the translation of SQLite errors into ``LedgerError``; and what it writes
as text: UTC times, canonical JSON with its sha256 checksum (every event and reservation row; checked
on every read) and audit rows.

SQLite in WAL mode, ``synchronous=FULL``, a busy timeout. A new ledger is built in a temporary
file and hard-linked into place, so a half-initialised ledger never exists. Table ``meta`` holds
the application marker and the check value of the ledger's key (:mod:`pate.ledger.keying`). A file
that is not a ledger of ``SCHEMA_VERSION`` is refused and never written to; an older one is never
converted (version 4 is the first format pate-learn released).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import pathlib
import socket
import sqlite3
import tempfile
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import numpy as np

from pate.analysis.errors import InputTypeError
from pate.core.errors import LedgerError
from pate.ledger import keying

SCHEMA_VERSION = 4
APPLICATION = "pate-learn-ledger"
DEFAULT_TIMEOUT_SECONDS = 10.0

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
-- record-key definition they were made with, identity.KEY_VERSION)
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


def utc_now() -> str:
    """Now, in UTC, ISO 8601 to the microsecond (what every ``created_utc`` column holds)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


def utc_from_unix(t: float) -> str:
    """A Unix time (a reservation's heartbeat) in UTC, ISO 8601 to the second."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise InputTypeError(f"{type(value).__name__} is not JSON-serialisable")


def canonical(obj: Any) -> str:
    """``obj`` as canonical JSON: sorted keys, no spaces, numpy values as plain numbers (floats
    round-trip exactly; +inf is kept as Infinity)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def sha256_text(text: str) -> str:
    """The sha256 hex digest of ``text`` as UTF-8 (the checksum of a stored payload)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_audit(
    conn: sqlite3.Connection, dataset: str, action: str, detail: dict[str, Any]
) -> None:
    """One row of the audit log (every registration, name, link, block, budget change and
    reservation draw, expiry or release) about ``dataset``."""
    conn.execute(
        "INSERT INTO audit (dataset, time_utc, action, detail) VALUES (?, ?, ?, ?)",
        (dataset, utc_now(), action, canonical(detail)),
    )


def read_audit(conn: sqlite3.Connection, digest: str) -> list[dict[str, Any]]:
    """The audit rows of dataset ``digest``, oldest first: ``time_utc``, ``action``, ``detail``."""
    rows = conn.execute(
        "SELECT time_utc, action, detail FROM audit WHERE dataset=? ORDER BY id", (digest,)
    )
    return [{"time_utc": t, "action": a, "detail": json.loads(d)} for t, a, d in rows]


def default_ledger_path() -> pathlib.Path:
    """``$PATE_LEDGER`` if set, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
    ``~/.local/share/pate/ledger.sqlite3``."""
    env = os.environ.get("PATE_LEDGER")
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return pathlib.Path(base) / "pate" / "ledger.sqlite3"


class LedgerConnection(sqlite3.Connection):
    """The connection to one ledger file, knowing its ``path``, this ``hostname`` (whose
    processes' reservations are checked directly) and the ledger's ``secret``
    (:mod:`pate.ledger.keying`). Every function of the package runs on one, inside a transaction
    of :class:`LedgerFile`."""

    path: pathlib.Path
    hostname: str
    secret: bytes


class LedgerFile:
    """One open ledger file and its connection, used through :meth:`transaction`. Opening refuses
    a file of another schema version or whose key file is not its own; ``create`` builds a
    missing file (and its folder)."""

    def __init__(self, path: pathlib.Path, *, create: bool, timeout: float) -> None:
        self.path, self.timeout = path, timeout
        self._conn: LedgerConnection | None = None
        if self.path.is_dir():
            raise LedgerError(
                f"ledger path {self.path} is a folder; pass the path of a file "
                "such as ledger.sqlite3 inside it"
            )
        if not self.path.exists():
            if not create:
                raise LedgerError(
                    f"no ledger at {self.path}; create one with `pate budget set "
                    f"--dataset DIGEST --eps E --delta D --ledger {self.path}`"
                )
            self._create_file()
        self._conn = self._connect()
        try:
            self._check(self._conn)
        except BaseException as exc:
            self.close()
            if isinstance(exc, sqlite3.Error):
                raise self.translate(exc) from exc
            raise

    def _create_file(self) -> None:
        """Create the key file, then build the schema in a temporary file and link it into place
        (:func:`pate.ledger.keying.link_new`)."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
        except OSError as exc:
            raise LedgerError(f"cannot create a ledger at {self.path}: {exc}") from exc
        try:
            secret = keying.create_key(self.path)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript("BEGIN;" + _SCHEMA + ";COMMIT;")
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        ("application", APPLICATION),
                        ("created_utc", utc_now()),
                        ("key_check", keying.key_check(secret)),
                    ],
                )
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            finally:
                conn.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            keying.link_new(tmp, self.path)  # a file system without hard links failed above
        except (OSError, sqlite3.Error) as exc:  # sqlite3: e.g. a full disk ("disk I/O error")
            raise LedgerError(
                f"cannot create a ledger at {self.path}: {exc}; check that its "
                "file system has free space and is writable, or choose another "
                "--ledger"
            ) from exc
        finally:
            for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)

    def _connect(self) -> LedgerConnection:
        uri = "file:" + quote(str(self.path.absolute()), safe="/") + "?mode=rw"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=self.timeout, isolation_level=None, factory=LedgerConnection
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger at {self.path}: {exc}") from exc
        conn.path, conn.hostname = self.path, socket.gethostname()
        return conn

    def _check(self, conn: LedgerConnection) -> None:
        """Set the connection up, and refuse (the file left untouched) a file that is not a
        pate-learn ledger, a ledger of another schema version, or one whose key file is not its
        own; then read its secret and make sure it is in WAL mode."""
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=FULL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(conn.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if meta.get("application") != APPLICATION:
            raise LedgerError(
                f"{self.path} exists but is not a pate-learn ledger (user_version {version}, "
                f"tables {sorted(tables) or 'none'}); it was left untouched. Pass another path "
                "with --ledger or set PATE_LEDGER."
            )
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger at {self.path} has schema version {version}, written by a newer "
                f"pate-learn (this one reads version {SCHEMA_VERSION}); upgrade pate-learn. "
                "The file was left untouched."
            )
        if version != SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger at {self.path} has schema version {version}, written by a "
                f"pre-release pate-learn; this one reads schema version {SCHEMA_VERSION} only and "
                "converts no older ledger. The file was left untouched: start a new ledger for "
                "new runs (--ledger FILE, [privacy] ledger or PATE_LEDGER) and keep the old file "
                "with the pate-learn that wrote it."
            )
        conn.secret = keying.read_key(self.path)
        if meta.get("key_check") != keying.key_check(conn.secret):
            raise LedgerError(
                f"the key file {keying.key_path(self.path)} is not the key of the ledger at "
                f"{self.path}; restore the ledger's own key file from its backup (with another "
                "key no record and no dataset of the ledger would be found again). Nothing was "
                "written"
            )
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")

    def _open_conn(self) -> LedgerConnection:
        """The connection, or a ``LedgerError`` once :meth:`close` has closed it."""
        if self._conn is None:
            raise LedgerError(f"the ledger at {self.path} is closed; open a new Ledger")
        return self._conn

    @property
    def secret(self) -> bytes:
        """The ledger's secret (:mod:`pate.ledger.keying`)."""
        return self._open_conn().secret

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def translate(self, exc: sqlite3.Error) -> LedgerError:
        """The ``LedgerError`` that says what a SQLite error means here and what to do."""
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return LedgerError(
                f"the ledger at {self.path} is locked by another process (waited {self.timeout:g} s: "
                f"{text}); nothing was written. Retry when the other run has finished its "
                "transaction, or pass a longer timeout."
            )
        if "malformed" in text or "not a database" in text or (type(exc) is sqlite3.DatabaseError):
            return LedgerError(
                f"the ledger at {self.path} is unreadable ({text}); it was left untouched. Do not "
                "delete it: check it with `sqlite3 PATH 'PRAGMA integrity_check'` and restore it "
                "from a backup if needed."
            )
        if "disk is full" in text or "disk I/O error" in text or "readonly" in text:
            return LedgerError(  # SQLite's words for a full disk (ENOSPC) or a read-only one
                f"ledger operation on {self.path} failed: {text}; the transaction was rolled "
                "back (nothing recorded). Free space on its file system (or make it writable) "
                "and run the command again"
            )
        return LedgerError(f"ledger operation on {self.path} failed: {text}")

    @contextlib.contextmanager
    def transaction(self, *, write: bool) -> Iterator[LedgerConnection]:
        """One transaction: ``BEGIN IMMEDIATE`` (a writer; serialises every read-then-write of
        budget across processes) or ``BEGIN`` (a consistent read snapshot)."""
        conn = self._open_conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
