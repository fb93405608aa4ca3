"""The round driver of the aggregate stage, the same for every kind of mechanism (each kind's
loop gives it ``ask``): reserve -> mark drawn (durably: from then on the whole bound counts as
spent) -> draw -> write pending -> commit the round's events in place of its reservation, and
publish only after the last commit. Fail closed: a crash loses budget, never leaves answers
uncharged (docs/pipeline.md; the resume: :mod:`pate.run.stages.resume`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.run.rundir import Run
from pate.run.stages.pending import write_pending


@dataclasses.dataclass
class Answers:
    """What an aggregate stage draws into, keeps in the pending file and publishes: ``labels``
    (n,) int64 (-1: no label), ``answered`` (n,) bool, and ``scores`` (n, m) float64 (NaN where
    not labelled) for a mechanism whose kind gives label scores, else None."""

    labels: np.ndarray
    answered: np.ndarray
    scores: np.ndarray | None = None

    @classmethod
    def empty(cls, num_queries: int, *, num_classes: int | None = None) -> Answers:
        """Nothing answered yet; with ``num_classes``, a score table too."""
        return cls(
            np.full(num_queries, -1, dtype=np.int64),
            np.zeros(num_queries, dtype=bool),
            None if num_classes is None else np.full((num_queries, num_classes), np.nan),
        )


@dataclasses.dataclass
class Rounds:
    """How far an aggregate stage's ledger rounds have come (its summaries read it)."""

    asked: int = 0
    reserved: int = 0
    rounds: int = 0
    stop_reason: str | None = None
    #: a reservation taken before any noise existed, for the first round: ``(reservation, n)``
    first: tuple = (None, 0)
    #: the pending file's rounds: ``{"keys": [reservation id], "events": [event dict]}``
    charges: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Charging:
    """Where an aggregate loop's rounds are charged: ``ledger`` (None: no ledger), the id of the
    run's ``dataset`` in it, the ``run_id`` its reservations carry, and the RDP ``orders``."""

    ledger: Any
    dataset: str | None
    run_id: str
    orders: np.ndarray

    def reserve(self, rdp):
        """A reservation of ``rdp`` (BudgetExceededError where it does not fit)."""
        return self.ledger.reserve(self.dataset, orders=self.orders, rdp=rdp, run_id=self.run_id)


def charged_part(
    config, charging: Charging, *, events, queries: int, plan: dict, rounds: Rounds
) -> dict:
    """The keys of ``aggregate.json`` every kind of mechanism writes alike."""
    ledger = charging.ledger
    return {
        "run_id": charging.run_id,
        "dataset": charging.dataset,
        "ledger": None if ledger is None else str(ledger.path),
        "events": [e.to_dict() for e in events],
        "queries_offered": int(queries),
        "release_plan": {k: v for k, v in plan.items() if k != "rdp"},
        "noise_seeded": config.aggregator.noise_seed is not None,
        "reserved_queries": int(rounds.reserved),
        "stop_reason": rounds.stop_reason,
        "rounds": rounds.rounds,
    }


def max_fitting(charging: Charging, *, worst, limit: int):
    """``(reservation, n)`` of the largest n <= limit whose worst case (n x ``worst``) the ledger
    can reserve now ((None, 0) when not one query fits): ``limit``, else a binary search."""

    def attempt(n):
        try:
            return charging.reserve(n * worst)
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


def commit_round(
    run: Run, reservation, events: list, answers: Answers, summary: dict, rounds: Rounds
) -> None:
    """Inside ``reservation``: record its id and ``events`` in ``rounds.charges``, write the pending
    file (``answers``, ``summary``, every round so far), and only then commit ``events``."""
    rounds.charges.append({"keys": [reservation.id], "events": [e.to_dict() for e in events]})
    write_pending(run, answers.labels, answers.answered, summary, rounds.charges, answers.scores)
    reservation.commit(events)


def ask_in_rounds(
    run: Run,
    charging: Charging,
    *,
    worst,
    limit: int,
    ask: Callable,
    answers: Answers,
    summary: Callable,
    rounds: Rounds,
) -> None:
    """The charge-before-publish loop: up to ``limit`` queries in rounds, each inside a ledger
    reservation (``rounds.first``, then the most queries whose worst case fits now) marked drawn
    before ``ask(start, n)`` draws answers into ``answers`` and returns ``(queries asked, the
    round's event, stop reason)``; :func:`commit_round` then keeps and commits them. Without a
    ledger: one round. Stops at ``limit``, when ``ask`` stops or when no query fits."""
    while rounds.asked < limit:
        reservation, n = None, limit - rounds.asked
        if rounds.first[0] is not None:
            (reservation, n), rounds.first = rounds.first, (None, 0)
        elif charging.ledger is not None:
            reservation, n = max_fitting(charging, worst=worst, limit=n)
            if reservation is None:
                rounds.stop_reason = (
                    f"privacy budget: the ledger's remaining budget does not cover one more "
                    f"query after {rounds.asked} asked"
                )
                return
        if reservation is not None:
            rounds.reserved += n
        with reservation if reservation is not None else contextlib.nullcontext():
            if reservation is not None:
                reservation.mark_drawn()  # spent from here on: a crash loses it, never frees it
            k, event, rounds.stop_reason = ask(rounds.asked, n)
            rounds.asked += k
            rounds.rounds += 1
            if reservation is not None:
                commit_round(run, reservation, [event], answers, summary(), rounds)
        if rounds.stop_reason is not None or k < n:
            return
