"""LNMax [P17]: the Laplace noisy argmax of the teachers' votes ("vote" kind)."""

from __future__ import annotations

import dataclasses

import numpy as np

from pate.analysis.accountant import lnmax_event
from pate.analysis.calibration import calibrate_lnmax_scale
from pate.analysis.rdp import lnmax_rdp
from pate.mechanisms.base import MechanismSpec, all_answered, noisy_argmax
from pate.mechanisms.params import SCALE

__all__ = ["LNMAX"]


@dataclasses.dataclass(frozen=True)
class _LNMax(MechanismSpec):
    def draw(self, votes, params, rng, *, student=None):
        n, m = votes.shape
        labels = noisy_argmax(votes, rng.laplace(0.0, params["scale"], size=(n, m)))
        return (labels, *all_answered(n))

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        answer = lnmax_rdp(votes, scale=params["scale"], orders=orders,
                           data_dependent=data_dependent)
        return np.zeros_like(answer), answer

    def event(self, votes, params, *, answered, orders, student=None):
        return lnmax_event(votes, scale=params["scale"], orders=orders)

    calibrated = ("scale",)

    def _calibrate(self, params, *, auto, **kw):
        return {"scale": calibrate_lnmax_scale(**kw)}


LNMAX = _LNMax(
    name="lnmax", title="LNMax", params=(SCALE,), always_answers=True,
    reference="Papernot et al. 2017",
    description=(
        "every query is answered with the class whose teacher vote count is largest after "
        "Laplace noise is added to each count. Every query is charged the noisy argmax "
        "(pure \u03b5 = 2/scale per query, or less where the teachers agree)."))
