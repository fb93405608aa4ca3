"""GNMax [P18, Section 4.1]: the Gaussian noisy argmax of the teachers' votes ("vote" kind)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.accountant import PrivacyEvent, gnmax_event
from pate.analysis.calibration import calibrate_gnmax_sigma
from pate.analysis.rdp import gnmax_rdp
from pate.core.rng import Rng
from pate.mechanisms.base import MechanismSpec, all_answered, noisy_argmax
from pate.mechanisms.params import SIGMA
from pate.mechanisms.registry import AUTO_WITH_TEACHERS


@dataclasses.dataclass(frozen=True)
class _GNMax(MechanismSpec):
    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = votes.shape[0]
        labels = noisy_argmax(votes, rng.normal(0.0, params["sigma"], size=votes.shape))
        return (labels, *all_answered(n))

    def query_rdp_parts(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: np.ndarray,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        answer = gnmax_rdp(
            votes, sigma=params["sigma"], orders=orders, data_dependent=data_dependent
        )
        return np.zeros_like(answer), answer

    def event(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        answered: Any,
        orders: Any,
        student: np.ndarray | None = None,
    ) -> PrivacyEvent:
        return gnmax_event(votes, sigma=params["sigma"], orders=orders)

    calibrated: ClassVar[tuple[str, ...]] = ("sigma",)

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        return {"sigma": calibrate_gnmax_sigma(**kw)}

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        return {"threshold": None, "sigma1": None, "sigma2": float(params["sigma"])}


GNMAX = _GNMax(
    name="gnmax",
    title="GNMax",
    params=(SIGMA,),
    always_answers=True,
    auto_for=(AUTO_WITH_TEACHERS,),
    reference="Papernot et al. 2018, Section 4.1",
    description=(
        "every query is answered with the class whose teacher vote count is largest after "
        "Gaussian noise is added to each count. Every query is charged the noisy argmax."
    ),
)
