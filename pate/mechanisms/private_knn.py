"""Private-kNN [ZYW20]: Confident GNMax on the label histograms of the k nearest records of a
fresh Poisson sample of the private records per query ("sample" kind)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np

from pate.analysis.accountant import PrivacyEvent
from pate.analysis.errors import InputError
from pate.analysis.private_knn import (
    calibrate_private_knn_sigma2,
    private_knn_event,
    private_knn_log_pr_answered,
    private_knn_query_rdp,
)
from pate.analysis.validation import check_mask, check_orders, check_positive, check_unit_interval
from pate.core.rng import Rng
from pate.mechanisms.confident_gnmax import ConfidentGNMaxSpec
from pate.mechanisms.kinds import SAMPLE, MechanismKind
from pate.mechanisms.params import SIGMA1, SIGMA2, THRESHOLD, Param

K = Param("k", "positive_integer", "Private-kNN: neighbours per query", "k")
SAMPLING_RATE = Param(
    "sampling_rate",
    "unit_interval",
    "Private-kNN: probability that a private record is in a query's sample",
    "\u03b3",
)


@dataclasses.dataclass(frozen=True)
class _PrivateKNN(ConfidentGNMaxSpec):
    """Private-kNN [ZYW20]: Confident GNMax on the label histogram of the k nearest records of a
    fresh Poisson sample per query. :meth:`draw` is the Confident-GNMax step on histograms the
    caller drew with :meth:`sample_votes` (``pate.core.knn.knn_votes``; the "sample" kind). Every asked query is
    charged the sampled Gaussian mechanism's RDP ([MTZ19]; ``pate.analysis.private_knn``),
    answered or not, with or without ``data_dependent``: there is no data-dependent bound."""

    kind: ClassVar[MechanismKind] = SAMPLE

    def _query_rdp(self, params: Mapping[str, float], orders: Any) -> np.ndarray:
        return private_knn_query_rdp(
            sampling_rate=params["sampling_rate"],
            sigma1=params["sigma1"],
            sigma2=params["sigma2"],
            orders=orders,
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
        check = np.broadcast_to(self._query_rdp(params, orders), (n, np.size(orders))).copy()
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
        return private_knn_event(
            answered=check_mask(answered, np.shape(votes)[0], "answered"),
            k=cast(int, params["k"]),  # validated: a positive_integer
            sampling_rate=params["sampling_rate"],
            threshold=params["threshold"],
            sigma1=params["sigma1"],
            sigma2=params["sigma2"],
            orders=check_orders(orders),
        )

    def pr_answered(
        self, votes: np.ndarray, params: Mapping[str, float], *, student: np.ndarray | None = None
    ) -> np.ndarray:
        # Pr[max h + N(0, sigma1^2) >= T] given these (already sampled) histograms.
        return np.exp(
            private_knn_log_pr_answered(
                votes, threshold=params["threshold"], sigma1=params["sigma1"]
            )
        )

    def expected_rdp(
        self,
        votes: np.ndarray,
        params: Mapping[str, float],
        *,
        orders: Any,
        data_dependent: bool,
        student: np.ndarray | None = None,
    ) -> np.ndarray:
        orders = check_orders(orders)
        total: np.ndarray = np.shape(votes)[0] * self._query_rdp(params, orders)
        return total

    calibrated: ClassVar[tuple[str, ...]] = ("sigma2",)

    def _calibrate(
        self, params: Mapping[str, Any], *, auto: list[str], **kw: Any
    ) -> dict[str, float]:
        """sigma2 with sigma1 (and the sampling rate) fixed: the cost depends on both sigmas
        only through z = 1/sqrt(1/sigma1^2 + 2/sigma2^2), which tends to sigma1 as sigma2 grows."""
        if "sigma2" not in auto or "sigma1" in auto:
            raise InputError(
                f'{self.name}: only sigma2 can be calibrated ("auto"), with sigma1 '
                "and sampling_rate given as numbers"
            )
        return {
            "sigma2": calibrate_private_knn_sigma2(
                eps=kw["eps"],
                delta=kw["delta"],
                num_queries=kw["num_queries"],
                sampling_rate=check_unit_interval(params["sampling_rate"], "sampling_rate"),
                sigma1=check_positive(params["sigma1"], "sigma1"),
                orders=kw["orders"],
                conversion=kw["conversion"],
                extra_rdp=kw["extra_rdp"],
            )
        }

    def release_params(self, params: Mapping[str, float]) -> dict[str, float | None] | None:
        return None  # no smooth-sensitivity analysis: the data-independent cost is the cost

    def voters(self, params: Mapping[str, float], *, private_records: int) -> int:
        return int(params["k"])  # the k nearest of the query's sample

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
        from pate.core.knn import knn_votes

        return knn_votes(
            queries,
            private,
            private_labels,
            k=cast(int, params["k"]),
            sampling_rate=params["sampling_rate"],
            num_classes=num_classes,
            rng=rng,
        )


PRIVATE_KNN = _PrivateKNN(
    name="private-knn",
    title="Private-kNN",
    params=(K, SAMPLING_RATE, THRESHOLD, SIGMA1, SIGMA2),
    reference="Zhu, Yu & Wang 2020 (CVPR); analysis: Mironov, Talwar & Zhang 2019",
    description=(
        "for every query a fresh random sample of the private records is drawn (each record "
        "with probability \u03b3), and the labels of the query's k nearest sampled records "
        "are counted; a query is answered only when the largest count, plus Gaussian noise, "
        "exceeds a threshold, and then gets the class with the largest count after "
        "independent Gaussian noise. Every query asked is charged the same data-independent "
        "cost, answered or not: the sampled Gaussian mechanism's RDP with noise multiplier "
        "1/\u221a(1/\u03c3\u2081\u00b2 + 2/\u03c3\u2082\u00b2)."
    ),
    voters_text=(
        "the sensitive records themselves vote, through the k nearest of a fresh "
        "sample for every query, on embeddings fitted to public data only"
    ),
    cost_text="the data-independent cost of all {asked} queries asked, answered or not",
)
