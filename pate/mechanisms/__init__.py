"""The registry of PATE aggregation mechanisms: one :class:`MechanismSpec` per mechanism.

A spec holds everything the rest of pate-learn needs to know about a mechanism -- its noise
parameters and their validation, the noise step, the per-query and worst-case Renyi-DP cost,
the :class:`pate.analysis.accountant.PrivacyEvent` it charges, the parameters of its
smooth-sensitivity release and the wording of the privacy report -- so that adding a mechanism
means adding one spec file here (and its tests), as dp_accounting has one event class per
mechanism. Every spec has a *kind* (:mod:`pate.mechanisms.kinds`: "vote", "sample" or
"release", or a kind of its own), and the rest of pate-learn asks the kind, never a mechanism's
name, what a run of it reads, draws, charges and publishes.

The protocol a mechanism implements (one spec, registered in one line with :func:`register`):

=====================  ====================================================================
what it reads          ``kind.reads_private_records`` (the teachers' votes, or the records
                       themselves: then no partition, no teachers) and ``kind.votes_stage``
how it answers         ``spec.draw`` (votes -> labels); a "sample" kind's ``sample_votes``, a
                       "release" kind's ``release_scores``; ``kind.aggregate_loop`` the
                       aggregate stage's loop that draws them inside the ledger's reservations
the event it charges   ``spec.event`` (a :class:`pate.analysis.accountant.PrivacyEvent`)
its analysis           ``spec.query_rdp_parts`` (data-dependent and data-independent RDP per
                       query), ``worst_case_query_rdp``, ``pr_answered``, ``calibrate``,
                       ``release_params`` (smooth sensitivity); the arithmetic in ``analysis/``
its report             ``title``, ``reference``, ``description``, ``voters_text``,
                       ``cost_text``, the parameters' symbols
the planner's hooks    ``auto_for`` (what ``mechanism = "auto"`` becomes), ``calibrated``
=====================  ====================================================================
The RDP arithmetic itself lives in :mod:`pate.analysis`; a spec only wires it. This package is part
of the pate core layer: it imports :mod:`pate.analysis`, numpy, and (inside the "sample" and
"release" specs' draws) ``pate.core.knn`` and ``pate.core.mean_release``; ``pate.core.aggregators`` imports it.

Files: ``params`` (:class:`Param` and the shared parameters), ``kinds`` (the kinds), ``base``
(:class:`MechanismSpec`), ``registry`` (the name -> spec table), and one file per built-in spec:
``lnmax``, ``gnmax``, ``confident_gnmax`` (Confident and Interactive GNMax), ``private_knn``,
``class_means``.

Symbols
-------
votes          (n, m) int vote matrix (``pate.analysis.validation.check_votes``): ``votes[i, j]``
               teachers voted class j on query i; every row sums to the number of teachers T.
params         a mechanism's clean noise parameters, the dict returned by
               :meth:`MechanismSpec.validate` (names -> floats).
student        (n, m) student probabilities (Interactive-GNMax) or None.
answered       (n,) bool: the teachers answered query i (the answer step ran and is charged).
orders         (k,) Renyi orders > 1.
``Param(name, kind, help, symbol="", default=None)``
    One noise parameter: ``kind`` is "positive" (> 0), "nonnegative" (>= 0),
    "unit_interval" (in [0, 1]) or "positive_integer" (an int >= 1; an integral float such as a
    command-line 300.0 is accepted and returned as an int); ``help`` the CLI help; ``symbol`` how
    the report writes it; ``default`` the value used when it is not given (None: it must be
    given). The validated parameters always hold every parameter, defaults included, so an
    event records the value that was used.
``MechanismSpec``
    Base class of the specs (see its methods). A mechanism subclasses it and implements
    :meth:`~MechanismSpec.draw` and :meth:`~MechanismSpec.query_rdp_parts`; every other method
    has a default built on those two. Its class attribute ``kind`` is VOTE unless it says
    otherwise; a SAMPLE spec also implements :meth:`~MechanismSpec.sample_votes`, a RELEASE spec
    :meth:`~MechanismSpec.release_scores`.
``MechanismKind``, ``KINDS``, ``VOTE``, ``SAMPLE``, ``RELEASE``
               the kinds (:mod:`pate.mechanisms.kinds`).
``REGISTRY``   read-only mapping name -> spec (lnmax, gnmax, confident-gnmax, interactive-gnmax,
               private-knn, class-means, and whatever :func:`register` added). ``NAMES``: the built-in names.
``get(name)``  the spec of ``name`` (ValueError listing the valid names otherwise).
``register(spec)`` / ``unregister(name)``  add / remove a spec (tests, plugins).
``all_param_names()`` the parameters of every registered mechanism, in a stable order.
``auto_choice(role)`` what the planner's ``mechanism = "auto"`` becomes in ``role`` (``AUTO_WITH_TEACHERS``,
               ``AUTO_WITHOUT_TEACHERS``, ``AUTO_FIXED_NOISE``): the spec whose ``auto_for`` names it.

References
----------
[P17] Papernot et al., "Semi-supervised Knowledge Transfer for Deep Learning from Private
      Training Data", ICLR 2017.
[P18] Papernot et al., "Scalable Private Learning with PATE", ICLR 2018 (arXiv:1802.08908).
[ZYW20] Zhu, Yu, Wang, "Private-kNN: Practical Differential Privacy for Computer Vision", CVPR 2020.
[MTZ19] Mironov, Talwar, Zhang, "Renyi Differential Privacy of the Sampled Gaussian Mechanism",
      arXiv:1908.10530.
[M17] Mironov, "Renyi Differential Privacy", CSF 2017.
"""

from __future__ import annotations

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe
from pate.mechanisms import registry as _registry
from pate.mechanisms.base import MechanismSpec
from pate.mechanisms.class_means import CLASS_MEANS
from pate.mechanisms.confident_gnmax import CONFIDENT_GNMAX, INTERACTIVE_GNMAX
from pate.mechanisms.gnmax import GNMAX
from pate.mechanisms.kinds import KINDS, RELEASE, SAMPLE, VOTE, MechanismKind
from pate.mechanisms.lnmax import LNMAX
from pate.mechanisms.params import PARAM_KINDS, Param
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
    "PARAM_KINDS",
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
