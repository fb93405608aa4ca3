"""A dataset's budget (``Budget``) and the constants it is checked against."""

from __future__ import annotations

import dataclasses

from pate.analysis.validation import check_choice

#: The one neighbouring relation a budget and every event composed against it are stated for.
LEDGER_RELATION = "add-remove"
BASES = ("data-independent", "data-dependent")
CONVERSIONS = ("classic", "tight")


@dataclasses.dataclass(frozen=True)
class Budget:
    """The privacy budget of one dataset: total ``eps`` at ``delta``, judged on ``basis`` RDP
    converted to (eps, delta) with ``conversion`` (``"classic"`` or ``"tight"``)."""

    eps: float
    delta: float
    basis: str = "data-independent"
    conversion: str = "classic"
    #: the neighbouring relation the budget is a promise for (the only one: add/remove)
    relation: str = LEDGER_RELATION

    def __post_init__(self) -> None:
        check_choice(self.conversion, "conversion", CONVERSIONS)
        check_choice(self.relation, "relation", (LEDGER_RELATION,))

    @property
    def data_dependent(self) -> bool:
        return self.basis == "data-dependent"
