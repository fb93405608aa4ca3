"""Dataset loaders for PATE, working offline, and the PATE protocol split.

Symbols
-------
``ArraySplit(x, y)``
    One split: ``x`` float32 -- images ``(N, C, H, W)`` in ``[0, 1]`` or tabular ``(N, F)`` --
    and ``y`` int64 labels ``(N,)`` (``-1`` where a label is unknown, e.g. an unlabelled public
    split read from a user's ``.npz``).
``PateData(name, private, public, evaluation, num_classes, input_shape, class_names=None)``
    The three splits of the PATE protocol (Papernot et al. 2017, section 4): ``private`` is the
    sensitive data the teachers are trained on (sharded by ``pate.core.partition``), ``public`` the
    unlabelled inputs the teachers vote on (the student's training pool), ``evaluation`` the
    held-out items used only to measure teacher and student accuracy. ``class_names`` is a
    tuple of ``num_classes`` strings (label ``i`` is ``class_names[i]``) or None when unknown:
    :data:`CLASS_NAMES` for the built-in datasets, the folder names of ``imagefolder:``, the
    sorted label strings of a ``csv:`` with non-numeric labels, an optional ``class_names``
    string array of an ``npz:``. Where the user declares the classes (folders, names),
    ``num_classes`` is their number even if some class has no records.
``load_pate_data(name, *, root=None, download=False, public_size=None, eval_size=None,
image_size=None, cache=None)``
    Load one of:

    * ``"fashion-mnist"``, ``"mnist"``, ``"kmnist"``, ``"cifar10"``, ``"svhn"``: private = the
      training split; public = the first ``public_size`` (default 9000) test items; evaluation =
      the last ``eval_size`` (default 1000) test items (the two never overlap).
      Fashion-MNIST is read from ``/usr/share/datasets/fashion-mnist`` (Debian's
      ``dataset-fashion-mnist``) when ``root`` is None; otherwise every dataset is read from a
      torchvision root in torchvision's own layout (``<root>/FashionMNIST/raw/*.gz``,
      ``<root>/MNIST/raw``, ``<root>/KMNIST/raw``, ``<root>/cifar-10-batches-py``,
      ``<root>/{train,test}_32x32.mat``). ``download=True`` lets torchvision fetch a missing
      dataset into ``root``; nothing is downloaded otherwise.
    * ``"digits"``: scikit-learn's ``load_digits`` (1797 8x8 images, shipped with sklearn),
      ``(N, 1, 8, 8)`` in ``[0, 1]``, permuted with a fixed seed 0: private 1000, public 597,
      evaluation 200.
    * ``"npz:PATH"``: either arrays ``x_private, y_private, x_public, x_evaluation,
      y_evaluation`` (``y_public`` optional) or a single pool ``x, y``; ``"csv:PATH"``: a numeric
      table, label in the column named ``label`` (or ``y``, ``target``, ``class``) if there is a
      header, else in the last column; ``"imagefolder:PATH"``: read with torchvision's
      ``ImageFolder`` (``PATH/<class>/<image>``, image files in sub-folders of a class folder
      included; with ``PATH/train`` and ``PATH/test`` the train/test protocol above applies, and
      a test class needs a training folder). Images of any sizes are resized (bilinear,
      antialiased, aspect ratio not kept) to ``image_size`` -- an int or ``(height, width)``,
      by default the size of the first image in sorted order (of ``train/`` if present); an image
      already of that size is read exactly. All images become greyscale (1 channel) when every
      one is greyscale, else RGB (3 channels; alpha dropped). A single pool is permuted with seed 0 and split into evaluation (the
      last ``eval_size``, default 10 %), public (the ``public_size`` before it, default 20 %) and
      private (the rest).

``CLASS_NAMES``, ``IMAGE_EXTENSIONS``
    The built-in datasets' class names; the file suffixes ``imagefolder:`` reads.

``check_features(x, what)``, ``check_labels(y, what, unknown_ok=False)``, ``check_classes(source,
splits, num_classes, declared=None)``
    The input checks every dataset passes, from a file or from memory (``pate.fit``), before it
    is partitioned, trained on or charged: features finite (as float32: NaN, +-inf and float64
    beyond float32's range are refused), labels integer class indices (``2.5`` and NaN refused,
    ``3.0`` accepted; negative refused, ``-1`` allowed for an unknown public label), and at most
    as many classes as private records (a label of 10**7 on 1000 records would otherwise size
    every vote histogram for 10**7 + 1 classes). Each raises
    :class:`pate.analysis.errors.InputError` naming the split (and file/array), the row (and
    column or position) and the value.

Errors: a missing dataset raises :class:`pate.teachers.errors.DatasetNotFoundError` saying how to
obtain it; a bad argument raises ``ValueError``/``TypeError`` naming it, before any file is read;
an image file that cannot be decoded, a non-finite feature or a label that is not a class index
raises :class:`pate.analysis.errors.InputError` naming it.
Messages go to the ``logging`` logger ``"pate.teachers.data"`` (a child of ``"pate"``).

The input checks are :mod:`pate.teachers.data_checks`, the built-in datasets' readers
:mod:`pate.teachers.builtin_datasets`, the readers of the user's own files
:mod:`pate.teachers.own_data`; every name above is importable from here.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

import numpy as np

from pate.analysis.mapped import release_read
from pate.analysis.validation import check_int, describe
from pate.teachers.builtin_datasets import (
    CLASS_NAMES,
    DATASET_NAMES,
    DEFAULT_FASHION_MNIST_DIR,
    load_cifar10,
    load_idx_dataset,
    load_svhn,
    read_idx,
)
from pate.teachers.data_checks import check_classes, check_features, check_labels
from pate.teachers.own_data import (
    IMAGE_EXTENSIONS,
    check_image_size,
    load_csv,
    load_imagefolder,
    load_npz,
)

__all__ = [
    "ArraySplit",
    "PateData",
    "load_pate_data",
    "read_idx",
    "check_features",
    "check_labels",
    "check_classes",
    "DATASET_NAMES",
    "DEFAULT_FASHION_MNIST_DIR",
    "CLASS_NAMES",
    "IMAGE_EXTENSIONS",
]

_PREFIXES = ("npz:", "csv:", "imagefolder:")
_NPZ_SPLIT_KEYS = ("x_private", "y_private", "x_public", "y_public", "x_evaluation", "y_evaluation")
_PROTOCOL_PUBLIC, _PROTOCOL_EVAL = 9000, 1000
_DIGITS_PUBLIC, _DIGITS_EVAL = 597, 200


@dataclass(frozen=True)
class ArraySplit:
    """Inputs ``x`` (float32) and labels ``y`` (int64, ``-1`` = unknown) of one split."""

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        # never a silent cast: 2.5 or NaN would become label 2 or garbage (see check_labels)
        check_labels(self.y, "ArraySplit y", unknown_ok=True)
        x = np.ascontiguousarray(self.x, dtype=np.float32)
        y = np.ascontiguousarray(self.y, dtype=np.int64)
        if x.ndim < 2:
            raise ValueError(f"x must have shape (N, features) or (N, C, H, W), got {x.shape}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"y must have shape ({x.shape[0]},) to match x, got {y.shape}")
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class PateData:
    """The private / public / evaluation splits of one dataset (see the module docstring)."""

    name: str
    private: ArraySplit
    public: ArraySplit
    evaluation: ArraySplit
    num_classes: int
    input_shape: tuple[int, ...]
    class_names: tuple[str, ...] | None = None


# --------------------------------------------------------------------------- splitting


def _check_size(value, name):
    if value is None:
        return None
    return check_int(value, name, minimum=1)


def _protocol_split(xtr, ytr, xte, yte, public_size, eval_size, name):
    public_size = _PROTOCOL_PUBLIC if public_size is None else public_size
    eval_size = _PROTOCOL_EVAL if eval_size is None else eval_size
    n_test = len(xte)
    if public_size + eval_size > n_test:
        if public_size + eval_size == _PROTOCOL_PUBLIC + _PROTOCOL_EVAL:
            # default sizes on a small test split: keep the 9:1 ratio
            eval_size = max(1, n_test // 10)
            public_size = n_test - eval_size
        else:
            raise ValueError(
                f"public_size + eval_size = {public_size} + {eval_size} exceeds the "
                f"{n_test} test items of {name}; choose smaller sizes"
            )
    return (
        ArraySplit(xtr, ytr),
        ArraySplit(xte[:public_size], yte[:public_size]),
        ArraySplit(xte[n_test - eval_size :], yte[n_test - eval_size :]),
    )


def _pool_split(
    x, y, public_size, eval_size, name, *, default_public=None, default_eval=None, permuted=False
):
    n = len(x)
    if len(y) != n:
        raise ValueError(f"{name}: x has {n} rows but y has {len(y)}")
    eval_size = (
        eval_size
        if eval_size is not None
        else (default_eval if default_eval is not None else max(1, n // 10))
    )
    public_size = (
        public_size
        if public_size is not None
        else (default_public if default_public is not None else max(1, n // 5))
    )
    if public_size + eval_size >= n:
        raise ValueError(
            f"public_size + eval_size = {public_size} + {eval_size} leaves no private "
            f"records out of {n} in {name}; choose smaller sizes"
        )
    k = n - public_size - eval_size
    if permuted:  # rows already in pool_order (imagefolder decodes them so): slices, no copies
        parts = (slice(0, k), slice(k, n - eval_size), slice(n - eval_size, n))
    else:
        perm = pool_order(n)
        parts = (perm[:k], perm[k : n - eval_size], perm[n - eval_size :])
    return tuple(ArraySplit(x[p], y[p]) for p in parts)


def pool_order(n: int) -> np.ndarray:
    """The order in which a pool's rows are dealt: private first, then public, then evaluation."""
    return np.random.default_rng(0).permutation(n)


