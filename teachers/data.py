"""Dataset loaders for PATE, working offline, and the PATE protocol split: :func:`load_pate_data`
gives a :class:`PateData` (docs/teachers.md, "Data"). A missing dataset raises
:class:`pate.teachers.errors.DatasetNotFoundError`; bad input an ``InputError`` naming the
split, row and value (:mod:`pate.teachers.data_checks`), before any file is read where it can.
"""

from __future__ import annotations

import logging
import os
import pathlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.mapped import release_read
from pate.analysis.validation import check_bool, check_int, describe
from pate.teachers.builtin_datasets import (
    CLASS_NAMES,
    DATASET_NAMES,
    load_cifar10,
    load_idx_dataset,
    load_svhn,
)
from pate.teachers.data_checks import (
    check_classes,
    check_features,
    check_in_label_set,
    check_labels,
    label_set,
)
from pate.teachers.image_folder import check_image_size, load_imagefolder
from pate.teachers.own_data import (
    SPLIT_COLUMN,
    SPLIT_VALUES,
    MarkedPool,
    load_csv,
    load_npz,
)

if TYPE_CHECKING:  # pandas is imported where a table is read, not with this module
    from pate.teachers.table_encoding import TableColumns, TableEncoder
    from pate.teachers.tables import TableSpec

logger = logging.getLogger("pate.teachers.data")


