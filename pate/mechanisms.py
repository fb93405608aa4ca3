"""The registry of PATE aggregation mechanisms: one :class:`MechanismSpec` per mechanism.

A spec holds everything the rest of pate-learn needs to know about a mechanism -- its noise
parameters and their validation, the noise step, the per-query and worst-case Renyi-DP cost,
the :class:`pate.analysis.accountant.PrivacyEvent` it charges, the parameters of its
smooth-sensitivity release and the wording of the privacy report -- so that adding a mechanism
means adding one spec here (and its tests), as dp_accounting has one event class per mechanism.
The RDP arithmetic itself lives in :mod:`pate.analysis`; a spec only wires it. This module is part of
the pate core layer: it imports :mod:`pate.analysis` and numpy only (``pate.aggregators`` imports it).

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
    has a default built on those two.
``REGISTRY``   read-only mapping name -> spec (lnmax, gnmax, confident-gnmax, interactive-gnmax,
               private-knn, class-means, and whatever :func:`register` added). ``NAMES``: the built-in names.
``get(name)``  the spec of ``name`` (ValueError listing the valid names otherwise).
``register(spec)`` / ``unregister(name)``  add / remove a spec (tests, plugins).
``all_param_names()`` the parameters of every registered mechanism, in a stable order.

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

import dataclasses
import types
from typing import Any, ClassVar, Mapping

import numpy as np

from pate.analysis.calibration import (calibrate_confident_gnmax, calibrate_gnmax_sigma,
                                       calibrate_lnmax_scale)
from pate.analysis.class_means import (calibrate_class_means_sigma, class_means_event,
                                       class_means_rdp)
from pate.analysis.accountant import (PrivacyEvent, confident_gnmax_event, gnmax_event,
                                      lnmax_event)
from pate.analysis.private_knn import (calibrate_private_knn_sigma2, private_knn_event,
                                       private_knn_log_pr_answered, private_knn_query_rdp)
from pate.analysis.rdp import (confident_gnmax_rdp, gnmax_rdp, lnmax_rdp, threshold_log_pr_answered,
                               threshold_rdp)
from pate.analysis.validation import (check_mask, check_nonnegative, check_orders, check_positive,
                                      check_probabilities, check_unit_interval, describe)

__all__ = ["Param", "MechanismSpec", "REGISTRY", "NAMES", "PARAM_KINDS", "get", "register",
           "unregister", "all_param_names"]

def _check_positive_integer(value: Any, name: str) -> int:
    """An integer >= 1; an integral real (e.g. 300.0 from a float command-line flag) is accepted."""
    out = check_positive(value, name)
    if out != int(out):
        raise ValueError(f"{name} must be a whole number >= 1, got {out!r}")
    return int(out)


_CHECKS = {"positive": check_positive, "nonnegative": check_nonnegative,
           "unit_interval": check_unit_interval, "positive_integer": _check_positive_integer}
PARAM_KINDS = tuple(_CHECKS)

#: A one-teacher, two-class vote row: data-independent costs do not look at the votes.
_DUMMY_VOTES = np.array([[1, 0]])


@dataclasses.dataclass(frozen=True)
class Param:
    """One noise parameter of a mechanism (see the module docstring)."""

    name: str
    kind: str
    help: str
    symbol: str = ""
    default: float | int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Param name must be a Python identifier, got {self.name!r}")
        if self.kind not in _CHECKS:
            raise ValueError(f"Param {self.name}: kind must be one of "
                             f"{', '.join(map(repr, PARAM_KINDS))}, got {self.kind!r}")
        if self.default is not None:
            object.__setattr__(self, "default", self.check(self.default, f"{self.name} default"))

    @property
    def required(self) -> bool:
        """The parameter must be given (it has no default)."""
        return self.default is None

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--student-confidence``."""
        return "--" + self.name.replace("_", "-")

    @property
    def display(self) -> str:
        """How the privacy report writes the parameter (its symbol, else its name)."""
        return self.symbol or self.name

    def check(self, value: Any, label: str) -> float | int:
        """The value as a float (an int for "positive_integer"), or ValueError/TypeError naming
        ``label``."""
        return _CHECKS[self.kind](value, label)


def _label(prefix: str, name: str) -> str:
    # "--" makes command-line flags (dashes); any other prefix is prepended as is.
    if prefix.endswith("-"):
        return prefix + name.replace("_", "-")
    return prefix + name


