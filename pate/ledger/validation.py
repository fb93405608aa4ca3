"""Checks of what a caller passes to the ledger: typed errors that name the argument and the
value, raised before any work."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_orders
from pate.ledger.identity import is_digest


def check_digest(digest: Any) -> str:
    """``digest`` as 64 lower-case hex characters, or a ``ValueError`` saying how to get one."""
    if not isinstance(digest, str) or not is_digest(digest.strip().lower()):
        raise InputError(
            f"digest must be a 64-character sha256 hex string, got {digest!r}; print "
            "the one `pate run` uses with `pate budget digest --config CONFIG` (or "
            "compute pate.ledger.dataset_identity(x, y).digest)"
        )
    return digest.strip().lower()


def check_name(name: Any, what: str) -> str | None:
    """``name`` stripped (None stays None), or a typed error naming ``what``."""
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise InputTypeError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > 200:
        raise InputError(f"{what} must be at most 200 characters, got {len(name)}")
    return name.strip()


def check_run_id(run_id: Any) -> str:
    """``run_id``, or a fresh random one for None."""
    if run_id is None:
        return uuid.uuid4().hex
    if not isinstance(run_id, str) or not run_id.strip():
        raise InputTypeError(f"run_id must be a non-empty string or None, got {run_id!r}")
    return run_id


def check_grid(orders: Any, name: str) -> np.ndarray:
    """``orders`` as valid Renyi orders without repeats, or a typed error naming ``name``."""
    arr = check_orders(orders, name)
    if np.unique(arr).size != arr.size:
        raise InputError(f"{name} must not repeat an order")
    return arr


def check_events(events: Any) -> list[Any]:
    """``events`` (one ``PrivacyEvent`` or a list) as a list of events, each on orders without
    repeats (a ``PrivacyEvent`` checks the rest of itself when it is made)."""
    if isinstance(events, PrivacyEvent):
        events = [events]
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise InputTypeError(
            f"events must be a list of pate.analysis.accountant.PrivacyEvent, got "
            f"{type(events).__name__}"
        )
    out = list(events)
    for i, e in enumerate(out):
        if not isinstance(e, PrivacyEvent):
            raise InputTypeError(
                f"events[{i}] must be an pate.analysis.accountant.PrivacyEvent, got "
                f"{type(e).__name__}"
            )
        check_grid(e.orders, f"events[{i}].orders")
    return out


def check_reason(reason: Any) -> str | None:
    """``reason`` (a non-empty string, or None), or a ``TypeError`` naming it."""
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise InputTypeError(f"reason must be a non-empty string or None, got {reason!r}")
    return reason
