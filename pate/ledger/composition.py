"""Composition: the Renyi orders a set of events shares, the RDP of items composed through the
accountant, per block (Sage: a dataset's loss is the max over its blocks), and the epsilon of a
set of items on a budget's basis, delta and conversion.

Events recorded with different Renyi-order grids are composed on the orders all of them share:
RDP at an order is valid for that order alone, and converting with fewer orders can only raise
epsilon, so the total is never understated. The ledger composes only add/remove events
(:func:`check_relations`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pate.core.errors import LedgerError
from pate.ledger.blocks import block_rows
from pate.ledger.budget import LEDGER_RELATION, Budget
from pate.ledger.dataset_registry import budget_of
from pate.ledger.events import accountant
from pate.ledger.ledger_file import LedgerFile
from pate.ledger.recorded_spend import Item, view


def check_relations(events: Sequence[Any], path: Any) -> None:
    """Refuse (``LedgerError``) to compose events stated for another neighbouring relation than
    the ledger's (add/remove): a sum of bounds for different relations bounds neither, and a
    replace-one bound does not give an add/remove one."""
    other = [e for e in events if e.relation != LEDGER_RELATION]
    if other:
        mechanisms = sorted({e.mechanism for e in other})
        raise LedgerError(
            f"the ledger at {path} holds {len(other)} event(s) ({', '.join(mechanisms)}) on these "
            f"records that were analysed for replace-one neighbours; the ledger states every "
            f"budget for adding or removing one record, and the two cannot be composed without "
            f"understating epsilon. Nothing was recorded. Give new runs a new ledger file "
            f"(--ledger FILE, [privacy] ledger or PATE_LEDGER)"
        )


def shared_grid(events: Sequence[Any], path: Any) -> np.ndarray:
    """The Renyi orders every event has (sorted); LedgerError when there is none or when the
    events are stated for another relation than the ledger's (:func:`check_relations`)."""
    if not events:
        raise LedgerError("internal: no events to compose")
    check_relations(events, path)
    common = set(np.asarray(events[0].orders, dtype=np.float64).tolist())
    for e in events[1:]:
        common &= set(np.asarray(e.orders, dtype=np.float64).tolist())
    if not common:
        raise LedgerError(
            f"the events of this dataset in the ledger at {path} share no Renyi order, so they "
            "cannot be composed without understating epsilon; record events on a common order grid "
            "(e.g. analysis.DEFAULT_ORDERS)"
        )
    return np.array(sorted(common), dtype=np.float64)


def restrict(event: Any, grid: np.ndarray) -> Any:
    """``event`` with its RDP curves restricted to the orders of ``grid`` (all present)."""
    orders = np.asarray(event.orders, dtype=np.float64)
    if orders.shape == grid.shape and np.array_equal(orders, grid):
        return event
    return event.on_orders(grid)


def compose(items: Sequence[Item], grid: np.ndarray, data_dependent: bool) -> np.ndarray:
    """The RDP at ``grid`` of ``items`` composed (data-dependent or data-independent RDP)."""
    _, RdpAccountant, _ = accountant()
    acc = RdpAccountant(orders=grid).compose(*[restrict(it.event, grid) for it in items])
    return np.asarray(acc.rdp(data_dependent=data_dependent), dtype=np.float64)


def scopes(
    items: Sequence[Item], all_blocks: Iterable[int], target: frozenset[int] | None
) -> list[tuple[int | None, list[Item]]]:
    """Per block, the items charged to it (whole-dataset items count in every block)."""
    blocks = sorted(all_blocks) if target is None else sorted(target)
    if not blocks:
        return [(None, list(items))]
    return [(b, [it for it in items if not it.blocks or b in it.blocks]) for b in blocks]


def worst_eps(
    conn: sqlite3.Connection,
    digest: str,
    items: Sequence[Item],
    budget: Budget,
    path: Any,
    target: frozenset[int] | None = None,
) -> float:
    """The worst-block epsilon of ``items`` on ``budget``'s basis at its delta, converted
    with its conversion."""
    _, _, eps_from_rdp = accountant()
    grid = shared_grid([it.event for it in items], path)
    names = dict(block_rows(conn, digest))
    worst = 0.0
    for _, scoped in scopes(items, names, target or None):
        if scoped:
            total = compose(scoped, grid, budget.data_dependent)
            worst = max(
                worst,
                float(
                    eps_from_rdp(
                        total, orders=grid, delta=budget.delta, conversion=budget.conversion
                    )[0]
                ),
            )
    return worst


def prior(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    orders: np.ndarray,
    *,
    target: frozenset[int],
    include_reservations: bool,
    exclude: str | None,
    data_dependent: bool | None,
) -> np.ndarray:
    """The RDP at ``orders`` already spent on ``digest`` (:meth:`pate.ledger.Ledger.prior_rdp`):
    the element-wise max over the ``target`` blocks; ``+inf`` at an order some item lacks."""
    if data_dependent is None:
        budget = budget_of(conn, digest)
        data_dependent = bool(budget and budget.data_dependent)
    events, live = view(ledger_file, conn, digest, exclude)
    items = events + (live if include_reservations else [])
    out = np.zeros(orders.shape, dtype=np.float64)
    if not items:
        return out
    check_relations([it.event for it in items], ledger_file.path)
    common = set(orders.tolist())
    for it in items:
        common &= set(np.asarray(it.event.orders, dtype=np.float64).tolist())
    present = np.array([o in common for o in orders.tolist()])
    out[~present] = np.inf
    if not present.any():
        return out
    grid = orders[present]
    names = dict(block_rows(conn, digest))
    curve = np.zeros(grid.shape)
    for _, scoped in scopes(items, names, target or None):
        if scoped:
            curve = np.maximum(curve, compose(scoped, grid, data_dependent))
    out[present] = curve
    return out
