"""Which public items to send to the aggregator: "first k" or active selection by the student.

More: docs/student.md, "pate.student.select".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import (
    check_choice,
    check_int,
    check_probabilities,
    check_votes,
    describe,
)

__all__ = [
    "SELECTION_MODES",
    "uncertainty",
    "select_uncertain",
    "active_labels",
    "ActiveResult",
]

SELECTION_MODES = ("first", "entropy", "margin")
_CRITERIA = ("entropy", "margin")


def _check_probability_matrix(probabilities: Any) -> np.ndarray:
    arr = (
        np.asarray(probabilities) if not isinstance(probabilities, (str, bytes)) else probabilities
    )
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        raise InputError(
            f"probabilities must be a 2-D (items, classes) array, got {describe(probabilities)}"
        )
    return check_probabilities(arr, arr.shape, "probabilities")


def uncertainty(probabilities: Any, *, criterion: str = "entropy") -> np.ndarray:
    """Uncertainty score per row (larger = less certain)."""
    criterion = check_choice(criterion, "criterion", _CRITERIA)
    p = _check_probability_matrix(probabilities)
    if criterion == "entropy":
        safe = np.clip(p, 1e-12, 1.0)
        return -np.sum(np.where(p > 0, p * np.log(safe), 0.0), axis=1)
    if p.shape[1] < 2:
        raise InputError("the margin criterion needs at least 2 classes")
    top2 = np.sort(p, axis=1)[:, -2:]
    return -(top2[:, 1] - top2[:, 0])


def select_uncertain(
    probabilities: Any, *, k: int, criterion: str = "entropy", exclude: Any = None
) -> np.ndarray:
    """Indices of the ``k`` most uncertain rows outside ``exclude``, most uncertain first."""
    score = uncertainty(probabilities, criterion=criterion)
    k = check_int(k, "k", minimum=1)
    n = score.shape[0]
    if exclude is None:
        exclude = np.zeros(n, dtype=bool)
    else:
        exclude = np.asarray(exclude)
        if exclude.dtype != np.bool_ or exclude.shape != (n,):
            raise InputError(
                f"exclude must be a boolean mask of shape ({n},), got {describe(exclude)}"
            )
    candidates = np.flatnonzero(~exclude)
    if k > candidates.size:
        raise InputError(f"k={k} exceeds the {candidates.size} items not yet asked")
    order = np.argsort(-score[candidates], kind="stable")
    return candidates[order[:k]].astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class ActiveResult:
    """Outcome of :func:`active_labels` (docs/student.md)."""

    labels: np.ndarray
    asked_mask: np.ndarray
    answered_mask: np.ndarray
    source: np.ndarray
    query_order: np.ndarray
    events: tuple
    rounds: tuple

    def __post_init__(self) -> None:
        for name in ("labels", "asked_mask", "answered_mask", "source", "query_order"):
            arr = np.array(getattr(self, name))
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def num_labelled(self) -> int:
        return int(np.sum(self.labels >= 0))

    def counts(self) -> dict[str, int]:
        """How many public items came from each source (no per-item information)."""
        return {
            s: int(np.sum(self.source == s)) for s in ("teachers", "student", "none", "not-asked")
        }


def active_labels(
    public_x: Any,
    votes: Any,
    *,
    rounds: int,
    batch_size: int,
    initial_size: int | None = None,
    criterion: str = "entropy",
    threshold: float | None = None,
    sigma1: float | None = None,
    sigma2: float | None = None,
    student_confidence: float | None = None,
    rng: Any = None,
    aggregator: Any = None,
    student_params: dict | None = None,
) -> ActiveResult:
    """Label public items in rounds, each batch chosen by a student trained on the labels so far
    (docs/student.md, "Query selection").

    ``votes`` (the teachers' votes on every public item) go to the aggregator only, row by row
    as items are selected; ``public_x`` to the students. ``initial_size`` (default
    ``batch_size``) queries in the first round, which has no student (uniform probabilities:
    Confident-GNMax with the threshold raised by T / classes). ``criterion``: ``"first"`` (in
    order, no student), ``"entropy"`` or ``"margin"``. The Interactive-GNMax noise
    (``threshold``, ``sigma1``, ``sigma2``, ``student_confidence``, ``rng``), or an
    ``aggregator`` (an ``OnlineAggregator("interactive-gnmax", ...)`` that also enforces a
    budget); ``student_params``: the per-round :class:`pate.student.train.Student` settings.
    Every argument is validated before any noise is drawn.
    """
    from pate.student.inputs import check_public_x

    criterion = check_choice(criterion, "criterion", SELECTION_MODES)
    x = check_public_x(public_x)
    votes = check_votes(votes)
    n, num_classes = votes.shape
    rounds, batch_size, initial_size = _check_round_sizes(
        num_votes=n,
        num_public=x.shape[0],
        rounds=rounds,
        batch_size=batch_size,
        initial_size=initial_size,
    )
    mechanism_params = {
        "threshold": threshold,
        "sigma1": sigma1,
        "sigma2": sigma2,
        "student_confidence": student_confidence,
    }
    _check_aggregation(aggregator, mechanism_params, rng)
    confidence = (
        aggregator.params.get("student_confidence")
        if aggregator is not None
        else float(student_confidence)
    )
    _check_student_confidence(confidence, num_classes=num_classes)
    params = _student_settings(student_params, criterion=criterion, num_classes=num_classes)
    loop = _ActiveLoop(
        x,
        votes,
        criterion=criterion,
        student_params=params,
        aggregator=aggregator,
        rng=rng,
        mechanism_params=mechanism_params,
    )
    return loop.run(rounds=rounds, initial_size=initial_size, batch_size=batch_size)


def _check_round_sizes(
    *, num_votes: int, num_public: int, rounds: Any, batch_size: Any, initial_size: Any
) -> tuple[int, int, int]:
    """``(rounds, batch_size, initial_size)`` of :func:`active_labels`, checked against the
    ``num_votes`` rows of votes and the ``num_public`` public items."""
    n = num_votes
    if n != num_public:
        raise InputError(
            f"votes has {n} rows but public_x has {num_public} items: pass the teachers' "
            "votes on every public item, in the same order"
        )
    rounds = check_int(rounds, "rounds", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    initial_size = (
        batch_size if initial_size is None else check_int(initial_size, "initial_size", minimum=1)
    )
    total = initial_size + (rounds - 1) * batch_size
    if total > n:
        raise InputError(
            f"initial_size + (rounds - 1) * batch_size = {total} exceeds the {n} public items"
        )
    return rounds, batch_size, initial_size


def _check_aggregation(aggregator: Any, mechanism_params: dict, rng: Any) -> None:
    """Either an online aggregator of a mechanism that uses the student, or every
    Interactive-GNMax parameter and ``rng`` (validated before any noise is drawn), not both."""
    from pate import mechanisms
    from pate.core.online_aggregator import OnlineAggregator

    if aggregator is not None:
        if (
            not isinstance(aggregator, OnlineAggregator)
            or not mechanisms.get(aggregator.mechanism).needs_student
        ):
            raise InputTypeError(
                f"aggregator must be an OnlineAggregator of a mechanism that uses the "
                f"student's predictions, e.g. OnlineAggregator('interactive-gnmax', "
                f"...), got {describe(aggregator)}"
            )
        given = [k for k, v in mechanism_params.items() if v is not None] + (
            ["rng"] if rng is not None else []
        )
        if given:
            raise InputTypeError(
                f"pass either aggregator or {', '.join(given)}, not both: the aggregator "
                "carries its own parameters and noise stream"
            )
    else:
        missing = [k for k, v in mechanism_params.items() if v is None] + (
            ["rng"] if rng is None else []
        )
        if missing:
            raise InputTypeError(
                f"active_labels needs {', '.join(missing)} (Interactive-GNMax parameters) "
                "or an OnlineAggregator('interactive-gnmax', ...) as aggregator"
            )
        # Validate the mechanism parameters before any noise is drawn.
        from pate.core.rng import check_rng

        mechanisms.get("interactive-gnmax").validate(mechanism_params)
        check_rng(rng)


def _check_student_confidence(confidence: float | None, *, num_classes: int) -> None:
    """Refuse a ``student_confidence`` at which even a uniform guess would be kept."""
    if confidence is not None and confidence <= 1.0 / num_classes:
        raise InputError(
            f"student_confidence={confidence!r} is at most 1/classes = "
            f"{1.0 / num_classes:.4g}: every student label, even a uniform guess, would "
            "be kept; use a confidence well above 1/classes (e.g. 0.9)"
        )


def _student_settings(student_params: dict | None, *, criterion: str, num_classes: int) -> dict:
    """The settings of the per-round students, checked before any noise when one is trained."""
    from pate.student.train import Student

    params = dict(student_params or {})
    if criterion != "first":
        params.setdefault("num_classes", num_classes)
        params.setdefault("progress", False)
        Student(**params)._validated()  # bad student settings fail here, before any noise
    return params


class _ActiveLoop:
    """The rounds of one :func:`active_labels` call and what each public item got so far."""

    def __init__(
        self,
        x: np.ndarray,
        votes: np.ndarray,
        *,
        criterion: str,
        student_params: dict,
        aggregator: Any,
        rng: Any,
        mechanism_params: dict,
    ) -> None:
        n, num_classes = votes.shape
        self.x = x
        self.votes = votes
        self.criterion = criterion
        self.student_params = student_params
        self.aggregator = aggregator
        self.rng = rng
        self.mechanism_params = mechanism_params
        self.labels = np.full(n, -1, dtype=np.int64)
        self.asked = np.zeros(n, dtype=bool)
        self.answered = np.zeros(n, dtype=bool)
        self.source = np.full(n, "not-asked", dtype=object)
        self.order: list[np.ndarray] = []
        self.events: list = []
        self.round_info: list[dict] = []
        self.uniform = np.full((n, num_classes), 1.0 / num_classes)
        self.selected_so_far = np.zeros(n, dtype=bool)

    def run(self, *, rounds: int, initial_size: int, batch_size: int) -> ActiveResult:
        """Ask ``rounds`` batches (fewer when the aggregator stops); the outcome."""
        for r in range(rounds):
            size = initial_size if r == 0 else batch_size
            rows, probabilities = self._next_batch(r, size=size)
            result = self._aggregate(rows, probabilities)
            self._record(r, rows, result)
            if getattr(result, "stop_reason", None):
                self.round_info[-1]["stop_reason"] = result.stop_reason
                break
        return self._result()

    def _next_batch(self, r: int, *, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of round ``r`` and the student's probabilities on them (uniform while no
        student is trained: the first round, ``"first"``, or no label released yet)."""
        from pate.student.train import Student

        criterion = self.criterion
        selected_so_far = self.selected_so_far
        if r == 0 or criterion == "first" or not np.any(self.labels >= 0):
            start = int(selected_so_far.sum()) if criterion == "first" else None
            if criterion == "first":
                rows = np.arange(start, start + size, dtype=np.int64)
            else:
                rows = np.flatnonzero(~selected_so_far)[:size].astype(np.int64)
            return rows, self.uniform[rows]
        student = Student(**self.student_params).fit(self.x, self.labels)
        probs = student.predict_proba(self.x)
        rows = select_uncertain(probs, k=size, criterion=criterion, exclude=selected_so_far)
        return rows, probs[rows]

    def _aggregate(self, rows: np.ndarray, probabilities: np.ndarray):
        from pate.core.aggregators import interactive_gnmax

        if self.aggregator is not None:
            return self.aggregator.answer(self.votes[rows], student_probabilities=probabilities)
        return interactive_gnmax(
            self.votes[rows],
            student_probabilities=probabilities,
            rng=self.rng,
            **self.mechanism_params,
        )

    def _record(self, r: int, rows: np.ndarray, result: Any) -> None:
        """Keep round ``r``'s answers on ``rows``."""
        self.selected_so_far[rows] = True
        self.labels[rows] = result.labels
        self.asked[rows] = result.asked_mask
        self.answered[rows] = result.answered_mask
        self.source[rows] = result.source
        self.order.append(rows[result.asked_mask])
        self.events.append(result.event)
        counts = result.counts()
        self.round_info.append({"round": r + 1, "queries": int(rows.size), **counts})

    def _result(self) -> ActiveResult:
        order = self.order
        return ActiveResult(
            labels=self.labels,
            asked_mask=self.asked,
            answered_mask=self.answered,
            source=self.source.astype(str),
            query_order=np.concatenate(order) if order else np.zeros(0, dtype=np.int64),
            events=tuple(self.events),
            rounds=tuple(self.round_info),
        )