def _num_classes(*ys) -> int:
    labels = np.concatenate([y[y >= 0] for y in ys])
    if labels.size == 0:
        raise ValueError("the dataset has no labels")
    if labels.min() < 0:
        raise ValueError("labels must be non-negative integers")
    return int(labels.max()) + 1


def load_pate_data(
    name: str,
    *,
    root: str | os.PathLike | None = None,
    download: bool = False,
    public_size: int | None = None,
    eval_size: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    cache=None,
) -> PateData:
    """Load dataset ``name`` and split it into private / public / evaluation (module docstring).

    ``image_size`` (``imagefolder:`` only): resize every image to ``(height, width)`` (an int
    ``s`` means ``(s, s)``); None keeps the size of the first image.
    ``cache`` (a :class:`pate.teachers.feature_cache.FeatureCache` or None; not used by
    ``digits`` and ``csv:``): a built-in dataset's training images as float32, an image
    folder's decoded images, a compressed or non-float32 ``x_private`` and an ``npz:`` pool
    ``x`` in split order are written into it once and memory-mapped (the private split stays
    mapped, the public and evaluation splits are read into memory); a later load of the same
    files reads them from there (:mod:`pate.teachers.cached_data`).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a dataset name string, got {describe(name)}")
    if name not in DATASET_NAMES and not name.startswith(_PREFIXES):
        raise ValueError(
            f"unknown dataset name {name!r}; use one of "
            f"{', '.join(DATASET_NAMES)}, or npz:PATH, csv:PATH, imagefolder:PATH"
        )
    if not isinstance(download, bool):
        raise TypeError(f"download must be True or False, got {describe(download)}")
    public_size = _check_size(public_size, "public_size")
    eval_size = _check_size(eval_size, "eval_size")
    image_size = check_image_size(image_size)
    if cache is not None:
        from pate.teachers.feature_cache import FeatureCache

        if not isinstance(cache, FeatureCache):
            raise TypeError(f"cache must be a FeatureCache or None, got {describe(cache)}")
    if image_size is not None and not name.startswith("imagefolder:"):
        raise ValueError(
            f"image_size={image_size} applies only to imagefolder:PATH datasets, not "
            f"{name!r}; leave it unset"
        )
    class_names = CLASS_NAMES.get(name)
    root_path = None if root is None else pathlib.Path(root).expanduser()
    if download and root_path is None:
        raise ValueError(
            "download=True needs root (--data-root DIR): the directory to download into"
        )
    if name in DATASET_NAMES:
        splits = _builtin_splits(name, root_path, download, public_size, eval_size, cache)
    else:
        splits, class_names = _own_splits(name, image_size, public_size, eval_size, cache)
    return _checked_data(name, *splits, class_names)


def _builtin_splits(
    name: str,
    root: pathlib.Path | None,
    download: bool,
    public_size: int | None,
    eval_size: int | None,
    cache=None,
):
    """``(private, public, evaluation)`` of a built-in dataset (the training images through
    ``cache`` when given)."""
    if name in ("fashion-mnist", "mnist", "kmnist"):
        return _protocol_split(
            *load_idx_dataset(name, root, download, cache=cache), public_size, eval_size, name
        )
    if name == "cifar10":
        return _protocol_split(
            *load_cifar10(root, download, cache=cache), public_size, eval_size, name
        )
    if name == "svhn":
        return _protocol_split(
            *load_svhn(root, download, cache=cache), public_size, eval_size, name
        )
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    return _pool_split(
        x,
        digits.target.astype(np.int64),
        public_size,
        eval_size,
        name,
        default_public=_DIGITS_PUBLIC,
        default_eval=_DIGITS_EVAL,
    )


def _own_splits(
    name: str,
    image_size: tuple[int, int] | None,
    public_size: int | None,
    eval_size: int | None,
    cache=None,
):
    """``((private, public, evaluation), class_names)`` of an ``npz:``, ``csv:`` or
    ``imagefolder:`` dataset; the files' arrays are checked before they are split."""
    prefix, _, rest = name.partition(":")
    if not rest:
        raise ValueError(f"dataset {name!r} needs a path after '{prefix}:'")
    path = pathlib.Path(rest).expanduser()
    if prefix == "npz":
        kind, arrays, class_names = load_npz(path, cache=cache, pool_order=pool_order, source=name)
    elif prefix == "csv":
        kind = "pool"
        arrays, class_names = load_csv(path)
    else:
        kind, arrays, class_names = load_imagefolder(
            path, image_size, pool_order=pool_order, cache=cache
        )
    if kind == "splits":
        if public_size is not None or eval_size is not None:
            raise ValueError(
                f"{name} already holds explicit splits; do not pass public_size/eval_size"
            )
        xs = [np.asarray(a) for a in arrays]
        for key, a in zip(_NPZ_SPLIT_KEYS, xs):
            split = key.split("_", 1)[1]
            if key.startswith("x"):
                check_features(a, f"{name}: {split} split ({key})")
            else:
                check_labels(a, f"{name}: {split} split ({key})", unknown_ok=split == "public")
        splits = (ArraySplit(xs[0], xs[1]), ArraySplit(xs[2], xs[3]), ArraySplit(xs[4], xs[5]))
    elif kind == "train-test":
        splits = _protocol_split(*arrays, public_size, eval_size, name)
    else:  # one pool, checked before it is split (rows are the file's; "pool-in-order": already
        # in pool_order, as an image folder is decoded, so its split is three slices)
        check_features(arrays[0], f"{name}: x (the pool split into private/public/evaluation)")
        check_labels(arrays[1], f"{name}: y (the pool split into private/public/evaluation)")
        x, y = np.asarray(arrays[0]), np.asarray(arrays[1])
        in_order = kind == "pool-in-order"
        splits = _pool_split(x, y, public_size, eval_size, name, permuted=in_order)
    if not splits[1].x.flags.writeable:  # a pool mapped from the cache: only the private split
        # stays mapped (read a block at a time); the public and evaluation splits are read into
        # memory (the student trains on the public pool)
        splits = (splits[0], *(ArraySplit(_read_whole(s.x), s.y) for s in splits[1:]))
    return splits, class_names


