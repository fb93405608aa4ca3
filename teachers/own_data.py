"""The user's own data files: ``npz:PATH`` and ``csv:PATH`` (``imagefolder:PATH``:
:mod:`pate.teachers.image_folder`; :mod:`pate.teachers.data` splits what these return). More:
docs/own_data.md, "pate.teachers.own_data".
"""

from __future__ import annotations

import csv
import pathlib
from dataclasses import dataclass

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.mapped import npz_member_map
from pate.teachers import cached_data
from pate.teachers.data_checks import (
    NOTHING_DONE,
    check_features,
    check_in_label_set,
    check_labels,
    class_indices,
    declared_or_public_classes,
    label_set,
)
from pate.teachers.errors import DatasetNotFoundError

_LABEL_COLUMNS = ("label", "y", "target", "class")
#: The default name of the CSV column / npz array marking each row's split (``[data]
#: split_column``), and its values (code i is ``SPLIT_VALUES[i]``).
SPLIT_COLUMN = "split"
SPLIT_VALUES = ("private", "public", "evaluation")
PRIVATE, PUBLIC, EVALUATION = range(3)


@dataclass(frozen=True)
class MarkedPool:
    """A pool whose rows the user marked (docs/own_data.md); ``split`` holds codes 0, 1, 2, and
    the rows are in split order (private, public, evaluation; each in the file's order)."""

    x: np.ndarray
    y: np.ndarray
    split: np.ndarray


def unmarked_pool(source: str, how: str) -> InputError:
    """The error for a single pool without a split marking (``how``: how this source marks)."""
    return InputError(
        f"{source} is a single pool of records with no marking of which rows are public; "
        f'pate-learn never splits a sensitive file into "public" rows on its own (the '
        f"student trains on public rows without any protection). {how}; or give the public "
        f"inputs as their own source (npz: x_private, y_private, x_public, x_evaluation, "
        f"y_evaluation) ({NOTHING_DONE})"
    )


#: How a row is marked (the end of :func:`unmarked_pool`'s ``how`` for a column or an array).
MARKS = (
    f"holding {', '.join(SPLIT_VALUES)} for each row (evaluation optional: without it, a "
    f"keyed-hash tenth of the private rows is held out for evaluation)"
)


def _split_codes(values, what: str, where=lambda shape, index: f"row {index[0]}") -> np.ndarray:
    """The codes 0, 1, 2 of the split marks ``values`` (text; case and spaces ignored);
    ``where(shape, index)`` words a row's place (default: ``row R`` of a file's array)."""
    lookup = {name: code for code, name in enumerate(SPLIT_VALUES)}
    codes = np.empty(len(values), dtype=np.int8)
    for row, value in enumerate(values):
        code = lookup.get(str(value).strip().lower())
        if code is None:
            raise InputError(
                f"{what}: {where((len(values),), (row,))} is {str(value)!r}, not one of "
                f"{', '.join(SPLIT_VALUES)} ({NOTHING_DONE})"
            )
        codes[row] = code
    for code in (PRIVATE, PUBLIC):
        if not np.any(codes == code):
            raise InputError(
                f"{what}: no row is marked {SPLIT_VALUES[code]!r}; mark the private records "
                f"and the public inputs the teachers label ({NOTHING_DONE})"
            )
    return codes


