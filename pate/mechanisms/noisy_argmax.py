"""GNMax [P18, Section 4.1] and LNMax [P17]: the Gaussian or Laplace noisy argmax of the teachers'
votes ("vote" kind)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.calibration import calibrate_gnmax_sigma, calibrate_lnmax_scale
from pate.analysis.rdp import gnmax_rdp, lnmax_rdp
from pate.core.rng import Rng
from pate.mechanisms.base import MechanismSpec, all_answered, noisy_argmax
from pate.mechanisms.params import SCALE, SIGMA
from pate.mechanisms.registry import AUTO_WITH_TEACHERS


@dataclasses.dataclass(frozen=True)
class NoisyArgmaxSpec(MechanismSpec):
    """The noisy argmax of the votes, every query answered and charged: Gaussian noise of
    ``sigma`` (GNMax), or Laplace noise of ``scale`` where :attr:`laplace` (LNMax)."""

    laplace: ClassVar[bool] = False
    calibrated: ClassVar[tuple[str, ...]] = ("sigma",)

    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.laplace:
            noise = rng.laplace(0.0, params["scale"], size=votes.shape)
        else:
            noise = rng.normal(0.0, params["sigma"], size=votes.shape)
        return (noisy_argmax(votes, noise), *all_answered(votes.shape[0]))

    def query_rdp_parts(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: np.ndarray,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.laplace:
            answer = lnmax_rdp(
                votes, scale=params["scale"], orders=orders, data_dependent=data_dependent
            )
        else:
            answer = gnmax_rdp(
                votes, sigma=params["sigma"], orders=orders, data_dependent=data_dependent
            )
        return np.zeros_like(answer), answer

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        if self.laplace:
            return {"scale": calibrate_lnmax_scale(**kw)}
        return {"sigma": calibrate_gnmax_sigma(**kw)}

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        if self.laplace:
            return None  # no smooth-sensitivity analysis of LNMax
        return {"threshold": None, "sigma1": None, "sigma2": float(params["sigma"])}


GNMAX = NoisyArgmaxSpec(
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


@dataclasses.dataclass(frozen=True)
class _LNMax(NoisyArgmaxSpec):
    laplace: ClassVar[bool] = True
    calibrated: ClassVar[tuple[str, ...]] = ("scale",)


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
