"""Privacy events and an immutable RDP accountant that composes them.

A :class:`PrivacyEvent` is what a mechanism *did*: its name, its noise parameters, how many
queries were asked and answered, and the per-order RDP it cost -- both the realised
data-dependent curve ``rdp`` (which looks at the votes: NOT private to publish as is) and the
data-independent curve ``rdp_data_independent`` (a function of public quantities only). Events
are stored (by the ledger) and recomposed exactly; a final epsilon is never stored alone.

:class:`RdpAccountant` composes events by adding their RDP curves ([M17] Proposition 1) and never
mutates: ``compose`` returns a new accountant (dp_accounting's event model).

Neighbouring relation
---------------------
An RDP curve bounds the divergence between the outputs on two *neighbouring* datasets, so it is
a statement about one relation. Every event records the relation its bound is stated for
(``relation``, one of :data:`RELATIONS`); :class:`RdpAccountant` refuses to compose events stated
for different relations (a sum of bounds for different relations bounds neither).

* ``"add-remove"`` (:data:`ADD_REMOVE`): D and D' differ by one record added or removed (with a
  privacy-unit partition: by all records of one unit). Every mechanism of pate-learn is analysed
  for it: the teacher partition decides each record's shard from the record alone (a keyed hash,
  :mod:`pate.core.partition`), so adding or removing a record changes one teacher's training set and
  therefore at most one vote -- the histogram change every vote bound below assumes -- and
  class-means and Private-kNN are derived for it in their modules. DP-SGD (Opacus,
  dp_accounting) states its epsilon for the same relation, so the numbers compare.
* ``"replace-one"`` (:data:`REPLACE_ONE`): D and D' have the same size and differ in one record.
  No mechanism of pate-learn states its events for it; the ledger refuses to compose such events.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray, FloatOrArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import confident_gnmax_rdp, eps_from_rdp, gnmax_rdp, lnmax_rdp
from pate.analysis.validation import check_baseline, check_mask, check_orders, check_votes

ADD_REMOVE = "add-remove"
REPLACE_ONE = "replace-one"
#: The relations an event may be stated for, each in plain words (the report prints them).
RELATIONS = {
    ADD_REMOVE: "two datasets are neighbours when one is the other with one record added or "
    "removed (with a privacy-unit partition: all records of one unit)",
    REPLACE_ONE: "two datasets are neighbours when they have the same size and differ in one "
    "record",
}


def _frozen_array(values: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.array(values, dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise InputError(f"{name} must be non-negative and not NaN")
    arr.setflags(write=False)
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class PrivacyEvent:
    """The realised privacy cost of one mechanism run (see the module docstring)."""

    mechanism: str
    params: Mapping[str, Any]
    orders: FloatArray
    rdp: FloatArray
    rdp_data_independent: FloatArray
    queries: int
    answered: int
    relation: str = ADD_REMOVE

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise InputError(f"relation must be one of {sorted(RELATIONS)}, got {self.relation!r}")
        object.__setattr__(self, "orders", check_orders(self.orders))
        for name in ("orders", "rdp", "rdp_data_independent"):
            object.__setattr__(self, name, _frozen_array(getattr(self, name), name))
        orders = self.orders
        if self.rdp.shape != orders.shape or self.rdp_data_independent.shape != orders.shape:
            raise InputError("rdp and rdp_data_independent must have one value per order")
        if not isinstance(self.mechanism, str) or not self.mechanism:
            raise InputTypeError(f"mechanism must be a non-empty string, got {self.mechanism!r}")
        json.dumps(dict(self.params))  # params must be JSON-serialisable (raises TypeError)
        object.__setattr__(self, "params", dict(self.params))
        for name in ("queries", "answered"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise InputError(f"{name} must be a non-negative integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.answered > self.queries:
            raise InputError(f"answered ({self.answered}) cannot exceed queries ({self.queries})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (floats round-trip exactly through ``json``)."""
        out = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        curves = {name: out[name].tolist() for name in ("orders", "rdp", "rdp_data_independent")}
        return out | curves | {"params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyEvent:
        keys = {field.name for field in dataclasses.fields(cls)}
        missing = keys - set(data)
        if missing:  # a relation is never guessed: the bound may hold for another one only
            raise InputError(f"a privacy event needs the keys {sorted(missing)}")
        return cls(**{k: data[k] for k in keys})

    def on_orders(self, orders: npt.ArrayLike) -> PrivacyEvent:
        """This event restricted to ``orders`` (each must be one of this event's orders)."""
        grid = check_orders(orders)
        index = {float(o): i for i, o in enumerate(self.orders)}
        try:
            idx = np.array([index[float(o)] for o in grid])
        except KeyError as exc:
            raise InputError(
                f"order {exc.args[0]} is not among this event's orders; "
                "recompute the event on the accountant's grid"
            ) from None
        return dataclasses.replace(
            self,
            orders=grid,
            rdp=self.rdp[idx],
            rdp_data_independent=self.rdp_data_independent[idx],
        )


class RdpAccountant:
    """Immutable composition of :class:`PrivacyEvent` s on a fixed grid of orders."""

    def __init__(
        self, orders: npt.ArrayLike = DEFAULT_ORDERS, events: Iterable[PrivacyEvent] = ()
    ) -> None:
        self._orders = _frozen_array(check_orders(orders), "orders")
        evs = tuple(events)
        for ev in evs:
            if not isinstance(ev, PrivacyEvent):
                raise InputTypeError(
                    f"events must be PrivacyEvent objects, got {type(ev).__name__}"
                )
            if ev.orders.shape != self._orders.shape or not np.array_equal(ev.orders, self._orders):
                raise InputError(
                    "every event must be computed on the accountant's orders; "
                    "use event.on_orders(accountant.orders) or recompute it"
                )
        relations = sorted({ev.relation for ev in evs})
        if len(relations) > 1:
            raise InputError(
                f"cannot compose events stated for different neighbouring relations "
                f"({', '.join(relations)}): the sum would bound neither; keep them in "
                "separate accountants"
            )
        self._events = evs

    @property
    def relation(self) -> str | None:
        """The neighbouring relation of every event (None while there is none)."""
        return self._events[0].relation if self._events else None

    @property
    def orders(self) -> FloatArray:
        return self._orders

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return self._events

    def compose(self, *events: PrivacyEvent) -> RdpAccountant:
        """A new accountant holding this one's events followed by ``events``."""
        return RdpAccountant(self._orders, self._events + tuple(events))

    def rdp(self, data_dependent: bool = True) -> FloatArray:
        """Composed per-order RDP (sum over events), shape (k,)."""
        total: FloatArray = np.zeros(self._orders.size)
        for ev in self._events:
            total = total + (ev.rdp if data_dependent else ev.rdp_data_independent)
        return total

    @property
    def queries(self) -> int:
        return sum(ev.queries for ev in self._events)

    @property
    def answered(self) -> int:
        return sum(ev.answered for ev in self._events)

    def epsilon(
        self, *, delta: float, data_dependent: bool = True, conversion: str = "classic"
    ) -> tuple[FloatOrArray, FloatOrArray]:
        """(eps, order) of the composition at ``delta`` (see :func:`analysis.eps_from_rdp`)."""
        return eps_from_rdp(
            self.rdp(data_dependent), orders=self._orders, delta=delta, conversion=conversion
        )

    def __repr__(self) -> str:
        return (
            f"RdpAccountant({len(self._events)} events, {self.queries} queries, "
            f"{self.answered} answered, {self._orders.size} orders)"
        )


# --------------------------------------------------------------------------- event builders


def _all_answered(
    mechanism: str, noise: tuple[str, float], votes: npt.ArrayLike, orders: npt.ArrayLike
) -> PrivacyEvent:
    """``mechanism`` (``gnmax_rdp`` or ``lnmax_rdp`` at the ``noise`` (name, value)) answered
    every query in ``votes``: the realised cost."""
    counts = check_votes(votes)
    grid = check_orders(orders)
    per_query = gnmax_rdp if mechanism == "gnmax" else lnmax_rdp
    kwargs: dict[str, Any] = {noise[0]: noise[1], "orders": grid}
    dep: FloatArray = per_query(counts, **kwargs).sum(axis=0)  # checks the noise
    ind: FloatArray = per_query(counts, **kwargs, data_dependent=False).sum(axis=0)
    n = counts.shape[0]
    return PrivacyEvent(mechanism, {noise[0]: float(noise[1])}, grid, dep, ind, n, n)


def gnmax_event(
    votes: npt.ArrayLike, *, sigma: float, orders: npt.ArrayLike = DEFAULT_ORDERS
) -> PrivacyEvent:
    """GNMax answered every query in ``votes`` (realised cost)."""
    return _all_answered("gnmax", ("sigma", sigma), votes, orders)


def lnmax_event(
    votes: npt.ArrayLike, *, scale: float, orders: npt.ArrayLike = DEFAULT_ORDERS
) -> PrivacyEvent:
    """LNMax answered every query in ``votes`` (realised cost)."""
    return _all_answered("lnmax", ("scale", scale), votes, orders)


def confident_gnmax_event(
    votes: npt.ArrayLike,
    *,
    threshold: float,
    sigma1: float,
    sigma2: float,
    answered: npt.ArrayLike,
    orders: npt.ArrayLike = DEFAULT_ORDERS,
    baseline: npt.ArrayLike | None = None,
) -> PrivacyEvent:
    """Confident GNMax (Interactive GNMax with ``baseline``) asked every query in ``votes`` and
    answered those in the ``answered`` mask: the realised cost."""
    counts = check_votes(votes)
    grid = check_orders(orders)
    mask = check_mask(answered, counts.shape[0], "answered")
    base = None if baseline is None else check_baseline(baseline, counts.shape)
    noise: dict[str, Any] = {"threshold": threshold, "sigma1": sigma1, "sigma2": sigma2}
    kwargs = noise | {"orders": grid, "answered": mask, "baseline": base}
    dep = confident_gnmax_rdp(counts, **kwargs)  # checks the noise parameters
    ind = confident_gnmax_rdp(counts, **kwargs, data_dependent=False)
    mechanism = "confident-gnmax" if base is None else "interactive-gnmax"
    params = {name: float(value) for name, value in noise.items()}
    return PrivacyEvent(mechanism, params, grid, dep, ind, counts.shape[0], int(mask.sum()))
