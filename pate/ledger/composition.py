"""Composition: the Renyi orders a set of events shares, the RDP of items composed through the
accountant per block (Sage: a dataset's loss is the max over its blocks), and its epsilon on a
budget's basis, delta and conversion.

Events recorded with different Renyi-order grids are composed on the orders all of them share:
RDP at an order is valid for that order alone, and converting with fewer orders can only raise
epsilon, so the total is never understated. The ledger composes only add/remove events
(:func:`check_relations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pate.analysis import eps_from_rdp
from pate.analysis.accountant import RdpAccountant
from pate.core.errors import LedgerError
from pate.ledger.dataset_registry import LEDGER_RELATION, Budget, block_names, budget_of
from pate.ledger.ledger_file import LedgerConnection
from pate.ledger.recorded_spend import Item, view


def epsilon(rdp: Any, orders: np.ndarray, budget: Budget) -> Any:
    """The epsilon of ``rdp`` (one curve, or one per row) at ``orders``, at ``budget``'s delta
    with its conversion."""
    return eps_from_rdp(rdp, orders=orders, delta=budget.delta, conversion=budget.conversion)[0]


def check_relations(conn: LedgerConnection, events: Sequence[Any]) -> None:
    """Refuse (``LedgerError``) to compose events stated for another neighbouring relation than
    the ledger's (add/remove): a sum of bounds for different relations bounds neither, and a
    replace-one bound does not give an add/remove one."""
    other = [e for e in events if e.relation != LEDGER_RELATION]
    if other:
        mechanisms = sorted({e.mechanism for e in other})
        raise LedgerError(
            f"the ledger at {conn.path} holds {len(other)} event(s) ({', '.join(mechanisms)}) on "
            f"these records that were analysed for replace-one neighbours; the ledger states every "
            f"budget for adding or removing one record, and the two cannot be composed without "
            f"understating epsilon. Nothing was recorded. Give new runs a new ledger file "
            f"(--ledger FILE, [privacy] ledger or PATE_LEDGER)"
        )


def common_orders(events: Iterable[Any], orders: Iterable[float]) -> set[float]:
    """The orders of ``orders`` that every event of ``events`` has."""
    common = set(orders)
    for e in events:
        common &= set(np.asarray(e.orders, dtype=np.float64).tolist())
    return common


def shared_grid(conn: LedgerConnection, events: Sequence[Any]) -> np.ndarray:
    """The Renyi orders every event has (sorted); LedgerError when there is none or when the
    events are stated for another relation than the ledger's (:func:`check_relations`)."""
    check_relations(conn, events)
    common = common_orders(events[1:], np.asarray(events[0].orders, dtype=np.float64).tolist())
    if not common:
        raise LedgerError(
            f"the events of this dataset in the ledger at {conn.path} share no Renyi order, so "
            "they cannot be composed without understating epsilon; record events on a common "
            "order grid (e.g. analysis.DEFAULT_ORDERS)"
        )
    return np.array(sorted(common), dtype=np.float64)


def compose(items: Sequence[Item], grid: np.ndarray, data_dependent: bool) -> np.ndarray:
    """The RDP at ``grid`` of ``items`` composed (data-dependent or data-independent RDP)."""
    acc = RdpAccountant(orders=grid).compose(*[it.event.on_orders(grid) for it in items])
    return np.asarray(acc.rdp(data_dependent=data_dependent), dtype=np.float64)


def scopes(items: Sequence[Item], blocks: Iterable[int]) -> list[tuple[int | None, list[Item]]]:
    """Per block of ``blocks``, the items charged to it (whole-dataset items count in every
    block); one scope of every item (block None) when ``blocks`` is empty."""
    ordered = sorted(blocks)
    if not ordered:
        return [(None, list(items))]
    return [(b, [it for it in items if not it.blocks or b in it.blocks]) for b in ordered]


def worst_eps(
    conn: LedgerConnection,
    digest: str,
    items: Sequence[Item],
    budget: Budget,
    target: frozenset[int] = frozenset(),
) -> float:
    """The worst-block epsilon of ``items`` on ``budget``'s basis at its delta, converted with
    its conversion, over the ``target`` blocks of ``digest`` (empty: every block); 0 without
    items."""
    if not items:
        return 0.0
    grid = shared_grid(conn, [it.event for it in items])
    return max(
        (
            float(epsilon(compose(scoped, grid, budget.data_dependent), grid, budget))
            for _, scoped in scopes(items, target or block_names(conn, digest))
            if scoped
        ),
        default=0.0,
    )


def prior(
    conn: LedgerConnection,
    digest: str,
    orders: np.ndarray,
    target: frozenset[int],
    exclude: str | None = None,
    data_dependent: bool | None = None,
    include_reservations: bool = True,
) -> np.ndarray:
    """The RDP at ``orders`` already spent on ``digest`` (:meth:`pate.ledger.Ledger.prior_rdp`):
    the element-wise max over the ``target`` blocks; ``+inf`` at an order some item lacks."""
    if data_dependent is None:
        budget = budget_of(conn, digest)
        data_dependent = bool(budget and budget.data_dependent)
    events, live = view(conn, digest, exclude)
    items = events + (live if include_reservations else [])
    out = np.zeros(orders.shape, dtype=np.float64)
    if not items:
        return out
    check_relations(conn, [it.event for it in items])
    common = common_orders([it.event for it in items], orders.tolist())
    present = np.array([o in common for o in orders.tolist()])
    out[~present] = np.inf
    grid = orders[present]
    curve = np.zeros(grid.shape)
    for _, scoped in scopes(items, target or block_names(conn, digest)):
        if scoped and grid.size:
            curve = np.maximum(curve, compose(scoped, grid, data_dependent))
    out[present] = curve
    return out