_PREFIXES = ("npz:", "csv:", "imagefolder:")
_NPZ_SPLIT_KEYS = ("x_private", "y_private", "x_public", "y_public", "x_evaluation", "y_evaluation")
_PROTOCOL_PUBLIC, _PROTOCOL_EVAL = 9000, 1000
_DIGITS_PUBLIC, _DIGITS_EVAL = 597, 200
#: A pool without rows marked ``evaluation`` holds out one bucket of this many of its private
#: records for evaluation (a tenth), by a keyed hash of each record (:func:`_hold_out`).
HELD_OUT_BUCKETS = 10


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
            raise InputError(f"x must have shape (N, features) or (N, C, H, W), got {x.shape}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise InputError(f"y must have shape ({x.shape[0]},) to match x, got {y.shape}")
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class PateData:
    """The private / public / evaluation splits of one dataset (Papernot et al. 2017, section
    4): the teachers train on ``private``, vote on ``public`` (the student's pool);
    ``evaluation`` only measures. ``num_classes`` / ``class_names`` are the DECLARED label set,
    never discovered from private labels; ``evaluation_public`` is True only where a source
    declares it; ``public_from_pool`` counts public inputs that are rows of the user's pool
    (docs/teachers.md, "Declared, never discovered").
    """

    name: str
    private: ArraySplit
    public: ArraySplit
    evaluation: ArraySplit
    num_classes: int
    input_shape: tuple[int, ...]
    class_names: tuple[str, ...] | None = None
    #: fail closed: evaluation data is public only where its source says so
    evaluation_public: bool = False
    public_from_pool: int = 0
    #: a table's (docs/own_data.md): what turned its raw rows into ``x`` (fitted on public rows;
    #: None: not a table, or ``preprocess="none"``), its columns, one unit id per private row
    encoder: TableEncoder | None = None
    columns: TableColumns | None = None
    unit_ids: np.ndarray | None = None


# --------------------------------------------------------------------------- splitting


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
            raise InputError(
                f"public_size + eval_size = {public_size} + {eval_size} exceeds the "
                f"{n_test} test items of {name}; choose smaller sizes"
            )
    return (
        ArraySplit(xtr, ytr),
        ArraySplit(xte[:public_size], yte[:public_size]),
        ArraySplit(xte[n_test - eval_size :], yte[n_test - eval_size :]),
    )


def load_pate_data(
    name: str,
    *,
    root: str | os.PathLike | None = None,
    download: bool = False,
    public_size: int | None = None,
    eval_size: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    cache=None,
    classes=None,
    split_column: str = SPLIT_COLUMN,
    evaluation_public: bool = False,
    split_key=None,
    table: TableSpec | None = None,
) -> PateData:
    """Load dataset ``name`` and split it into private / public / evaluation (the sources, the
    split and every argument: docs/teachers.md, "Data"; ``table``: ``name`` is a table with
    named columns, docs/own_data.md). ``split_key``: the key (or a function returning it) of a
    held-out evaluation split (None: a fresh key); ``cache`` (a
    :class:`pate.teachers.feature_cache.FeatureCache`): large arrays written once and
    memory-mapped (:mod:`pate.teachers.cached_data`)."""
    if not isinstance(name, str):
        raise InputTypeError(f"name must be a dataset name string, got {describe(name)}")
    classes = check_class_names(classes)
    if table is not None:  # name: the private table
        return table_data(name, table, name=name, classes=classes, split_key=split_key)
    if name not in DATASET_NAMES and not name.startswith(_PREFIXES):
        raise InputError(
            f"unknown dataset name {name!r}; use one of "
            f"{', '.join(DATASET_NAMES)}, or npz:PATH, csv:PATH, imagefolder:PATH"
        )
    download = check_bool(download, "download")
    public_size, eval_size = (
        None if size is None else check_int(size, label, minimum=1)
        for size, label in ((public_size, "public_size"), (eval_size, "eval_size"))
    )
    image_size = check_image_size(image_size)
    if cache is not None:
        from pate.teachers.feature_cache import FeatureCache

        if not isinstance(cache, FeatureCache):
            raise InputTypeError(f"cache must be a FeatureCache or None, got {describe(cache)}")
    if image_size is not None and not name.startswith("imagefolder:"):
        raise InputError(
            f"image_size={image_size} applies only to imagefolder:PATH datasets, not "
            f"{name!r}; leave it unset"
        )
    if not isinstance(split_column, str) or not split_column.strip():
        raise InputTypeError(f"split_column must be a column name, got {describe(split_column)}")
    evaluation_public = check_bool(evaluation_public, "evaluation_public")
    root_path = None if root is None else pathlib.Path(root).expanduser()
    if download and root_path is None:
        raise InputError(
            "download=True needs root (--data-root DIR): the directory to download into"
        )
    if name in DATASET_NAMES:
        splits = _builtin_splits(name, root_path, download, public_size, eval_size, cache)
        # a built-in dataset's evaluation split is a public benchmark's test split
        return _checked_data(
            name, *splits, classes or CLASS_NAMES.get(name), evaluation_public=True
        )
    pool = dict(split_column=split_column, evaluation_public=evaluation_public, key=split_key)
    return _own_data(name, image_size, public_size, eval_size, cache, classes, pool)


def check_class_names(classes) -> list[str] | None:
    """The declared class names: a list of distinct non-empty strings (or None)."""
    if classes is None:
        return None
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (list, tuple)):
        raise InputTypeError(
            f"classes must be a list of class names (strings), got {describe(classes)}"
        )
    names = list(classes)
    bad = [c for c in names if not isinstance(c, str) or not c.strip()]
    if bad or len(names) < 2:
        raise InputError(
            f"classes must list at least two class names (non-empty strings), got {names!r}"
        )
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise InputError(f"classes must name each class once; {repeated} repeat")
    return names


def _builtin_splits(
    name: str,
    root: pathlib.Path | None,
    download: bool,
    public_size: int | None,
    eval_size: int | None,
    cache,
):
    """``(private, public, evaluation)`` of a built-in dataset (the training images through
    ``cache`` when given); digits (a public benchmark: its split is a public fact) permuted with
    seed 0: private first, then public, then evaluation."""
    if name != "digits":
        arrays = (
            load_cifar10(root, download, cache=cache)
            if name == "cifar10"
            else load_svhn(root, download, cache=cache)
            if name == "svhn"
            else load_idx_dataset(name, root, download, cache=cache)
        )
        return _protocol_split(*arrays, public_size, eval_size, name)
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.images.astype(np.float32) / 16.0)[:, None], digits.target.astype(np.int64)
    public_size = _DIGITS_PUBLIC if public_size is None else public_size
    eval_size = _DIGITS_EVAL if eval_size is None else eval_size
    k = len(x) - public_size - eval_size
    if k <= 0:
        raise InputError(
            f"public_size + eval_size = {public_size} + {eval_size} leaves no private "
            f"records out of {len(x)} in digits; choose smaller sizes"
        )
    private, rest = np.split(np.random.default_rng(0).permutation(len(x)), [k])
    return _protocol_split(x[private], y[private], x[rest], y[rest], public_size, eval_size, name)


