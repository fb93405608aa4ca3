"""Budget checks: whether new spend fits the budget of a dataset and of every dataset linked to
it, each on its own budget, delta, basis, conversion and items (``BudgetExceededError``
otherwise, nothing recorded; a dataset without a budget is still limited by its linked ones);
every budget a run must stay within; setting a budget (audited) and the budget's changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.ledger.composition import compose, epsilon, prior, scopes, shared_grid, worst_eps
from pate.ledger.dataset_registry import (
    Budget,
    block_names,
    budget_of,
    first_name,
    label,
    linked_pairs,
)
from pate.ledger.ledger_file import LedgerConnection, write_audit
from pate.ledger.recorded_spend import Item, ViewCache, view


def check_fits(
    conn: LedgerConnection,
    digest: str,
    new: Sequence[Item],
    target: frozenset[int],
    *,
    exclude: str | None,
    what: str,
) -> None:
    """Refuse (``BudgetExceededError``) the ``new`` items on ``digest`` unless they fit the budget
    of ``digest`` (in the ``target`` blocks) and of every dataset linked to it (every block); the
    existing items are everything but reservation ``exclude``."""
    cache: ViewCache = {}
    for d, shared in [(digest, None), *linked_pairs(conn, digest)]:
        events, live = view(conn, d, exclude, cache)
        if d == digest:
            _check_one(conn, d, events + live, list(new), target, what, None)
        else:
            moved = [Item(it.event, frozenset(), it.reservation, digest) for it in new]
            _check_one(conn, d, events + live, moved, frozenset(), what, (digest, shared))


def _check_one(
    conn: LedgerConnection,
    digest: str,
    existing: list[Item],
    new: list[Item],
    target: frozenset[int],
    what: str,
    linked: tuple[str, int | None] | None,
) -> None:
    """Refuse ``new`` unless ``existing`` + ``new`` fit the budget of ``digest`` in every
    ``target`` block (every block when empty); ``linked``: the dataset ``new`` is charged on and
    its number of shared records, when it is another one (linked to ``digest``)."""
    # Even without a budget, refuse what could never be composed with the rest.
    grid = shared_grid(conn, [it.event for it in existing + new])
    budget = budget_of(conn, digest)
    if budget is None:
        return
    names = block_names(conn, digest)
    spends = [
        (float(epsilon(compose(items, grid, budget.data_dependent), grid, budget)), block)
        for block, items in scopes(existing + new, target or names)
    ]
    eps, block = max(spends, key=lambda spend: spend[0])
    if eps <= budget.eps:
        return
    requested = float(epsilon(compose(new, grid, budget.data_dependent), grid, budget))
    remaining = max(0.0, budget.eps - worst_eps(conn, digest, existing, budget, target))
    name = label(conn, digest)
    where = "" if block is None else f" in block {names[block]!r}"
    if linked is None:
        head = f"{what} on dataset {name} would bring its spend{where}"
    else:
        shares = "records (linked by hand)" if linked[1] is None else f"{linked[1]} record(s)"
        head = (
            f"{what} on dataset {label(conn, linked[0])} would bring the spend of dataset "
            f"{name}, which shares {shares} with it,{where}"
        )
    raise BudgetExceededError(
        f"{head} to eps={eps:.4g} > budget eps={budget.eps:g} of {name} "
        f"(delta={budget.delta:g}, {budget.basis} RDP, {budget.conversion} conversion); this "
        f"request alone "
        f"costs eps={requested:.4g}, remaining: eps={remaining:.4g} (committed events, drawn and "
        f"live reservations, of {name} and of the datasets sharing records with it). Nothing was "
        f"recorded. See `pate budget show --dataset {name} --ledger {conn.path}`.",
        requested=requested,
        remaining=remaining,
    )


def constraints(
    conn: LedgerConnection,
    digest: str,
    orders: np.ndarray,
    target: frozenset[int],
    exclude: str | None,
) -> list[dict[str, Any]]:
    """Every budget a run on ``digest`` must stay within (:meth:`pate.ledger.Ledger.constraints`)."""
    out = []
    for d, shared in [(digest, None), *linked_pairs(conn, digest)]:
        budget = budget_of(conn, d)
        if budget is not None:
            scope = target if d == digest else frozenset()
            out.append(
                {
                    "dataset": d,
                    "name": first_name(conn, d),
                    "budget": budget,
                    "shared_records": shared,
                    "linked": d != digest,
                    "prior_rdp": prior(conn, d, orders, scope, exclude, budget.data_dependent),
                }
            )
    return out


def write_budget(
    conn: LedgerConnection, digest: str, budget: Budget, reason: str | None
) -> tuple[float | None, float]:
    """Set the budget of ``digest`` to ``budget``; audit the change with the previous budget and
    the spend at the time. Returns (the previous budget's eps or None, that spend)."""
    old = conn.execute(
        "SELECT budget_eps, budget_delta, basis, conversion FROM datasets WHERE digest=?", (digest,)
    ).fetchone()
    conn.execute(
        "UPDATE datasets SET budget_eps=?, budget_delta=?, basis=?, conversion=? WHERE digest=?",
        (budget.eps, budget.delta, budget.basis, budget.conversion, digest),
    )
    spent = worst_eps(conn, digest, view(conn, digest)[0], budget)
    previous = dict(zip(("eps", "delta", "basis", "conversion"), old))  # eps None: the first
    detail = {k: getattr(budget, k) for k in ("eps", "delta", "basis", "conversion")}
    detail |= {"previous": previous, "spent_eps": spent, "reason": reason}
    write_audit(conn, digest, "set-budget", detail)
    return old[0], spent


def budget_changes(audit_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The budget changes among ``audit_rows`` (:meth:`pate.ledger.Ledger.budget_changes`)."""
    out = []
    for row in audit_rows:
        if row["action"] != "set-budget":
            continue
        new = row["detail"]
        previous = None if new["previous"]["eps"] is None else new["previous"]
        if previous is None:
            change = "initial"
        elif any(previous[k] != new[k] for k in ("delta", "basis", "conversion")):
            change = "changed"
        elif new["eps"] == previous["eps"]:
            change = "unchanged"
        else:
            change = "raised" if new["eps"] > previous["eps"] else "lowered"
        keys = ("eps", "delta", "basis", "conversion", "spent_eps", "reason")
        out.append(
            {"time_utc": row["time_utc"], "previous": previous, "change": change}
            | {k: new[k] for k in keys}
        )
    return out
