"""Data-independent feature front-ends: ScatterNet features for teachers, students and kNN.

A front-end maps images to features with filters that are fixed in advance (they look at no
data), so it costs no privacy. Its normalisation statistics come from the *public* split only.
Tramer & Boneh (2021, "Differentially Private Learning Needs Better Features (or Much More
Data)", ICLR) showed that a linear model on ScatterNet features beats end-to-end CNNs under
differential privacy on MNIST, Fashion-MNIST and CIFAR-10; here the same features make better
teachers (each sees a few hundred private images), a better student and an embedding for
Private-kNN.

Symbols
-------
``FEATURES``       the front-end names: ``"none"`` (raw inputs) and ``"scatternet"``.
``J``, ``L``       the scattering scale (2: a 4x smaller grid) and number of orientations (8).
``ScatterNet()``   a torch module without parameters: (B, C, H, W) images in [0, 1] ->
                   (B, C * 81, H / 4, W / 4) scattering coefficients (order 0, 1 and 2 for J = 2,
                   L = 8: 1 + J L + L^2 J (J - 1) / 2 = 81 per input channel). H and W must be
                   multiples of 4. Uses kymatio's Morlet filter bank (Andreux et al. 2020,
                   "Kymatio: Scattering Transforms in Python", JMLR).
``scatter(x, *, batch_size)``  numpy (N, C, H, W) -> float32 (N, C * 81, H / 4, W / 4).
``Standardizer``   per-channel mean and standard deviation of public features;
                   ``Standardizer.fit(public_features)``, ``transform(features)``.
``feature_data(data, features)``  a :class:`pate.teachers.data.PateData` whose three splits are
                   replaced by their standardised features (statistics from ``data.public`` only);
                   ``features="none"`` returns ``data`` itself.
``public_pca_embedding(public, others, *, dims)``  flattened features projected on the first
                   ``dims`` principal axes of the *public* rows (for Private-kNN distances).

Note: ``import kymatio.torch`` fails with scipy >= 1.15 (its 3-D frontend imports
``scipy.special.sph_harm``); the 2-D frontend is imported directly.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pate.analysis.validation import check_choice, check_int

__all__ = ["FEATURES", "J", "L", "ScatterNet", "scatter", "Standardizer", "PublicPCA",
           "PublicFrontEnd", "feature_data", "public_pca_embedding", "feature_shape"]

FEATURES = ("none", "scatternet")
J, L = 2, 8
_PER_CHANNEL = 1 + J * L + L * L * J * (J - 1) // 2  # 81
logger = logging.getLogger("pate.teachers.features")


def feature_shape(input_shape) -> tuple[int, int, int]:
    """The ScatterNet output shape for an image shape ``(C, H, W)`` (ValueError otherwise)."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[1] % 4 or shape[2] % 4 or min(shape[1:]) < 8:
        raise ValueError(f"features = 'scatternet' needs images (C, H, W) with H and W multiples "
                         f"of 4 and at least 8; got input shape {shape}")
    return (shape[0] * _PER_CHANNEL, shape[1] // 4, shape[2] // 4)


def ScatterNet(height: int, width: int):
    """The fixed scattering transform for ``height x width`` images (a ``torch.nn.Module``)."""
    import torch
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    class _ScatterNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scattering = ScatteringTorch2D(J=J, shape=(height, width), L=L)

        def forward(self, x):
            b, c, h, w = x.shape
            out = self.scattering(x.contiguous())  # (B, C, 81, H/4, W/4)
            return out.reshape(b, c * _PER_CHANNEL, h // 4, w // 4)

    return _ScatterNet()


def scatter(x: np.ndarray, *, batch_size: int = 1000) -> np.ndarray:
    """ScatterNet features of images ``x`` (N, C, H, W) as float32 (N, C * 81, H/4, W/4)."""
    import torch

    x = np.asarray(x, dtype=np.float32)
    shape = feature_shape(x.shape[1:])
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    net = ScatterNet(x.shape[2], x.shape[3])
    out = np.empty((len(x),) + shape, dtype=np.float32)
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            out[i:i + batch_size] = net(torch.from_numpy(x[i:i + batch_size])).numpy()
    return out


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """Per-channel ``(x - mean) / std`` with statistics of public features only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray) -> "Standardizer":
        public = np.asarray(public, dtype=np.float64)
        if public.ndim != 4 or len(public) < 2:
            raise ValueError(f"Standardizer.fit needs (N >= 2, C, H, W) features, got {public.shape}")
        mean = public.mean(axis=(0, 2, 3), keepdims=True)
        std = public.std(axis=(0, 2, 3), keepdims=True)
        return cls(mean=mean[0].astype(np.float32), std=(std[0] + 1e-6).astype(np.float32))

    def transform(self, features: np.ndarray) -> np.ndarray:
        return ((np.asarray(features, dtype=np.float32) - self.mean) / self.std).astype(np.float32)


def feature_data(data, features: str):
    """``data`` with every split replaced by its standardised ``features`` (see the module)."""
    from pate.teachers.data import ArraySplit

    check_choice(features, "features", FEATURES)
    if features == "none":
        return data
    shape = feature_shape(data.input_shape)
    raw = {name: scatter(getattr(data, name).x) for name in ("public", "private", "evaluation")}
    norm = Standardizer.fit(raw["public"])
    splits = {name: ArraySplit(norm.transform(x), getattr(data, name).y) for name, x in raw.items()}
    logger.info("features: ScatterNet (J=%d, L=%d) %s -> %s, normalised with public statistics",
                J, L, tuple(data.input_shape), shape)
    return dataclasses.replace(data, input_shape=shape, **splits)


@dataclasses.dataclass(frozen=True)
class PublicPCA:
    """The first principal axes of public rows: ``mean`` (F,) and ``axes`` (dims, F), float64;
    :meth:`project` maps rows (N, ...) to float32 (N, dims)."""

    mean: np.ndarray
    axes: np.ndarray

    @classmethod
    def fit(cls, public: np.ndarray, *, dims: int, standardize: bool = False) -> "PublicPCA":
        """With ``standardize``, the axes are those of the public rows standardised column by
        column with their own (public) mean and std, folded into ``mean`` and ``axes``:
        ``project(x)`` = ((x - mu) / s - m) @ A.T = (x - (mu + s m)) @ (A / s).T -- a table's
        columns on scales 0.01 .. 1000 then count alike instead of the largest alone."""
        dims = check_int(dims, "dims", minimum=1)
        pub = np.asarray(public, dtype=np.float64).reshape(len(public), -1)
        if dims > min(pub.shape):
            raise ValueError(f"dims must be at most min(public items, features) = "
                             f"{min(pub.shape)}, got {dims}")
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

    def project(self, rows: np.ndarray) -> np.ndarray:
        r = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        return ((r - self.mean) @ self.axes.T).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class PublicFrontEnd:
    """The embedding of the mechanisms that read the private records (``[knn] features`` and
    ``dims``), fitted on public inputs only: ScatterNet features standardised with public
    statistics (``features = "scatternet"``; ``standardizer``) or the inputs themselves
    (``"none"``; ``standardizer`` None; a table's columns standardised with public statistics
    inside the PCA), then the public ``pca``. :meth:`embed` maps inputs
    (N, ...) to float32 (N, dims)."""

    features: str
    standardizer: Standardizer | None
    pca: PublicPCA

    @classmethod
    def fit_transform(cls, public: np.ndarray, *, features: str, dims: int):
        """(the front-end fitted on ``public``, the embedding of ``public``)."""
        check_choice(features, "features", FEATURES)
        front, standardizer = np.asarray(public, dtype=np.float32), None
        if features == "scatternet":
            raw = scatter(front)
            standardizer = Standardizer.fit(raw)
            front = standardizer.transform(raw)
        # a table's columns have units of their own: their axes are taken standardised with the
        # public statistics (free; folded into the PCA, so the embedding and the rule head that
        # copies the PCA are unchanged in form). Image pixels share a unit: as they are.
        pca = PublicPCA.fit(front, dims=dims, standardize=features == "none" and front.ndim == 2)
        return cls(features=features, standardizer=standardizer, pca=pca), pca.project(front)

    def embed(self, x: np.ndarray) -> np.ndarray:
        front = np.asarray(x, dtype=np.float32)
        if self.standardizer is not None:
            front = self.standardizer.transform(scatter(front))
        return self.pca.project(front)


def public_pca_embedding(public: np.ndarray, *others: np.ndarray, dims: int):
    """Rows of ``public`` and of each of ``others`` projected on the first ``dims`` principal
    axes of the public rows (centred with the public mean): a tuple of float32 (N, dims)."""
    pca = PublicPCA.fit(public, dims=dims)
    return tuple(pca.project(rows) for rows in (public, *others))
