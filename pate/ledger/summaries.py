"""Read-only reports of a dataset's spend: ``summary`` (what ``pate budget show`` prints) and
``history`` (one row per event with its own and the cumulative epsilon). Every epsilon is
converted with its budget's conversion at its budget's delta, on its budget's basis; spend
includes the events and live reservations of the datasets linked to this one."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pate.ledger.budget_checks import budget_changes
from pate.ledger.composition import compose, epsilon, scopes, shared_grid, worst_eps
from pate.ledger.dataset_registry import (
    Budget,
    aliases,
    block_names,
    budget_of,
    first_name,
    linked_datasets,
    linked_pairs,
)
from pate.ledger.ledger_file import LedgerConnection, read_audit
from pate.ledger.recorded_spend import Item, ViewCache, reservation_infos, stored_events, view


def summary(conn: LedgerConnection, digest: str) -> dict[str, Any]:
    """:meth:`pate.ledger.Ledger.summary`."""
    budget = budget_of(conn, digest)
    cache: ViewCache = {}
    events, live = view(conn, digest, None, cache)
    names = block_names(conn, digest)
    records = conn.execute(
        "SELECT num_records FROM identities WHERE dataset=?", (digest,)
    ).fetchone()
    grid = shared_grid(conn, [it.event for it in events + live]) if events + live else None
    blocks, worst = _spend_per_block(events, live, names, grid, budget)
    remaining = None
    if budget is not None and worst["spent_and_reserved"] is not None:
        remaining = max(0.0, budget.eps - worst["spent_and_reserved"])
    linked = _linked_spend(conn, digest, cache)
    candidates = [
        (row["remaining"], row["dataset"]) for row in linked if row["remaining"] is not None
    ]
    least = min(candidates + ([] if remaining is None else [(remaining, digest)]), default=None)
    # ``events`` holds the drawn reservations too (spent: their noise was drawn)
    return worst | {
        "dataset": digest,
        "name": first_name(conn, digest),
        "aliases": aliases(conn, digest),
        "ledger": str(conn.path),
        "records": None if records is None else int(records[0]),
        "budget": None if budget is None else dataclasses.asdict(budget),
        "events": sum(1 for it in events if it.via is None and it.reservation is None),
        "drawn_reservations": sum(
            1 for it in events if it.via is None and it.reservation is not None
        ),
        "linked_events": sum(1 for it in events if it.via is not None and it.reservation is None),
        "runs": conn.execute(
            "SELECT count(DISTINCT run_id) FROM events WHERE dataset=?", (digest,)
        ).fetchone()[0],
        "orders": None
        if grid is None
        else {"count": int(grid.size), "min": float(grid.min()), "max": float(grid.max())},
        "remaining": remaining,
        "blocks": blocks if names else [],
        "reservations": _live_reservations(conn, digest, budget),
        "linked": linked,
        "remaining_effective": None if least is None else least[0],
        "limited_by": None if least is None else least[1],
        "budget_changes": budget_changes(read_audit(conn, digest)),
    }


def _spend_per_block(
    events: list[Item],
    live: list[Item],
    names: dict[int, str],
    grid: np.ndarray | None,
    budget: Budget | None,
) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """One row per block (one row for the whole dataset without blocks) of spent epsilon on
    both RDP kinds and spent + reserved on the budget's basis, and the worst of each."""
    basis = bool(budget and budget.data_dependent)

    def eps_of(items: list[Item], data_dependent: bool) -> float | None:
        if not items:
            return 0.0
        if budget is None or grid is None:
            return None
        return float(epsilon(compose(items, grid, data_dependent), grid, budget))

    keys = ("spent", "spent_data_independent", "spent_data_dependent", "spent_and_reserved")
    worst: dict[str, float | None] = dict.fromkeys(keys, 0.0)
    rows = []
    for (block, spent), (_, reserved) in zip(scopes(events, names), scopes(live, names)):
        row: dict[str, Any] = {
            "block": None if block is None else names[block],
            "events": len(spent),
            "spent_data_independent": eps_of(spent, False),
            "spent_data_dependent": eps_of(spent, True),
            "spent_and_reserved": eps_of(spent + reserved, basis),
        }
        row["spent"] = row["spent_data_dependent" if basis else "spent_data_independent"]
        for key in keys:
            before = worst[key]
            worst[key] = None if before is None or row[key] is None else max(before, row[key])
        rows.append(row)
    return rows, worst


def _live_reservations(
    conn: LedgerConnection, digest: str, budget: Budget | None
) -> list[dict[str, Any]]:
    """The active, stale and drawn reservations of ``digest`` (a drawn one counts as spent),
    each with its own epsilon."""
    keys = ("id", "run_id", "status", "pid", "hostname", "created_utc", "heartbeat_utc")
    return [
        {k: getattr(r, k) for k in keys}
        | {
            "blocks": list(r.blocks),
            "eps_alone": None if budget is None else float(epsilon(r.rdp, r.orders, budget)),
        }
        for r in reservation_infos(conn, digest, live_only=False)
        if r.status in ("active", "stale", "drawn")
    ]


def _linked_spend(conn: LedgerConnection, digest: str, cache: ViewCache) -> list[dict[str, Any]]:
    """Every dataset linked to ``digest`` with its own budget, spend and remaining epsilon."""
    linked = linked_datasets(conn, digest)
    for row in linked:
        budget = budget_of(conn, row["dataset"])
        events, live = view(conn, row["dataset"], None, cache)
        row["events"] = sum(1 for it in events if it.via is None and it.reservation is None)
        row["live_reservations"] = sum(1 for it in live if it.via is None)
        row["spent_and_reserved"] = row["remaining"] = None
        if budget is not None:
            reserved = worst_eps(conn, row["dataset"], events + live, budget)
            row["spent_and_reserved"], row["remaining"] = reserved, max(0.0, budget.eps - reserved)
    return linked


def history(conn: LedgerConnection, digest: str) -> list[dict[str, Any]]:
    """:meth:`pate.ledger.Ledger.history`: one row per event of ``digest`` and of its linked
    datasets, oldest first, with its own and the cumulative (worst block) epsilon."""
    budget = budget_of(conn, digest)
    datasets = [digest, *(other for other, _ in linked_pairs(conn, digest))]
    stored = sorted((s for d in datasets for s in stored_events(conn, d)), key=lambda s: s.id)
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
    grid = shared_grid(conn, [s.event for s in stored])
    kind = "rdp" if budget.data_dependent else "rdp_data_independent"
    per_event = np.stack([getattr(s.event.on_orders(grid), kind) for s in stored])
    # After each event, the epsilon of every event up to it, worst over the blocks: prefix
    # compositions, each one recomposed with the accountant at the points it changes.
    charged = [s.blocks if s.dataset == digest else () for s in stored]  # (): every block
    cumulative = np.zeros(len(stored))
    blocks: list[str | None] = [*block_names(conn, digest).values()] or [None]
    for block in blocks:
        mask = np.array([block is None or not b or block in b for b in charged], dtype=float)
        prefix = epsilon(np.cumsum(per_event * mask[:, None], axis=0), grid, budget)
        cumulative = np.maximum(cumulative, np.where(np.cumsum(mask) > 0, prefix, 0.0))
    alone = np.atleast_1d(epsilon(per_event, grid, budget))
    for row, own, total in zip(rows, alone, cumulative):
        row["eps"], row["cumulative_eps"] = float(own), float(total)
    return rows