@dataclasses.dataclass(frozen=True)
class MechanismSpec:
    """A PATE aggregation mechanism: parameters, noise step, privacy cost and report wording.

    Attributes
    ----------
    name : registry key, e.g. "confident-gnmax" (also ``PrivacyEvent.mechanism``).
    title : its name in prose, e.g. "Confident GNMax".
    params : its noise parameters, in the order they are reported.
    description : one or two sentences for the privacy report: what it does, what is charged.
    reference : where it is defined, e.g. "Papernot et al. 2018, Algorithm 1".
    needs_student : the mechanism needs the student's predicted probabilities per query.
    always_answers : every query asked is answered (no threshold check); an ``answered`` mask
        is then meaningless and every asked query is charged the answer step.
    samples_private_records : (class attribute) the mechanism's "votes" are not the teachers'
        votes but histograms it computes from the private records with fresh randomness per
        query (Private-kNN: ``pate.knn.knn_votes``); a caller must draw them itself, after the
        budget is reserved, and pass them to :meth:`draw`. False for the PATE mechanisms.
    releases_once : (class attribute) the mechanism reads the private records too, but releases
        one noisy statistic that labels every query (class-means: ``pate.class_means``); its
        whole cost is one event, charged before the release is drawn, and :meth:`draw` does not
        apply. Implies ``samples_private_records``.
    gives_label_scores : (class attribute) its labelling rule scores every class of every query
        (post-processing of the charged release), and the aggregate stage publishes those scores
        with the labels, for a student trained on soft targets (``[student] targets = "soft"``).
        True for class-means; False where only a noisy argmax is released.
    voters_text : (records mechanisms) how the records vote instead of teachers, for the report.
    cost_text : (records mechanisms) what the data-independent guarantee is the cost of.

    Subclasses implement :meth:`draw` and :meth:`query_rdp_parts`; they may override
    :meth:`event` (e.g. to use a ``pate.analysis`` event builder), :meth:`pr_answered`,
    :meth:`expected_rdp` and :meth:`release_params`.
    """

    name: str
    title: str
    params: tuple[Param, ...]
    description: str
    reference: str
    needs_student: bool = False
    always_answers: bool = False

    voters_text: str = ""
    cost_text: str = ""

    #: See the class docstring: True for a mechanism whose input histograms sample the records.
    samples_private_records: ClassVar[bool] = False
    #: See the class docstring: True for a mechanism whose one release labels every query.
    releases_once: ClassVar[bool] = False
    #: See the class docstring: True for a mechanism that publishes per-class scores per query.
    gives_label_scores: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(f"a mechanism name must be a non-empty string, got {self.name!r}")
        params = tuple(self.params)
        if not all(isinstance(p, Param) for p in params):
            raise TypeError(f"{self.name}: params must be Param objects")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate parameter names in {names}")
        object.__setattr__(self, "params", params)

    # ------------------------------------------------------------------ parameters
    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{name} is not a parameter of {self.name}")

    def validate(self, params: Mapping[str, Any], *, prefix: str = "") -> dict[str, float]:
        """The clean parameters (floats -- ints for "positive_integer" ones --, in :attr:`params`
        order) of ``params``.

        ``params`` may hold other keys (e.g. a config table's ``mechanism``); a key that is a
        parameter of *another* registered mechanism and is not None is refused (TypeError), as
        is a missing or None parameter of this one that has no default (TypeError; one with a
        default gets it); an invalid value raises the ValueError/TypeError of its check. Errors
        name the parameter with ``prefix`` ("--" gives command-line flags, e.g. "--sigma1";
        "[aggregator] " a config key).
        """
        if not isinstance(params, Mapping):
            raise TypeError(f"{self.name}: parameters must be a mapping of names to values, got "
                            f"{describe(params)}")
        own = self.param_names
        listed = ", ".join(_label(prefix, n) if prefix.endswith("-") else n for n in own)
        foreign = [k for k, v in params.items()
                   if v is not None and k not in own and k in all_param_names()]
        if foreign:
            raise TypeError(f"{', '.join(_label(prefix, k) for k in foreign)} is not a parameter "
                            f"of {self.name}; its parameters are {listed}")
        params = self.with_defaults(params)
        missing = [n for n in own if params.get(n) is None]
        if missing:
            suffix = "=..." if not prefix else ""
            raise TypeError(f"{self.name} needs "
                            f"{', '.join(_label(prefix, n) + suffix for n in missing)}; "
                            f"its parameters are {listed}")
        return {p.name: p.check(params[p.name], _label(prefix, p.name)) for p in self.params}

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with the default of every parameter that is missing or None and has one."""
        out = dict(params)
        for p in self.params:
            if out.get(p.name) is None and p.default is not None:
                out[p.name] = p.default
        return out

    def check_student(self, student: Any, votes: np.ndarray) -> np.ndarray | None:
        """The validated (n, m) student probabilities (None for a mechanism without student).

        TypeError if a student is missing where needed or given where it is not used.
        """
        if self.needs_student:
            if student is None:
                raise TypeError(f"{self.name} needs student_probabilities=... (the student's "
                                "(queries, classes) predicted probabilities)")
            return check_probabilities(student, votes.shape, "student_probabilities")
        if student is not None:
            users = [n for n, s in REGISTRY.items() if s.needs_student]
            raise TypeError(f"student_probabilities is only used by {', '.join(users) or 'no mechanism'}, "
                            f"not {self.name}")
        return None

    # ------------------------------------------------------------------ noise step
    def draw(self, votes: np.ndarray, params: Mapping[str, float], rng, *,
             student: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw the noise and decide every query: (labels (n,) int64 (-1: no label),
        answered (n,) bool, source (n,) str). ``votes``, ``params`` and ``student`` are
        validated; the noise drawn must not depend on the votes (only on their shape)."""
        raise NotImplementedError(f"{type(self).__name__} must implement draw()")

    # ------------------------------------------------------------------ privacy cost
    def query_rdp_parts(self, votes: np.ndarray, params: Mapping[str, float], *,
                        orders: np.ndarray, data_dependent: bool,
                        student: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(check, answer), each (n, k): the RDP charged for every query asked (e.g. a threshold
        check) and the RDP charged in addition when the teachers answer it. ``student`` may be
        None only for data-independent costs."""
        raise NotImplementedError(f"{type(self).__name__} must implement query_rdp_parts()")

    def _weights(self, answered: Any, n: int) -> np.ndarray:
        if self.always_answers:
            return np.ones(n, dtype=bool)
        return check_mask(answered, n, "answered")

    def per_query_rdp(self, votes: np.ndarray, params: Mapping[str, float], *, answered: Any,
                      orders: Any, data_dependent: bool,
                      student: np.ndarray | None = None) -> np.ndarray:
        """Realised RDP of each asked query, (n, k); its column sums equal ``event(...).rdp``
        (``data_dependent=True``) or ``.rdp_data_independent`` (False), up to rounding."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(votes, params, orders=orders,
                                             data_dependent=data_dependent, student=student)
        weights = self._weights(answered, check.shape[0])
        return check + weights[:, None] * answer

    def event(self, votes: np.ndarray, params: Mapping[str, float], *, answered: Any,
              orders: Any, student: np.ndarray | None = None) -> PrivacyEvent:
        """The realised cost of running the mechanism on ``votes`` with ``answered`` outcomes."""
        orders = check_orders(orders)
        weights = self._weights(answered, np.shape(votes)[0])
        kw = dict(params=params, answered=weights, orders=orders, student=student)
        dep = self.per_query_rdp(votes, data_dependent=True, **kw).sum(axis=0)
        ind = self.per_query_rdp(votes, data_dependent=False, **kw).sum(axis=0)
        return PrivacyEvent(self.name, dict(params), orders, dep, ind, int(weights.size),
                            int(weights.sum()))

    def worst_case_query_rdp(self, params: Mapping[str, float], *, orders: Any) -> np.ndarray:
        """Data-independent RDP of one query answered by the teachers, (k,): an upper bound of
        what any one query can cost, whatever the votes."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(_DUMMY_VOTES, params, orders=orders,
                                             data_dependent=False)
        return check[0] + answer[0]

    def pr_answered(self, votes: np.ndarray, params: Mapping[str, float], *,
                    student: np.ndarray | None = None) -> np.ndarray:
        """Probability that the teachers answer each query, (n,) (1 if :attr:`always_answers`)."""
        if self.always_answers:
            return np.ones(np.shape(votes)[0])
        raise NotImplementedError(f"{type(self).__name__} must implement pr_answered()")

    def expected_rdp(self, votes: np.ndarray, params: Mapping[str, float], *, orders: Any,
                     data_dependent: bool, student: np.ndarray | None = None) -> np.ndarray:
        """Total RDP, (k,), with the answer step weighted by Pr[answered] (what the reference
        scripts report for a run that was not sampled; it looks at the votes through
        Pr[answered] even when ``data_dependent=False``)."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(votes, params, orders=orders,
                                             data_dependent=data_dependent, student=student)
        pr = self.pr_answered(votes, params, student=student)
        return (check + pr[:, None] * answer).sum(axis=0)

    #: The parameters that :meth:`calibrate` can choose (``"auto"`` in a config); empty: none.
    calibrated: ClassVar[tuple[str, ...]] = ()

    def calibrate(self, params: Mapping[str, Any], *, target_eps: float, delta: float,
                  num_queries: int, orders: Any, conversion: str = "classic",
                  extra_rdp: Any = None) -> dict[str, float]:
        """``params`` with every ``"auto"`` value replaced by the smallest noise such that asking
        ``num_queries`` queries -- all answered by the teachers, the worst case -- composed with
        ``extra_rdp`` (e.g. a planned release) costs at most ``target_eps`` at ``delta``
        (data-independent: public quantities only, so calibrating is private). Delegates to
        ``pate.analysis.calibrate_*``. ValueError where a parameter cannot be calibrated."""
        params = self.with_defaults(params)
        auto = [k for k, v in params.items() if isinstance(v, str) and v == "auto"]
        if not auto:
            return dict(params)
        if not set(auto) <= set(self.calibrated):
            raise ValueError(f"{self.name} can calibrate {', '.join(self.calibrated) or 'nothing'}, "
                             f"not {', '.join(sorted(set(auto) - set(self.calibrated)))} "
                             "(give a number)")
        return {**params, **self._calibrate(params, auto=auto, eps=target_eps, delta=delta,
                                            num_queries=num_queries, orders=check_orders(orders),
                                            conversion=conversion, extra_rdp=extra_rdp)}

    def _calibrate(self, params, *, auto, **kw) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} must implement _calibrate()")

    def voters(self, params: Mapping[str, float], *, private_records: int) -> int:
        """For a mechanism that reads the private records (``samples_private_records``): how
        many of them vote on one query -- the report's count in place of teachers. All of them
        unless a spec says otherwise (Private-kNN: its k nearest)."""
        return int(private_records)

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        """Parameters of the smooth-sensitivity (GNSS) release of the data-dependent epsilon,
        ``{"threshold", "sigma1", "sigma2"}`` for ``analysis.release_sanitized_epsilon``
        (threshold and sigma1 None without a threshold check), or None when the mechanism has
        no smooth-sensitivity analysis."""
        return None


