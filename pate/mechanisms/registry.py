"""The registry of mechanism specs: name -> spec, read-only to everyone but
:func:`pate.mechanisms.register` / :func:`pate.mechanisms.unregister` (which check what they add
and remove, and call :func:`add` / :func:`remove` here)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

from pate.analysis.errors import InputError
from pate.analysis.validation import describe

#: What ``mechanism = "auto"`` may become (a spec's ``auto_for``): with a target and teachers
#: asked for, with a target and no teachers asked for, and (``pate.fit``) without a target.
AUTO_WITH_TEACHERS = "with teachers"
AUTO_WITHOUT_TEACHERS = "without teachers"
AUTO_FIXED_NOISE = "fixed noise"

# Specs are typed Any here: their class (pate.mechanisms.base.MechanismSpec) imports this module,
# so naming it would make an import cycle; pate.mechanisms.register checks what is added.
_REGISTRY: dict[str, Any] = {}
REGISTRY: Mapping[str, Any] = types.MappingProxyType(_REGISTRY)


def get(name: str) -> Any:
    """The spec of mechanism ``name``; ValueError listing the registered names otherwise."""
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None:
        raise InputError(
            f"mechanism must be one of {', '.join(map(repr, _REGISTRY))}; got {describe(name)}"
        )
    return spec


def add(spec: Any) -> None:
    """Store ``spec`` under its name (a name already taken is refused)."""
    if spec.name in _REGISTRY:
        raise InputError(f"mechanism {spec.name!r} is already registered; choose another name")
    _REGISTRY[spec.name] = spec


def remove(name: str) -> Any:
    """Drop mechanism ``name`` and return its spec (ValueError if it is not registered)."""
    spec = get(name)
    del _REGISTRY[name]
    return spec


def auto_choice(role: str) -> str:
    """The name of the first registered mechanism that ``mechanism = "auto"`` becomes in
    ``role`` (one of the ``AUTO_*`` roles; its spec's ``auto_for`` names the role)."""
    for spec in _REGISTRY.values():
        if role in spec.auto_for:
            return str(spec.name)
    raise InputError(f"no registered mechanism is the automatic choice {role!r}")


def all_param_names() -> tuple[str, ...]:
    """Every registered mechanism's parameter names, each once, in registry order."""
    seen: dict[str, None] = {}
    for spec in _REGISTRY.values():
        for name in spec.param_names:
            seen.setdefault(name, None)
    return tuple(seen)
