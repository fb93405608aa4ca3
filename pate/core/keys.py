"""The secret keys of a run (``"partition"``: which teacher gets which record; ``"split"``: which
rows of a pool are split off), each 32 bytes of OS entropy kept owner-only in
``<run_dir>/private/keys.json``, so that a resume reuses it and nobody without that folder can
tell which teacher saw which record; or, for a run seeded on purpose, derived from the seed
(:func:`seeded_key`: reproducible by anyone who knows it, and the report says so)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import secrets

from pate.analysis.errors import CorruptFileError, InputError
from pate.analysis.validation import check_int, describe
from pate.core.io import atomic_write_json, read_json

__all__ = [
    "KEYS_FILE",
    "KEY_BYTES",
    "PRIVATE_DIR",
    "fresh_key",
    "make_private_dir",
    "read_keys",
    "seal",
    "seeded_key",
    "write_keys",
]

PRIVATE_DIR = "private"
KEYS_FILE = f"{PRIVATE_DIR}/keys.json"
KEY_BYTES = 32
_OWNER_ONLY_DIR = 0o700
_OWNER_ONLY_FILE = 0o600


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise InputError(f"a key's name must be a word such as 'partition', got {describe(name)}")
    return name


def fresh_key() -> bytes:
    """32 bytes from the operating system's entropy pool."""
    return secrets.token_bytes(KEY_BYTES)


def seeded_key(seed: int, name: str) -> bytes:
    """The key ``name`` derived from a user's ``seed``: the same for everyone who knows the
    seed (a reproducible experiment, not a secret)."""
    seed = check_int(seed, "seed", minimum=0)
    return hashlib.blake2b(
        f"pate-run-key:{_check_name(name)}".encode(),
        key=seed.to_bytes(16, "little"),
        digest_size=KEY_BYTES,
    ).digest()


def make_private_dir(folder: str | os.PathLike[str]) -> pathlib.Path:
    """Create ``folder`` (and its parents) and set it to owner-only (0700), also when it
    existed with wider permissions."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=_OWNER_ONLY_DIR)
    folder.chmod(_OWNER_ONLY_DIR)
    return folder


def seal(folder: str | os.PathLike[str]) -> None:
    """Make ``folder`` and everything under it owner-only: folders 0700, files 0600 (what a
    library wrote with the umask's permissions, e.g. a torch checkpoint). Links are left as
    they are."""
    folder = pathlib.Path(folder)
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(_OWNER_ONLY_DIR if path.is_dir() else _OWNER_ONLY_FILE)


def read_keys(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """The keys stored in ``path`` (``{}`` when the file does not exist)."""
    path = pathlib.Path(path)
    if not path.exists():
        return {}
    doc = read_json(path, what="the run's keys")
    if not isinstance(doc, dict) or not all(
        isinstance(v, str) and len(v) == 2 * KEY_BYTES for v in doc.values()
    ):
        raise CorruptFileError(
            f"{path} must map key names to {KEY_BYTES}-byte hex keys; it was modified: "
            "start a new run",
            path=path,
        )
    try:
        return {_check_name(name): bytes.fromhex(value) for name, value in doc.items()}
    except ValueError as exc:
        raise CorruptFileError(f"{path}: {exc}; start a new run", path=path) from None


def write_keys(path: str | os.PathLike[str], keys: dict[str, bytes]) -> pathlib.Path:
    """Write ``keys`` to ``path`` (atomically; the file owner-only, in an owner-only folder)."""
    path = pathlib.Path(path)
    make_private_dir(path.parent)
    atomic_write_json(path, {_check_name(k): v.hex() for k, v in sorted(keys.items())})
    path.chmod(_OWNER_ONLY_FILE)
    return path
