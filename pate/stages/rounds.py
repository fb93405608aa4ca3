"""The round driver of the aggregate stage: reserve -> draw -> write pending -> commit."""

from __future__ import annotations

import contextlib
import dataclasses

from pate.analysis.errors import BudgetExceededError
from pate.rundir import Run
from pate.stages.pending import _pending_write


def _max_fitting(ledger, dataset: str, *, orders, worst, limit: int, run_id: str):
    """The largest n <= limit whose worst case (n x ``worst``) the ledger can reserve now, and
    that reservation (None, 0 when not even one query fits). Tries ``limit`` first, then a
    binary search of reservation attempts (each one checked by the ledger itself, linked
    datasets and concurrent runs included)."""
    def attempt(n):
        try:
            return ledger.reserve(dataset, orders=orders, rdp=n * worst, run_id=run_id)
        except BudgetExceededError:
            return None

    reservation = attempt(limit)
    if reservation is not None:
        return reservation, limit
    lo, hi = 0, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trial = attempt(mid)
        if trial is None:
            hi = mid - 1
        else:
            trial.release()
            lo = mid
    if lo == 0:
        return None, 0
    reservation = attempt(lo)
    return (reservation, lo) if reservation is not None else (None, 0)


@dataclasses.dataclass
class _Progress:
    """How far an aggregate stage's ledger rounds have come (its summaries read it)."""

    asked: int = 0
    reserved: int = 0
    rounds: int = 0
    stop_reason: str | None = None
    #: the pending file's rounds: ``{"keys": [reservation id], "events": [event dict]}``
    charges: list = dataclasses.field(default_factory=list)


def _ask_in_rounds(run: Run, ledger, dataset: str | None, run_id: str, *, orders, worst,
                   limit: int, first, ask, labels, answered, summary, progress: _Progress) -> None:
    """The charge-before-publish loop, the same for every mechanism.

    Asks up to ``limit`` queries in rounds. A round takes its ledger reservation -- ``first``
    (reserved before any noise existed), then the most queries whose worst case (``worst``
    each) fits now (:func:`_max_fitting`) -- and only inside it calls ``ask(start, n)``, which
    draws the answers of queries ``start .. start + n - 1`` into ``labels``/``answered`` and
    returns ``(queries asked, the round's event, stop reason)`` (it may ask fewer than ``n``);
    the answers then go to the pending file with ``summary()`` and the round's reservation id
    (``progress.charges``), and only then is the event committed (always within the
    reservation). Without a ledger: one round of ``limit`` queries. Stops at
    ``limit``, when ``ask`` stops, or when the ledger has no room for one more query."""
    while progress.asked < limit:
        reservation, n = None, limit - progress.asked
        if first[0] is not None:
            (reservation, n), first = first, (None, 0)
        elif ledger is not None:
            reservation, n = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=n,
                                          run_id=run_id)
            if reservation is None:
                progress.stop_reason = (
                    f"privacy budget: the ledger's remaining budget does not cover one more "
                    f"query after {progress.asked} asked")
                return
        if reservation is not None:
            progress.reserved += n
        with (reservation if reservation is not None else contextlib.nullcontext()):
            k, event, progress.stop_reason = ask(progress.asked, n)
            progress.asked += k
            progress.rounds += 1
            if reservation is not None:
                progress.charges.append({"keys": [reservation.id], "events": [event.to_dict()]})
                _pending_write(run, labels, answered, summary(), progress.charges)
                reservation.commit([event])
        if progress.stop_reason is not None or k < n:
            return
