"""The base class of the mechanism specs (see :mod:`pate.mechanisms`), and the noise steps the
vote mechanisms share."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.arrays import IntArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_mask, check_orders, check_probabilities, describe
from pate.core.rng import Rng
from pate.mechanisms.kinds import VOTE, MechanismKind
from pate.mechanisms.params import Param, label
from pate.mechanisms.registry import REGISTRY, all_param_names

#: A one-teacher, two-class vote row: data-independent costs do not look at the votes.
DUMMY_VOTES = np.array([[1, 0]])


@dataclasses.dataclass(frozen=True)
class MechanismSpec:
    """A PATE aggregation mechanism: parameters, noise step, privacy cost and report wording
    (the protocol: docs/aggregators.md).

    ``name`` its registry key (also ``PrivacyEvent.mechanism``), ``title`` its name in prose,
    ``params`` its noise parameters in report order, ``description`` what it does and what is
    charged (report prose), ``reference`` where it is defined. ``needs_student``: it needs the
    student's probabilities per query; ``always_answers``: every query asked is answered and
    charged the answer step (no threshold check, no ``answered`` mask). ``voters_text`` /
    ``cost_text`` (records kinds): how the records vote, what the guarantee is the cost of.
    ``auto_for``: the roles (``pate.mechanisms.AUTO_*``) where ``mechanism = "auto"`` becomes it.
    The class attribute ``kind`` (:class:`~pate.mechanisms.kinds.MechanismKind`) says what a run
    of it reads, draws, charges and publishes.

    Subclasses implement :meth:`draw` and :meth:`query_rdp_parts` (a "sample" kind also
    :meth:`sample_votes`, a "release" kind :meth:`release_scores`); they may override
    :meth:`event`, :meth:`pr_answered`, :meth:`expected_rdp` and :meth:`release_params`.
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
    auto_for: tuple[str, ...] = ()

    kind: ClassVar[MechanismKind] = VOTE

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise InputError(f"a mechanism name must be a non-empty string, got {self.name!r}")
        params = tuple(self.params)
        if not all(isinstance(p, Param) for p in params):
            raise InputTypeError(f"{self.name}: params must be Param objects")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise InputError(f"{self.name}: duplicate parameter names in {names}")
        object.__setattr__(self, "params", params)

    # ------------------------------------------------------------------ parameters
    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def validate(self, params: Mapping[str, Any], *, prefix: str = "") -> dict[str, float]:
        """The clean parameters (floats; ints for "positive_integer"), in :attr:`params` order.

        Other keys of ``params`` are ignored, but one that is a parameter of *another* mechanism
        and not None is refused (TypeError), as is a missing parameter without default; an
        invalid value raises its check's error. Errors name the parameter with ``prefix`` ("--":
        command-line flags, e.g. "--sigma1"; "[aggregator] " a config key).
        """
        if not isinstance(params, Mapping):
            raise InputTypeError(
                f"{self.name}: parameters must be a mapping of names to values, got "
                f"{describe(params)}"
            )
        own = self.param_names
        listed = ", ".join(label(prefix, n) if prefix.endswith("-") else n for n in own)
        foreign = [
            k
            for k, v in params.items()
            if v is not None and k not in own and k in all_param_names()
        ]
        if foreign:
            raise InputTypeError(
                f"{', '.join(label(prefix, k) for k in foreign)} is not a parameter "
                f"of {self.name}; its parameters are {listed}"
            )
        params = self.with_defaults(params)
        missing = [n for n in own if params.get(n) is None]
        if missing:
            suffix = "=..." if not prefix else ""
            raise InputTypeError(
                f"{self.name} needs "
                f"{', '.join(label(prefix, n) + suffix for n in missing)}; "
                f"its parameters are {listed}"
            )
        return {p.name: p.check(params[p.name], label(prefix, p.name)) for p in self.params}

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
                raise InputTypeError(
                    f"{self.name} needs student_probabilities=... (the student's "
                    "(queries, classes) predicted probabilities)"
                )
            return check_probabilities(student, votes.shape, "student_probabilities")
        if student is not None:
            users = [n for n, s in REGISTRY.items() if s.needs_student]
            raise InputTypeError(
                f"student_probabilities is only used by {', '.join(users) or 'no mechanism'}, "
                f"not {self.name}"
            )
        return None

    # ------------------------------------------------------------------ noise step
    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw the noise and decide every query: (labels (n,) int64 (-1: no label),
        answered (n,) bool, source (n,) str). ``votes``, ``params`` and ``student`` are
        validated; the noise drawn must not depend on the votes (only on their shape)."""
        raise NotImplementedError(f"{type(self).__name__} must implement draw()")

    # ------------------------------------------------------------------ privacy cost
    def query_rdp_parts(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: np.ndarray,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(check, answer), each (n, k): the RDP charged for every query asked (e.g. a threshold
        check) and the RDP charged in addition when the teachers answer it. ``student`` may be
        None only for data-independent costs."""
        raise NotImplementedError(f"{type(self).__name__} must implement query_rdp_parts()")

    def _weights(self, answered: Any, n: int) -> np.ndarray:
        if self.always_answers:
            return np.ones(n, dtype=bool)
        return check_mask(answered, n, "answered")

    def per_query_rdp(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        answered: Any,
        orders: Any,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> np.ndarray:
        """Realised RDP of each asked query, (n, k); its column sums equal ``event(...).rdp``
        (``data_dependent=True``) or ``.rdp_data_independent`` (False), up to rounding."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(
            votes, params, orders=orders, data_dependent=data_dependent, student=student
        )
        weights = self._weights(answered, check.shape[0])
        rdp: np.ndarray = check + weights[:, None] * answer
        return rdp

    def event(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        answered: Any,
        orders: Any,
        student: np.ndarray | None = None,
    ) -> PrivacyEvent:
        """The realised cost of running the mechanism on ``votes`` with ``answered`` outcomes."""
        orders = check_orders(orders)
        weights = self._weights(answered, np.shape(votes)[0])
        kw = dict(params=params, answered=weights, orders=orders, student=student)
        dep = self.per_query_rdp(votes, data_dependent=True, **kw).sum(axis=0)
        ind = self.per_query_rdp(votes, data_dependent=False, **kw).sum(axis=0)
        return PrivacyEvent(
            self.name, dict(params), orders, dep, ind, int(weights.size), int(weights.sum())
        )

    def worst_case_query_rdp(self, params: Mapping[str, float], *, orders: Any) -> np.ndarray:
        """Data-independent RDP of one query answered by the teachers, (k,): an upper bound of
        what any one query can cost, whatever the votes."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(
            DUMMY_VOTES, params, orders=orders, data_dependent=False
        )
        worst: np.ndarray = check[0] + answer[0]
        return worst

    def pr_answered(
        self, votes: np.ndarray, params: Mapping[str, float], *, student: np.ndarray | None = None
    ) -> np.ndarray:
        """Probability that the teachers answer each query, (n,) (1 if :attr:`always_answers`)."""
        if self.always_answers:
            return np.ones(np.shape(votes)[0])
        raise NotImplementedError(f"{type(self).__name__} must implement pr_answered()")

    def expected_rdp(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: Any,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> np.ndarray:
        """Total RDP, (k,), with the answer step weighted by Pr[answered] (what the reference
        scripts report for a run that was not sampled; it looks at the votes through
        Pr[answered] even when ``data_dependent=False``)."""
        orders = check_orders(orders)
        check, answer = self.query_rdp_parts(
            votes, params, orders=orders, data_dependent=data_dependent, student=student
        )
        pr = self.pr_answered(votes, params, student=student)
        total: np.ndarray = (check + pr[:, None] * answer).sum(axis=0)
        return total

    #: The parameters that :meth:`calibrate` can choose (``"auto"`` in a config); empty: none.
    calibrated: ClassVar[tuple[str, ...]] = ()

    def calibrate(
        self,
        params: Mapping[str, Any],
        *,
        target_eps: float,
        delta: float,
        num_queries: int,
        orders: Any,
        conversion: str = "classic",
        extra_rdp: Any = None,
    ) -> dict[str, float]:
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
            raise InputError(
                f"{self.name} can calibrate {', '.join(self.calibrated) or 'nothing'}, "
                f"not {', '.join(sorted(set(auto) - set(self.calibrated)))} "
                "(give a number)"
            )
        return {
            **params,
            **self._calibrate(
                params,
                auto=auto,
                eps=target_eps,
                delta=delta,
                num_queries=num_queries,
                orders=check_orders(orders),
                conversion=conversion,
                extra_rdp=extra_rdp,
            ),
        }

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} must implement _calibrate()")

    def voters(self, params: Mapping[str, float], *, private_records: int) -> int:
        """For a mechanism that reads the private records (``kind.reads_private_records``): how
        many of them vote on one query -- the report's count in place of teachers. All of them
        unless a spec says otherwise (e.g. the k nearest of a sample)."""
        return int(private_records)

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        """Parameters of the smooth-sensitivity (GNSS) release of the data-dependent epsilon,
        ``{"threshold", "sigma1", "sigma2"}`` for ``analysis.release_sanitized_epsilon``
        (threshold and sigma1 None without a threshold check), or None when the mechanism has
        no smooth-sensitivity analysis."""
        return None

    # ------------------------------------------------------------------ records kinds
    #: A "release" spec: what its one release is, for ``aggregate.json`` (``records.statistic``).
    released_statistic: ClassVar[str] = ""

    def sample_votes(
        self,
        queries: np.ndarray,
        private: np.ndarray,
        private_labels: np.ndarray,
        params: Mapping[str, float],
        *,
        num_classes: int,
        rng: Rng,
    ) -> np.ndarray:
        """A "sample" spec: the (n, m) histograms its noise step answers, one per row of the
        public embeddings ``queries``, drawn from a fresh sample of the ``private`` embeddings
        (labels ``private_labels``) with ``rng`` -- called only inside the round's reservation."""
        raise NotImplementedError(
            f"{type(self).__name__} ({self.kind.name} kind) has no "
            'sample_votes(): only a "sample" mechanism samples records'
        )

    def release_scores(
        self,
        public: np.ndarray,
        private: np.ndarray,
        private_labels: np.ndarray,
        params: Mapping[str, float],
        *,
        queries: int,
        num_classes: int,
        rng: Rng,
        rule: str,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A "release" spec: draw its one noisy release of the ``private`` embeddings (labels
        ``private_labels``) with ``rng`` -- called only inside the release's reservation -- and
        return the (queries, m) class scores of the first ``queries`` rows of ``public`` (its
        labelling ``rule``, post-processing of the release and the public rows) and what
        ``aggregate.json`` records of the release beside :attr:`released_statistic` (its
        ``records`` entry)."""
        raise NotImplementedError(
            f"{type(self).__name__} ({self.kind.name} kind) has no "
            'release_scores(): only a "release" mechanism releases once'
        )


# ---------------------------------------------------------------------- shared noise steps


def noisy_argmax(votes: np.ndarray, noise: np.ndarray) -> IntArray:
    labels: IntArray = np.argmax(votes + noise, axis=1).astype(np.int64)
    return labels


def all_answered(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(n, dtype=bool), np.full(n, "teachers", dtype="<U9")


def student_baseline(votes: np.ndarray, student: np.ndarray | None) -> np.ndarray | None:
    # T p_j: what the student's distribution would put on each class with the teachers' count.
    return None if student is None else votes.sum(axis=1, keepdims=True) * student
