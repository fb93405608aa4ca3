"""LNMax [P17]: the Laplace noisy argmax of the teachers' votes ("vote" kind)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.accountant import PrivacyEvent, lnmax_event
from pate.analysis.calibration import calibrate_lnmax_scale
from pate.analysis.rdp import lnmax_rdp
from pate.core.rng import Rng
from pate.mechanisms.base import MechanismSpec, all_answered, noisy_argmax
from pate.mechanisms.params import SCALE


@dataclasses.dataclass(frozen=True)
class _LNMax(MechanismSpec):
    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, m = votes.shape
        labels = noisy_argmax(votes, rng.laplace(0.0, params["scale"], size=(n, m)))
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
        answer = lnmax_rdp(
            votes, scale=params["scale"], orders=orders, data_dependent=data_dependent
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
        return lnmax_event(votes, scale=params["scale"], orders=orders)

    calibrated: ClassVar[tuple[str, ...]] = ("scale",)

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        return {"scale": calibrate_lnmax_scale(**kw)}


LNMAX = _LNMax(
    name="lnmax",
    title="LNMax",
    params=(SCALE,),
    always_answers=True,
    reference="Papernot et al. 2017",
    description=(
        "every query is answered with the class whose teacher vote count is largest after "
        "Laplace noise is added to each count. Every query is charged the noisy argmax "
        "(pure \u03b5 = 2/scale per query, or less where the teachers agree)."
    ),
)
