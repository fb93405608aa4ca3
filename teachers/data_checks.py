"""The input checks every dataset passes, from a file or from memory (``pate.fit``), before it is
partitioned, trained on or charged (docs/teachers.md, "pate.teachers.data_checks").
"""

from __future__ import annotations

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.mapped import release_read

#: The largest label accepted before the class count is judged against the records (a class
#: index is below the number of private records, :func:`check_classes`).
_MAX_LABEL = 2**31 - 1
NOTHING_DONE = "nothing was trained, written or charged"
#: How to declare the label set (the end of the messages that ask for it).
DECLARE_CLASSES = (
    'declare the classes: [data] classes = ["name0", "name1", ...] in the config, or '
    'pate.fit(..., classes=["name0", "name1", ...]) (label i is the i-th name)'
)
_CHUNK = 1 << 22  # values checked at a time (bounds the temporary masks of a large split)


def _show(value) -> str:
    """A value as the user wrote it: ``nan``, ``2.5``, ``10000000`` (no numpy type names)."""
    value = np.asarray(value).item()
    return repr(value) if isinstance(value, float) else str(value)


def _where(shape: tuple[int, ...], index: tuple[int, ...]) -> str:
    """``row 3`` / ``row 3, column 5`` / ``row 3, position (0, 2, 5)`` of one value."""
    row = f"row {index[0]}"
    if len(shape) == 2:
        return f"{row}, column {index[1]}"
    if len(shape) > 2:
        return f"{row}, position {tuple(int(i) for i in index[1:])}"
    return row