def _read_whole(mapped: np.ndarray) -> np.ndarray:
    """An in-memory copy of a memory-mapped block, whose pages are dropped from the resident set
    once copied (otherwise the block would count twice)."""
    copy = np.array(mapped)
    release_read(mapped)
    return copy


def _checked_data(
    name: str, private: ArraySplit, public: ArraySplit, evaluation: ArraySplit, class_names
) -> PateData:
    """The :class:`PateData` of three splits, after the checks every source passes (shapes,
    features, labels, classes; the files' arrays were checked before they were split)."""
    shapes = {private.x.shape[1:], public.x.shape[1:], evaluation.x.shape[1:]}
    if len(shapes) != 1:
        raise ValueError(f"{name}: the splits have different input shapes {sorted(shapes)}")
    splits = {"private": private, "public": public, "evaluation": evaluation}
    for split, part in splits.items():
        check_features(part.x, f"{name}: {split} split")
        check_labels(part.y, f"{name}: {split} split", unknown_ok=split == "public")
    num_classes = _num_classes(private.y, public.y, evaluation.y)
    declared = None
    if class_names is not None:
        if name in CLASS_NAMES:  # fixed label -> name table; a small sample may lack the last
            class_names = class_names[:num_classes]
        elif len(class_names) < num_classes:
            raise ValueError(
                f"{name}: {len(class_names)} class names {list(class_names)} for "
                f"labels up to {num_classes - 1}; give one name per class"
            )
        else:  # the user declared the classes (folders, names): a class may have no records
            num_classes = declared = len(class_names)
        class_names = tuple(str(c) for c in class_names)
    check_classes(name, splits, num_classes, declared=declared)
    return PateData(
        name=name,
        private=private,
        public=public,
        evaluation=evaluation,
        num_classes=num_classes,
        input_shape=tuple(int(s) for s in private.x.shape[1:]),
        class_names=class_names,
    )
