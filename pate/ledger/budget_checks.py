"""Budget checks: whether new spend fits the budget of a dataset and of every dataset linked to
it (``BudgetExceededError`` otherwise, nothing recorded), every budget a run must stay within,
and setting a budget (the spend at the time kept in the audit log).

``reserve``, ``charge`` and a reservation's ``commit`` check, in the same transaction, the budget
of X and of every linked dataset (each on its own budget, delta, basis, conversion and items, the
new spend included); a dataset without a budget is still limited by the budgets of its linked
datasets.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.ledger.audit import write_audit
from pate.ledger.blocks import block_rows
from pate.ledger.budget import Budget
from pate.ledger.composition import compose, prior, scopes, shared_grid, worst_eps
from pate.ledger.dataset_registry import budget_of, label, linked_pairs
from pate.ledger.events import accountant
from pate.ledger.ledger_file import LedgerFile
from pate.ledger.names import first_name
from pate.ledger.recorded_spend import Item, ViewCache, view


def check_fits(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    new: Sequence[Item],
    target: frozenset[int],
    *,
    exclude: str | None,
    what: str,
) -> None:
    """Refuse (``BudgetExceededError``) ``new`` items on ``digest`` unless they fit the budget
    of ``digest`` (in the ``target`` blocks) and of every dataset linked to it (every block)."""
    cache: ViewCache = {}
    for d, shared in [(digest, None)] + linked_pairs(conn, digest):
        events, live = view(ledger_file, conn, d, exclude, cache)
        if d == digest:
            _check_one(ledger_file, conn, d, events + live, list(new), target, what=what)
        else:
            moved = [Item(it.event, frozenset(), it.reservation, digest) for it in new]
            _check_one(
                ledger_file,
                conn,
                d,
                events + live,
                moved,
                frozenset(),
                what=what,
                origin=digest,
                shared=shared,
            )


def _check_one(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    existing: list[Item],
    new: list[Item],
    target: frozenset[int],
    *,
    what: str,
    origin: str | None = None,
    shared: int | None = None,
) -> None:
    """Refuse ``new`` unless ``existing`` + ``new`` fit the budget of ``digest`` in every
    ``target`` block (every block when empty); ``origin``: the dataset ``new`` is charged on,
    when it is another one (linked to ``digest``, sharing ``shared`` records)."""
    # Even without a budget, refuse what could never be composed with the rest.
    grid = shared_grid([it.event for it in existing + new], ledger_file.path)
    budget = budget_of(conn, digest)
    if budget is None:
        return
    _, _, eps_from_rdp = accountant()
    names = dict(block_rows(conn, digest))
    worst = None
    for block, items in scopes(existing + new, names, target or None):
        total = compose(items, grid, budget.data_dependent)
        eps, _ = eps_from_rdp(total, orders=grid, delta=budget.delta, conversion=budget.conversion)
        if float(eps) > budget.eps and (worst is None or float(eps) > worst[1]):
            worst = (block, float(eps))
    if worst is None:
        return
    worst_spent = (
        worst_eps(conn, digest, existing, budget, ledger_file.path, target) if existing else 0.0
    )
    alone = compose(new, grid, budget.data_dependent) if new else None
    requested = (
        float(eps_from_rdp(alone, orders=grid, delta=budget.delta, conversion=budget.conversion)[0])
        if new
        else 0.0
    )
    remaining = max(0.0, budget.eps - worst_spent)
    name = label(conn, digest)
    where = "" if worst[0] is None else f" in block {names[worst[0]]!r}"
    if origin is None:
        head = f"{what} on dataset {name} would bring its spend{where}"
    else:
        head = (
            f"{what} on dataset {label(conn, origin)} would bring the spend of dataset "
            f"{name}, which shares "
            f"{'records (linked by hand)' if shared is None else f'{shared} record(s)'} "
            f"with it,{where}"
        )
    raise BudgetExceededError(
        f"{head} to eps={worst[1]:.4g} > budget eps={budget.eps:g} of {name} "
        f"(delta={budget.delta:g}, {budget.basis} RDP, {budget.conversion} conversion); this "
        f"request alone "
        f"costs eps={requested:.4g}, remaining: eps={remaining:.4g} (committed events, drawn and "
        f"live reservations, of {name} and of the datasets sharing records with it). Nothing was "
        f"recorded. See `pate budget show --dataset {name} --ledger {ledger_file.path}`.",
        requested=requested,
        remaining=remaining,
    )


def constraints(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    orders: np.ndarray,
    *,
    target: frozenset[int],
    exclude: str | None,
) -> list[dict[str, Any]]:
    """Every budget a run on ``digest`` must stay within (:meth:`pate.ledger.Ledger.constraints`)."""
    out = []
    for d, shared in [(digest, None)] + linked_pairs(conn, digest):
        budget = budget_of(conn, d)
        if budget is None:
            continue
        spent = prior(
            ledger_file,
            conn,
            d,
            orders,
            target=target if d == digest else frozenset(),
            include_reservations=True,
            exclude=exclude,
            data_dependent=budget.data_dependent,
        )
        out.append(
            {
                "dataset": d,
                "name": first_name(conn, d),
                "budget": budget,
                "shared_records": shared,
                "linked": d != digest,
                "prior_rdp": spent,
            }
        )
    return out


#: A ``datasets`` row's budget columns: (eps, delta, basis, conversion), all None without one
BudgetRow = tuple[float | None, float | None, str | None, str | None]


def write_budget(
    ledger_file: LedgerFile,
    conn: sqlite3.Connection,
    digest: str,
    budget: Budget,
    reason: str | None,
) -> tuple[BudgetRow, float]:
    """Set the budget of ``digest`` to ``budget``; audit the change with the previous budget and
    the spend at the time. Returns (the previous budget row, that spend)."""
    old = conn.execute(
        "SELECT budget_eps, budget_delta, basis, conversion FROM datasets WHERE digest=?", (digest,)
    ).fetchone()
    conn.execute(
        "UPDATE datasets SET budget_eps=?, budget_delta=?, basis=?, conversion=? WHERE digest=?",
        (budget.eps, budget.delta, budget.basis, budget.conversion, digest),
    )
    events, _ = view(ledger_file, conn, digest)
    spent = worst_eps(conn, digest, events, budget, ledger_file.path) if events else 0.0
    write_audit(
        conn,
        digest,
        "set-budget",
        {
            "eps": budget.eps,
            "delta": budget.delta,
            "basis": budget.basis,
            "conversion": budget.conversion,
            "previous": {
                "eps": old[0],
                "delta": old[1],
                "basis": old[2],
                "conversion": None if old[0] is None else old[3],
            },
            "spent_eps": spent,
            "reason": reason,
        },
    )
    return old, spent
