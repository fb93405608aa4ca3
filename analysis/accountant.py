"""Privacy events and an immutable RDP accountant that composes them.

A :class:`PrivacyEvent` is what a mechanism *did*: its name, its noise parameters, how many
queries were asked and answered, and the per-order RDP it cost -- both the realised
data-dependent curve ``rdp`` (which looks at the votes: NOT private to publish as is) and the
data-independent curve ``rdp_data_independent`` (a function of public quantities only). Events
are stored (by the ledger) and recomposed exactly; a final epsilon is never stored alone.

:class:`RdpAccountant` composes events by adding their RDP curves ([M17] Proposition 1) and never
mutates: ``compose`` returns a new accountant (dp_accounting's event model).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

import numpy as np

from pate.analysis.orders import DEFAULT_ORDERS
from pate.analysis.rdp import confident_gnmax_rdp, eps_from_rdp, gnmax_rdp, lnmax_rdp
from pate.analysis.validation import (check_baseline, check_delta, check_mask, check_orders,
                                      check_votes)

__all__ = ["PrivacyEvent", "RdpAccountant", "gnmax_event", "lnmax_event", "confident_gnmax_event"]


def _frozen_array(values, name: str) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative and not NaN")
    arr.setflags(write=False)
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class PrivacyEvent:
    """The realised privacy cost of one mechanism run (see the module docstring)."""

    mechanism: str
    params: Mapping[str, Any]
    orders: np.ndarray
    rdp: np.ndarray
    rdp_data_independent: np.ndarray
    queries: int
    answered: int

    def __post_init__(self) -> None:
        orders = check_orders(self.orders)
        orders = orders.copy()
        orders.setflags(write=False)
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "rdp", _frozen_array(self.rdp, "rdp"))
        object.__setattr__(self, "rdp_data_independent",
                           _frozen_array(self.rdp_data_independent, "rdp_data_independent"))
        if self.rdp.shape != orders.shape or self.rdp_data_independent.shape != orders.shape:
            raise ValueError("rdp and rdp_data_independent must have one value per order")
        if not isinstance(self.mechanism, str) or not self.mechanism:
            raise TypeError(f"mechanism must be a non-empty string, got {self.mechanism!r}")
        json.dumps(dict(self.params))  # params must be JSON-serialisable (raises TypeError)
        object.__setattr__(self, "params", dict(self.params))
        for name in ("queries", "answered"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.answered > self.queries:
            raise ValueError(f"answered ({self.answered}) cannot exceed queries ({self.queries})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (floats round-trip exactly through ``json``)."""
        return {
            "mechanism": self.mechanism,
            "params": dict(self.params),
            "orders": self.orders.tolist(),
            "rdp": self.rdp.tolist(),
            "rdp_data_independent": self.rdp_data_independent.tolist(),
            "queries": self.queries,
            "answered": self.answered,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PrivacyEvent":
        keys = {"mechanism", "params", "orders", "rdp", "rdp_data_independent", "queries", "answered"}
        missing = keys - set(data)
        if missing:
            raise ValueError(f"a privacy event needs the keys {sorted(missing)}")
        return cls(**{k: data[k] for k in keys})

    def on_orders(self, orders) -> "PrivacyEvent":
        """This event restricted to ``orders`` (each must be one of this event's orders)."""
        orders = check_orders(orders)
        index = {float(o): i for i, o in enumerate(self.orders)}
        try:
            idx = np.array([index[float(o)] for o in orders])
        except KeyError as exc:
            raise ValueError(f"order {exc.args[0]} is not among this event's orders; "
                             "recompute the event on the accountant's grid") from None
        return dataclasses.replace(self, orders=orders, rdp=self.rdp[idx],
                                   rdp_data_independent=self.rdp_data_independent[idx])


class RdpAccountant:
    """Immutable composition of :class:`PrivacyEvent` s on a fixed grid of orders."""

    def __init__(self, orders=DEFAULT_ORDERS, events: Iterable[PrivacyEvent] = ()) -> None:
        self._orders = check_orders(orders).copy()
        self._orders.setflags(write=False)
        evs = tuple(events)
        for ev in evs:
            if not isinstance(ev, PrivacyEvent):
                raise TypeError(f"events must be PrivacyEvent objects, got {type(ev).__name__}")
            if ev.orders.shape != self._orders.shape or not np.array_equal(ev.orders, self._orders):
                raise ValueError("every event must be computed on the accountant's orders; "
                                 "use event.on_orders(accountant.orders) or recompute it")
        self._events = evs

    @property
    def orders(self) -> np.ndarray:
        return self._orders

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        return self._events

    def compose(self, *events: PrivacyEvent) -> "RdpAccountant":
        """A new accountant holding this one's events followed by ``events``."""
        return RdpAccountant(self._orders, self._events + tuple(events))

    def rdp(self, data_dependent: bool = True) -> np.ndarray:
        """Composed per-order RDP (sum over events), shape (k,)."""
        total = np.zeros(self._orders.size)
        for ev in self._events:
            total = total + (ev.rdp if data_dependent else ev.rdp_data_independent)
        return total

    @property
    def queries(self) -> int:
        return sum(ev.queries for ev in self._events)

    @property
    def answered(self) -> int:
        return sum(ev.answered for ev in self._events)

    def epsilon(self, *, delta, data_dependent: bool = True, conversion: str = "classic"):
        """(eps, order) of the composition at ``delta`` (see :func:`analysis.eps_from_rdp`)."""
        check_delta(delta)
        return eps_from_rdp(self.rdp(data_dependent), orders=self._orders, delta=delta,
                            conversion=conversion)

    def __repr__(self) -> str:
        return (f"RdpAccountant({len(self._events)} events, {self.queries} queries, "
                f"{self.answered} answered, {self._orders.size} orders)")


# --------------------------------------------------------------------------- event builders

def gnmax_event(votes, *, sigma, orders=DEFAULT_ORDERS) -> PrivacyEvent:
    """GNMax answered every query in ``votes`` (realised cost)."""
    votes = check_votes(votes)
    orders = check_orders(orders)
    dep = gnmax_rdp(votes, sigma=sigma, orders=orders).sum(axis=0)
    ind = gnmax_rdp(votes, sigma=sigma, orders=orders, data_dependent=False).sum(axis=0)
    n = votes.shape[0]
    return PrivacyEvent("gnmax", {"sigma": float(sigma)}, orders, dep, ind, n, n)


def lnmax_event(votes, *, scale, orders=DEFAULT_ORDERS) -> PrivacyEvent:
    """LNMax answered every query in ``votes`` (realised cost)."""
    votes = check_votes(votes)
    orders = check_orders(orders)
    dep = lnmax_rdp(votes, scale=scale, orders=orders).sum(axis=0)
    ind = lnmax_rdp(votes, scale=scale, orders=orders, data_dependent=False).sum(axis=0)
    n = votes.shape[0]
    return PrivacyEvent("lnmax", {"scale": float(scale)}, orders, dep, ind, n, n)


def confident_gnmax_event(votes, *, threshold, sigma1, sigma2, answered, orders=DEFAULT_ORDERS,
                          baseline=None) -> PrivacyEvent:
    """Confident GNMax (Interactive GNMax with ``baseline``) asked every query in ``votes`` and
    answered those in the ``answered`` mask: the realised cost."""
    votes = check_votes(votes)
    orders = check_orders(orders)
    answered = check_mask(answered, votes.shape[0], "answered")
    if baseline is not None:
        baseline = check_baseline(baseline, votes.shape)
    kwargs = dict(threshold=threshold, sigma1=sigma1, sigma2=sigma2, orders=orders,
                  answered=answered, baseline=baseline)
    dep = confident_gnmax_rdp(votes, **kwargs)
    ind = confident_gnmax_rdp(votes, data_dependent=False, **kwargs)
    mechanism = "confident-gnmax" if baseline is None else "interactive-gnmax"
    params = {"threshold": float(threshold), "sigma1": float(sigma1), "sigma2": float(sigma2)}
    return PrivacyEvent(mechanism, params, orders, dep, ind, votes.shape[0], int(answered.sum()))
