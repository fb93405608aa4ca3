"""Answering PATE queries online against a privacy budget: :class:`OnlineAggregator` runs any
registered mechanism a query or a batch at a time, stops (or refuses) *before* an answer could
exceed the (eps, delta) budget, and charges the realised cost (the cost and the randomness as in
:mod:`pate.core.aggregators`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from pate import mechanisms
from pate.analysis.accountant import RdpAccountant
from pate.analysis.arrays import FloatArray, FloatOrArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import eps_from_rdp
from pate.analysis.validation import (
    check_choice,
    check_delta,
    check_orders,
    check_positive,
    check_rdp_curve,
    check_votes,
)
from pate.core.aggregators import AggregationResult, check_param_names
from pate.core.errors import BudgetExceededError
from pate.core.rng import Rng, check_rng
from pate.mechanisms.base import MechanismSpec

__all__ = ["OnlineAggregator", "BUDGET_BASES"]

BUDGET_BASES = ("data_independent", "data_dependent")


class OnlineAggregator:
    """Answer queries online against a privacy budget, stopping before it could be exceeded.

    Parameters
    ----------
    mechanism : a registered mechanism (:data:`pate.mechanisms.REGISTRY`), ``**params`` its
        noise parameters by name (those of other mechanisms and unknown names are refused).
    budget_eps, delta : the (eps, delta) budget of the whole dataset, prior spending included.
    rng : numpy Generator or pate.core.rng.SecureGenerator; ``orders`` the Renyi orders.
    prior_rdp : (k,) array or None
        RDP already spent on this dataset by earlier releases (e.g. from the ledger), on
        ``orders``. It is added to both totals; pass the data-independent RDP of the earlier
        releases (it upper-bounds their data-dependent one).
    budget_basis : "data_independent" (default) or "data_dependent"
        Which cost decides when to stop. ``"data_independent"``: query i is asked only if
        eps(prior + realised data-independent cost so far + the worst-case cost of query i)
        <= budget_eps. That decision depends only on earlier *outputs* (answered or not) and
        public parameters, so stopping itself leaks nothing. ``"data_dependent"`` decides on the
        data-dependent cost of each query, which depends on the votes: WHEN the aggregator
        stops then reveals private information that no epsilon accounts for. It is NOT
        private; use it only to explore parameters on non-sensitive data.
    conversion : "classic" | "tight", the RDP -> (eps, delta) conversion (``analysis.eps_from_rdp``).

    The realised cost of each batch (threshold check for every query asked, GNMax step for
    the answered ones) is composed into an immutable :class:`analysis.RdpAccountant`:
    ``accountant`` holds this aggregator's events (for a ledger), ``epsilon(...)`` the totals
    including ``prior_rdp`` (an example: docs/aggregators.md).
    """

    def __init__(
        self,
        mechanism: str,
        *,
        budget_eps: float,
        delta: float,
        rng: Rng,
        orders: npt.ArrayLike = DEFAULT_ORDERS,
        prior_rdp: npt.ArrayLike | None = None,
        budget_basis: str = "data_independent",
        conversion: str = "classic",
        **params: Any,
    ) -> None:
        self._spec: MechanismSpec = mechanisms.get(mechanism)
        check_param_names(params)
        self._params = self._spec.validate(params)
        self._budget_eps = check_positive(budget_eps, "budget_eps")
        self._delta = check_delta(delta)
        self._orders = check_orders(orders).copy()
        self._orders.setflags(write=False)
        self._basis = check_choice(budget_basis, "budget_basis", BUDGET_BASES)
        self._conversion = check_choice(conversion, "conversion", ("classic", "tight"))
        self._rng = check_rng(rng)
        self._prior = (
            np.zeros(self._orders.size)
            if prior_rdp is None
            else check_rdp_curve(prior_rdp, self._orders, "prior_rdp").copy()
        )
        self._accountant = RdpAccountant(self._orders)
        self._shape: tuple[int, int] | None = None  # (teachers, classes) of the first batch
        self._stopped: str | None = None
        prior_eps = cast(np.float64, self._eps(self._prior))  # one curve: a scalar
        if prior_eps > self._budget_eps:
            raise BudgetExceededError(
                f"prior_rdp already amounts to eps={prior_eps:.4g} at delta={self._delta:g}, more "
                f"than budget_eps={self._budget_eps:g}; nothing remains for this dataset",
                requested=0.0,
                remaining=self._budget_eps - prior_eps,
            )

    # -- configuration and state
    @property
    def mechanism(self) -> str:
        return self._spec.name

    @property
    def params(self) -> dict[str, float]:
        return dict(self._params)

    @property
    def accountant(self) -> RdpAccountant:
        """Immutable accountant of the events of this aggregator (``prior_rdp`` not included)."""
        return self._accountant

    @property
    def queries_asked(self) -> int:
        return self._accountant.queries

    @property
    def queries_answered(self) -> int:
        return self._accountant.answered

    def total_rdp(self, *, data_dependent: bool = False) -> FloatArray:
        """prior_rdp + the realised RDP of every event so far, shape (k,)."""
        total: FloatArray = self._prior + self._accountant.rdp(data_dependent=data_dependent)
        return total

    def epsilon(self, *, data_dependent: bool = False) -> tuple[float, float]:
        """(eps, order) spent at ``delta`` so far, prior included: the publishable worst case, or
        with ``data_dependent`` the value that depends on the votes (not private to publish)."""
        eps, order = eps_from_rdp(
            self.total_rdp(data_dependent=data_dependent),
            orders=self._orders,
            delta=self._delta,
            conversion=self._conversion,
        )
        return float(eps), float(order)

    @property
    def remaining_eps(self) -> float:
        """budget_eps minus the eps spent on the budget basis (>= 0 by construction)."""
        spent, _ = self.epsilon(data_dependent=self._basis == "data_dependent")
        return max(0.0, self._budget_eps - spent)

    def _eps(self, rdp: FloatArray) -> FloatOrArray:
        eps, _ = eps_from_rdp(
            rdp, orders=self._orders, delta=self._delta, conversion=self._conversion
        )
        return eps

    # -- answering
    def _validate_batch(
        self, votes: npt.ArrayLike, student_probabilities: Any
    ) -> tuple[IntArray, np.ndarray | None]:
        counts = check_votes(votes)
        student = self._spec.check_student(student_probabilities, counts)
        if counts.shape[0]:
            shape = (int(counts[0].sum()), counts.shape[1])
            if self._shape is not None and shape != self._shape:
                raise InputError(
                    f"votes come from {shape[0]} teachers over {shape[1]} classes, "
                    f"but earlier batches from {self._shape[0]} teachers over "
                    f"{self._shape[1]} classes; use one aggregator per ensemble"
                )
        return counts, student

    def answer(
        self, votes: npt.ArrayLike, *, student_probabilities: Any = None, on_exhausted: str = "stop"
    ) -> AggregationResult:
        """Answer a batch of queries in order, within the budget.

        on_exhausted="stop" (default): queries are asked in order while the next one fits the
        budget (see ``budget_basis``); the rest get source "not-asked", label -1, and cost
        nothing; ``result.stop_reason`` says why. on_exhausted="raise": if the whole batch
        could exceed the budget (all of it answered by the teachers), nothing is asked and
        :class:`pate.core.errors.BudgetExceededError` is raised, before any noise is drawn.
        """
        on_exhausted = check_choice(on_exhausted, "on_exhausted", ("stop", "raise"))
        counts, student = self._validate_batch(votes, student_probabilities)
        n = counts.shape[0]
        dd = self._basis == "data_dependent"
        base = self.total_rdp(data_dependent=dd)
        if on_exhausted == "raise" and n:
            self._refuse_if_over(counts, student, base, dd)

        # All validation is done: draw the noise and decide every query.
        labels, answered, source = self._spec.draw(counts, self._params, self._rng, student=student)

        # Sequential stopping rule, vectorized per chunk (bounded memory): query i is asked iff
        # the cost realised by the queries before it plus query i's worst case fits the budget.
        stop, stop_reason, running = n, None, base
        for lo, hi, always, if_answered in self._chunk_costs(counts, student, dd):
            realised = always + answered[lo:hi, None] * (if_answered - always)
            before = running[None, :] + np.cumsum(realised, axis=0) - realised
            candidate_eps = cast(FloatArray, self._eps(before + if_answered))  # one per row
            over = np.nonzero(candidate_eps > self._budget_eps)[0]
            if over.size:
                i = int(over[0])
                stop = lo + i
                stop_reason = (
                    f"privacy budget: stopped before query {stop} of {n}: answering it could "
                    f"bring the {self._basis.replace('_', '-')} eps from "
                    f"{self._eps(before[i]):.6g} to {candidate_eps[i]:.6g} > budget_eps="
                    f"{self._budget_eps:g} (delta={self._delta:g}); {n - stop} queries not asked"
                )
                break
            running = before[-1] + realised[-1]
        asked = np.arange(n) < stop
        if stop < n:
            labels = np.where(asked, labels, -1)
            answered = answered & asked
            source = np.where(asked, source, "not-asked").astype("<U9")
        self._stopped = stop_reason

        event = self._spec.event(
            counts[asked],
            self._params,
            answered=answered[asked],
            orders=self._orders,
            student=None if student is None else student[asked],
        )
        self._accountant = self._accountant.compose(event)
        if n and self._shape is None:
            self._shape = (int(counts[0].sum()), counts.shape[1])
        return AggregationResult(labels, answered, source, asked, event, stop_reason)

    #: Queries per block of the (queries, orders) cost arrays (bounds memory on large batches).
    chunk_size = 2048

    def _chunk_costs(
        self,
        votes: IntArray,
        student: np.ndarray | None,
        dd: bool,
    ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """(lo, hi, always-charged cost, cost if the teachers answer) per block of queries, the
        costs (hi - lo, k) from the mechanism's spec."""
        n = votes.shape[0]
        for lo in range(0, n, self.chunk_size):
            hi = min(n, lo + self.chunk_size)
            check, answer = self._spec.query_rdp_parts(
                votes[lo:hi],
                self._params,
                orders=self._orders,
                data_dependent=dd,
                student=None if student is None else student[lo:hi],
            )
            yield lo, hi, check, check + answer

    def _refuse_if_over(
        self, votes: IntArray, student: np.ndarray | None, base: FloatArray, dd: bool
    ) -> None:
        """Raise BudgetExceededError (before any noise) if the batch could exceed the budget."""
        n = votes.shape[0]
        fits, running = None, base
        for lo, _hi, _, if_answered in self._chunk_costs(votes, student, dd):
            prefix = running[None, :] + np.cumsum(if_answered, axis=0)
            if fits is None:
                over = np.nonzero(self._eps(prefix) > self._budget_eps)[0]
                if over.size:
                    fits = lo + int(over[0])
            running = prefix[-1]
        worst_eps, spent_eps = self._eps(running), self._eps(base)
        if worst_eps > self._budget_eps:
            raise BudgetExceededError(
                f"answering these {n} queries could bring the {self._basis.replace('_', '-')} "
                f"eps to {worst_eps:.6g} (delta={self._delta:g}), over budget_eps="
                f"{self._budget_eps:g}; spent {spent_eps:.6g}, remaining "
                f"{self._budget_eps - spent_eps:.6g}: at most {fits if fits is not None else n} "
                "of them fit. Ask fewer queries, use more noise, or raise the budget",
                requested=float(worst_eps - spent_eps),
                remaining=float(self._budget_eps - spent_eps),
            )

    def answer_one(
        self, votes_row: npt.ArrayLike, *, student_probabilities: npt.ArrayLike | None = None
    ) -> int:
        """Answer one query (a (classes,) vote row); returns its label (-1: not answered).

        Raises :class:`pate.core.errors.BudgetExceededError` (nothing drawn, nothing charged) if
        answering it could exceed the budget.
        """
        row = np.asarray(votes_row)
        if row.ndim != 1:
            raise InputError(
                f"votes_row must be 1-D (one query's vote counts), got shape "
                f"{row.shape}; use answer() for a batch"
            )
        student = None
        if student_probabilities is not None:
            student = np.asarray(student_probabilities)
            if student.ndim != 1:
                raise InputError(
                    "student_probabilities must be 1-D (one query) in answer_one, "
                    f"got shape {student.shape}"
                )
            student = student[None, :]
        result = self.answer(row[None, :], student_probabilities=student, on_exhausted="raise")
        return int(result.labels[0])

    def summary(self) -> dict[str, Any]:
        """JSON-able totals (no per-query information)."""
        eps_di, order_di = self.epsilon(data_dependent=False)
        eps_dd, order_dd = self.epsilon(data_dependent=True)
        return {
            "mechanism": self._spec.name,
            "params": dict(self._params),
            "budget_eps": self._budget_eps,
            "delta": self._delta,
            "budget_basis": self._basis,
            "conversion": self._conversion,
            "queries_asked": self.queries_asked,
            "queries_answered": self.queries_answered,
            "eps_data_independent": eps_di,
            "order_data_independent": order_di,
            "eps_data_dependent": eps_dd,
            "order_data_dependent": order_dd,
            "prior_included": bool(np.any(self._prior > 0)),
            "stop_reason": self._stopped,
        }

    def __repr__(self) -> str:
        eps, _ = self.epsilon(data_dependent=self._basis == "data_dependent")
        return (
            f"OnlineAggregator({self._spec.name}, asked={self.queries_asked}, "
            f"answered={self.queries_answered}, eps={eps:.4g}/{self._budget_eps:g} "
            f"({self._basis}), delta={self._delta:g})"
        )
