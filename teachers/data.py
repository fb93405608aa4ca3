"""Dataset loaders for PATE, working offline, and the PATE protocol split.

Symbols
-------
``ArraySplit(x, y)``
    One split: ``x`` float32 -- images ``(N, C, H, W)`` in ``[0, 1]`` or tabular ``(N, F)`` --
    and ``y`` int64 labels ``(N,)`` (``-1`` where a label is unknown, e.g. an unlabelled public
    split read from a user's ``.npz``).
``PateData(name, private, public, evaluation, num_classes, input_shape, class_names=None)``
    The three splits of the PATE protocol (Papernot et al. 2017, section 4): ``private`` is the
    sensitive data the teachers are trained on (sharded by ``pate.partition``), ``public`` the
    unlabelled inputs the teachers vote on (the student's training pool), ``evaluation`` the
    held-out items used only to measure teacher and student accuracy. ``class_names`` is a
    tuple of ``num_classes`` strings (label ``i`` is ``class_names[i]``) or None when unknown:
    :data:`CLASS_NAMES` for the built-in datasets, the folder names of ``imagefolder:``, the
    sorted label strings of a ``csv:`` with non-numeric labels, an optional ``class_names``
    string array of an ``npz:``. Where the user declares the classes (folders, names),
    ``num_classes`` is their number even if some class has no records.
``load_pate_data(name, *, root=None, download=False, public_size=None, eval_size=None,
image_size=None)``
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

Errors: a missing dataset raises :class:`pate.analysis.errors.DatasetNotFoundError` saying how to
obtain it; a bad argument raises ``ValueError``/``TypeError`` naming it, before any file is read;
an image file that cannot be decoded, a non-finite feature or a label that is not a class index
raises :class:`pate.analysis.errors.InputError` naming it.
Messages go to the ``logging`` logger ``"pate.teachers.data"`` (a child of ``"pate"``).
"""

from __future__ import annotations

import csv
import gzip
import logging
import os
import pathlib
import pickle
from dataclasses import dataclass

import numpy as np

from pate.analysis.errors import DatasetNotFoundError, InputError
from pate.analysis.validation import check_int, describe

__all__ = ["ArraySplit", "PateData", "load_pate_data", "read_idx", "check_features", "check_labels",
           "check_classes", "DATASET_NAMES",
           "DEFAULT_FASHION_MNIST_DIR", "CLASS_NAMES", "IMAGE_EXTENSIONS"]

logger = logging.getLogger("pate.teachers.data")

DEFAULT_FASHION_MNIST_DIR = pathlib.Path("/usr/share/datasets/fashion-mnist")
#: Names accepted by :func:`load_pate_data` (plus the ``npz:``/``csv:``/``imagefolder:`` prefixes).
DATASET_NAMES = ("fashion-mnist", "mnist", "kmnist", "cifar10", "svhn", "digits")
_PREFIXES = ("npz:", "csv:", "imagefolder:")
_NPZ_SPLIT_KEYS = ("x_private", "y_private", "x_public", "y_public", "x_evaluation", "y_evaluation")
_PROTOCOL_PUBLIC, _PROTOCOL_EVAL = 9000, 1000
_DIGITS_PUBLIC, _DIGITS_EVAL = 597, 200
_LABEL_COLUMNS = ("label", "y", "target", "class")
_DIGIT_NAMES = tuple(str(i) for i in range(10))
#: The class names of the built-in datasets, in label order (torchvision's, digits as "0".."9").
CLASS_NAMES = {
    "fashion-mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"),
    "mnist": _DIGIT_NAMES,
    "kmnist": ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                "truck"),
    "svhn": _DIGIT_NAMES,
    "digits": _DIGIT_NAMES,
}


# --------------------------------------------------------------------------- input checks