def _own_data(
    name: str,
    image_size: tuple[int, int] | None,
    public_size: int | None,
    eval_size: int | None,
    cache,
    classes: list[str] | None,
    pool: dict,
) -> PateData:
    """The :class:`PateData` of an ``npz:``, ``csv:`` or ``imagefolder:`` dataset; the files'
    arrays are checked before they are split. ``pool``: ``split_column``, ``evaluation_public``
    and the held-out split's ``key``."""
    prefix, _, rest = name.partition(":")
    if not rest:
        raise InputError(f"dataset {name!r} needs a path after '{prefix}:'")
    path = pathlib.Path(rest).expanduser()
    if prefix == "npz":
        kind, arrays, class_names = load_npz(
            path, cache=cache, source=name, classes=classes, split_column=pool["split_column"]
        )
    elif prefix == "csv":
        kind = "pool"
        arrays, class_names = load_csv(path, classes=classes, split_column=pool["split_column"])
    else:
        kind, arrays, class_names = load_imagefolder(path, image_size, cache=cache, classes=classes)
    if kind != "train-test" and (public_size is not None or eval_size is not None):
        raise InputError(
            f"{name} already says which records are public and which evaluate (its splits or "
            f"its {pool['split_column']!r} marks); do not pass public_size/eval_size"
        )
    if kind == "pool":
        return _marked_data(name, arrays, class_names, pool)
    if kind == "splits":
        xs = [np.asarray(a) for a in arrays]
        for key, a in zip(_NPZ_SPLIT_KEYS, xs):
            split = key.split("_", 1)[1]
            if key.startswith("x"):
                check_features(a, f"{name}: {split} split ({key})")
            else:
                check_labels(a, f"{name}: {split} split ({key})", unknown_ok=split == "public")
        splits = (ArraySplit(xs[0], xs[1]), ArraySplit(xs[2], xs[3]), ArraySplit(xs[4], xs[5]))
    else:
        splits = _protocol_split(*arrays, public_size, eval_size, name)
    # a file's evaluation split of its own (x_evaluation, an image folder's test/): the user's
    # data, public only where declared so ([data] evaluation_public)
    public, evaluation = _in_memory(*splits[1:])
    return _checked_data(
        name,
        splits[0],
        public,
        evaluation,
        class_names,
        evaluation_public=bool(pool["evaluation_public"]),
    )


def _in_memory(public: ArraySplit, evaluation: ArraySplit) -> tuple[ArraySplit, ArraySplit]:
    """The public and evaluation splits in memory where they are mapped from the cache: only
    the private split stays mapped (read a block at a time); the student trains on the public
    pool. A copied block's pages are dropped from the resident set (else it would count twice)."""
    if public.x.flags.writeable:
        return public, evaluation
    copies = []
    for split in (public, evaluation):
        copies.append(ArraySplit(np.array(split.x), split.y))
        release_read(split.x)
    return copies[0], copies[1]


def _marked_data(name: str, pool: MarkedPool, class_names, settings: dict) -> PateData:
    """The splits of a pool whose rows the user marked (rows in split order: private, public,
    evaluation); with no row marked ``evaluation``, a keyed-hash tenth of the private rows is
    held out for it (:func:`_hold_out`; the evaluation records are then private records)."""
    counts = np.bincount(pool.split, minlength=len(SPLIT_VALUES))
    ends = np.cumsum(counts)
    private = ArraySplit(pool.x[: ends[0]], pool.y[: ends[0]])
    public = ArraySplit(pool.x[ends[0] : ends[1]], pool.y[ends[0] : ends[1]])
    evaluation = ArraySplit(pool.x[ends[1] :], pool.y[ends[1] :])
    evaluation_public = bool(settings["evaluation_public"]) and bool(counts[2] > 0)
    if counts[2] == 0:
        marks = f"mark rows 'evaluation' in the {settings['split_column']!r} marks"
        private, evaluation, _ = _hold_out(name, private, settings["key"], marks)
    public, evaluation = _in_memory(public, evaluation)
    logger.warning(
        "%s: %d public inputs are rows of your file marked public: the student learns from "
        "them without any privacy protection",
        name,
        len(public),
    )
    data = _checked_data(name, private, public, evaluation, class_names)
    return replace(data, evaluation_public=evaluation_public, public_from_pool=len(public))


