"""The ledger's secret: what keeps the ledger file from being a membership oracle.

Every ledger has a 32-byte secret from ``os.urandom``, kept in a key file beside it
(``<ledger>.key``, mode 0600, created before the ledger file is linked into place). The ledger
never stores a content hash of a record or of a dataset as such: a record key is stored as
``HMAC-SHA256(secret, record key)`` truncated to 16 bytes, and a dataset's id is
``HMAC-SHA256(secret, tag + dataset digest)`` (64 hex). Whoever holds the ledger file alone can
no longer test whether a record (or a set of records) is in it; whoever holds the key file too
can. A ledger whose key file is missing is refused, never given a new key (every budget would
start again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import logging
import os
import pathlib
import stat
import tempfile

import numpy as np

from pate.core.errors import LedgerError
from pate.ledger.identity import RECORD_KEY_BYTES, DatasetIdentity, key_bytes

logger = logging.getLogger(__name__)

KEY_BYTES = 32
_DATASET_TAG = b"pate-learn dataset id v1\n"
_CHECK_TAG = b"pate-learn ledger key check v1\n"


def key_path(ledger_path: pathlib.Path) -> pathlib.Path:
    """The key file of the ledger at ``ledger_path``: ``<ledger>.key`` beside it."""
    return ledger_path.with_name(ledger_path.name + ".key")


def link_new(tmp: str, path: pathlib.Path) -> None:
    """Hard-link the finished, fsynced file ``tmp`` to ``path``, never over a file (if another
    process linked its own first, theirs stays), and make the link durable."""
    with contextlib.suppress(FileExistsError):
        os.link(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def create_key(ledger_path: pathlib.Path) -> bytes:
    """A fresh secret written to the ledger's key file (mode 0600, fsynced, hard-linked into
    place, never over an existing file); the existing one if another process created it first."""
    path = key_path(ledger_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
        os.close(fd)
        fd = -1
        link_new(tmp, path)
    except OSError as exc:
        raise LedgerError(f"cannot create the ledger's key file {path}: {exc}") from exc
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return read_key(ledger_path)


def read_key(ledger_path: pathlib.Path) -> bytes:
    """The secret of the ledger at ``ledger_path``; ``LedgerError`` when its key file is missing
    or is not a key (a new key would reset every budget of the ledger, so none is made)."""
    path = key_path(ledger_path)
    try:
        with open(path, "rb") as fh:
            secret = fh.read(KEY_BYTES + 1)
            mode = os.fstat(fh.fileno()).st_mode
    except FileNotFoundError:
        raise LedgerError(
            f"the ledger at {ledger_path} is keyed but its key file {path} is missing; restore "
            "it from the backup of the ledger (the ledger and its key file belong together). "
            "No new key is made: with another key no record and no dataset of the ledger would "
            "be found again, and every budget would start from zero. Nothing was written"
        ) from None
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger's key file {path}: {exc}") from exc
    if len(secret) != KEY_BYTES:
        raise LedgerError(
            f"{path} is not a ledger key file ({KEY_BYTES} bytes expected, got {len(secret)}); "
            "restore it from the backup of the ledger. Nothing was written"
        )
    if stat.S_IMODE(mode) & 0o077:
        logger.warning(
            "the ledger's key file %s can be read by others (mode %o); make it owner-only: "
            "chmod 600 %s",
            path,
            stat.S_IMODE(mode),
            path,
        )
    return secret


def key_check(secret: bytes) -> str:
    """What ``meta.key_check`` holds: tells a ledger's own key from another (no secret in it)."""
    return hmac.new(secret, _CHECK_TAG, hashlib.sha256).hexdigest()


def keyed_digest(secret: bytes, digest: str) -> str:
    """The ledger's id (64 hex) of the dataset whose digest (:func:`dataset_digest`) is
    ``digest``."""
    return hmac.new(secret, _DATASET_TAG + digest.encode("ascii"), hashlib.sha256).hexdigest()


def keyed_keys(secret: bytes, raw: list[bytes]) -> list[bytes]:
    """The stored form of each 16-byte record key of ``raw``: its HMAC, truncated to 16 bytes."""
    return [hmac.digest(secret, key, "sha256")[:RECORD_KEY_BYTES] for key in raw]


@dataclasses.dataclass(frozen=True, eq=False)
class KeyedIdentity:
    """A :class:`DatasetIdentity` as one ledger stores it: its ``digest`` is the ledger's id of
    the dataset and ``record_keys`` (``S16``) the keyed record keys."""

    digest: str
    record_keys: np.ndarray
    num_records: int


def keyed_identity(secret: bytes, identity: DatasetIdentity) -> KeyedIdentity:
    """``identity`` under the secret of one ledger (:class:`KeyedIdentity`)."""
    keys = keyed_keys(secret, key_bytes(identity.record_keys))
    return KeyedIdentity(
        keyed_digest(secret, identity.digest),
        np.frombuffer(b"".join(keys), dtype=f"S{RECORD_KEY_BYTES}"),
        identity.num_records,
    )