def load_npz(path: pathlib.Path, *, cache, source: str, classes, split_column: str):
    """``(kind, arrays, class_names)`` of an ``.npz`` (docs/own_data.md). Uncompressed float32
    private images are memory-mapped; otherwise, with a ``cache``, written into it as float32
    (a pool's ``x`` in split order, its labels and marks checked first) and mapped from there;
    without one read into memory. ``source`` names the data in messages; ``classes``: the
    declared class names (else the file's ``class_names``, else the public labels)."""
    if not path.is_file():
        raise DatasetNotFoundError(
            f"npz file {path} does not exist; give npz:PATH of an existing "
            "file with arrays x_private, y_private, x_public, x_evaluation, y_evaluation "
            f"(or x, y and {split_column}, marking each row private, public or evaluation)"
        )
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        names = classes if classes is not None else _npz_class_names(npz, path)
        split_keys = {"x_private", "y_private", "x_public", "x_evaluation", "y_evaluation"}
        if split_keys <= keys:
            xp = npz["x_public"]
            yp = npz["y_public"] if "y_public" in keys else np.full(len(xp), -1, dtype=np.int64)
            # memory-mapped where stored uncompressed: the private split is read a block at a
            # time by whatever scans it, never held whole
            xq = _private_images(npz, path, cache, f"{source}: private split (x_private)")
            arrays = (xq, npz["y_private"], xp, yp, npz["x_evaluation"], npz["y_evaluation"])
            return "splits", arrays, names
        if {"x", "y"} <= keys:
            if split_column not in keys:
                raise unmarked_pool(source, f"Add an array {split_column!r} {MARKS}")
            pool = _npz_pool(npz, path, cache, source, names, split_column)
            return "pool", pool, names
    raise InputError(
        f"npz file {path} must hold arrays x, y, {split_column} or x_private, y_private, "
        f"x_public, x_evaluation, y_evaluation; it has {sorted(keys)}"
    )


def _npz_class_names(npz, path: pathlib.Path) -> list[str] | None:
    """The file's ``class_names`` (a declaration that comes with the file), or None."""
    if "class_names" not in npz.files:
        return None
    raw = npz["class_names"]
    if raw.ndim != 1 or raw.dtype.kind not in "US":
        raise InputError(
            f"npz file {path}: class_names must be a 1-D array of strings, "
            f"got dtype {raw.dtype} and shape {raw.shape}"
        )
    return [str(v) for v in raw.astype(str)]


def _npz_pool(npz, path: pathlib.Path, cache, source: str, names, split_column: str):
    """The :class:`MarkedPool` of an npz's ``x, y`` and split array, its labels and marks
    checked by the file's rows; through the cache, ``x`` is written in split order."""
    what = f"{source}: {{}} (the pool)"
    y, marks = npz["y"], npz[split_column]
    if y.ndim != 1 or marks.shape != y.shape:
        raise InputError(
            f"npz file {path}: y and {split_column} must be 1-D with one value per row of x, "
            f"got shapes {y.shape} and {marks.shape}"
        )
    split = _split_codes(marks.tolist(), what.format(split_column))
    check_labels(y, what.format("y"), unknown_ok=True)
    unlabelled = np.flatnonzero((y < 0) & (split != PUBLIC))
    if unlabelled.size:
        row = int(unlabelled[0])
        raise InputError(
            f"{what.format('y')}: row {row} is {y[row]}, a negative label on a row marked "
            f"{SPLIT_VALUES[split[row]]}; every private and evaluation record needs its "
            f"label (-1 marks an unknown label on public rows only) ({NOTHING_DONE})"
        )
    num_classes, _ = label_set(source, declared=names, public_labels=y[split == PUBLIC])
    check_in_label_set(y, num_classes, what.format("y"))
    order = np.argsort(split, kind="stable")
    x = None
    if cache is not None:
        x = cached_data.npz_rows(cache, path, "x", order=order, what=what.format("x"))
    if x is None:
        x = npz["x"]
        check_features(x, what.format("x"))
        if len(x) != len(y):
            raise InputError(f"{source}: x has {len(x)} rows but y has {len(y)}")
        x = x[order]
    return MarkedPool(x, np.asarray(y, dtype=np.int64)[order], split[order])


def _private_images(npz, path: pathlib.Path, cache, what: str):
    mapped = npz_member_map(path, "x_private")
    if mapped is not None and mapped.dtype == np.float32 and mapped.flags.c_contiguous:
        return mapped
    if cache is not None:
        rows = cached_data.npz_rows(cache, path, "x_private", what=what)
        if rows is not None:
            return rows
    return npz["x_private"] if mapped is None else mapped


def _csv_rows(path: pathlib.Path):
    """The file's rows that hold a value (lists of cells), read one at a time."""
    with open(path, newline="") as fh:
        for row in csv.reader(fh):
            if row and any(c.strip() for c in row):
                yield row