# ---------------------------------------------------------------------- shared noise steps

def _noisy_argmax(votes: np.ndarray, noise: np.ndarray) -> np.ndarray:
    return np.argmax(votes + noise, axis=1).astype(np.int64)


def _all_answered(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(n, dtype=bool), np.full(n, "teachers", dtype="<U9")


def _baseline(votes: np.ndarray, student: np.ndarray | None) -> np.ndarray | None:
    # T p_j: what the student's distribution would put on each class with the teachers' count.
    return None if student is None else votes.sum(axis=1, keepdims=True) * student


# ---------------------------------------------------------------------- the mechanisms

@dataclasses.dataclass(frozen=True)
class _LNMax(MechanismSpec):
    def draw(self, votes, params, rng, *, student=None):
        n, m = votes.shape
        labels = _noisy_argmax(votes, rng.laplace(0.0, params["scale"], size=(n, m)))
        return (labels, *_all_answered(n))

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        answer = lnmax_rdp(votes, scale=params["scale"], orders=orders,
                           data_dependent=data_dependent)
        return np.zeros_like(answer), answer

    def event(self, votes, params, *, answered, orders, student=None):
        return lnmax_event(votes, scale=params["scale"], orders=orders)

    calibrated = ("scale",)

    def _calibrate(self, params, *, auto, **kw):
        return {"scale": calibrate_lnmax_scale(**kw)}


@dataclasses.dataclass(frozen=True)
class _GNMax(MechanismSpec):
    def draw(self, votes, params, rng, *, student=None):
        n = votes.shape[0]
        labels = _noisy_argmax(votes, rng.normal(0.0, params["sigma"], size=votes.shape))
        return (labels, *_all_answered(n))

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        answer = gnmax_rdp(votes, sigma=params["sigma"], orders=orders,
                           data_dependent=data_dependent)
        return np.zeros_like(answer), answer

    def event(self, votes, params, *, answered, orders, student=None):
        return gnmax_event(votes, sigma=params["sigma"], orders=orders)

    calibrated = ("sigma",)

    def _calibrate(self, params, *, auto, **kw):
        return {"sigma": calibrate_gnmax_sigma(**kw)}

    def release_params(self, params):
        return {"threshold": None, "sigma1": None, "sigma2": float(params["sigma"])}


@dataclasses.dataclass(frozen=True)
class _ConfidentGNMax(MechanismSpec):
    """Confident GNMax; with ``needs_student`` the check runs on votes - T p (Interactive)."""

    def _statistic(self, votes, student):
        if not self.needs_student:
            return votes.max(axis=1).astype(np.float64)
        # max_j (n_j - T p_j) rounded half-to-even: exactly the statistic pate.analysis.threshold_rdp
        # accounts for (sensitivity 1 before and after rounding), so the data-dependent bound is
        # computed for the mechanism that actually ran.
        return np.round(np.max(votes - _baseline(votes, student), axis=1))

    def draw(self, votes, params, rng, *, student=None):
        n, m = votes.shape
        # Fixed draw order, whatever the outcome: threshold noise (n,), then argmax noise (n, m).
        noise1 = rng.normal(0.0, params["sigma1"], size=n)
        noise2 = rng.normal(0.0, params["sigma2"], size=(n, m))
        answered = self._statistic(votes, student) + noise1 >= params["threshold"]
        labels = np.where(answered, _noisy_argmax(votes, noise2), -1)
        source = np.where(answered, "teachers", "none").astype("<U9")
        if self.needs_student:
            # The confident student's own label is kept at no privacy cost.
            keep = ~answered & (student.max(axis=1) >= params["student_confidence"])
            labels = np.where(keep, np.argmax(student, axis=1), labels)
            source[keep] = "student"
        return labels.astype(np.int64), answered, source

    def _checked_baseline(self, votes, student, data_dependent):
        if self.needs_student and student is None and data_dependent:
            raise TypeError(f"the data-dependent cost of {self.name} needs the student's "
                            "probabilities (student=...)")
        return _baseline(votes, student)

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        baseline = self._checked_baseline(votes, student, data_dependent)
        check = threshold_rdp(votes, threshold=params["threshold"], sigma=params["sigma1"],
                              orders=orders, data_dependent=data_dependent, baseline=baseline)
        answer = gnmax_rdp(votes, sigma=params["sigma2"], orders=orders,
                           data_dependent=data_dependent)
        return check, answer

    def event(self, votes, params, *, answered, orders, student=None):
        event = confident_gnmax_event(
            votes, threshold=params["threshold"], sigma1=params["sigma1"],
            sigma2=params["sigma2"], answered=answered, orders=orders,
            baseline=self._checked_baseline(votes, student, True))
        extra = {k: params[k] for k in self.param_names if k not in event.params}
        if extra:  # e.g. student_confidence: free, recorded for the audit trail
            event = dataclasses.replace(event, params={**event.params, **extra})
        return event

    calibrated = ("sigma1", "sigma2")

    def _calibrate(self, params, *, auto, **kw):
        """sigma2 (and sigma1 = sigma1_ratio x sigma2 when it is "auto" too; the ratio is the
        given sigma1 / sigma2 ratio of Scalable PATE, 3.75, unless sigma1 is a number -- then
        only sigma2 is chosen, with that sigma1)."""
        if "sigma2" not in auto:
            raise ValueError(f"{self.name}: calibrate sigma2 (with sigma1 = \"auto\" too, or a "
                             "fixed sigma1); sigma1 alone cannot be calibrated")
        if "sigma1" in auto:
            sigma1, sigma2 = calibrate_confident_gnmax(**kw)
            return {"sigma1": sigma1, "sigma2": sigma2}
        sigma1 = check_positive(params["sigma1"], "sigma1")
        check = threshold_rdp(_DUMMY_VOTES, threshold=0.0, sigma=sigma1, orders=kw["orders"],
                              data_dependent=False)[0]
        extra = check * kw["num_queries"] + (0.0 if kw["extra_rdp"] is None
                                             else np.asarray(kw["extra_rdp"], dtype=np.float64))
        return {"sigma2": calibrate_gnmax_sigma(**dict(kw, extra_rdp=extra))}

    def pr_answered(self, votes, params, *, student=None):
        return np.exp(threshold_log_pr_answered(
            votes, threshold=params["threshold"], sigma=params["sigma1"],
            baseline=self._checked_baseline(votes, student, True)))

    def expected_rdp(self, votes, params, *, orders, data_dependent, student=None):
        return confident_gnmax_rdp(votes, threshold=params["threshold"], sigma1=params["sigma1"],
                                   sigma2=params["sigma2"], orders=check_orders(orders),
                                   data_dependent=data_dependent,
                                   baseline=self._checked_baseline(votes, student, True))

    def release_params(self, params):
        if self.needs_student:
            # The GNSS release of Interactive GNMax needs the per-query student baseline, which
            # these parameters cannot carry: no release rather than a wrong sensitivity.
            return None
        return {k: float(params[k]) for k in ("threshold", "sigma1", "sigma2")}


@dataclasses.dataclass(frozen=True)
class _PrivateKNN(_ConfidentGNMax):
    """Private-kNN [ZYW20]: Confident GNMax on the label histogram of the k nearest records of a
    fresh Poisson sample per query. :meth:`draw` is the Confident-GNMax step on histograms the
    caller drew with ``pate.knn.knn_votes`` (``samples_private_records``). Every asked query is
    charged the sampled Gaussian mechanism's RDP ([MTZ19]; ``pate.analysis.private_knn``),
    answered or not, with or without ``data_dependent``: there is no data-dependent bound."""

    samples_private_records: ClassVar[bool] = True

    def _query_rdp(self, params, orders) -> np.ndarray:
        return private_knn_query_rdp(sampling_rate=params["sampling_rate"],
                                     sigma1=params["sigma1"], sigma2=params["sigma2"],
                                     orders=orders)

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        n = np.shape(votes)[0]
        check = np.broadcast_to(self._query_rdp(params, orders), (n, np.size(orders))).copy()
        return check, np.zeros_like(check)

    def event(self, votes, params, *, answered, orders, student=None):
        return private_knn_event(answered=check_mask(answered, np.shape(votes)[0], "answered"),
                                 k=params["k"], sampling_rate=params["sampling_rate"],
                                 threshold=params["threshold"], sigma1=params["sigma1"],
                                 sigma2=params["sigma2"], orders=check_orders(orders))

    def pr_answered(self, votes, params, *, student=None):
        # Pr[max h + N(0, sigma1^2) >= T] given these (already sampled) histograms.
        return np.exp(private_knn_log_pr_answered(votes, threshold=params["threshold"],
                                                  sigma1=params["sigma1"]))

    def expected_rdp(self, votes, params, *, orders, data_dependent, student=None):
        orders = check_orders(orders)
        return np.shape(votes)[0] * self._query_rdp(params, orders)

    calibrated = ("sigma2",)

    def _calibrate(self, params, *, auto, **kw):
        """sigma2 with sigma1 (and the sampling rate) fixed: the cost depends on both sigmas
        only through z = 1/sqrt(1/sigma1^2 + 2/sigma2^2), which tends to sigma1 as sigma2 grows."""
        if "sigma2" not in auto or "sigma1" in auto:
            raise ValueError(f"{self.name}: only sigma2 can be calibrated (\"auto\"), with sigma1 "
                             "and sampling_rate given as numbers")
        return {"sigma2": calibrate_private_knn_sigma2(
            eps=kw["eps"], delta=kw["delta"], num_queries=kw["num_queries"],
            sampling_rate=check_unit_interval(params["sampling_rate"], "sampling_rate"),
            sigma1=check_positive(params["sigma1"], "sigma1"), orders=kw["orders"],
            conversion=kw["conversion"], extra_rdp=kw["extra_rdp"])}

    def release_params(self, params):
        return None  # no smooth-sensitivity analysis: the data-independent cost is the cost

    def voters(self, params, *, private_records: int) -> int:
        return int(params["k"])  # the k nearest of the query's sample


def _count_weight(params: Mapping[str, Any]) -> float:
    """The count weight of clean class-means ``params``; a TypeError, not a guess, where it is
    missing (e.g. a summary written before the weight existed, when counts weighed 1)."""
    if params.get("count_weight") is None:
        raise TypeError("class-means parameters without count_weight: pass the parameters "
                        "validated by mechanisms.get('class-means').validate(...), which fills "
                        "in its default (a run directory written before the count weight "
                        "existed weighted the counts like the sums: count_weight = 1)")
    return params["count_weight"]


@dataclasses.dataclass(frozen=True)
class _ClassMeans(MechanismSpec):
    """Noisy class means: one Gaussian release of the private records' per-class sums of
    clipped, public-whitened embeddings and their class counts weighted by ``count_weight``
    kappa (sensitivity sqrt(1 + kappa^2)), post-processed into a rule that labels every query,
    LDA or the public-marginal logistic regression (``pate.class_means``; analysis and
    derivation: ``pate.analysis.class_means``, [M17] Propositions 7 and 9). The whole run costs
    one event, RDP orders (1 + kappa^2) / (2 sigma^2), whatever the number of queries: for the
    per-query methods the first query asked carries that cost and every other query is free
    (post-processing)."""

    samples_private_records: ClassVar[bool] = True
    releases_once: ClassVar[bool] = True
    gives_label_scores: ClassVar[bool] = True

    def draw(self, votes, params, rng, *, student=None):
        raise TypeError(f"{self.name} labels queries from one release of the private records' "
                        "class sums, not from votes: use pate.class_means.noisy_class_means, or "
                        "a run (`pate run`, pate.api), which charges the release first")

    def query_rdp_parts(self, votes, params, *, orders, data_dependent, student=None):
        n = np.shape(votes)[0]
        check = np.zeros((n, np.size(orders)))
        if n:
            check[0] = class_means_rdp(sigma=params["sigma"],
                                       count_weight=_count_weight(params), orders=orders)
        return check, np.zeros_like(check)

    def event(self, votes, params, *, answered, orders, student=None):
        orders = check_orders(orders)
        n = np.shape(votes)[0]
        if n == 0:  # nothing asked: nothing is released (the stage draws nothing), no cost
            zero = np.zeros(orders.size)
            return PrivacyEvent(self.name, dict(params), orders, zero, zero, 0, 0)
        return class_means_event(sigma=params["sigma"], count_weight=_count_weight(params),
                                 queries=n, orders=orders)

    calibrated = ("sigma",)

    def _calibrate(self, params, *, auto, **kw):
        """sigma for the one release, at the given count weight (the number of queries does
        not enter the cost)."""
        return {"sigma": calibrate_class_means_sigma(
            eps=kw["eps"], delta=kw["delta"], count_weight=params["count_weight"],
            orders=kw["orders"], conversion=kw["conversion"], extra_rdp=kw["extra_rdp"])}



_SCALE = Param("scale", "positive", "Laplace noise scale", "Laplace scale")
_SIGMA = Param("sigma", "positive", "Gaussian noise std", "\u03c3")
_THRESHOLD = Param("threshold", "nonnegative", "threshold T of the noisy check", "T")
_SIGMA1 = Param("sigma1", "positive", "threshold-check noise std", "\u03c3\u2081")
_SIGMA2 = Param("sigma2", "positive", "argmax noise std", "\u03c3\u2082")
_CONFIDENCE = Param("student_confidence", "unit_interval",
                    "the student's top probability from which its own label is kept")
_K = Param("k", "positive_integer", "Private-kNN: neighbours per query", "k")
_SAMPLING_RATE = Param("sampling_rate", "unit_interval",
                       "Private-kNN: probability that a private record is in a query's sample",
                       "\u03b3")
#: The count weight's default (pate.analysis.class_means derives why 0.3 suits d from 16 to 2000).
_COUNT_WEIGHT = Param("count_weight", "positive",
                      "class-means: weight of a record's count beside its clipped embedding in "
                      "the released sums (default 0.3)", "\u03ba", default=0.3)

_BUILTIN: tuple[MechanismSpec, ...] = (
    _LNMax(
        name="lnmax", title="LNMax", params=(_SCALE,), always_answers=True,
        reference="Papernot et al. 2017",
        description=(
            "every query is answered with the class whose teacher vote count is largest after "
            "Laplace noise is added to each count. Every query is charged the noisy argmax "
            "(pure \u03b5 = 2/scale per query, or less where the teachers agree).")),
    _GNMax(
        name="gnmax", title="GNMax", params=(_SIGMA,), always_answers=True,
        reference="Papernot et al. 2018, Section 4.1",
        description=(
            "every query is answered with the class whose teacher vote count is largest after "
            "Gaussian noise is added to each count. Every query is charged the noisy argmax.")),
    _ConfidentGNMax(
        name="confident-gnmax", title="Confident GNMax", params=(_THRESHOLD, _SIGMA1, _SIGMA2),
        reference="Papernot et al. 2018, Algorithm 1",
        description=(
            "a query is answered only when the teachers' largest vote count, plus Gaussian "
            "noise, exceeds a threshold; an answered query gets the class with the largest vote "
            "count after independent Gaussian noise is added. Every query asked is charged the "
            "threshold check, and the answered ones also the noisy argmax.")),
    _ConfidentGNMax(
        name="interactive-gnmax", title="Interactive GNMax",
        params=(_THRESHOLD, _SIGMA1, _SIGMA2, _CONFIDENCE), needs_student=True,
        reference="Papernot et al. 2018, Algorithm 2",
        description=(
            "a query is answered only when the teachers' votes, minus the student's own "
            "prediction, plus Gaussian noise, clear a threshold; an answered query gets the noisy "
            "(Gaussian) argmax of the votes, and otherwise a confident student keeps its own "
            "label. Every query asked is charged the threshold check, the answered ones also the "
            "noisy argmax; the student's own labels cost nothing.")),
    _PrivateKNN(
        name="private-knn", title="Private-kNN",
        params=(_K, _SAMPLING_RATE, _THRESHOLD, _SIGMA1, _SIGMA2),
        reference="Zhu, Yu & Wang 2020 (CVPR); analysis: Mironov, Talwar & Zhang 2019",
        description=(
            "for every query a fresh random sample of the private records is drawn (each record "
            "with probability \u03b3), and the labels of the query's k nearest sampled records "
            "are counted; a query is answered only when the largest count, plus Gaussian noise, "
            "exceeds a threshold, and then gets the class with the largest count after "
            "independent Gaussian noise. Every query asked is charged the same data-independent "
            "cost, answered or not: the sampled Gaussian mechanism's RDP with noise multiplier "
            "1/\u221a(1/\u03c3\u2081\u00b2 + 2/\u03c3\u2082\u00b2)."),
        voters_text=("the sensitive records themselves vote, through the k nearest of a fresh "
                     "sample for every query, on embeddings fitted to public data only"),
        cost_text="the data-independent cost of all {asked} queries asked, answered or not"),
    _ClassMeans(
        name="class-means", title="Noisy class means", params=(_SIGMA, _COUNT_WEIGHT),
        always_answers=True,
        reference="Gaussian mechanism (Mironov 2017, Proposition 7) on per-class sums; LDA "
                  "(Hastie, Tibshirani & Friedman 2009, Section 4.3) or a logistic regression "
                  "fitted to the release and the public inputs",
        description=(
            "the per-class sums of the sensitive records' embeddings (each clipped to a fixed "
            "radius) and the class counts (weighted by \u03ba) are released once with Gaussian "
            "noise; every query "
            "is labelled from that release and the public inputs alone, by the class whose "
            "noisy mean is nearest in the public-whitened embedding (linear discriminant "
            "analysis) or by a logistic regression fitted to the release and the public "
            "inputs. The one release is charged once, whatever the number of queries: the "
            "labels are post-processing."),
        voters_text=("the sensitive records' per-class sums, on embeddings fitted to public "
                     "data only, are released once with Gaussian noise, and every query is "
                     "labelled from them"),
        cost_text="the data-independent cost of the one release, which labels all {asked} "
                  "queries asked"),
)

_REGISTRY: dict[str, MechanismSpec] = {spec.name: spec for spec in _BUILTIN}
REGISTRY: Mapping[str, MechanismSpec] = types.MappingProxyType(_REGISTRY)
NAMES: tuple[str, ...] = tuple(spec.name for spec in _BUILTIN)


def get(name: str) -> MechanismSpec:
    """The spec of mechanism ``name``; ValueError listing the registered names otherwise."""
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"mechanism must be one of {', '.join(map(repr, _REGISTRY))}; got "
                         f"{describe(name)}")
    return spec


def register(spec: MechanismSpec) -> MechanismSpec:
    """Add ``spec`` to the registry (for tests and plugins); a name already taken is refused."""
    if not isinstance(spec, MechanismSpec):
        raise TypeError(f"register needs a MechanismSpec, got {describe(spec)}")
    if spec.name in _REGISTRY:
        raise ValueError(f"mechanism {spec.name!r} is already registered; choose another name")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> MechanismSpec:
    """Remove a mechanism added by :func:`register` (the built-in ones cannot be removed)."""
    if name in NAMES:
        raise ValueError(f"{name!r} is a built-in mechanism and cannot be unregistered")
    spec = get(name)
    del _REGISTRY[name]
    return spec


def all_param_names() -> tuple[str, ...]:
    """Every registered mechanism's parameter names, each once, in registry order."""
    seen: dict[str, None] = {}
    for spec in _REGISTRY.values():
        for name in spec.param_names:
            seen.setdefault(name, None)
    return tuple(seen)
