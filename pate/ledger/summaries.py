"""Read-only reports of a dataset's spend: ``summary`` (what ``pate budget show`` prints) and
``history`` (one row per event with its own and the cumulative epsilon). Every epsilon is
converted with its budget's conversion at its budget's delta, on its budget's basis; spend
includes the events and live reservations of the datasets linked to this one."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

import numpy as np

from pate.ledger.blocks import block_rows
from pate.ledger.budget import Budget
from pate.ledger.composition import compose, restrict, scopes, shared_grid, worst_eps
from pate.ledger.dataset_registry import budget_of, linked_pairs
from pate.ledger.events import accountant
from pate.ledger.ledger_file import LedgerFile
from pate.ledger.names import aliases, first_name
from pate.ledger.recorded_spend import (
    Item,
    ReservationInfo,
    ViewCache,
    reservation_infos,
    stored_events,
    view,
)


def summary(ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str) -> dict[str, Any]:
    """:meth:`pate.ledger.Ledger.summary` without ``budget_changes`` (read from the audit log)."""
    budget = budget_of(conn, digest)
    cache: ViewCache = {}
    events, live = view(ledger_file, conn, digest, None, cache)
    names = dict(block_rows(conn, digest))
    runs = conn.execute(
        "SELECT count(DISTINCT run_id) FROM events WHERE dataset=?", (digest,)
    ).fetchone()[0]
    records = conn.execute(
        "SELECT num_records FROM identities WHERE dataset=?", (digest,)
    ).fetchone()
    # ``events`` holds the drawn reservations too (spent: their noise was drawn)
    own = [it for it in events if it.via is None and it.reservation is None]
    drawn = [it for it in events if it.via is None and it.reservation is not None]
    out: dict[str, Any] = {
        "dataset": digest,
        "name": first_name(conn, digest),
        "aliases": aliases(conn, digest),
        "ledger": str(ledger_file.path),
        "records": None if records is None else int(records[0]),
        "budget": None if budget is None else dataclasses.asdict(budget),
        "events": len(own),
        "drawn_reservations": len(drawn),
        "linked_events": sum(1 for it in events if it.via is not None and it.reservation is None),
        "runs": runs,
    }
    all_items = events + live
    grid = shared_grid([it.event for it in all_items], ledger_file.path) if all_items else None
    out["orders"] = (
        None
        if grid is None
        else {"count": int(grid.size), "min": float(grid.min()), "max": float(grid.max())}
    )
    blocks, worst = _spend_per_block(events, live, names, grid, budget)
    out.update(worst)
    out["remaining"] = (
        None
        if budget is None or worst["spent_and_reserved"] is None
        else max(0.0, budget.eps - worst["spent_and_reserved"])
    )
    out["blocks"] = blocks if names else []
    out["reservations"] = _live_reservations(
        reservation_infos(ledger_file, conn, digest, live_only=False), budget
    )
    linked = _linked_spend(ledger_file, conn, digest, cache)
    out["linked"] = linked
    candidates = ([(out["remaining"], digest)] if out["remaining"] is not None else []) + [
        (row["remaining"], row["dataset"]) for row in linked if row["remaining"] is not None
    ]
    least = min(candidates, default=None)
    out["remaining_effective"] = None if least is None else least[0]
    out["limited_by"] = None if least is None else least[1]
    return out


def _spend_per_block(
    events: list[Item],
    live: list[Item],
    names: dict[int, str],
    grid: np.ndarray | None,
    budget: Budget | None,
) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """One row per block (one row for the whole dataset without blocks) of spent epsilon on
    both RDP kinds and spent + reserved on the budget's basis, and the worst of each."""
    _, _, eps_from_rdp = accountant()
    delta = budget.delta if budget else None
    conversion = budget.conversion if budget else "classic"
    dd_basis = bool(budget and budget.data_dependent)

    def eps_of(items: list[Item], data_dependent: bool) -> float | None:
        if not items or delta is None or grid is None:  # grid is None only without items
            return 0.0 if not items else None
        return float(
            eps_from_rdp(
                compose(items, grid, data_dependent),
                orders=grid,
                delta=delta,
                conversion=conversion,
            )[0]
        )

    blocks = []
    worst: dict[str, float | None] = {
        "spent": 0.0,
        "spent_data_independent": 0.0,
        "spent_data_dependent": 0.0,
        "spent_and_reserved": 0.0,
    }
    for block, _ in scopes(events + live, names, None):
        scoped_events = [
            it for it in events if block is None or not it.blocks or block in it.blocks
        ]
        scoped_live = [it for it in live if block is None or not it.blocks or block in it.blocks]
        row: dict[str, Any] = {
            "block": None if block is None else names[block],
            "events": len(scoped_events),
            "spent_data_independent": eps_of(scoped_events, False),
            "spent_data_dependent": eps_of(scoped_events, True),
            "spent_and_reserved": eps_of(scoped_events + scoped_live, dd_basis),
        }
        row["spent"] = row["spent_data_dependent" if dd_basis else "spent_data_independent"]
        for key in worst:
            if row[key] is not None and worst[key] is not None:
                worst[key] = max(worst[key], row[key])
            else:
                worst[key] = None
        blocks.append(row)
    return blocks, worst


