"""Two figures of the budget in words that the run's analysis does not hold, read from the ledger
by the report stage (kept in ``private/ledger_outlook.json``, so the report stays a function of
the run directory's files); post-processing of charged events, hence publishable."""

from __future__ import annotations

import logging
from pathlib import Path

from pate.core.errors import LedgerError
from pate.ledger.composition import worst_eps
from pate.ledger.dataset_registry import budget_of, resolve
from pate.ledger.ledger_file import DEFAULT_TIMEOUT_SECONDS, LedgerFile
from pate.ledger.recorded_spend import Item, stored_events, view
from pate.ledger.summaries import history

logger = logging.getLogger(__name__)


def ledger_outlook(ledger: dict | None, run_id: str | None) -> dict:
    """``sum_of_charges_eps`` (the dataset's charges, each converted on its own, summed) and
    ``next_run_eps`` (the dataset's total with this run's events charged once more), on the
    dataset's budget; {} when there is no ledger file, no budget, no named dataset or no event of
    ``run_id``. Opens the ledger read-only; never creates one."""
    if not ledger or not run_id or not ledger.get("name") or not Path(ledger["path"]).is_file():
        return {}
    try:
        file = LedgerFile(Path(ledger["path"]), create=False, timeout=DEFAULT_TIMEOUT_SECONDS)
        try:
            with file.transaction(write=False) as conn:
                digest = resolve(conn, ledger["name"])
                budget = budget_of(conn, digest)
                mine = [  # a run's events are recorded as "<run id>:<stage>"
                    Item(s.event, frozenset())
                    for s in stored_events(conn, digest)
                    if s.run_id.partition(":")[0] == run_id
                ]
                if budget is None or not mine:
                    return {}
                events, live = view(conn, digest)
                own = [row["eps"] for row in history(conn, digest) if not row["linked"]]
                next_eps = worst_eps(conn, digest, events + live + mine, budget)
        finally:
            file.close()
    except (LedgerError, OSError, ValueError) as exc:
        logger.warning("the report could not read the ledger at %s: %s", ledger["path"], exc)
        return {}
    return {"sum_of_charges_eps": float(sum(own)), "next_run_eps": float(next_eps)}