def _scan(mask_of, a: np.ndarray) -> tuple[tuple[int, ...] | None, int]:
    """(index of the first value of ``a`` where ``mask_of`` is True or None, how many), over
    chunks of rows (so that a large split needs no full-size temporary mask)."""
    if a.size == 0:
        return None, 0
    step = max(1, _CHUNK // max(1, a.size // a.shape[0]))
    first, count = None, 0
    for start in range(0, a.shape[0], step):
        mask = mask_of(a[start : start + step])
        release_read(a[start : start + step])  # a memory-mapped split: not kept resident
        found = int(np.count_nonzero(mask))
        if found and first is None:
            index = np.unravel_index(int(np.flatnonzero(mask.reshape(-1))[0]), mask.shape)
            first = (int(index[0]) + start, *(int(i) for i in index[1:]))
        count += found
    return first, count


def check_features(x, what: str, *, where=_where) -> None:
    """Refuse features that are not finite numbers (as float32, what pate-learn trains on).

    ``what`` names the split (and file/array) in the message; ``where(shape, index)`` words
    the position (default: ``row R, column C``). Raises :class:`InputError` naming the first
    bad value, its position and how many there are."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise InputError(
            f"{what}: features must be numbers, got dtype {x.dtype}; encode them "
            f"as numeric arrays ({NOTHING_DONE})"
        )
    if x.dtype.kind != "f" or x.ndim == 0:
        return
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf: refused
        index, count = _scan(lambda part: ~np.isfinite(part.astype(np.float32, copy=False)), x)
    if index is None:
        return
    value = x[index]
    kind = (
        "a missing value"
        if np.isnan(value)
        else ("infinite" if np.isinf(value) else "beyond float32's range")
    )
    raise InputError(
        f"{what}: {where(x.shape, index)} is {_show(value)} ({kind}; {count} "
        f"non-finite value{'s' if count != 1 else ''} in all); features must be "
        f"finite numbers: impute or drop those records first ({NOTHING_DONE})"
    )


def check_labels(y, what: str, *, unknown_ok: bool = False) -> None:
    """Refuse labels that are not class indices: not integers (2.5, NaN; an integer-valued float
    such as 3.0 is accepted), negative (``-1`` is accepted where ``unknown_ok``: an unknown
    public label) or absurdly large (over 2**31 - 1; :func:`check_classes` bounds them by the
    records). Raises :class:`InputError` naming the first bad label, its row and its value."""
    y = np.asarray(y)
    if y.ndim != 1:
        return  # the shape is refused by the caller, naming both shapes
    if y.dtype.kind not in "biuf":
        raise InputError(
            f"{what}: labels must be integer class indices 0, 1, ..., got dtype "
            f"{y.dtype}; map class names to indices first ({NOTHING_DONE})"
        )
    if y.dtype.kind == "f":
        index, _ = _scan(lambda part: ~np.isfinite(part) | (part != np.round(part)), y)
        if index is not None:
            raise InputError(
                f"{what}: {_where(y.shape, index)} is {_show(y[index])}, not an integer "
                f"class index; labels must be 0, 1, ..., K-1 (an integer-valued "
                f"float such as 3.0 is accepted) ({NOTHING_DONE})"
            )
    low = -1 if unknown_ok else 0
    index, _ = _scan(lambda part: (part < low) | (part > _MAX_LABEL), y)
    if index is not None:
        value = y[index]
        if value < low:
            hint = "labels must be class indices 0, 1, ..., K-1" + (
                " (-1 marks an unknown label)"
                if unknown_ok
                else "; every record of this split needs its label"
            )
            raise InputError(
                f"{what}: {_where(y.shape, index)} is {_show(value)}, a negative label; "
                f"{hint} ({NOTHING_DONE})"
            )
        raise InputError(
            f"{what}: {_where(y.shape, index)} is {_show(value)}, not a plausible class "
            f"index (labels must be 0, 1, ..., K-1 with K at most the number of "
            f"private records); remap the labels, e.g. with "
            f"numpy.unique(y, return_inverse=True) ({NOTHING_DONE})"
        )


def check_classes(source: str, private_records: int, num_classes: int) -> None:
    """Refuse more classes than the private records could populate: a class index must be below
    the number of private records (every class has to be learnt from private records, and the
    vote histograms grow with the number of classes)."""
    if num_classes > private_records:
        raise InputError(
            f"{source}: {num_classes} classes are declared (class names or folders) but "
            f"the private split has only {private_records} records; give at least one private "
            f"record per class ({NOTHING_DONE})"
        )


def label_set(source: str, *, declared, public_labels) -> tuple[int, tuple[str, ...] | None]:
    """``(num_classes, class_names or None)`` of the declared label set (docs/teachers.md):
    ``declared`` (the user's class names, or the source's own), else the largest known label of
    ``public_labels`` + 1 (names unknown)."""
    if declared is not None:
        return len(declared), tuple(str(c) for c in declared)
    known = np.asarray(public_labels)
    known = known[known >= 0]
    if known.size == 0:
        raise InputError(
            f"{source}: the set of classes is not declared, and no public labels give it (it "
            f"is never read from the private labels: one added record would add a class); "
            f"{DECLARE_CLASSES} ({NOTHING_DONE})"
        )
    return int(known.max()) + 1, None


def check_in_label_set(y, num_classes: int, what: str) -> None:
    """Refuse a label of ``y`` at or above ``num_classes`` (``-1``, an unknown public label, is
    left to :func:`check_labels`): the first one, by row and value."""
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        return
    index, count = _scan(lambda part: part >= num_classes, y)
    if index is None:
        return
    raise InputError(
        f"{what}: {_where(y.shape, index)} has label {_show(y[index])}, outside the declared "
        f"{num_classes} classes (0 .. {num_classes - 1}; {count} such label"
        f"{'s' if count != 1 else ''} in all); a label outside the declared set is refused: "
        f"fix the record, or {DECLARE_CLASSES} ({NOTHING_DONE})"
    )


def _as_index(text: str) -> int | None:
    """The class index a label cell writes (``3``, ``3.0``), or None (a name, ``2.5``, ``-1``)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if np.isfinite(value) and value == round(value) and value >= 0 else None


def declared_or_public_classes(classes, public: list[str], what: str) -> list[str]:
    """The class names: ``classes`` (declared), else those of the public label cells ``public``
    (indices 0 .. their largest, or their names in sorted order); never the private labels."""
    if classes is None:
        if not public:
            raise InputError(
                f"{what}: no public row has a label, so nothing declares the set of classes "
                f"(it is never read from the private rows: one added record would add a "
                f"class); {DECLARE_CLASSES} ({NOTHING_DONE})"
            )
        indices = [_as_index(t) for t in public]
        if all(i is not None for i in indices):
            classes = [str(i) for i in range(max(i for i in indices if i is not None) + 1)]
        else:
            classes = sorted(set(public))
    return [str(c) for c in classes]


def class_indices(labels: list[str], names: list[str], where, *, unlabelled_ok) -> np.ndarray:
    """The class indices of label cells: a cell is a name of ``names`` or an index ``0 ..
    K-1``; an empty cell is -1 where ``unlabelled_ok`` (a bool, or one per cell). ``where(row)``
    names a cell's place in the message refusing a label outside the set."""
    lookup = {c: i for i, c in enumerate(names)}
    unlabelled = np.broadcast_to(np.asarray(unlabelled_ok, dtype=bool), (len(labels),))
    y = np.empty(len(labels), dtype=np.int64)
    for row, text in enumerate(labels):
        index = lookup.get(text)
        if index is None:
            index = _as_index(text)
        if not text and unlabelled[row]:
            index = -1
        elif index is None or index >= len(names):
            raise InputError(
                f"{where(row)} has label {text!r}, outside the declared classes {names}; a "
                f"label outside the declared set is refused: fix the record, or "
                f"{DECLARE_CLASSES} ({NOTHING_DONE})"
            )
        y[row] = index
    return y