def _live_reservations(infos: list[ReservationInfo], budget: Budget | None) -> list[dict[str, Any]]:
    """The active, stale and drawn reservations among ``infos`` (a drawn one counts as spent),
    each with its own epsilon."""
    _, _, eps_from_rdp = accountant()
    delta = budget.delta if budget else None
    conversion = budget.conversion if budget else "classic"
    return [
        {
            "id": r.id,
            "run_id": r.run_id,
            "status": r.status,
            "pid": r.pid,
            "hostname": r.hostname,
            "created_utc": r.created_utc,
            "heartbeat_utc": r.heartbeat_utc,
            "blocks": list(r.blocks),
            "eps_alone": None
            if delta is None
            else float(eps_from_rdp(r.rdp, orders=r.orders, delta=delta, conversion=conversion)[0]),
        }
        for r in infos
        if r.status in ("active", "stale", "drawn")
    ]


def _linked_spend(
    ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str, cache: ViewCache
) -> list[dict[str, Any]]:
    """Every dataset linked to ``digest`` with its own budget, spend and remaining epsilon."""
    linked = []
    for other, shared in linked_pairs(conn, digest):
        other_budget = budget_of(conn, other)
        other_events, other_live = view(ledger_file, conn, other, None, cache)
        both = other_events + other_live
        reserved = (
            None
            if other_budget is None
            else (worst_eps(conn, other, both, other_budget, ledger_file.path) if both else 0.0)
        )
        linked.append(
            {
                "dataset": other,
                "shared_records": shared,
                "name": first_name(conn, other),
                "budget": None if other_budget is None else dataclasses.asdict(other_budget),
                "events": sum(
                    1 for it in other_events if it.via is None and it.reservation is None
                ),
                "live_reservations": sum(1 for it in other_live if it.via is None),
                "spent_and_reserved": reserved,
                "remaining": (
                    None
                    if reserved is None or other_budget is None
                    else max(0.0, other_budget.eps - reserved)
                ),
            }
        )
    return linked


def history(ledger_file: LedgerFile, conn: sqlite3.Connection, digest: str) -> list[dict[str, Any]]:
    """:meth:`pate.ledger.Ledger.history`: one row per event of ``digest`` and of its linked
    datasets, oldest first, with its own and the cumulative (worst block) epsilon."""
    _, _, eps_from_rdp = accountant()
    budget = budget_of(conn, digest)
    stored = stored_events(ledger_file, conn, digest)
    for other, _ in linked_pairs(conn, digest):
        stored += stored_events(ledger_file, conn, other)
    names = dict(block_rows(conn, digest))
    stored.sort(key=lambda s: s.id)
    rows = [
        {
            "id": s.id,
            "dataset": s.dataset,
            "linked": s.dataset != digest,
            "run_id": s.run_id,
            "time_utc": s.time_utc,
            "mechanism": s.event.mechanism,
            "params": s.event.params,
            "queries": int(s.event.queries),
            "answered": int(s.event.answered),
            "blocks": [] if s.dataset != digest else list(s.blocks),
            "reservation": s.reservation,
            "eps": None,
            "cumulative_eps": None,
        }
        for s in stored
    ]
    if not stored or budget is None:
        return rows
    grid = shared_grid([s.event for s in stored], ledger_file.path)
    dd = budget.data_dependent
    per_event = np.stack(
        [
            restrict(s.event, grid).rdp if dd else restrict(s.event, grid).rdp_data_independent
            for s in stored
        ]
    )
    alone, _ = eps_from_rdp(
        per_event, orders=grid, delta=budget.delta, conversion=budget.conversion
    )
    by_name = {n: b for b, n in names.items()}
    block_ids = [
        frozenset(by_name[n] for n in s.blocks) if s.dataset == digest else frozenset()
        for s in stored
    ]
    scope_blocks: list[int | None] = [*sorted(names)] or [None]
    cumulative = _cumulative_eps(per_event, block_ids, scope_blocks, grid, budget)
    for row, a, c in zip(rows, np.atleast_1d(alone), cumulative):
        row["eps"], row["cumulative_eps"] = float(a), float(c)
    return rows


def _cumulative_eps(
    per_event: np.ndarray,
    block_ids: list[frozenset[int]],
    blocks: list[int | None],
    grid: np.ndarray,
    budget: Budget,
) -> np.ndarray:
    """After each event, the epsilon of every event up to it, worst over ``blocks``."""
    _, _, eps_from_rdp = accountant()
    cumulative = np.full(per_event.shape[0], 0.0)
    for block in blocks:
        mask = np.array([block is None or not b or block in b for b in block_ids], dtype=float)
        # Prefix compositions, each one recomposed with the accountant at the points it changes.
        prefix = np.cumsum(per_event * mask[:, None], axis=0)
        eps_prefix, _ = eps_from_rdp(
            prefix, orders=grid, delta=budget.delta, conversion=budget.conversion
        )
        eps_prefix = np.where(np.cumsum(mask) > 0, eps_prefix, 0.0)
        cumulative = np.maximum(cumulative, eps_prefix)
    return cumulative
