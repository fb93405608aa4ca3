"""What the ledger writes as text: UTC timestamps, canonical JSON and its sha256 checksums.

Every event and reservation row stores the canonical JSON of its payload and the sha256 of that
text (checked on every read); every audit row stores canonical JSON.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Any

import numpy as np


def utc_now() -> str:
    """Now, in UTC, ISO 8601 to the microsecond (what every ``created_utc`` column holds)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


def utc_from_unix(t: float) -> str:
    """A Unix time (a reservation's heartbeat) in UTC, ISO 8601 to the second."""
    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="seconds")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def canonical(obj: Any) -> str:
    """``obj`` as canonical JSON: sorted keys, no spaces, numpy values as plain numbers."""
    # repr-based float formatting round-trips float64 exactly; +inf is kept as Infinity.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def sha256_text(text: str) -> str:
    """The sha256 hex digest of ``text`` as UTF-8 (the checksum of a stored payload)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
