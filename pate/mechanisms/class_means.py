"""Noisy class means: one Gaussian release of the private records' per-class sums labels every
query ("release" kind; ``pate.core.mean_release``, analysis ``pate.analysis.class_means``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.class_means import (
    calibrate_class_means_sigma,
    class_means_event,
    class_means_rdp,
)
from pate.analysis.errors import InputTypeError
from pate.analysis.validation import check_orders
from pate.core.rng import Rng
from pate.mechanisms.base import MechanismSpec
from pate.mechanisms.kinds import RELEASE, MechanismKind
from pate.mechanisms.params import SIGMA, Param
from pate.mechanisms.registry import AUTO_WITHOUT_TEACHERS

#: The count weight's default (pate.analysis.class_means derives why 0.3 suits d from 16 to 2000).
COUNT_WEIGHT = Param(
    "count_weight",
    "positive",
    "class-means: weight of a record's count beside its clipped embedding in "
    "the released sums (default 0.3)",
    "\u03ba",
    default=0.3,
)


def _count_weight(params: Mapping[str, Any]) -> float:
    """The count weight of clean class-means ``params``; a TypeError, not a guess, if missing."""
    if params.get("count_weight") is None:
        raise InputTypeError(
            "class-means parameters without count_weight: pass the parameters validated by "
            "mechanisms.get('class-means').validate(...), which fills in its default"
        )
    weight: float = params["count_weight"]
    return weight


@dataclasses.dataclass(frozen=True)
class _ClassMeans(MechanismSpec):
    """Noisy class means: one Gaussian release of the private records' per-class sums of
    clipped, public-whitened embeddings and their class counts weighted by ``count_weight``
    kappa (sensitivity sqrt(1 + kappa^2)), post-processed into a rule that labels every query,
    LDA or the public-marginal logistic regression (``pate.core.mean_release``; analysis and
    derivation: ``pate.analysis.class_means``, [M17] Propositions 7 and 9). The whole run costs
    one event, RDP orders (1 + kappa^2) / (2 sigma^2), whatever the number of queries: for the
    per-query methods the first query asked carries that cost and every other query is free
    (post-processing)."""

    kind: ClassVar[MechanismKind] = RELEASE
    released_statistic: ClassVar[str] = (
        "the noisy class sums: drawn once after the reservation; never saved"
    )

    def draw(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        rng: Rng,
        *,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise InputTypeError(
            f"{self.name} labels queries from one release of the private records' "
            "class sums, not from votes: use pate.core.mean_release.noisy_class_means, or "
            "a run (`pate run`, pate.api), which charges the release first"
        )

    def query_rdp_parts(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: np.ndarray,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        n = np.shape(votes)[0]
        check = np.zeros((n, np.size(orders)))
        if n:
            check[0] = class_means_rdp(
                sigma=params["sigma"], count_weight=_count_weight(params), orders=orders
            )
        return check, np.zeros_like(check)

    def event(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        answered: Any,
        orders: Any,
        student: np.ndarray | None = None,
    ) -> PrivacyEvent:
        orders = check_orders(orders)
        n = np.shape(votes)[0]
        if n == 0:  # nothing asked: nothing is released (the stage draws nothing), no cost
            zero = np.zeros(orders.size)
            return PrivacyEvent(self.name, dict(params), orders, zero, zero, 0, 0)
        return class_means_event(
            sigma=params["sigma"], count_weight=_count_weight(params), queries=n, orders=orders
        )

    calibrated: ClassVar[tuple[str, ...]] = ("sigma",)

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        """sigma for the one release, at the given count weight (the number of queries does
        not enter the cost)."""
        return {
            "sigma": calibrate_class_means_sigma(
                eps=kw["eps"],
                delta=kw["delta"],
                count_weight=params["count_weight"],
                orders=kw["orders"],
                conversion=kw["conversion"],
                extra_rdp=kw["extra_rdp"],
            )
        }

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
        """The noisy class sums (``pate.core.mean_release.noisy_class_means``), then the scores of
        the labelling ``rule`` on the first ``queries`` public rows, chosen among its variants
        and checked against the release (``pate.core.release_check.checked_rule``), and how far
        apart the release puts the classes (``class_separation``): all free."""
        from pate.core.mean_release import noisy_class_means
        from pate.core.release_check import checked_rule, class_separation
        from pate.core.tuned_defaults import LOGISTIC_RIDGE

        release = noisy_class_means(
            public,
            private,
            private_labels,
            sigma=params["sigma"],
            count_weight=params["count_weight"],
            num_classes=num_classes,
            rng=rng,
        )
        # post-processing: the release and the public rows only
        labeller, check = checked_rule(release, public, rule)
        scores = labeller.scores(public[:queries])
        return scores, {
            "clip_radius": release.geometry.radius,
            "dims": int(public.shape[1]),
            "rule": rule,
            **({"ridge": LOGISTIC_RIDGE} if rule == "logistic" else {}),
            **({"rule_check": check.to_dict()} if check is not None else {}),
            "class_separation": class_separation(release).to_dict(),
        }


CLASS_MEANS = _ClassMeans(
    name="class-means",
    title="Noisy class means",
    params=(SIGMA, COUNT_WEIGHT),
    always_answers=True,
    auto_for=(AUTO_WITHOUT_TEACHERS,),
    reference="Gaussian mechanism (Mironov 2017, Proposition 7) on per-class sums; LDA or QDA "
    "(Hastie, Tibshirani & Friedman 2009, Section 4.3) or a logistic regression "
    "fitted to the release and the public inputs",
    description=(
        "the per-class sums of the sensitive records' embeddings (each clipped to a fixed "
        "radius) and the class counts (weighted by \u03ba) are released once with Gaussian "
        "noise; every query "
        "is labelled from that release and the public inputs alone, by linear discriminant "
        "analysis (the noisy class means, the within-class covariance read from the public "
        "inputs), by each class's Gaussian read from the release (quadratic discriminant "
        "analysis, over a table's columns and their products) or by a logistic regression "
        "fitted to the release and the public inputs. The one release is charged once, whatever the number of queries: the "
        "labels are post-processing."
    ),
    voters_text=(
        "the sensitive records' per-class sums, on embeddings fitted to public "
        "data only, are released once with Gaussian noise, and every query is "
        "labelled from them"
    ),
    cost_text="the data-independent cost of the one release, which labels all {asked} "
    "queries asked",
)
