"""LNMax [P17]: the Laplace noisy argmax of the teachers' votes ("vote" kind)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from pate.mechanisms.gnmax import NoisyArgmaxSpec
from pate.mechanisms.params import SCALE


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
