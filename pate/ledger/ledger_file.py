"""The ledger file and its one connection: creation, opening, schema and key checks,
transactions and the translation of SQLite errors into ``LedgerError``.

SQLite in WAL mode, ``synchronous=FULL``, a busy timeout. A new ledger is built in a temporary
file and hard-linked into place, so a half-initialised ledger never exists. A file that is not a
ledger of a version this code reads is never written to.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import sqlite3
import tempfile
from collections.abc import Iterator

from pate.core.errors import LedgerError
from pate.ledger import keying, schema

DEFAULT_TIMEOUT_SECONDS = 10.0


def default_ledger_path() -> pathlib.Path:
    """Where the ledger lives unless ``--ledger`` / ``path`` says otherwise.

    ``$PATE_LEDGER`` if set, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
    ``~/.local/share/pate/ledger.sqlite3``.
    """
    env = os.environ.get("PATE_LEDGER")
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return pathlib.Path(base) / "pate" / "ledger.sqlite3"


class LedgerFile:
    """One open ledger file: ``path``, the lock ``timeout`` (seconds), this ``hostname`` (whose
    processes' reservations are checked directly, :mod:`pate.ledger.liveness`) and one
    connection, used through :meth:`transaction`. Opening checks the schema version and the key
    file (a ledger of another version is refused); ``create`` builds a missing file (and its
    folder)."""

    def __init__(self, path: pathlib.Path, *, create: bool, timeout: float) -> None:
        self.timeout = timeout
        self.path = path
        self.hostname = socket.gethostname()
        #: the ledger's secret (:mod:`pate.ledger.keying`), read when the file is opened
        self.secret = b""
        self._conn: sqlite3.Connection | None = None
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
            self._check_schema()
        except BaseException:
            self.close()
            raise

    # ---- file and connection ------------------------------------------------------------

    def _create_file(self) -> None:
        """Create the key file (:func:`pate.ledger.keying.create_key`), then build the schema in a
        temporary file and hard-link it into place (never over a file)."""
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
                schema.build_new(conn, secret)
            finally:
                conn.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            self._link_into_place(tmp)
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

    def _link_into_place(self, tmp: str) -> None:
        """Hard-link the built file ``tmp`` to the ledger's path, never over an existing file."""
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:
            # no hard links on this filesystem: rename, but never over an existing file
            if not self.path.exists():
                os.replace(tmp, self.path)

    def _connect(self) -> sqlite3.Connection:
        uri = "file:" + _uri_path(self.path) + "?mode=rw"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger at {self.path}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            conn.close()
            raise self.translate(exc) from exc
        return conn

    def _open_conn(self) -> sqlite3.Connection:
        """The connection, or a ``LedgerError`` once :meth:`close` has closed it."""
        if self._conn is None:
            raise LedgerError(f"the ledger at {self.path} is closed; open a new Ledger")
        return self._conn

    def _check_schema(self) -> None:
        """Refuse a file that is not a ledger of this schema version or whose key file is not
        its own (:func:`pate.ledger.schema.check_version`); make sure it is in WAL mode."""
        try:
            schema.check_version(self._open_conn(), self.path)
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        self.secret = keying.read_key(self.path)
        self._check_key()
        try:
            mode = self._open_conn().execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                self._open_conn().execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc

    def _check_key(self) -> None:
        """Refuse a key file that is not this ledger's (its check value differs)."""
        try:
            row = (
                self._open_conn().execute("SELECT value FROM meta WHERE key='key_check'").fetchone()
            )
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        if row is None or row[0] != keying.key_check(self.secret):
            raise LedgerError(
                f"the key file {keying.key_path(self.path)} is not the key of the ledger at "
                f"{self.path}; restore the ledger's own key file from its backup (with another "
                "key no record and no dataset of the ledger would be found again). Nothing was "
                "written"
            )

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---- transactions -------------------------------------------------------------------

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
    def transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` (a writer; serialises every read-then-write of
        budget across processes) or ``BEGIN`` (a consistent read snapshot)."""
        conn = self._open_conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        try:
            yield conn
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self.translate(exc) from exc
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self.translate(exc) from exc


def _uri_path(path: pathlib.Path) -> str:
    from urllib.parse import quote

    return quote(str(path.absolute()), safe="/")
