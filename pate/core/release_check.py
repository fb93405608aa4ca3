"""Choosing and checking a class-means release's labelling rule from the release itself (free).

More: docs/own_data.md, "pate.core.release_check".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import FloatArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.validation import check_choice, check_embeddings
from pate.core.labelling_rules import (
    RULES,
    AffineRule,
    labelling_rule,
    linear_discriminant,
    rule_features,
)
from pate.core.mean_release import NoisyClassMeans, release_from_statistic
from pate.core.quadratic_rule import QuadraticDiscriminant, quadratic_discriminant
from pate.core.tuned_defaults import (
    MISMATCH_WARNING,
    SEPARABLE_DISTANCE,
    SEPARATION_WARNING,
)

__all__ = [
    "CHECK_DRAWS",
    "CHECK_SEED",
    "CANDIDATES",
    "RuleCheck",
    "fission",
    "mismatch",
    "expected_mismatch",
    "checked_rule",
    "ClassSeparation",
    "class_separation",
    "CANNOT_PLACE",
]

logger = logging.getLogger(__name__)

#: Independent data-fission splits averaged per candidate (each costs one labelling of the
#: public rows per candidate).
CHECK_DRAWS = 3
#: The fixed public seed of the fission noise Z (public randomness: the check is deterministic).
CHECK_SEED = 31_0031

Labeller = AffineRule | QuadraticDiscriminant
#: rule -> {candidate name: how it is read from a release and the public embeddings}
CANDIDATES: dict[str, dict[str, Callable[[NoisyClassMeans, FloatArray], Labeller]]] = {
    "qda": {
        "qda": lambda release, public: quadratic_discriminant(release, public),
        "qda-shrunk": lambda release, public: quadratic_discriminant(release, public, shrink=True),
    },
    "lda": {"lda": linear_discriminant},
}


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """What :func:`checked_rule` found: the configured ``rule``, the candidate ``chosen``, and
    each candidate's mismatch as a ratio to :func:`expected_mismatch` (``ratios``)."""

    rule: str
    chosen: str
    ratios: dict[str, float]

    @property
    def ratio(self) -> float:
        return self.ratios[self.chosen]

    @property
    def weak(self) -> bool:
        """The chosen rule does not reproduce the release's class statistics."""
        return self.ratio > MISMATCH_WARNING

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RuleCheck:
        """The check :meth:`to_dict` wrote (a run's ``aggregate.json``, ``records.rule_check``)."""
        ratios = data["mismatch_ratios"]
        if not isinstance(ratios, dict):
            raise InputError(f"rule_check.mismatch_ratios must be a mapping, got {ratios!r}")
        return cls(
            rule=str(data["rule"]),
            chosen=str(data["chosen"]),
            ratios={str(k): float(v) for k, v in ratios.items()},
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "chosen": self.chosen,
            "mismatch_ratios": {k: round(v, 4) for k, v in self.ratios.items()},
            "mismatch_warning_above": MISMATCH_WARNING,
        }

    def warning_text(self) -> str:
        return (
            f"The release's class statistics are not reproduced by the labelling rule "
            f"({self.chosen}): the class sums of its public labels differ from the released ones "
            f"{self.ratio:.1f} times as much as the noise and sampling explain (above "
            f"{MISMATCH_WARNING:g}). Expect many wrong labels, and a student no better than "
            f"them. Either the classes overlap (then no model does much better) or they are not "
            f"shaped as the rule assumes (then teachers, which learn the records without that "
            f"assumption, may do better: teacher=, num_teachers= or [teachers] model); a larger "
            f"target epsilon shrinks only the noise part."
        )


