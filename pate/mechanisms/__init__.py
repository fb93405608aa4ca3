"""The registry of PATE aggregation mechanisms: one :class:`MechanismSpec` per mechanism, each of
one kind (:mod:`pate.mechanisms.kinds`), which the rest of pate-learn asks, never a mechanism's
name, what a run reads, draws, charges and publishes (docs/aggregators.md, "The mechanism
protocol")."""

from __future__ import annotations

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe
from pate.mechanisms import registry as _registry
from pate.mechanisms.base import MechanismSpec
from pate.mechanisms.class_means import CLASS_MEANS
from pate.mechanisms.confident_gnmax import CONFIDENT_GNMAX, INTERACTIVE_GNMAX
from pate.mechanisms.kinds import KINDS, RELEASE, SAMPLE, VOTE, MechanismKind
from pate.mechanisms.noisy_argmax import GNMAX, LNMAX
from pate.mechanisms.params import Param
from pate.mechanisms.private_knn import PRIVATE_KNN
from pate.mechanisms.registry import (
    AUTO_FIXED_NOISE,
    AUTO_WITH_TEACHERS,
    AUTO_WITHOUT_TEACHERS,
    REGISTRY,
    all_param_names,
    auto_choice,
    get,
)

__all__ = [
    "Param",
    "MechanismSpec",
    "REGISTRY",
    "NAMES",
    "get",
    "register",
    "unregister",
    "all_param_names",
    "auto_choice",
    "AUTO_WITH_TEACHERS",
    "AUTO_WITHOUT_TEACHERS",
    "AUTO_FIXED_NOISE",
    "MechanismKind",
    "KINDS",
    "VOTE",
    "SAMPLE",
    "RELEASE",
]

_BUILTIN: tuple[MechanismSpec, ...] = (
    LNMAX,
    GNMAX,
    CONFIDENT_GNMAX,
    INTERACTIVE_GNMAX,
    PRIVATE_KNN,
    CLASS_MEANS,
)
for _spec in _BUILTIN:
    _registry.add(_spec)
NAMES: tuple[str, ...] = tuple(spec.name for spec in _BUILTIN)


def register(spec: MechanismSpec) -> MechanismSpec:
    """Add ``spec`` to the registry (for tests and plugins); a name already taken is refused."""
    if not isinstance(spec, MechanismSpec):
        raise InputTypeError(f"register needs a MechanismSpec, got {describe(spec)}")
    if not isinstance(spec.kind, MechanismKind):
        raise InputTypeError(
            f"mechanism {spec.name!r}: its kind must be a mechanisms.MechanismKind (one of "
            f"{', '.join(f'mechanisms.{k.upper()}' for k in KINDS)}, or its own), got "
            f"{describe(spec.kind)}"
        )
    _registry.add(spec)
    return spec


def unregister(name: str) -> MechanismSpec:
    """Remove a mechanism added by :func:`register` (the built-in ones cannot be removed)."""
    if name in NAMES:
        raise InputError(f"{name!r} is a built-in mechanism and cannot be unregistered")
    spec: MechanismSpec = _registry.remove(name)
    return spec
