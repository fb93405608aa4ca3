"""The public embeddings of the mechanisms that read the private records (``[knn] features`` and
``dims``): a public PCA, random Fourier features and quadratic features of a table, and
:class:`PublicFrontEnd`, which chains them after the ScatterNet front-end of
:mod:`pate.teachers.features`. Every statistic is fitted on the public split only.

More: docs/teachers.md, "pate.teachers.features".
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg

from pate.analysis.errors import InputError
from pate.analysis.validation import check_choice, check_int
from pate.core.quadratic_rule import QUADRATIC_MAX_WIDTH, quadratic_width
from pate.teachers import feature_cache
from pate.teachers.features import (
    FEATURES,
    Standardizer,
    scatter_blocks,
    scatter_features,
    stack_blocks,
)
from pate.teachers.patch_features import PatchFeatures

__all__ = [
    "KNN_FEATURES",
    "PublicPCA",
    "PublicFrontEnd",
    "RandomFourierFeatures",
    "QuadraticFeatures",
    "public_pca_embedding",
]

KNN_FEATURES = FEATURES + ("kernel", "quadratic", "scatternet+patches")
#: Random Fourier features of the "kernel" front-end (their count D) and the fixed, public seed
#: of their frequencies and phases: the map looks at no data but the public split's statistics.
KERNEL_FEATURES = 2048
KERNEL_SEED = 31_2026
#: Standardised table values are clipped to +-KERNEL_CLIP before the map (one wild value then
#: cannot dominate a row's distance to every other).
KERNEL_CLIP = 6.0
#: Public rows that estimate the bandwidth (median pairwise squared distance).
KERNEL_BANDWIDTH_ROWS = 1000
#: Public quantiles per column of the "quadratic" front-end's normal-score map.
QUADRATIC_KNOTS = 1000
#: Rows mapped at a time (the (rows, D) block is the largest array the map makes).
KERNEL_CHUNK = 4096
#: Rows of the covariance corrected at a time in :meth:`PublicPCA.fit_blocks`.
_OUTER_ROWS = 256


@dataclasses.dataclass(frozen=True)
class PublicPCA:
    """The first principal axes of public rows: ``mean`` (F,) and ``axes`` (dims, F), float64;
    :meth:`project` maps rows (N, ...) to float32 (N, dims)."""

    mean: np.ndarray
    axes: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray, *, dims: int, standardize: bool = False) -> PublicPCA:
        """With ``standardize``, the axes are those of the public rows standardised column by
        column with their own (public) mean and std, folded into ``mean`` and ``axes``:
        ``project(x)`` = ((x - mu) / s - m) @ A.T = (x - (mu + s m)) @ (A / s).T -- a table's
        columns on scales 0.01 .. 1000 then count alike instead of the largest alone."""
        dims = check_int(dims, "dims", minimum=1)
        pub = np.asarray(public, dtype=np.float64).reshape(len(public), -1)
        if dims > min(pub.shape):
            raise InputError(
                f"dims must be at most min(public items, features) = {min(pub.shape)}, got {dims}"
            )
        shift, unit = np.zeros(pub.shape[1]), np.ones(pub.shape[1])
        if standardize:
            shift, std = pub.mean(axis=0), pub.std(axis=0)
            unit = np.where(std > 1e-6, std, 1.0)
            pub = (pub - shift) / unit
        mean = pub.mean(axis=0)
        # principal axes of the public rows (right singular vectors), sign-fixed for determinism
        _, _, vt = np.linalg.svd(pub - mean, full_matrices=False)
        axes = vt[:dims]
        axes *= np.where(axes[np.arange(dims), np.abs(axes).argmax(axis=1)] < 0, -1.0, 1.0)[:, None]
        return cls(mean=shift + unit * mean, axes=axes / unit)

    @classmethod
    def fit_blocks(cls, blocks, *, dims: int) -> PublicPCA:
        """The principal axes of rows given as an iterable of blocks (n_i, ...) (flattened),
        without holding them: their mean and second moment are summed block by block and the
        axes are the top eigenvectors of the covariance (the same axes as :meth:`fit`'s SVD up to
        rounding, same sign rule)."""
        dims = check_int(dims, "dims", minimum=1)
        total, second, n = None, None, 0
        for block in blocks:
            block = np.asarray(block, dtype=np.float64).reshape(len(block), -1)
            n += len(block)
            total = block.sum(axis=0) if total is None else total + block.sum(axis=0)
            second = block.T @ block if second is None else second + block.T @ block
        if total is None or dims > min(n, total.shape[0]):
            raise InputError(
                f"dims must be at most min(public items, features) = "
                f"{min(n, 0 if total is None else total.shape[0])}, got {dims}"
            )
        mean = total / n
        covariance = second  # in place (F x F float64: 126 MB for ScatterNet's F = 3969)
        covariance /= n
        for i in range(0, len(mean), _OUTER_ROWS):  # - outer(mean, mean), a band at a time
            covariance[i : i + _OUTER_ROWS] -= np.outer(mean[i : i + _OUTER_ROWS], mean)
        # the top ``dims`` eigenvectors only (LAPACK's syevr on the matrix itself): a full
        # eigh copied the matrix and held all F eigenvectors and a 2 F^2 workspace (0.6 GB)
        f = len(mean)
        _, vectors = scipy.linalg.eigh(
            covariance,
            subset_by_index=[f - dims, f - 1],
            driver="evr",
            overwrite_a=True,
            check_finite=False,
        )
        axes = np.ascontiguousarray(vectors[:, ::-1].T)  # ascending eigenvalues
        axes *= np.where(axes[np.arange(dims), np.abs(axes).argmax(axis=1)] < 0, -1.0, 1.0)[:, None]
        return cls(mean=mean, axes=axes)

    def project(self, rows: np.ndarray) -> np.ndarray:
        r = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        return ((r - self.mean) @ self.axes.T).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class RandomFourierFeatures:
    """Random Fourier features of a table (Rahimi & Recht 2007, "Random Features for Large-Scale
    Kernel Machines", NeurIPS): phi(x) = sqrt(2 / D) cos(z(x) @ weights + phases), z(x) the
    columns standardised with the PUBLIC ``mean`` / ``std`` and clipped to +-KERNEL_CLIP,
    ``weights`` (F, D) ~ N(0, 2 gamma) and ``phases`` (D,) ~ U[0, 2 pi) from the fixed public seed
    KERNEL_SEED, so <phi(x), phi(x')> ~ exp(-gamma ||z(x) - z(x')||^2) (a Gaussian kernel).
    gamma = 1 / median squared distance between public rows (the median heuristic). Fitted on the
    public split alone. In this space a class mean is the class's kernel mean embedding, so a
    class-means release's nearest-mean rule becomes a kernel rule (docs/teachers.md,
    ``KNN_FEATURES``)."""

    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    phases: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray) -> RandomFourierFeatures:
        pub = np.asarray(public, dtype=np.float64).reshape(len(public), -1)
        if pub.shape[0] < 2:
            raise InputError(f"the kernel features need at least 2 public rows, got {pub.shape[0]}")
        mean, std = pub.mean(axis=0), pub.std(axis=0)
        std = np.where(std > 1e-6, std, 1.0)
        z = np.clip((pub - mean) / std, -KERNEL_CLIP, KERNEL_CLIP)
        rng = np.random.default_rng(KERNEL_SEED)
        rows = rng.choice(len(z), size=min(KERNEL_BANDWIDTH_ROWS, len(z)), replace=False)
        sample = z[rows]
        sq = np.einsum("ij,ij->i", sample, sample)
        d2 = sq[:, None] + sq[None, :] - 2.0 * sample @ sample.T
        positive = d2[np.triu_indices(len(sample), k=1)]
        positive = positive[positive > 1e-12]
        median = float(np.median(positive)) if positive.size else 1.0
        gamma = 1.0 / median
        weights = rng.standard_normal((z.shape[1], KERNEL_FEATURES)) * np.sqrt(2.0 * gamma)
        phases = rng.uniform(0.0, 2.0 * np.pi, KERNEL_FEATURES)
        return cls(mean=mean, std=std, weights=weights, phases=phases)

    def transform(self, rows: np.ndarray) -> np.ndarray:
        """float64 (N, D): phi of every row (one block; :meth:`PublicFrontEnd.embed` chunks)."""
        r = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        z = np.clip((r - self.mean) / self.std, -KERNEL_CLIP, KERNEL_CLIP)
        return np.sqrt(2.0 / self.weights.shape[1]) * np.cos(z @ self.weights + self.phases)


@dataclasses.dataclass(frozen=True)
class QuadraticFeatures:
    """A table's columns and their pairwise products: phi(x) = [z, (z_i z_k) for i <= k], z the
    columns' **public normal scores**: each column mapped by the monotone map that sends the
    PUBLIC split's quantiles to the standard normal's (z = Phi^-1(F_public(x)), linear between
    ``knots``, constant beyond the first and last: a wild value cannot dominate), then centred
    on the public mean (``centre``: the public rows' z have mean exactly 0); ties (integer codes)
    share the mean score of their quantiles. Fitted on the public split alone. Normal scores make
    every column's public marginal standard normal, as the "qda" rule's Gaussians assume
    (docs/plan.md); the class sums of phi hold every class's mean and second moments, which
    :func:`pate.core.quadratic_rule.quadratic_discriminant` reads back (docs/own_data.md)."""

    knots: tuple
    scores: tuple
    centre: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray) -> QuadraticFeatures:
        from scipy.special import ndtri

        pub = np.asarray(public, dtype=np.float64).reshape(len(public), -1)
        if pub.shape[0] < 2:
            raise InputError(
                f"the quadratic features need at least 2 public rows, got {pub.shape[0]}"
            )
        width = quadratic_width(pub.shape[1])
        if width > QUADRATIC_MAX_WIDTH:
            raise InputError(
                f"the quadratic features of {pub.shape[1]} columns would be {width} "
                f"features (at most {QUADRATIC_MAX_WIDTH}): set [knn] features = "
                '"kernel"'
            )
        if not np.all(np.isfinite(pub)):
            raise InputError("the public rows must be finite to fit the quadratic features")
        levels = (np.arange(min(QUADRATIC_KNOTS, len(pub))) + 0.5) / min(QUADRATIC_KNOTS, len(pub))
        normal = ndtri(levels)
        knots, scores = [], []
        for column in pub.T:
            at, tied = np.unique(np.quantile(column, levels), return_inverse=True)
            knots.append(at)
            scores.append(np.bincount(tied, weights=normal) / np.bincount(tied))
        out = cls(knots=tuple(knots), scores=tuple(scores), centre=np.zeros(pub.shape[1]))
        return dataclasses.replace(out, centre=out._scores(pub).mean(axis=0))

    def _scores(self, r: np.ndarray) -> np.ndarray:
        return (
            np.column_stack(
                [np.interp(r[:, c], self.knots[c], self.scores[c]) for c in range(len(self.knots))]
            )
            - self.centre
        )

    def transform(self, rows: np.ndarray) -> np.ndarray:
        """float64 (N, F + F (F + 1) / 2): z, then z_i z_k for i <= k in row-major upper-triangle
        order (``np.triu_indices(F)``)."""
        r = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        z = self._scores(r)
        i, k = np.triu_indices(z.shape[1])
        return np.hstack([z, z[:, i] * z[:, k]])


@dataclasses.dataclass(frozen=True)
class PublicFrontEnd:
    """The embedding of the mechanisms that read the private records (``[knn] features`` and
    ``dims``), fitted on public inputs only: ScatterNet features standardised with public
    statistics (``features = "scatternet"``; ``standardizer``), the inputs themselves
    (``"none"``; ``standardizer`` None; a table's columns standardised with public statistics
    inside the PCA), or a table's random Fourier features (``"kernel"``; ``kernel``), then the
    public ``pca``; ``"scatternet+patches"`` appends to the standardised ScatterNet features
    the k-means patch features of :mod:`pate.teachers.patch_features` (``patches``) before the
    PCA; a table's quadratic features (``"quadratic"``; ``kernel`` holds the
    :class:`QuadraticFeatures`) are only centred (``pca`` with identity axes). :meth:`embed` maps
    inputs (N, ...) to float32 (N, dims), a chunk of rows at a time."""

    features: str
    standardizer: Standardizer | None
    pca: PublicPCA
    kernel: RandomFourierFeatures | QuadraticFeatures | None = None
    patches: PatchFeatures | None = None

    @classmethod
    def fit_transform(
        cls,
        public: np.ndarray,
        *,
        features: str,
        dims: int,
        cache: feature_cache.FeatureCache | None = None,
    ):
        """(the front-end fitted on ``public``, the embedding of ``public``). ScatterNet features
        come from the feature cache ``cache`` (None: the active one, or computed; see
        :func:`scatter_features`); their principal axes are those of the covariance summed a
        chunk at a time (:meth:`PublicPCA.fit_blocks`)."""
        check_choice(features, "features", KNN_FEATURES)
        front = np.asarray(public, dtype=np.float32)
        if features in ("kernel", "quadratic") and front.ndim != 2:
            raise InputError(
                f"features = {features!r} maps tables (rows of numbers); got inputs of shape "
                f"{front.shape[1:]}"
            )
        if features == "scatternet":
            # the public features are read a chunk at a time (twice for the statistics, once
            # for the axes' sums, once to embed): never a standardised float64 copy of them all
            raw = scatter_features(front, cache=cache)
            standardizer = Standardizer.fit(raw)
            pca = PublicPCA.fit_blocks((standardizer.transform(b) for b in raw.chunks()), dims=dims)
            blocks = (pca.project(standardizer.transform(b)) for b in raw.chunks())
            out = cls(features=features, standardizer=standardizer, pca=pca)
            return out, stack_blocks(blocks, (len(front), dims))
        if features == "scatternet+patches":
            raw = scatter_features(front, cache=cache)
            standardizer = Standardizer.fit(raw)
            patches, patch_rows = PatchFeatures.fit_transform(front)  # public (N, 4 K), once

            def rows():
                return _scatter_and_patches(
                    standardizer, raw.chunks(), lambda at, n: patch_rows[at : at + n]
                )

            pca = PublicPCA.fit_blocks(rows(), dims=dims)
            out = cls(features=features, standardizer=standardizer, pca=pca, patches=patches)
            return out, stack_blocks((pca.project(b) for b in rows()), (len(front), dims))
        if features == "kernel":
            kernel = RandomFourierFeatures.fit(front)
            chunks = (
                kernel.transform(front[i : i + KERNEL_CHUNK])
                for i in range(0, len(front), KERNEL_CHUNK)
            )
            pca = PublicPCA.fit_blocks(chunks, dims=dims)
            out = cls(features=features, standardizer=None, pca=pca, kernel=kernel)
        elif features == "quadratic":
            quadratic = QuadraticFeatures.fit(front)
            # no reduction: the "qda" rule reads every class's moments back from the release.
            # The "PCA" only centres on the public mean (identity axes).
            phi_mean = sum(
                quadratic.transform(front[i : i + KERNEL_CHUNK]).sum(axis=0)
                for i in range(0, len(front), KERNEL_CHUNK)
            ) / len(front)
            pca = PublicPCA(mean=phi_mean, axes=np.eye(phi_mean.shape[0]))
            out = cls(features=features, standardizer=None, pca=pca, kernel=quadratic)
        else:
            # a table's columns have units of their own: their axes are taken standardised with
            # the public statistics (free; folded into the PCA, so the embedding and the rule
            # head that copies the PCA are unchanged in form). Image pixels share a unit.
            pca = PublicPCA.fit(front, dims=dims, standardize=front.ndim == 2)
            out = cls(features=features, standardizer=None, pca=pca)
        return out, out.embed(front)

    def embed(
        self, x: np.ndarray, *, cache: feature_cache.FeatureCache | None = None
    ) -> np.ndarray:
        """float32 (N, dims); ScatterNet features read (or computed) a chunk of rows at a time
        (from the feature cache ``cache``, default the active one), never held all at once."""
        front = np.asarray(x, dtype=np.float32)
        if self.kernel is None and self.standardizer is None:
            return self.pca.project(front)
        return stack_blocks(
            self.embed_blocks(front, cache=cache), (len(front), self.pca.axes.shape[0])
        )

    def embed_blocks(self, x: np.ndarray, *, cache: feature_cache.FeatureCache | None = None):
        """The rows of :meth:`embed`, float32 (rows, dims) blocks in order, for a caller that
        writes them out as they come instead of holding (N, dims); the same values."""
        front = np.asarray(x, dtype=np.float32)
        if self.patches is not None and self.standardizer is not None:
            patches = self.patches
            for block in _scatter_and_patches(
                self.standardizer,
                scatter_blocks(front, cache),
                lambda at, n: patches.transform(front[at : at + n]),
            ):
                yield self.pca.project(block)
            return
        if self.standardizer is not None:
            for block in scatter_blocks(front, cache):
                yield self.pca.project(self.standardizer.transform(block))
            return
        for i in range(0, len(front), KERNEL_CHUNK):
            block = front[i : i + KERNEL_CHUNK]
            yield self.pca.project(block if self.kernel is None else self.kernel.transform(block))


def _scatter_and_patches(standardizer: Standardizer, scatter, patch_rows):
    """float64 rows [standardised ScatterNet features, patch features], a block of ``scatter``
    (raw ScatterNet feature blocks, in row order) at a time; ``patch_rows(at, n)``: the patch
    features of rows at .. at + n."""
    at = 0
    for block in scatter:
        n = len(block)
        flat = np.asarray(standardizer.transform(block), np.float64).reshape(n, -1)
        yield np.hstack([flat, patch_rows(at, n)])
        at += n


def public_pca_embedding(public: np.ndarray, *others: np.ndarray, dims: int):
    """Rows of ``public`` and of each of ``others`` projected on the first ``dims`` principal
    axes of the public rows (centred with the public mean): a tuple of float32 (N, dims)."""
    pca = PublicPCA.fit(public, dims=dims)
    return tuple(pca.project(rows) for rows in (public, *others))