#: The largest label accepted before the class count is judged against the records (a class
#: index is below the number of private records, :func:`check_classes`).
_MAX_LABEL = 2**31 - 1
_NOTHING_DONE = "nothing was trained, written or charged"
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
        mask = mask_of(a[start:start + step])
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
        raise InputError(f"{what}: features must be numbers, got dtype {x.dtype}; encode them "
                         f"as numeric arrays ({_NOTHING_DONE})")
    if x.dtype.kind != "f" or x.ndim == 0:
        return
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf: refused
        index, count = _scan(lambda part: ~np.isfinite(part.astype(np.float32, copy=False)), x)
    if index is None:
        return
    value = x[index]
    kind = "a missing value" if np.isnan(value) else (
        "infinite" if np.isinf(value) else "beyond float32's range")
    raise InputError(f"{what}: {where(x.shape, index)} is {_show(value)} ({kind}; {count} "
                     f"non-finite value{'s' if count != 1 else ''} in all); features must be "
                     f"finite numbers: impute or drop those records first ({_NOTHING_DONE})")


def check_labels(y, what: str, *, unknown_ok: bool = False, where=_where) -> None:
    """Refuse labels that are not class indices: not integers (2.5, NaN; an integer-valued float
    such as 3.0 is accepted), negative (``-1`` is accepted where ``unknown_ok``: an unknown
    public label) or absurdly large (over 2**31 - 1; :func:`check_classes` bounds them by the
    records). Raises :class:`InputError` naming the first bad label, its row and its value."""
    y = np.asarray(y)
    if y.ndim != 1:
        return  # the shape is refused by the caller, naming both shapes
    if y.dtype.kind not in "biuf":
        raise InputError(f"{what}: labels must be integer class indices 0, 1, ..., got dtype "
                         f"{y.dtype}; map class names to indices first ({_NOTHING_DONE})")
    if y.dtype.kind == "f":
        index, _ = _scan(lambda part: ~np.isfinite(part) | (part != np.round(part)), y)
        if index is not None:
            raise InputError(f"{what}: {where(y.shape, index)} is {_show(y[index])}, not an integer "
                             f"class index; labels must be 0, 1, ..., K-1 (an integer-valued "
                             f"float such as 3.0 is accepted) ({_NOTHING_DONE})")
    low = -1 if unknown_ok else 0
    index, _ = _scan(lambda part: (part < low) | (part > _MAX_LABEL), y)
    if index is not None:
        value = y[index]
        if value < low:
            hint = ("labels must be class indices 0, 1, ..., K-1" + (
                " (-1 marks an unknown label)" if unknown_ok else
                "; every record of this split needs its label"))
            raise InputError(f"{what}: {where(y.shape, index)} is {_show(value)}, a negative label; "
                             f"{hint} ({_NOTHING_DONE})")
        raise InputError(f"{what}: {where(y.shape, index)} is {_show(value)}, not a plausible class "
                         f"index (labels must be 0, 1, ..., K-1 with K at most the number of "
                         f"private records); remap the labels, e.g. with "
                         f"numpy.unique(y, return_inverse=True) ({_NOTHING_DONE})")


def check_classes(source: str, splits: dict, num_classes: int, *,
                  declared: int | None = None) -> None:
    """Refuse more classes than the private records could populate: a class index must be below
    the number of private records (every class has to be learnt from private records, and the
    vote histograms grow with the number of classes). ``splits`` maps split names (``private``
    first) to :class:`ArraySplit`; ``declared``: a class count the user declared (class names,
    folders), if any."""
    n = len(splits["private"])
    if num_classes <= n:
        return
    if declared is not None:
        raise InputError(f"{source}: {declared} classes are declared (class names or folders) but "
                         f"the private split has only {n} records; give at least one private "
                         f"record per class ({_NOTHING_DONE})")
    split, row, value = max(((name, int(np.argmax(s.y)), int(s.y.max()))
                             for name, s in splits.items() if len(s) and s.y.max() >= 0),
                            key=lambda t: t[2])
    raise InputError(f"{source}: {split} split, row {row} has label {value}, which makes "
                     f"{value + 1} classes, more than its {n} private records could populate (a "
                     f"class index must be below the number of private records); labels must be "
                     f"class indices 0, 1, ..., K-1: remap them, e.g. with "
                     f"numpy.unique(y, return_inverse=True) ({_NOTHING_DONE})")


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


# --------------------------------------------------------------------------- readers

