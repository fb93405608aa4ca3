"""Data-independent feature front-ends: ScatterNet features for teachers, students and kNN
(:mod:`pate.teachers.public_embedding`). Its filters are fixed in advance (they look at no
data), its normalisation comes from the *public* split: it costs no privacy. More:
docs/teachers.md, "pate.teachers.features".
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.validation import check_choice, check_int
from pate.teachers import feature_cache

__all__ = [
    "FEATURES",
    "J",
    "L",
    "ScatterNet",
    "scatter",
    "scatter_features",
    "scatter_blocks",
    "computing_on",
    "Standardizer",
    "feature_data",
    "feature_rows",
    "FeatureRows",
    "feature_shape",
    "stack_blocks",
]

FEATURES = ("none", "scatternet")
J, L = 2, 8
#: The ScatterNet settings in every feature-cache key: the transform and the code that computes
#: it (entries of kymatio's path-by-path code, equal to float32 rounding, are not reused).
SCATTER_SETTINGS = {"J": J, "L": L, "implementation": "pate.teachers.scattering/1"}
_PER_CHANNEL = 1 + J * L + L * L * J * (J - 1) // 2  # 81
logger = logging.getLogger("pate.teachers.features")


def feature_shape(input_shape) -> tuple[int, int, int]:
    """The ScatterNet output shape for an image shape ``(C, H, W)`` (ValueError otherwise)."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[1] % 4 or shape[2] % 4 or min(shape[1:]) < 8:
        raise InputError(
            f"features = 'scatternet' needs images (C, H, W) with H and W multiples "
            f"of 4 and at least 8; got input shape {shape}"
        )
    return (shape[0] * _PER_CHANNEL, shape[1] // 4, shape[2] // 4)


def ScatterNet(height: int, width: int):
    """The fixed scattering transform for ``height x width`` images (a ``torch.nn.Module``:
    :class:`pate.teachers.scattering.Scattering2D`, kymatio's transform a layer at a time)."""
    from pate.teachers.scattering import Scattering2D

    return Scattering2D(height, width)


_DEVICE: contextvars.ContextVar[str] = contextvars.ContextVar("pate_front_end", default="cpu")


@contextlib.contextmanager
def computing_on(device: str):
    """Inside the block the ScatterNet front-end computes on ``device`` ("cpu", "cuda",
    "cuda:N"; a resolved device, not "auto"), blocks of the cache's chunk moved there and back."""
    token = _DEVICE.set(str(device))
    try:
        yield
    finally:
        _DEVICE.reset(token)


def _scatter_settings() -> dict:
    """The feature-cache key's settings of the front-end as it computes now: a GPU's entries
    apart from the CPU's (the same features to float32 rounding, not bit for bit)."""
    on_gpu = _DEVICE.get().startswith("cuda")
    return {**SCATTER_SETTINGS, "device": "cuda"} if on_gpu else SCATTER_SETTINGS


def _scatter_function(image_shape):
    """x (n, C, H, W) -> float32 features, with one ScatterNet built for ``image_shape`` on the
    device of :func:`computing_on`."""
    import torch

    feature_shape(image_shape)
    device = torch.device(_DEVICE.get())
    net = ScatterNet(int(image_shape[1]), int(image_shape[2])).to(device)

    def apply(block: np.ndarray) -> np.ndarray:
        images = np.ascontiguousarray(block, dtype=np.float32)
        if not images.flags.writeable:  # a read-only memory map (own data): torch warns on it
            images = images.copy()
        with torch.no_grad():
            return net(torch.from_numpy(images).to(device)).cpu().numpy()

    return apply


def scatter(x: np.ndarray, *, batch_size: int | None = None) -> np.ndarray:
    """ScatterNet features of images ``x`` (N, C, H, W) as float32 (N, C * 81, H/4, W/4),
    ``batch_size`` images at a time (None: the feature cache's chunk, so that they are the
    cached features bit for bit; other batch sizes agree to float32 rounding)."""
    x = np.asarray(x, dtype=np.float32)
    shape = feature_shape(x.shape[1:])
    batch_size = check_int(
        feature_cache.CHUNK_ROWS if batch_size is None else batch_size, "batch_size", minimum=1
    )
    apply = _scatter_function(x.shape[1:])
    out = np.empty((len(x),) + shape, dtype=np.float32)
    for i in range(0, len(x), batch_size):
        out[i : i + batch_size] = apply(x[i : i + batch_size])
    return out


def scatter_features(
    x: np.ndarray, *, cache: feature_cache.FeatureCache | None = None
) -> feature_cache.CachedFeatures:
    """ScatterNet features of images ``x`` (N, C, H, W): from the feature cache ``cache`` (None:
    :func:`pate.teachers.feature_cache.active`) when it holds them, else computed (a chunk at a
    time) and cached; without a cache, computed in memory (``hit`` None)."""
    shape = feature_shape(np.shape(x)[1:])
    cache = feature_cache.active() if cache is None else cache
    if cache is None:
        t0 = time.perf_counter()
        return feature_cache.CachedFeatures(scatter(x), None, time.perf_counter() - t0)
    key = feature_cache.EntryKey.of(
        x, front_end="scatternet", settings=_scatter_settings(), output_shape=shape
    )
    return cache.features(key, x, _scatter_function(np.shape(x)[1:]))


def scatter_blocks(x: np.ndarray, cache) -> iter:
    """ScatterNet features of ``x`` a chunk of rows at a time: read from the cache (written
    first on a miss), or, without one, computed chunk by chunk (never all held at once)."""
    cache = feature_cache.active() if cache is None else cache
    if cache is not None:
        yield from scatter_features(x, cache=cache).chunks()
        return
    apply = _scatter_function(np.shape(x)[1:])
    for i in range(0, len(x), feature_cache.CHUNK_ROWS):
        yield apply(x[i : i + feature_cache.CHUNK_ROWS])


def stack_blocks(blocks, shape: tuple, transform=None) -> np.ndarray:
    """float32 (N, *shape[1:]) filled from ``blocks`` of rows in order, each ``transform``ed."""
    out, i = np.empty(shape, dtype=np.float32), 0
    for block in blocks:
        out[i : i + len(block)] = block if transform is None else transform(block)
        i += len(block)
    return out


def _blocks_of(rows) -> iter:
    """Blocks of rows of an array or of :class:`~pate.teachers.feature_cache.CachedFeatures`."""
    if isinstance(rows, feature_cache.CachedFeatures):
        return rows.chunks()
    return (
        rows[i : i + feature_cache.CHUNK_ROWS]
        for i in range(0, len(rows), feature_cache.CHUNK_ROWS)
    )


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """Per-channel ``(x - mean) / std`` with statistics of public features only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, public) -> Standardizer:
        """Statistics of ``public`` features (N, C, H, W): an array or a ``CachedFeatures``,
        read a chunk at a time in two passes (the mean, then the squared deviations)."""
        shape = tuple(
            public.array.shape
            if isinstance(public, feature_cache.CachedFeatures)
            else np.shape(public)
        )
        if len(shape) != 4 or shape[0] < 2:
            raise InputError(f"Standardizer.fit needs (N >= 2, C, H, W) features, got {shape}")
        count = shape[0] * shape[2] * shape[3]
        total = np.zeros(shape[1])
        for block in _blocks_of(public):
            total += np.asarray(block, dtype=np.float64).sum(axis=(0, 2, 3))
        mean = total / count
        squares = np.zeros(shape[1])
        for block in _blocks_of(public):
            d = np.asarray(block, dtype=np.float64) - mean[None, :, None, None]
            squares += np.einsum("nchw,nchw->c", d, d)
        std = np.sqrt(squares / count)
        return cls(
            mean=mean[:, None, None].astype(np.float32),
            std=(std[:, None, None] + 1e-6).astype(np.float32),
        )

    def transform(self, features: np.ndarray) -> np.ndarray:
        return ((np.asarray(features, dtype=np.float32) - self.mean) / self.std).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class FeatureRows:
    """The standardised features of one split, read a few rows at a time instead of held:
    ``raw`` its ScatterNet features (an entry of the feature cache, or in memory without one),
    ``standardizer`` the public statistics, ``y`` its labels. ``take(rows)`` gives the
    standardised rows asked for (float32, bit for bit those rows of :func:`feature_data`'s
    array); ``shape`` and ``len()`` as the array's; ``row_bytes`` what one row takes."""

    raw: feature_cache.CachedFeatures
    standardizer: Standardizer
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.raw.array.shape)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:])) * 4

    def take(self, rows) -> np.ndarray:
        # standardised in place: the same float32 operations as Standardizer.transform, without
        # its temporaries (each as large as the rows)
        out = self.raw.take(rows)
        out -= self.standardizer.mean
        out /= self.standardizer.std
        return out

    def split(self):
        """The whole split as a :class:`pate.teachers.data.ArraySplit` (held in memory)."""
        from pate.teachers.data import ArraySplit

        return ArraySplit(
            stack_blocks(self.raw.chunks(), self.shape, self.standardizer.transform), self.y
        )


