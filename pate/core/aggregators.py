"""Noisy aggregation of teacher votes: any registered mechanism, Confident- and Interactive-GNMax.

Runs any registered mechanism (:mod:`pate.mechanisms`: parameters, noise step, cost) on an
(n, m) int vote matrix (``votes[i, j]`` teachers voted class j on query i; rows sum to T), one-shot
here or online against a budget (:mod:`pate.core.online_aggregator`).

Privacy cost: each call returns the realised ``PrivacyEvent`` built by the spec from
``pate.analysis`` (no privacy arithmetic lives here): the threshold check is charged for every
query asked, the GNMax step only for the answered ones. ``event.rdp`` is data-dependent (NOT
private to publish); ``event.rdp_data_independent`` is the worst case, publishable as is.

Randomness: ``rng`` is a ``numpy.random.Generator`` or the ``SecureGenerator`` of
:func:`pate.core.rng.make_streams`. Noise is drawn for all queries in a fixed order (threshold
noise (n,), then argmax noise (n, m)) whatever the outcome, so the stream's state never depends
on the votes; every argument is validated before any noise is drawn.

[P17] Papernot et al., "Semi-supervised Knowledge Transfer for Deep Learning from Private
      Training Data", ICLR 2017.
[P18] Papernot et al., "Scalable Private Learning with PATE", ICLR 2018 (arXiv:1802.08908).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from pate import mechanisms
from pate.analysis.accountant import PrivacyEvent
from pate.analysis.errors import InputTypeError
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.validation import check_orders, check_votes
from pate.core.rng import Rng, check_rng
from pate.mechanisms.base import MechanismSpec

__all__ = [
    "AggregationResult",
    "aggregate",
    "confident_gnmax",
    "interactive_gnmax",
    "SOURCES",
    "check_param_names",
]

SOURCES = ("teachers", "student", "none", "not-asked")


# --------------------------------------------------------------------------- result


@dataclasses.dataclass(frozen=True, eq=False)
class AggregationResult:
    """What an aggregator released for a batch of n queries, and what it cost (arrays
    read-only): ``labels`` (n,) int64, -1 where none was released; ``answered_mask`` (n,) the
    teachers answered (the GNMax step ran and is charged); ``asked_mask`` (n,) the query went
    through the mechanism (its threshold check, if any, charged); ``source`` (n,) str:
    "teachers", "student" (Interactive-GNMax kept the confident student's label, free), "none"
    (not answered) or "not-asked" (an online aggregator stopped first: not charged);
    ``event`` the realised :class:`PrivacyEvent` of the asked queries; ``stop_reason`` why an
    online aggregator stopped before the end of the batch (None otherwise)."""

    labels: np.ndarray
    answered_mask: np.ndarray
    source: np.ndarray
    asked_mask: np.ndarray
    event: PrivacyEvent
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        for name in ("labels", "answered_mask", "source", "asked_mask"):
            arr = np.array(getattr(self, name), dtype=np.int64 if name == "labels" else None)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def mechanism(self) -> str:
        return self.event.mechanism

    @property
    def num_queries(self) -> int:
        return int(self.labels.size)

    @property
    def num_asked(self) -> int:
        return int(self.asked_mask.sum())

    @property
    def num_answered(self) -> int:
        return int(self.answered_mask.sum())

    @property
    def num_labelled(self) -> int:
        """Queries given a label (by the teachers or, in Interactive-GNMax, the student)."""
        return int((self.labels >= 0).sum())

    def counts(self) -> dict[str, int]:
        """How many queries came from each source (no per-query information)."""
        return {s: int(np.sum(self.source == s)) for s in SOURCES}

    def __repr__(self) -> str:
        return (
            f"AggregationResult({self.mechanism}, queries={self.num_queries}, "
            f"asked={self.num_asked}, answered={self.num_answered}, "
            f"labelled={self.num_labelled})"
        )


# --------------------------------------------------------------------------- one-shot mechanisms


def aggregate(
    mechanism: str,
    votes: npt.ArrayLike,
    *,
    rng: Rng,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    student_probabilities: Any = None,
    **params: Any,
) -> AggregationResult:
    """Run any registered mechanism once on every query of ``votes``: ``params`` its noise
    parameters by name, ``student_probabilities`` the student's (queries, classes) predictions
    for a mechanism that needs them."""
    spec: MechanismSpec = mechanisms.get(mechanism)
    check_param_names(params)
    counts = check_votes(votes)
    p = spec.validate(params)
    student = spec.check_student(student_probabilities, counts)
    grid, rng = check_orders(orders), check_rng(rng)
    labels, answered, source = spec.draw(counts, p, rng, student=student)
    event = spec.event(counts, p, answered=answered, orders=grid, student=student)
    return AggregationResult(labels, answered, source, np.ones(labels.shape[0], bool), event)


def check_param_names(params: dict[str, Any]) -> None:
    known = mechanisms.all_param_names()
    unknown = [k for k in params if k not in known]
    if unknown:
        raise InputTypeError(
            f"unknown parameter(s) {', '.join(unknown)}; the mechanisms' parameters "
            f"are {', '.join(known)}"
        )


def confident_gnmax(
    votes: npt.ArrayLike,
    *,
    threshold: float,
    sigma1: float,
    sigma2: float,
    rng: Rng,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
) -> AggregationResult:
    """Confident-GNMax ([P18] Algorithm 1): a query is answered (else label -1) only when
    max_j votes_j + N(0, sigma1^2) >= ``threshold``, then by GNMax(sigma2); the event equals
    ``analysis.confident_gnmax_rdp(votes, ..., answered=result.answered_mask)``."""
    return aggregate(
        "confident-gnmax",
        votes,
        rng=rng,
        orders=orders,
        threshold=threshold,
        sigma1=sigma1,
        sigma2=sigma2,
    )


def interactive_gnmax(
    votes: npt.ArrayLike,
    *,
    student_probabilities: npt.ArrayLike,
    threshold: float,
    sigma1: float,
    sigma2: float,
    student_confidence: float,
    rng: Rng,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
) -> AggregationResult:
    """Interactive-GNMax ([P18] Algorithm 2), with ``student_probabilities`` p (n, m): the check
    runs on round(max_j (votes_j - T p_j)) + N(0, sigma1^2), T teachers, passing when the teachers
    disagree with the student; passed: GNMax(sigma2) on the votes (source "teachers"); failed
    and max_j p_j >= ``student_confidence``: the student's argmax, free (it depends on the
    student only; source "student"); otherwise label -1 (source "none")."""
    return aggregate(
        "interactive-gnmax",
        votes,
        rng=rng,
        orders=orders,
        student_probabilities=student_probabilities,
        threshold=threshold,
        sigma1=sigma1,
        sigma2=sigma2,
        student_confidence=student_confidence,
    )
