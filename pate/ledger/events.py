"""Privacy events as the ledger stores them: the canonical payload of an event, a reservation's
upper-bound curve as an event (so it composes like one), and both read back with their
checksums verified (a failed checksum is a ``LedgerError``, the file left untouched)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pate.core.errors import LedgerError
from pate.ledger.formats import canonical, sha256_text

if TYPE_CHECKING:
    from pate.analysis.accountant import PrivacyEvent, RdpAccountant
    from pate.analysis.arrays import FloatOrArray

    #: :func:`pate.analysis.eps_from_rdp`: (rdp, *, orders, delta, conversion) -> (eps, order)
    EpsFromRdp = Callable[..., tuple[FloatOrArray, FloatOrArray]]


def accountant() -> tuple[type[PrivacyEvent], type[RdpAccountant], EpsFromRdp]:
    """``pate.analysis.accountant`` and ``eps_from_rdp`` (imported lazily: the CLI starts fast)."""
    from pate.analysis import eps_from_rdp
    from pate.analysis.accountant import PrivacyEvent, RdpAccountant

    return PrivacyEvent, RdpAccountant, eps_from_rdp


def event_payload(e: Any) -> str:
    """The canonical JSON stored for ``PrivacyEvent`` ``e`` (its checksum is stored beside it)."""
    return canonical(
        {
            "mechanism": str(e.mechanism),
            "params": e.params,
            "orders": np.asarray(e.orders, dtype=np.float64).tolist(),
            "rdp": np.asarray(e.rdp, dtype=np.float64).tolist(),
            "rdp_data_independent": np.asarray(e.rdp_data_independent, dtype=np.float64).tolist(),
            "queries": int(e.queries),
            "answered": int(e.answered),
            "relation": str(e.relation),
        }
    )


def reservation_event(orders: np.ndarray, rdp: np.ndarray, rid: str) -> Any:
    """A reservation as a PrivacyEvent, so it composes through the accountant like any event."""
    PrivacyEvent, _, _ = accountant()
    return PrivacyEvent(
        mechanism="reservation",
        params={"reservation": rid},
        orders=np.asarray(orders, dtype=np.float64),
        rdp=np.asarray(rdp, dtype=np.float64),
        rdp_data_independent=np.asarray(rdp, dtype=np.float64),
        queries=0,
        answered=0,
    )


def load_event(row: Sequence[Any], path: Any) -> Any:
    """The ``PrivacyEvent`` of an events row ``(id, payload, sha256, ...)`` of the ledger at
    ``path``, its checksum verified."""
    PrivacyEvent, _, _ = accountant()
    event_id, payload, digest = row[0], row[1], row[2]
    if sha256_text(payload) != digest:
        raise LedgerError(
            f"event {event_id} in the ledger at {path} fails its checksum "
            "(the file was altered or damaged); the ledger was left untouched -- "
            "restore it from a backup"
        )
    try:
        return PrivacyEvent.from_dict(json.loads(payload))
    except (ValueError, TypeError) as exc:  # e.g. no relation: never guessed
        raise LedgerError(
            f"event {event_id} in the ledger at {path} is malformed ({exc}); the ledger was "
            "left untouched -- restore it from a backup"
        ) from None


def load_curve(rid: str, payload: str, digest: str, path: Any) -> tuple[np.ndarray, np.ndarray]:
    """(orders, rdp) of reservation ``rid`` of the ledger at ``path``, its checksum verified."""
    if sha256_text(payload) != digest:
        raise LedgerError(
            f"reservation {rid} in the ledger at {path} fails its checksum "
            "(the file was altered or damaged); restore it from a backup"
        )
    d = json.loads(payload)
    return np.asarray(d["orders"], dtype=np.float64), np.asarray(d["rdp"], dtype=np.float64)