def fission(
    statistic: np.ndarray, *, sigma: float, draws: int = CHECK_DRAWS, seed: int = CHECK_SEED
) -> list[tuple[FloatArray, FloatArray]]:
    """``draws`` splits (Y + Z, Y - Z) of a released ``statistic`` Y, Z ~ N(0, sigma^2 I) from
    the public ``seed``: given S, the two are independent, each N(S, 2 sigma^2 I)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        z = sigma * rng.standard_normal(statistic.shape)
        out.append((statistic + z, statistic - z))
    return out


def mismatch(statistic: np.ndarray, u: np.ndarray, labels: IntArray, *, total: float) -> float:
    """||statistic's class sums - S_hat||^2: S_hat the class sums of the public rows ``u``
    (clipped, scaled) under ``labels``, scaled from the n public rows to ``total``. The count
    column is left out (docs/own_data.md: "Why not the counts")."""
    estimate = np.zeros((statistic.shape[0], u.shape[1]))
    np.add.at(estimate, labels, u)
    estimate *= total / len(u)
    return float(np.sum((statistic[:, :-1] - estimate) ** 2))


def expected_mismatch(u: np.ndarray, *, num_classes: int, sigma: float, total: float) -> float:
    """The mismatch a rule that labels like the truth should show against one fission half
    (docs/own_data.md): 2 sigma^2 m d + (N^2 / n + N) mean ||u||^2."""
    n, d = u.shape
    spread = float(np.mean(np.einsum("ij,ij->i", u, u)))
    return float(2.0 * sigma**2 * num_classes * d + (total**2 / n + total) * spread)


def checked_rule(
    release: NoisyClassMeans, public: npt.ArrayLike, rule: str
) -> tuple[Labeller, RuleCheck | None]:
    """The labeller of ``rule`` for a class-means ``release`` and the public embeddings, and
    its check (None where the rule is not checked or the release has no statistic): among the
    rule's :data:`CANDIDATES`, the one whose public labels reproduce the release best (docs/own_data.md),
    read from the whole release. Post-processing only; a weak match is logged as a warning (``RuleCheck.warning_text``)."""
    rule = check_choice(rule, "rule", RULES)
    pub = check_embeddings(public, "public").astype(np.float64)
    if rule not in CANDIDATES or release.statistic is None or release.count_weight is None:
        return labelling_rule(release, pub, rule), None
    kappa, sigma = release.count_weight, release.sigma
    u = rule_features(pub, release.geometry, "logistic")  # the clipped, scaled u
    total = float(release.counts.sum())
    m = release.means.shape[0]
    expected = expected_mismatch(u, num_classes=m, sigma=sigma, total=total)
    candidates = CANDIDATES[rule]
    ratios = dict.fromkeys(candidates, 0.0)
    splits = fission(release.statistic, sigma=sigma)
    for first, second in splits:
        half = release_from_statistic(
            first, geometry=release.geometry, sigma=sigma * np.sqrt(2.0), count_weight=kappa
        )
        for name, read in candidates.items():
            labels = read(half, pub).predict(pub)
            ratios[name] += mismatch(second, u, labels, total=total)
    ratios = {k: v / len(splits) / expected for k, v in ratios.items()}
    chosen = min(candidates, key=lambda k: ratios[k])  # ties: the first (as released)
    check = RuleCheck(rule=rule, chosen=chosen, ratios=ratios)
    if check.weak:
        logger.warning("%s", check.warning_text())
    return candidates[chosen](release, pub), check


#: The words that start :meth:`ClassSeparation.warning_text` (benchmarks look for them).
CANNOT_PLACE = "The release cannot place"


@dataclasses.dataclass(frozen=True)
class ClassSeparation:
    """What :func:`class_separation` found, per class j: the class k whose released mean is
    nearest in units of the noise (``nearest``), the estimated distance of the two noiseless
    means (``distances``) and the root mean square of the larger noise of the two (``noise``),
    both in public standard deviations, and the noisy counts the noise was read with
    (``counts``, rounded). Their ``ratios``: distance over noise."""

    nearest: tuple[int, ...]
    distances: tuple[float, ...]
    noise: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(d / n if n > 0 else np.inf for d, n in zip(self.distances, self.noise))

    @property
    def unplaced(self) -> tuple[int, ...]:
        """The classes the noise hides, most noise-bound first: ratio below
        ``SEPARATION_WARNING``, no more records after noise than their nearest class (a pair is
        blamed on its noisier class), and not merely overlapping classes (the distance or the
        noise at least ``SEPARABLE_DISTANCE``: two means closer than that, under less noise,
        are classes that overlap whatever the budget)."""
        ratios = self.ratios
        weak = [
            j
            for j, ratio in enumerate(ratios)
            if ratio < SEPARATION_WARNING
            and max(self.distances[j], self.noise[j]) >= SEPARABLE_DISTANCE
            and self.counts[j] <= self.counts[self.nearest[j]]
        ]
        return tuple(sorted(weak, key=lambda j: ratios[j]))

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ClassSeparation:
        """The separation :meth:`to_dict` wrote (``aggregate.json``, ``records.class_separation``)."""
        lists: list[list[Any]] = []
        for key in ("nearest", "distances", "noise", "noisy_counts"):
            values = data[key]
            if not isinstance(values, list):
                raise InputError(f"class_separation must hold four lists, got {data!r}")
            lists.append(values)
        nearest, distances, noise, counts = lists
        return cls(
            nearest=tuple(int(v) for v in nearest),
            distances=tuple(float(v) for v in distances),
            noise=tuple(float(v) for v in noise),
            counts=tuple(int(v) for v in counts),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "nearest": list(self.nearest),
            "distances": [round(v, 6) for v in self.distances],
            "noise": [round(v, 6) for v in self.noise],
            "ratios": [round(v, 4) for v in self.ratios],
            "noisy_counts": list(self.counts),
            "warning_below": SEPARATION_WARNING,
            "separable_from": SEPARABLE_DISTANCE,
        }

    def warning_text(self, names: Sequence[str] | None = None) -> str:
        """The warning for the unplaced classes ('' when none), in the class ``names`` when
        given (else their indices)."""
        unplaced, ratios = self.unplaced, self.ratios
        if not unplaced:
            return ""

        def name(j: int) -> str:
            return repr(names[j]) if names is not None and j < len(names) else f"class {j}"

        parts = [
            f"{name(j)} (about {self.counts[j]} records after noise; {ratios[j]:.1f} times "
            f"the noise from {name(self.nearest[j])})"
            for j in unplaced
        ]
        return (
            f"{CANNOT_PLACE} {'; '.join(parts)}: the noise on such a class's released mean is "
            f"as large as its distance from the nearest class (below {SEPARATION_WARNING:g} "
            "times), so many of its labels will be wrong and the student trained on them weak "
            "for it. More records of the class or a larger target epsilon would help; this "
            "reading of the release is free (post-processing)."
        )


def class_separation(release: NoisyClassMeans) -> ClassSeparation:
    """How far each class's released mean lies from the nearest other class's, over the noise
    on them; post-processing of the ``release`` only (docs/own_data.md, "pate.core.release_check").

    In the release's whitened coordinates (d of them) the noise on class j's mean has
    E||noise_j||^2 = d (R sigma / n_j)^2 (n_j its noisy count), so ||mu_j - mu_k||^2 - that of j
    and of k estimates the squared distance of the noiseless means. Class j's ratio is the
    smallest, over the other classes k, of the root of that estimate (0 when negative; the
    class's ``distances``, in public standard deviations: the whitened axes have the public
    rows' unit variance) over the root mean square of the larger noise of the two."""
    means = np.asarray(release.means, dtype=np.float64)
    m, d = means.shape
    noise = d * (release.geometry.radius * release.sigma / np.asarray(release.counts)) ** 2
    squared = np.sum((means[:, None, :] - means[None, :, :]) ** 2, axis=-1)
    distance = np.sqrt(np.maximum(squared - noise[:, None] - noise[None, :], 0.0))
    larger = np.sqrt(np.maximum(noise[:, None], noise[None, :]))
    ratio = distance / larger
    np.fill_diagonal(ratio, np.inf)
    nearest = np.argmin(ratio, axis=1)
    pick = (np.arange(m), nearest)
    return ClassSeparation(
        nearest=tuple(int(k) for k in nearest),
        distances=tuple(float(v) for v in distance[pick]),
        noise=tuple(float(v) for v in larger[pick]),
        counts=tuple(int(round(c)) for c in release.counts),
    )