def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (LeCun's MNIST format), gzip-compressed or not, into a numpy array.

    Header: two zero bytes, a type code (0x08 = uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions, then one big-endian uint32 per
    dimension.
    """
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    code, ndim = raw[2], raw[3]
    if code not in dtypes:
        raise ValueError(f"{path} has an unknown IDX type code {code:#x}")
    header = 4 + 4 * ndim
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">u4"))
    dtype = np.dtype(dtypes[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"{path} is truncated or corrupt: header says shape {shape} "
                         f"({expected} bytes) but {len(raw) - header} bytes follow")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find_idx(directory: pathlib.Path, stem: str) -> pathlib.Path | None:
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    return None


_IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_TV_FOLDER = {"fashion-mnist": "FashionMNIST", "mnist": "MNIST", "kmnist": "KMNIST"}
_TV_CLASS = {"fashion-mnist": "FashionMNIST", "mnist": "MNIST", "kmnist": "KMNIST",
             "cifar10": "CIFAR10", "svhn": "SVHN"}


def _how_to_get(name: str, root: pathlib.Path | None) -> str:
    where = f"--data-root {root}" if root is not None else "--data-root DIR"
    apt = ("install Debian's package (`apt-get install dataset-fashion-mnist`, files in "
           f"{DEFAULT_FASHION_MNIST_DIR}), or " if name == "fashion-mnist" else "")
    return (f"To obtain {name}: {apt}point {where} at a torchvision root that holds it, or add "
            f"--download (download=True) to let torchvision fetch it into that root.")


def _download(name: str, root: pathlib.Path) -> None:
    import torchvision  # only when the user asked for a download

    cls = getattr(torchvision.datasets, _TV_CLASS[name])
    for train in (True, False):
        if name == "svhn":
            cls(str(root), split="train" if train else "test", download=True)
        else:
            cls(str(root), train=train, download=True)


def _load_idx_dataset(name: str, root: pathlib.Path | None, download: bool):
    if root is None:
        if name != "fashion-mnist":
            raise DatasetNotFoundError(f"{name} has no default location; " + _how_to_get(name, None))
        candidates = [DEFAULT_FASHION_MNIST_DIR]
    else:
        candidates = [root / _TV_FOLDER[name] / "raw", root]
    for attempt in range(2):
        for directory in candidates:
            paths = [_find_idx(directory, stem) for stem in _IDX_STEMS]
            if all(p is not None for p in paths):
                xtr, ytr, xte, yte = (read_idx(p) for p in paths)
                return (xtr[:, None].astype(np.float32) / 255.0, ytr, xte[:, None].astype(np.float32) / 255.0, yte)
        if attempt == 0 and download and root is not None:
            _download(name, root)
            continue
        break
    looked = ", ".join(str(d) for d in candidates)
    raise DatasetNotFoundError(f"{name} IDX files ({', '.join(s + '[.gz]' for s in _IDX_STEMS)}) "
                               f"not found in {looked}. " + _how_to_get(name, root))


def _load_cifar10(root: pathlib.Path | None, download: bool):
    if root is None:
        raise DatasetNotFoundError("cifar10 has no default location; " + _how_to_get("cifar10", None))
    folder = root / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    if download and not all((folder / n).is_file() for n in names):
        _download("cifar10", root)
    if not all((folder / n).is_file() for n in names):
        raise DatasetNotFoundError(f"cifar10 batches ({', '.join(names)}) not found in {folder}. "
                                   + _how_to_get("cifar10", root))

    def read(n):
        with open(folder / n, "rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        return (np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32),
                np.asarray(batch["labels"], dtype=np.int64))

    parts = [read(n) for n in names[:5]]
    xtr = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
    ytr = np.concatenate([p[1] for p in parts])
    xte, yte = read(names[5])
    return xtr, ytr, xte.astype(np.float32) / 255.0, yte


def _load_svhn(root: pathlib.Path | None, download: bool):
    if root is None:
        raise DatasetNotFoundError("svhn has no default location; " + _how_to_get("svhn", None))
    files = [root / "train_32x32.mat", root / "test_32x32.mat"]
    if download and not all(f.is_file() for f in files):
        _download("svhn", root)
    if not all(f.is_file() for f in files):
        raise DatasetNotFoundError(f"svhn files (train_32x32.mat, test_32x32.mat) not found in "
                                   f"{root}. " + _how_to_get("svhn", root))
    from scipy.io import loadmat

    out = []
    for f in files:
        mat = loadmat(str(f))
        x = np.transpose(mat["X"], (3, 2, 0, 1)).astype(np.float32) / 255.0
        y = mat["y"].astype(np.int64).reshape(-1)
        y[y == 10] = 0  # SVHN stores digit 0 as label 10 (torchvision does the same mapping)
        out += [x, y]
    return tuple(out)


def _load_npz(path: pathlib.Path):
    if not path.is_file():
        raise DatasetNotFoundError(f"npz file {path} does not exist; give npz:PATH of an existing "
                                   "file with arrays x, y (or x_private, y_private, x_public, "
                                   "x_evaluation, y_evaluation)")
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        names = None
        if "class_names" in keys:
            raw = npz["class_names"]
            if raw.ndim != 1 or raw.dtype.kind not in "US":
                raise ValueError(f"npz file {path}: class_names must be a 1-D array of strings, "
                                 f"got dtype {raw.dtype} and shape {raw.shape}")
            names = [str(v) for v in raw.astype(str)]
        split_keys = {"x_private", "y_private", "x_public", "x_evaluation", "y_evaluation"}
        if split_keys <= keys:
            xp = npz["x_public"]
            yp = npz["y_public"] if "y_public" in keys else np.full(len(xp), -1, dtype=np.int64)
            return "splits", (npz["x_private"], npz["y_private"], xp, yp,
                              npz["x_evaluation"], npz["y_evaluation"]), names
        if {"x", "y"} <= keys:
            return "pool", (npz["x"], npz["y"]), names
    raise ValueError(f"npz file {path} must hold arrays x, y or x_private, y_private, x_public, "
                     f"x_evaluation, y_evaluation; it has {sorted(keys)}")


def _load_csv(path: pathlib.Path):
    if not path.is_file():
        raise DatasetNotFoundError(f"csv file {path} does not exist; give csv:PATH of an existing "
                                   "file with numeric feature columns and a label column")
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"csv file {path} is empty")

    def numeric(row):
        try:
            [float(c) for c in row]
            return True
        except ValueError:
            return False

    header = None if numeric(rows[0]) else [c.strip() for c in rows[0]]
    body = rows if header is None else rows[1:]
    label_col = len(rows[0]) - 1
    if header is not None:
        lowered = [h.lower() for h in header]
        for name in _LABEL_COLUMNS:
            if name in lowered:
                label_col = lowered.index(name)
                break
    width = len(rows[0])
    for i, r in enumerate(body):
        if len(r) != width:
            raise ValueError(f"csv file {path}: row {i + (header is not None) + 1} has {len(r)} "
                             f"columns, expected {width}")
    labels = [r[label_col].strip() for r in body]
    try:  # float64 first: a value beyond float32's range is refused by name, not read as inf
        feats = np.array([[float(c) for j, c in enumerate(r) if j != label_col] for r in body],
                         dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"csv file {path}: feature columns must be numeric ({exc}); encode "
                         "categorical features first") from None
    offset = (header is not None) + 1  # row numbers of the file (header = row 1), as above
    features = [j for j in range(width) if j != label_col]

    def where(shape, index):
        if len(index) == 1:
            return f"row {index[0] + offset}"
        j = features[index[1]]
        column = f"column {header[j]!r}" if header is not None else f"column {j + 1}"
        return f"row {index[0] + offset}, {column}"

    check_features(feats, f"csv file {path}", where=where)
    feats = feats.astype(np.float32)
    what = f"csv file {path}, label column"
    classes = y = None
    try:
        as_num = np.array([float(v) for v in labels])
    except ValueError:  # class names
        as_num = None
    if as_num is not None:
        bad = np.flatnonzero(~np.isfinite(as_num) | (as_num != np.round(as_num)))
        if bad.size:  # a number that is no class index (2.5, nan): never a class name
            raise InputError(f"{what}: {where(as_num.shape, (int(bad[0]),))} is "
                             f"{labels[bad[0]]!r}, not an integer class index; numeric labels "
                             f"must be class indices 0, 1, ..., K-1 ({_NOTHING_DONE})")
        if as_num.min() >= 0:
            check_labels(as_num, what, where=where)  # an absurd index, before the int cast
            y = as_num.astype(np.int64)
    if y is None:  # class names (or negative numbers such as -1/1): sorted into indices
        classes = sorted(set(labels))
        lookup = {c: i for i, c in enumerate(classes)}
        y = np.array([lookup[v] for v in labels], dtype=np.int64)
    return (feats, y), classes


#: File suffixes read as images by ``imagefolder:`` (case-insensitive; other files are skipped).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
#: PIL modes read as one greyscale channel; any other mode makes the dataset RGB.
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})


def _check_image_size(image_size) -> tuple[int, int] | None:
    """``image_size`` as ``(height, width)``: an int ``s`` means ``(s, s)``; None stays None."""
    if image_size is None:
        return None
    if isinstance(image_size, (list, tuple)):
        if len(image_size) != 2:
            raise ValueError(f"image_size must be one integer or a (height, width) pair, got "
                             f"{describe(image_size)}")
        return (check_int(image_size[0], "image_size height", minimum=1),
                check_int(image_size[1], "image_size width", minimum=1))
    side = check_int(image_size, "image_size", minimum=1)
    return side, side


def _image_folder(directory: pathlib.Path, classes: list[str] | None):
    """torchvision's ``ImageFolder`` over ``directory``, with ``classes`` (None: its own)."""
    from torchvision.datasets import ImageFolder

    class _Folder(ImageFolder):
        def find_classes(self, root):
            if classes is None:
                return super().find_classes(root)
            return list(classes), {c: i for i, c in enumerate(classes)}

    found = sorted(d.name for d in directory.iterdir() if d.is_dir())
    if not found:
        raise ValueError(f"image folder {directory} has no class sub-directories; lay it out as "
                         f"{directory}/<class>/<image>")
    unknown = set(found) - set(classes or found)
    if unknown:
        raise ValueError(f"image folder {directory} has classes {sorted(unknown)} that the "
                         f"training folder lacks; every test class must have a training folder")
    folder = _Folder(str(directory), allow_empty=True,
                     is_valid_file=lambda p: p.lower().endswith(IMAGE_EXTENSIONS))
    if not folder.samples:
        raise ValueError(f"image folder {directory} holds no images (suffixes read: "
                         f"{', '.join(IMAGE_EXTENSIONS)})")
    return folder


def _image_header(path: str):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return im.mode, (int(im.height), int(im.width))
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(f"image folder: {path} cannot be read as an image ({exc}); remove or "
                         "replace it") from None


class _ToArray:
    """PIL image -> float32 ``(C, H, W)`` array in ``[0, 1]`` (``uint8 / 255``)."""

    def __call__(self, image) -> np.ndarray:
        arr = np.asarray(image, dtype=np.uint8)
        arr = arr[None] if arr.ndim == 2 else np.transpose(arr, (2, 0, 1))
        return arr.astype(np.float32) / 255.0


def _load_imagefolder(path: pathlib.Path, image_size: tuple[int, int] | None):
    """Read ``PATH/<class>/<image>`` (or ``PATH/train`` + ``PATH/test``) with torchvision's
    ``ImageFolder``; returns ``(kind, arrays, class_names)``.

    Every image is converted to one colour mode -- greyscale ``L`` (1 channel) when all images
    of the dataset are greyscale, else ``RGB`` (3 channels; greyscale images are replicated,
    alpha is dropped) -- and resized (bilinear, antialiased, aspect ratio not kept) to
    ``image_size`` = ``(height, width)``; by default the size of the first image (first class
    in sorted order, first file in sorted order, of ``train/`` when there is one). An image
    already of that size is not resampled, so a folder of same-size images reads exactly.
    """
    if not path.is_dir():
        raise DatasetNotFoundError(f"image folder {path} does not exist; give imagefolder:PATH "
                                   "of a directory laid out as PATH/<class>/<image>")
    from torchvision import transforms

    split = (path / "train").is_dir() and (path / "test").is_dir()
    folders = [_image_folder(path / "train", None)] if split else [_image_folder(path, None)]
    classes = list(folders[0].classes)
    if split:
        folders.append(_image_folder(path / "test", classes))
    headers = [[_image_header(p) for p, _ in f.samples] for f in folders]
    mode = "L" if all(m in _GREY_MODES for h in headers for m, _ in h) else "RGB"
    size = image_size if image_size is not None else headers[0][0][1]
    transform = transforms.Compose([transforms.Lambda(lambda im: im.convert(mode)),
                                    transforms.Resize(size), _ToArray()])
    arrays = []
    for folder in folders:
        folder.transform = transform
        xs, ys = [], []
        for i, (file, _) in enumerate(folder.samples):
            try:
                x, y = folder[i]
            except (OSError, ValueError) as exc:
                raise InputError(f"image folder: {file} cannot be read as an image ({exc}); "
                                 "remove or replace it") from None
            xs.append(x)
            ys.append(y)
        arrays += [np.stack(xs), np.asarray(ys, dtype=np.int64)]
    logger.info("imagefolder %s: %d images, %d classes, %s %dx%d", path,
                sum(len(f.samples) for f in folders), len(classes), mode, size[0], size[1])
    return ("train-test" if split else "pool"), tuple(arrays), classes


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
            raise ValueError(f"public_size + eval_size = {public_size} + {eval_size} exceeds the "
                             f"{n_test} test items of {name}; choose smaller sizes")
    return (ArraySplit(xtr, ytr), ArraySplit(xte[:public_size], yte[:public_size]),
            ArraySplit(xte[n_test - eval_size:], yte[n_test - eval_size:]))


def _pool_split(x, y, public_size, eval_size, name, *, default_public=None, default_eval=None):
    n = len(x)
    if len(y) != n:
        raise ValueError(f"{name}: x has {n} rows but y has {len(y)}")
    eval_size = eval_size if eval_size is not None else (
        default_eval if default_eval is not None else max(1, n // 10))
    public_size = public_size if public_size is not None else (
        default_public if default_public is not None else max(1, n // 5))
    if public_size + eval_size >= n:
        raise ValueError(f"public_size + eval_size = {public_size} + {eval_size} leaves no private "
                         f"records out of {n} in {name}; choose smaller sizes")
    perm = np.random.default_rng(0).permutation(n)
    priv = perm[: n - public_size - eval_size]
    pub = perm[n - public_size - eval_size: n - eval_size]
    ev = perm[n - eval_size:]
    return ArraySplit(x[priv], y[priv]), ArraySplit(x[pub], y[pub]), ArraySplit(x[ev], y[ev])


def _num_classes(*ys) -> int:
    labels = np.concatenate([y[y >= 0] for y in ys])
    if labels.size == 0:
        raise ValueError("the dataset has no labels")
    if labels.min() < 0:
        raise ValueError("labels must be non-negative integers")
    return int(labels.max()) + 1


def load_pate_data(name: str, *, root: str | os.PathLike | None = None, download: bool = False,
                   public_size: int | None = None, eval_size: int | None = None,
                   image_size: int | tuple[int, int] | None = None) -> PateData:
    """Load dataset ``name`` and split it into private / public / evaluation (module docstring).

    ``image_size`` (``imagefolder:`` only): resize every image to ``(height, width)`` (an int
    ``s`` means ``(s, s)``); None keeps the size of the first image.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a dataset name string, got {describe(name)}")
    if name not in DATASET_NAMES and not name.startswith(_PREFIXES):
        raise ValueError(f"unknown dataset name {name!r}; use one of "
                         f"{', '.join(DATASET_NAMES)}, or npz:PATH, csv:PATH, imagefolder:PATH")
    if not isinstance(download, bool):
        raise TypeError(f"download must be True or False, got {describe(download)}")
    public_size = _check_size(public_size, "public_size")
    eval_size = _check_size(eval_size, "eval_size")
    image_size = _check_image_size(image_size)
    if image_size is not None and not name.startswith("imagefolder:"):
        raise ValueError(f"image_size={image_size} applies only to imagefolder:PATH datasets, not "
                         f"{name!r}; leave it unset")
    class_names = CLASS_NAMES.get(name)
    root_path = None if root is None else pathlib.Path(root).expanduser()
    if download and root_path is None:
        raise ValueError("download=True needs root (--data-root DIR): the directory to download into")

    if name in ("fashion-mnist", "mnist", "kmnist"):
        private, public, evaluation = _protocol_split(*_load_idx_dataset(name, root_path, download),
                                                      public_size, eval_size, name)
    elif name == "cifar10":
        private, public, evaluation = _protocol_split(*_load_cifar10(root_path, download),
                                                      public_size, eval_size, name)
    elif name == "svhn":
        private, public, evaluation = _protocol_split(*_load_svhn(root_path, download),
                                                      public_size, eval_size, name)
    elif name == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.images.astype(np.float32) / 16.0)[:, None]
        private, public, evaluation = _pool_split(
            x, digits.target.astype(np.int64), public_size, eval_size, name,
            default_public=_DIGITS_PUBLIC, default_eval=_DIGITS_EVAL)
    else:
        prefix, _, rest = name.partition(":")
        if not rest:
            raise ValueError(f"dataset {name!r} needs a path after '{prefix}:'")
        path = pathlib.Path(rest).expanduser()
        if prefix == "npz":
            kind, arrays, class_names = _load_npz(path)
        elif prefix == "csv":
            kind = "pool"
            arrays, class_names = _load_csv(path)
        else:
            kind, arrays, class_names = _load_imagefolder(path, image_size)
        if kind == "splits":
            if public_size is not None or eval_size is not None:
                raise ValueError(f"{name} already holds explicit splits; do not pass "
                                 "public_size/eval_size")
            xs = [np.asarray(a) for a in arrays]
            for key, a in zip(_NPZ_SPLIT_KEYS, xs):
                split = key.split("_", 1)[1]
                if key.startswith("x"):
                    check_features(a, f"{name}: {split} split ({key})")
                else:
                    check_labels(a, f"{name}: {split} split ({key})", unknown_ok=split == "public")
            private, public, evaluation = (ArraySplit(xs[0], xs[1]), ArraySplit(xs[2], xs[3]),
                                           ArraySplit(xs[4], xs[5]))
        elif kind == "train-test":
            private, public, evaluation = _protocol_split(*arrays, public_size, eval_size, name)
        else:  # one pool, checked before it is split (rows are the file's)
            check_features(arrays[0], f"{name}: x (the pool split into private/public/evaluation)")
            check_labels(arrays[1], f"{name}: y (the pool split into private/public/evaluation)")
            private, public, evaluation = _pool_split(np.asarray(arrays[0]), np.asarray(arrays[1]),
                                                      public_size, eval_size, name)

    shapes = {private.x.shape[1:], public.x.shape[1:], evaluation.x.shape[1:]}
    if len(shapes) != 1:
        raise ValueError(f"{name}: the splits have different input shapes {sorted(shapes)}")
    splits = {"private": private, "public": public, "evaluation": evaluation}
    for split, part in splits.items():  # every source (the files' arrays were checked above)
        check_features(part.x, f"{name}: {split} split")
        check_labels(part.y, f"{name}: {split} split", unknown_ok=split == "public")
    num_classes = _num_classes(private.y, public.y, evaluation.y)
    declared = None
    if class_names is not None:
        if name in CLASS_NAMES:  # fixed label -> name table; a small sample may lack the last
            class_names = class_names[:num_classes]
        elif len(class_names) < num_classes:
            raise ValueError(f"{name}: {len(class_names)} class names {list(class_names)} for "
                             f"labels up to {num_classes - 1}; give one name per class")
        else:  # the user declared the classes (folders, names): a class may have no records
            num_classes = declared = len(class_names)
        class_names = tuple(str(c) for c in class_names)
    check_classes(name, splits, num_classes, declared=declared)
    return PateData(name=name, private=private, public=public, evaluation=evaluation,
                    num_classes=num_classes, input_shape=tuple(int(s) for s in private.x.shape[1:]),
                    class_names=class_names)