def _csv_layout(path: pathlib.Path, split_column: str):
    """``(header or None, label column, split column or None, width, rows with the header)`` of
    a csv file: the first pass, which also refuses a ragged row and a file without records."""
    first = next(_csv_rows(path), None)
    if first is None:
        raise InputError(f"csv file {path} is empty")
    header = None  # a first row of numbers: no header
    try:
        [float(c) for c in first]
    except ValueError:
        header = [c.strip() for c in first]
    label_col, split_col = len(first) - 1, None
    if header is not None:
        lowered = [h.lower() for h in header]
        for name in _LABEL_COLUMNS:
            if name in lowered:
                label_col = lowered.index(name)
                break
        if split_column.lower() in lowered:
            split_col = lowered.index(split_column.lower())
    width = len(first)
    rows = 0
    for k, r in enumerate(_csv_rows(path)):  # k + 1: the row's number (header = row 1)
        if len(r) != width:
            raise InputError(f"csv file {path}: row {k + 1} has {len(r)} columns, expected {width}")
        rows += 1
    if rows == (header is not None):
        raise InputError(f"csv file {path} has a header row and no records")
    if split_col == label_col:
        raise InputError(f"csv file {path}: the column {split_column!r} cannot be the label")
    return header, label_col, split_col, width, rows


def load_csv(path: pathlib.Path, *, classes, split_column: str):
    """``(MarkedPool, class_names)`` of a csv file (docs/own_data.md), in two passes a row at a
    time: the header, label and split columns and the row count, then the features into one
    preallocated array. The label set is ``classes`` (declared), else the labels of the rows
    marked public; a label outside it is refused by row and value."""
    if not path.is_file():
        raise DatasetNotFoundError(
            f"csv file {path} does not exist; give csv:PATH of an existing "
            "file with numeric feature columns, a label column and a split column"
        )
    header, label_col, split_col, width, rows = _csv_layout(path, split_column)
    if split_col is None:
        raise unmarked_pool(
            f"csv:{path}",
            f"Add a column named {split_column!r} (in a header row; [data] split_column "
            f"chooses another name) {MARKS}",
        )
    skip = header is not None
    labels: list[str] = []
    marks: list[str] = []
    features = [j for j in range(width) if j not in (label_col, split_col)]
    # float64 first: a value beyond float32's range is refused by name, not read as inf
    feats = np.empty((rows - skip, len(features)), dtype=np.float64)
    for k, r in enumerate(_csv_rows(path)):
        if k < skip:
            continue
        if k >= rows or len(r) != width:
            raise InputError(f"csv file {path} changed while it was read; read it again")
        labels.append(r[label_col].strip())
        marks.append(r[split_col])
        try:
            feats[k - skip] = [float(r[j]) for j in features]
        except ValueError as exc:
            raise InputError(
                f"csv file {path}: feature columns must be numeric ({exc}); encode "
                "categorical features first"
            ) from None
    if len(labels) != rows - skip:
        raise InputError(f"csv file {path} changed while it was read; read it again")
    offset = (header is not None) + 1  # row numbers of the file (header = row 1), as above

    def where(shape, index):
        if len(index) == 1:
            return f"row {index[0] + offset}"
        j = features[index[1]]
        column = f"column {header[j]!r}" if header is not None else f"column {j + 1}"
        return f"row {index[0] + offset}, {column}"

    check_features(feats, f"csv file {path}", where=where)
    split = _split_codes(marks, f"csv file {path}, column {split_column!r}", where)
    # the label set: ``classes``, else the public rows' labels; an empty public cell is -1
    what = f"csv file {path}, label column"
    public = [t for t, s in zip(labels, split) if s == PUBLIC and t]
    names = declared_or_public_classes(classes, public, what)

    def at(row: int) -> str:
        return f"{what}: {where((len(labels),), (row,))} (marked {SPLIT_VALUES[split[row]]})"

    y = class_indices(labels, names, at, unlabelled_ok=split == PUBLIC)
    order = np.argsort(split, kind="stable")  # private rows, then public, then evaluation
    return MarkedPool(feats.astype(np.float32)[order], y[order], split[order]), names