def feature_data(data, features: str, *, cache: feature_cache.FeatureCache | None = None):
    """``data`` with every split replaced by its standardised ``features`` (statistics of
    ``data.public`` only; ``"none"``: ``data`` itself), raw features read a chunk at a time."""
    rows = feature_rows(data, features, cache=cache)
    if rows is data:
        return data
    return dataclasses.replace(rows, private=rows.private.split())


def feature_rows(data, features: str, *, cache: feature_cache.FeatureCache | None = None):
    """:func:`feature_data` with the private split left as :class:`FeatureRows` (read from the
    feature cache a shard's rows at a time when the teachers ask for them: the private split's
    features are never all in memory; without a cache its raw features are). ``features =
    "none"`` returns ``data`` itself."""
    from pate.teachers.data import ArraySplit

    check_choice(features, "features", FEATURES)
    if features == "none":
        return data
    shape = feature_shape(data.input_shape)
    cache = feature_cache.active() if cache is None else cache
    public = scatter_features(data.public.x, cache=cache)
    norm = Standardizer.fit(public)
    splits = {
        "private": FeatureRows(scatter_features(data.private.x, cache=cache), norm, data.private.y)
    }
    for name in ("public", "evaluation"):
        x = getattr(data, name).x
        blocks = public.chunks() if name == "public" else scatter_blocks(x, cache)
        out = stack_blocks(blocks, (len(x),) + shape, norm.transform)
        splits[name] = ArraySplit(out, getattr(data, name).y)
    logger.info(
        "features: ScatterNet (J=%d, L=%d) %s -> %s, normalised with public statistics",
        J,
        L,
        tuple(data.input_shape),
        shape,
    )
    return dataclasses.replace(data, input_shape=shape, **splits)