def _hold_out(name: str, private: ArraySplit, key, fix: str, *, units=None):
    """``(private, evaluation, held)``: the private records whose keyed hash (of the record's
    content key, :func:`pate.ledger.record_keys`; of its privacy unit's id where ``units`` gives
    one per record, so that a person's rows go together) falls in bucket 0 of
    :data:`HELD_OUT_BUCKETS` are held out for evaluation. A record's place depends on the record
    and ``key`` alone, so that adding or removing a record moves no other (as the partition:
    :mod:`pate.core.partition`). ``key``: the key, a function returning it, or None (a fresh
    one); ``fix``: what to do when the tenth leaves no private or no evaluation record."""
    from pate.core.partition import teacher_of
    from pate.ledger import record_keys

    key = key() if callable(key) else key
    if key is None:
        key = os.urandom(32)
        logger.info("%s: the held-out evaluation split is keyed with a fresh key", name)
    if units is not None:
        items = [str(unit).encode() for unit in units]
    else:
        keys = record_keys(private.x, private.y)
        raw, width = np.ascontiguousarray(keys).tobytes(), keys.dtype.itemsize
        items = [raw[i : i + width] for i in range(0, len(raw), width)]
    held = teacher_of(items, num_teachers=HELD_OUT_BUCKETS, key=key) == 0
    if held.all() or not held.any():
        raise InputError(
            f"{name}: holding out a tenth of the private rows for evaluation left "
            f"{'no private' if held.all() else 'no evaluation'} record; {fix}"
        )
    keep = ArraySplit(private.x[~held], private.y[~held])
    return keep, ArraySplit(private.x[held], private.y[held]), held


def table_data(private, spec: TableSpec, *, name: str, classes=None, split_key=None) -> PateData:
    """The :class:`PateData` of tables with named columns (:func:`pate.teachers.tables.
    load_tables`): the private table ``private`` and ``spec``'s public and evaluation tables,
    encoded by the public-fitted encoder; without an evaluation table, a keyed-hash tenth of
    the private units is held out for it (as a pool's: :func:`_hold_out`)."""
    from pate.teachers.tables import load_tables

    tables = load_tables(private, spec, classes)
    x, y, unit_ids = tables.x, tables.y, tables.unit_ids
    splits = [ArraySplit(x[s], y[s]) for s in x]  # private, public[, evaluation]
    if "evaluation" not in x:
        fix = "give an evaluation table (evaluation=, [data] evaluation)"
        splits[0], evaluation, held = _hold_out(name, splits[0], split_key, fix, units=unit_ids)
        splits.append(evaluation)
        unit_ids = None if unit_ids is None else unit_ids[~held]
    data = _checked_data(name, *splits, tables.class_names)
    return replace(data, encoder=tables.encoder, columns=tables.columns, unit_ids=unit_ids)


def _checked_data(
    name: str,
    private: ArraySplit,
    public: ArraySplit,
    evaluation: ArraySplit,
    class_names,
    *,
    evaluation_public: bool = False,
) -> PateData:
    """The :class:`PateData` of three splits, after the checks every source passes (shapes,
    features, labels, the declared label set: ``class_names``, else the public labels; the
    files' arrays were checked before they were split); ``evaluation_public``: the source says
    its evaluation split is public."""
    shapes = {private.x.shape[1:], public.x.shape[1:], evaluation.x.shape[1:]}
    if len(shapes) != 1:
        raise InputError(f"{name}: the splits have different input shapes {sorted(shapes)}")
    splits = {"private": private, "public": public, "evaluation": evaluation}
    for split, part in splits.items():
        check_features(part.x, f"{name}: {split} split")
        check_labels(part.y, f"{name}: {split} split", unknown_ok=split == "public")
    num_classes, names = label_set(name, declared=class_names, public_labels=public.y)
    for split, part in splits.items():
        check_in_label_set(part.y, num_classes, f"{name}: {split} split")
    check_classes(name, len(private), num_classes)
    return PateData(
        name=name,
        private=private,
        public=public,
        evaluation=evaluation,
        num_classes=num_classes,
        input_shape=tuple(int(s) for s in private.x.shape[1:]),
        class_names=names,
        evaluation_public=evaluation_public,
    )
