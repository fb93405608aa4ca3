"""Single-layer k-means patch features (Coates, Ng & Lee 2011, "An Analysis of Single-Layer
Networks in Unsupervised Feature Learning"), fitted on PUBLIC images only: the second half of
the ``[knn] features = "scatternet+patches"`` front-end (:mod:`pate.teachers.public_embedding`).

Random P x P patches of the public images, each normalised (its mean removed, divided by
sqrt(variance + 0.01)) and ZCA-whitened with the public patches' covariance (+ 0.1), are
clustered by mini-batch k-means into K centroids. An image's features are the triangle
activations max(0, mean_k d_k - d_k) of every patch (stride 1; d_k: the whitened patch's
distance to centroid k), summed over the four quadrants of the grid of patch positions: 4 K
features, standardised column by column with the public images' own statistics. Nothing here
reads a private record or any label.

More: docs/teachers.md, "pate.teachers.patch_features"; measured: docs/utility.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pate.analysis.errors import InputError
from pate.core.tuned_defaults import PATCH_CENTROIDS, PATCH_SIZE

__all__ = ["PatchFeatures", "PATCH", "CENTROIDS", "patch_width", "triangle_activations"]

#: Patch side and centroid count (chosen on benchmark results: pate.core.tuned_defaults).
PATCH, CENTROIDS = PATCH_SIZE, PATCH_CENTROIDS
#: Public patches the codebook is fitted on, and the codebook's fixed public seed.
PATCH_SAMPLES, PATCH_SEED = 200_000, 0
#: Images mapped at a time (a block's (images x positions, K) distances are the largest array).
PATCH_ROWS = 100


def _normalised(patches: np.ndarray) -> np.ndarray:
    centred = patches - patches.mean(axis=1, keepdims=True)
    return centred / np.sqrt(centred.var(axis=1, keepdims=True) + 0.01)


def triangle_activations(x, *, centres, mean, zca, patch: int):
    """float64 torch (n, 4 K) of images ``x`` (n, C, H, W), float64 torch: every P x P patch
    (stride 1, flattened channel-major), normalised and whitened ((z - ``mean``) @ ``zca``),
    its triangle activations max(0, mean_k d_k - d_k) against ``centres`` (K, C P P) summed over
    the four quadrants of the grid of patch positions. The one implementation of the map:
    :meth:`PatchFeatures.activations` and the released model's rule head
    (``pate.student.rule_product.RuleHead``) both call it."""
    import torch

    height, width = x.shape[2] - patch + 1, x.shape[3] - patch + 1
    half = height // 2, width // 2
    z = torch.nn.functional.unfold(x, patch).transpose(1, 2).reshape(-1, centres.shape[1])
    z = z - z.mean(1, keepdim=True)
    z = (z / torch.sqrt(z.var(1, unbiased=False, keepdim=True) + 0.01) - mean) @ zca
    squared = (centres**2).sum(1)
    distance = torch.sqrt(((z * z).sum(1, keepdim=True) - 2 * z @ centres.T + squared).clamp_min(0))
    grid = (
        (distance.mean(1, keepdim=True) - distance).clamp_min(0).reshape(len(x), height, width, -1)
    )
    return torch.cat(
        [
            grid[:, rows, cols].sum((1, 2))
            for rows in (slice(None, half[0]), slice(half[0], None))
            for cols in (slice(None, half[1]), slice(half[1], None))
        ],
        1,
    )


def _grid(shape: tuple[int, ...], patch: int) -> tuple[int, int]:
    if len(shape) != 3 or min(shape[1:]) < patch + 1:
        raise InputError(
            f"the patch features need images (C, H, W) with H and W at least {patch + 1}, got "
            f"inputs of shape {tuple(shape)}"
        )
    return shape[1] - patch + 1, shape[2] - patch + 1


def patch_width(input_shape, *, patch: int = PATCH, centroids: int = CENTROIDS) -> int:
    """The number of patch features of images ``input_shape`` (C, H, W), 4 K (InputError for
    inputs too small for a patch grid of at least 2 x 2): public sizes only."""
    _grid(tuple(int(s) for s in input_shape), patch)
    return 4 * centroids


@dataclasses.dataclass(frozen=True)
class PatchFeatures:
    """The fitted map: ``centres`` (K, C P P), the patch ``mean`` and ``zca`` of the whitening,
    and the public ``column_mean`` / ``column_std`` (4 K,) of the activations; float64."""

    patch: int
    centres: np.ndarray
    mean: np.ndarray
    zca: np.ndarray
    column_mean: np.ndarray
    column_std: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray, **settings) -> PatchFeatures:
        """Fitted on the ``public`` images (N, C, H, W) alone (``settings``: those of
        :meth:`fit_transform`)."""
        return cls.fit_transform(public, **settings)[0]

    @classmethod
    def fit_transform(
        cls,
        public: np.ndarray,
        *,
        patch: int = PATCH,
        centroids: int = CENTROIDS,
        samples: int = PATCH_SAMPLES,
        seed: int = PATCH_SEED,
    ) -> tuple[PatchFeatures, np.ndarray]:
        """(the map fitted on the ``public`` images (N, C, H, W) alone, their :meth:`transform`):
        at most ``samples`` patches, no more than the images have positions; deterministic for
        a seed. The public activations are computed once, for their statistics and the rows."""
        from sklearn.cluster import MiniBatchKMeans

        images = np.asarray(public, dtype=np.float64)
        grid = _grid(images.shape[1:], patch)
        n, channels, height, width = images.shape
        samples = min(samples, n * grid[0] * grid[1])
        rng = np.random.default_rng(seed)
        which = rng.integers(0, n, samples)
        rows = rng.integers(0, height - patch + 1, samples)
        cols = rng.integers(0, width - patch + 1, samples)
        at = np.arange(patch)
        patches = images[
            which[:, None, None, None],
            np.arange(channels)[None, :, None, None],
            rows[:, None, None, None] + at[None, None, :, None],
            cols[:, None, None, None] + at[None, None, None, :],
        ].reshape(samples, -1)
        patches = _normalised(patches)
        mean = patches.mean(axis=0)
        values, vectors = np.linalg.eigh(np.cov(patches - mean, rowvar=False))
        zca = vectors @ np.diag(1 / np.sqrt(np.maximum(values, 0) + 0.1)) @ vectors.T
        kmeans = MiniBatchKMeans(
            min(centroids, samples), batch_size=4096, n_init=1, random_state=seed, max_iter=50
        ).fit((patches - mean) @ zca)
        k = kmeans.cluster_centers_.shape[0]
        out = cls(
            patch=patch,
            centres=kmeans.cluster_centers_.astype(np.float64),
            mean=mean,
            zca=zca,
            column_mean=np.zeros(4 * k),
            column_std=np.ones(4 * k),
        )
        raw = out.activations(images)
        out = dataclasses.replace(
            out, column_mean=raw.mean(axis=0), column_std=raw.std(axis=0) + 1e-6
        )
        return out, (raw - out.column_mean) / out.column_std

    @property
    def width(self) -> int:
        """The number of features, 4 K."""
        return 4 * self.centres.shape[0]

    def activations(self, images: np.ndarray) -> np.ndarray:
        """float64 (N, 4 K): the quadrant sums of the triangle activations, unstandardised
        (:func:`triangle_activations`, a block of images at a time)."""
        import torch

        x = np.asarray(images, dtype=np.float64)
        _grid(x.shape[1:], self.patch)
        centres, mean, zca = (torch.from_numpy(a) for a in (self.centres, self.mean, self.zca))
        out = np.empty((len(x), self.width))
        for start in range(0, len(x), PATCH_ROWS):
            block = torch.from_numpy(x[start : start + PATCH_ROWS])
            out[start : start + len(block)] = triangle_activations(
                block, centres=centres, mean=mean, zca=zca, patch=self.patch
            ).numpy()
        return out

    def transform(self, images: np.ndarray) -> np.ndarray:
        """float64 (N, 4 K): the activations standardised with the public statistics."""
        return (self.activations(images) - self.column_mean) / self.column_std
