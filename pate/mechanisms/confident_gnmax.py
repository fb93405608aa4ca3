"""Confident GNMax and Interactive GNMax [P18, Algorithms 1 and 2]: a noisy threshold check of
the teachers' votes (minus the student's prediction, Interactive), then the Gaussian noisy argmax
("vote" kind)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.accountant import PrivacyEvent, confident_gnmax_event
from pate.analysis.calibration import calibrate_confident_gnmax, calibrate_gnmax_sigma
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.rdp import (
    confident_gnmax_rdp,
    gnmax_rdp,
    threshold_log_pr_answered,
    threshold_rdp,
)
from pate.analysis.validation import check_orders, check_positive
from pate.core.rng import Rng
from pate.mechanisms.base import DUMMY_VOTES, MechanismSpec, noisy_argmax, student_baseline
from pate.mechanisms.params import CONFIDENCE, SIGMA1, SIGMA2, THRESHOLD
from pate.mechanisms.registry import AUTO_FIXED_NOISE


@dataclasses.dataclass(frozen=True)
class ConfidentGNMaxSpec(MechanismSpec):
    """Confident GNMax; with ``needs_student`` the check runs on votes - T p (Interactive)."""

    def _statistic(self, votes: np.ndarray, student: np.ndarray | None) -> np.ndarray:
        if not self.needs_student:
            top: np.ndarray = votes.max(axis=1).astype(np.float64)
            return top
        # max_j (n_j - T p_j) rounded half-to-even: exactly the statistic pate.analysis.threshold_rdp
        # accounts for (sensitivity 1 before and after rounding), so the data-dependent bound is
        # computed for the mechanism that actually ran.
        rounded: np.ndarray = np.round(np.max(votes - student_baseline(votes, student), axis=1))
        return rounded

    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, m = votes.shape
        # Fixed draw order, whatever the outcome: threshold noise (n,), then argmax noise (n, m).
        noise1 = rng.normal(0.0, params["sigma1"], size=n)
        noise2 = rng.normal(0.0, params["sigma2"], size=(n, m))
        answered = self._statistic(votes, student) + noise1 >= params["threshold"]
        labels = np.where(answered, noisy_argmax(votes, noise2), -1)
        source = np.where(answered, "teachers", "none").astype("<U9")
        if self.needs_student:
            if student is None:  # check_student refuses a missing student before any draw
                raise InputTypeError(f"{self.name} needs the student's probabilities (student=...)")
            # The confident student's own label is kept at no privacy cost.
            keep = ~answered & (student.max(axis=1) >= params["student_confidence"])
            labels = np.where(keep, np.argmax(student, axis=1), labels)
            source[keep] = "student"
        return labels.astype(np.int64), answered, source

    def _checked_baseline(
        self, votes: np.ndarray, student: np.ndarray | None, data_dependent: bool
    ) -> np.ndarray | None:
        if self.needs_student and student is None and data_dependent:
            raise InputTypeError(
                f"the data-dependent cost of {self.name} needs the student's "
                "probabilities (student=...)"
            )
        return student_baseline(votes, student)

    def query_rdp_parts(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: np.ndarray,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        baseline = self._checked_baseline(votes, student, data_dependent)
        check = threshold_rdp(
            votes,
            threshold=params["threshold"],
            sigma=params["sigma1"],
            orders=orders,
            data_dependent=data_dependent,
            baseline=baseline,
        )
        answer = gnmax_rdp(
            votes, sigma=params["sigma2"], orders=orders, data_dependent=data_dependent
        )
        return check, answer

    def event(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        answered: Any,
        orders: Any,
        student: np.ndarray | None = None,
    ) -> PrivacyEvent:
        event = confident_gnmax_event(
            votes,
            threshold=params["threshold"],
            sigma1=params["sigma1"],
            sigma2=params["sigma2"],
            answered=answered,
            orders=orders,
            baseline=self._checked_baseline(votes, student, True),
        )
        extra = {k: params[k] for k in self.param_names if k not in event.params}
        if extra:  # e.g. student_confidence: free, recorded for the audit trail
            event = dataclasses.replace(event, params={**event.params, **extra})
        return event

    calibrated: ClassVar[tuple[str, ...]] = ("sigma1", "sigma2")

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        """sigma2 (and sigma1 = sigma1_ratio x sigma2 when it is "auto" too; the ratio is the
        given sigma1 / sigma2 ratio of Scalable PATE, 3.75, unless sigma1 is a number -- then
        only sigma2 is chosen, with that sigma1)."""
        if "sigma2" not in auto:
            raise InputError(
                f'{self.name}: calibrate sigma2 (with sigma1 = "auto" too, or a '
                "fixed sigma1); sigma1 alone cannot be calibrated"
            )
        if "sigma1" in auto:
            sigma1, sigma2 = calibrate_confident_gnmax(**kw)
            return {"sigma1": sigma1, "sigma2": sigma2}
        sigma1 = check_positive(params["sigma1"], "sigma1")
        check = threshold_rdp(
            DUMMY_VOTES, threshold=0.0, sigma=sigma1, orders=kw["orders"], data_dependent=False
        )[0]
        extra = check * kw["num_queries"] + (
            0.0 if kw["extra_rdp"] is None else np.asarray(kw["extra_rdp"], dtype=np.float64)
        )
        return {"sigma2": calibrate_gnmax_sigma(**dict(kw, extra_rdp=extra))}

    def pr_answered(
        self, votes: np.ndarray, params: Mapping[str, float], *, student: np.ndarray | None = None
    ) -> np.ndarray:
        return np.exp(
            threshold_log_pr_answered(
                votes,
                threshold=params["threshold"],
                sigma=params["sigma1"],
                baseline=self._checked_baseline(votes, student, True),
            )
        )

    def expected_rdp(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: Any,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> np.ndarray:
        return confident_gnmax_rdp(
            votes,
            threshold=params["threshold"],
            sigma1=params["sigma1"],
            sigma2=params["sigma2"],
            orders=check_orders(orders),
            data_dependent=data_dependent,
            baseline=self._checked_baseline(votes, student, True),
        )

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        if self.needs_student:
            # The GNSS release of Interactive GNMax needs the per-query student baseline, which
            # these parameters cannot carry: no release rather than a wrong sensitivity.
            return None
        return {k: float(params[k]) for k in ("threshold", "sigma1", "sigma2")}


CONFIDENT_GNMAX = ConfidentGNMaxSpec(
    name="confident-gnmax",
    title="Confident GNMax",
    params=(THRESHOLD, SIGMA1, SIGMA2),
    auto_for=(AUTO_FIXED_NOISE,),
    reference="Papernot et al. 2018, Algorithm 1",
    description=(
        "a query is answered only when the teachers' largest vote count, plus Gaussian "
        "noise, exceeds a threshold; an answered query gets the class with the largest vote "
        "count after independent Gaussian noise is added. Every query asked is charged the "
        "threshold check, and the answered ones also the noisy argmax."
    ),
)


INTERACTIVE_GNMAX = ConfidentGNMaxSpec(
    name="interactive-gnmax",
    title="Interactive GNMax",
    params=(THRESHOLD, SIGMA1, SIGMA2, CONFIDENCE),
    needs_student=True,
    reference="Papernot et al. 2018, Algorithm 2",
    description=(
        "a query is answered only when the teachers' votes, minus the student's own "
        "prediction, plus Gaussian noise, clear a threshold; an answered query gets the noisy "
        "(Gaussian) argmax of the votes, and otherwise a confident student keeps its own "
        "label. Every query asked is charged the threshold check, the answered ones also the "
        "noisy argmax; the student's own labels cost nothing."
    ),
)
