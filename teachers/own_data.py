"""The user's own data files: ``npz:PATH``, ``csv:PATH`` and ``imagefolder:PATH`` (the formats are
described in :mod:`pate.teachers.data`, which splits what these return).

Symbols
-------
``load_npz(path, *, cache=None, pool_order=None, source=None)``: ``(kind, arrays, class_names)``,
kind ``"splits"`` (six arrays), ``"pool"`` or ``"pool-in-order"`` (through the cache).
``load_csv(path)``: ``((features, labels), class_names)``; every value checked, rows and columns
named as in the file.
``load_imagefolder(path, image_size, *, pool_order, cache=None)``: ``(kind, arrays,
class_names)``, kind ``"pool"``, ``"pool-in-order"`` (the pool's rows already in ``pool_order``)
or ``"train-test"``; torchvision's ``ImageFolder``, one colour mode, one size.
``check_image_size(image_size)``: an int or ``(height, width)`` as ``(height, width)``.
``IMAGE_EXTENSIONS``: the file suffixes ``imagefolder:`` reads.
Messages go to the ``logging`` logger ``"pate.teachers.data"``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import pathlib
from typing import Any

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.mapped import npz_member_map
from pate.analysis.validation import check_int, describe
from pate.teachers import cached_data
from pate.teachers.data_checks import NOTHING_DONE, check_features, check_labels
from pate.teachers.errors import DatasetNotFoundError

__all__ = ["load_npz", "load_csv", "load_imagefolder", "check_image_size", "IMAGE_EXTENSIONS"]

logger = logging.getLogger("pate.teachers.data")

_LABEL_COLUMNS = ("label", "y", "target", "class")


def load_npz(path: pathlib.Path, *, cache=None, pool_order=None, source: str | None = None):
    """``(kind, arrays, class_names)`` of an ``.npz`` (module docstring). The private images are
    memory-mapped where stored uncompressed as float32; otherwise, with a ``cache``
    (:class:`pate.teachers.feature_cache.FeatureCache`), they are written into it as float32 and
    mapped from there, and a pool ``x`` is written in ``pool_order`` (``n -> permutation``; kind
    ``"pool-in-order"``, its labels checked before they are put in that order); without one they
    are read into memory. ``source`` names the data in messages (default ``npz:PATH``)."""
    source = source or f"npz:{path}"
    if not path.is_file():
        raise DatasetNotFoundError(
            f"npz file {path} does not exist; give npz:PATH of an existing "
            "file with arrays x, y (or x_private, y_private, x_public, "
            "x_evaluation, y_evaluation)"
        )
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
        names = None
        if "class_names" in keys:
            raw = npz["class_names"]
            if raw.ndim != 1 or raw.dtype.kind not in "US":
                raise ValueError(
                    f"npz file {path}: class_names must be a 1-D array of strings, "
                    f"got dtype {raw.dtype} and shape {raw.shape}"
                )
            names = [str(v) for v in raw.astype(str)]
        split_keys = {"x_private", "y_private", "x_public", "x_evaluation", "y_evaluation"}
        if split_keys <= keys:
            xp = npz["x_public"]
            yp = npz["y_public"] if "y_public" in keys else np.full(len(xp), -1, dtype=np.int64)
            return (
                "splits",
                (
                    # memory-mapped where stored uncompressed: the private split is read a block
                    # at a time by whatever scans it, never held whole (issue #33)
                    _private_images(npz, path, cache, f"{source}: private split (x_private)"),
                    npz["y_private"],
                    xp,
                    yp,
                    npz["x_evaluation"],
                    npz["y_evaluation"],
                ),
                names,
            )
        if {"x", "y"} <= keys:
            y = npz["y"]
            if cache is not None and pool_order is not None and y.ndim == 1:
                x = _pool_in_order(cache, path, y, pool_order, source)
                if x is not None:
                    return "pool-in-order", (x, y[pool_order(len(y))]), names
            return "pool", (npz["x"], y), names
    raise ValueError(
        f"npz file {path} must hold arrays x, y or x_private, y_private, x_public, "
        f"x_evaluation, y_evaluation; it has {sorted(keys)}"
    )


def _private_images(npz, path: pathlib.Path, cache, what: str):
    mapped = npz_member_map(path, "x_private")
    if mapped is not None and mapped.dtype == np.float32 and mapped.flags.c_contiguous:
        return mapped
    if cache is not None:
        rows = cached_data.npz_rows(cache, path, "x_private", what=what)
        if rows is not None:
            return rows
    return npz["x_private"] if mapped is None else mapped


def _pool_in_order(cache, path: pathlib.Path, y: np.ndarray, pool_order, source: str):
    """A pool's ``x`` in ``pool_order`` through the cache (None: read it the usual way); its
    labels are checked first, so that an error names the file's row."""
    what = f"{source}: {{}} (the pool split into private/public/evaluation)"
    check_labels(y, what.format("y"))
    return cached_data.npz_rows(cache, path, "x", order=pool_order(len(y)), what=what.format("x"))


def _csv_rows(path: pathlib.Path):
    """The file's rows that hold a value (lists of cells), read one at a time."""
    with open(path, newline="") as fh:
        for row in csv.reader(fh):
            if row and any(c.strip() for c in row):
                yield row


def _csv_layout(path: pathlib.Path):
    """``(header or None, label column, columns, rows with the header)`` of a csv file: the
    first pass, which also refuses a ragged row and a file without records."""
    first = next(_csv_rows(path), None)
    if first is None:
        raise ValueError(f"csv file {path} is empty")

    def numeric(row):
        try:
            [float(c) for c in row]
            return True
        except ValueError:
            return False

    header = None if numeric(first) else [c.strip() for c in first]
    label_col = len(first) - 1
    if header is not None:
        lowered = [h.lower() for h in header]
        for name in _LABEL_COLUMNS:
            if name in lowered:
                label_col = lowered.index(name)
                break
    width = len(first)
    rows = 0
    for k, r in enumerate(_csv_rows(path)):  # k + 1: the row's number (header = row 1)
        if len(r) != width:
            raise ValueError(f"csv file {path}: row {k + 1} has {len(r)} columns, expected {width}")
        rows += 1
    if rows == (header is not None):
        raise ValueError(f"csv file {path} has a header row and no records")
    return header, label_col, width, rows


def load_csv(path: pathlib.Path):
    """Two passes over the file, a row at a time: the first finds the header, the label column
    and the number of rows, the second writes the features into one preallocated array (never
    every cell as a string: those took ~10x the array's memory)."""
    if not path.is_file():
        raise DatasetNotFoundError(
            f"csv file {path} does not exist; give csv:PATH of an existing "
            "file with numeric feature columns and a label column"
        )
    header, label_col, width, rows = _csv_layout(path)
    skip = header is not None
    labels: list[str] = []
    # float64 first: a value beyond float32's range is refused by name, not read as inf
    feats = np.empty((rows - skip, width - 1), dtype=np.float64)
    for k, r in enumerate(_csv_rows(path)):
        if k < skip:
            continue
        if k >= rows or len(r) != width:
            raise ValueError(f"csv file {path} changed while it was read; read it again")
        labels.append(r[label_col].strip())
        try:
            feats[k - skip] = [float(c) for j, c in enumerate(r) if j != label_col]
        except ValueError as exc:
            raise ValueError(
                f"csv file {path}: feature columns must be numeric ({exc}); encode "
                "categorical features first"
            ) from None
    if len(labels) != rows - skip:
        raise ValueError(f"csv file {path} changed while it was read; read it again")
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
            raise InputError(
                f"{what}: {where(as_num.shape, (int(bad[0]),))} is "
                f"{labels[bad[0]]!r}, not an integer class index; numeric labels "
                f"must be class indices 0, 1, ..., K-1 ({NOTHING_DONE})"
            )
        if as_num.min() >= 0:
            check_labels(as_num, what, where=where)  # an absurd index, before the int cast
            y = as_num.astype(np.int64)
    if y is None:  # class names (or negative numbers such as -1/1): sorted into indices
        classes = sorted(set(labels))
        lookup = {c: i for i, c in enumerate(classes)}
        y = np.array([lookup[v] for v in labels], dtype=np.int64)
    return (feats, y), classes


#: File suffixes read as images by ``imagefolder:`` (case-insensitive; other files are skipped).
IMAGE_EXTENSIONS = (
    ".png",
    ".jpg",
    ".jpeg",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".ppm",
    ".pgm",
)
#: PIL modes read as one greyscale channel; any other mode makes the dataset RGB.
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})


def check_image_size(image_size) -> tuple[int, int] | None:
    """``image_size`` as ``(height, width)``: an int ``s`` means ``(s, s)``; None stays None."""
    if image_size is None:
        return None
    if isinstance(image_size, (list, tuple)):
        if len(image_size) != 2:
            raise ValueError(
                f"image_size must be one integer or a (height, width) pair, got "
                f"{describe(image_size)}"
            )
        return (
            check_int(image_size[0], "image_size height", minimum=1),
            check_int(image_size[1], "image_size width", minimum=1),
        )
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
        raise ValueError(
            f"image folder {directory} has no class sub-directories; lay it out as "
            f"{directory}/<class>/<image>"
        )
    unknown = set(found) - set(classes or found)
    if unknown:
        raise ValueError(
            f"image folder {directory} has classes {sorted(unknown)} that the "
            f"training folder lacks; every test class must have a training folder"
        )
    folder = _Folder(
        str(directory),
        allow_empty=True,
        is_valid_file=lambda p: p.lower().endswith(IMAGE_EXTENSIONS),
    )
    if not folder.samples:
        raise ValueError(
            f"image folder {directory} holds no images (suffixes read: "
            f"{', '.join(IMAGE_EXTENSIONS)})"
        )
    return folder


def _image_header(path: str, *, digest: bool = False):
    """``(mode, (height, width), sha256 of the file's bytes or None)`` of one image file."""
    from PIL import Image, UnidentifiedImageError

    try:
        if digest:
            with open(path, "rb") as fh:
                data = fh.read()
            source: Any = io.BytesIO(data)
        else:
            source = path
        with Image.open(source) as im:
            header = im.mode, (int(im.height), int(im.width))
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(
            f"image folder: {path} cannot be read as an image ({exc}); remove or replace it"
        ) from None
    return (*header, hashlib.sha256(data).digest() if digest else None)


def _decode(folder, order: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Decode the images ``order`` of ``folder`` (its transform set) into the rows of ``out``."""
    for row, i in enumerate(np.asarray(order).tolist()):
        try:
            out[row] = folder[i][0]
        except (OSError, ValueError) as exc:
            raise InputError(
                f"image folder: {folder.samples[i][0]} cannot be read as an image ({exc}); "
                "remove or replace it"
            ) from None
    return out


class _ToArray:
    """PIL image -> float32 ``(C, H, W)`` array in ``[0, 1]`` (``uint8 / 255``)."""

    def __call__(self, image) -> np.ndarray:
        arr = np.asarray(image, dtype=np.uint8)
        arr = arr[None] if arr.ndim == 2 else np.transpose(arr, (2, 0, 1))
        return arr.astype(np.float32) / 255.0


def load_imagefolder(
    path: pathlib.Path, image_size: tuple[int, int] | None, *, pool_order=None, cache=None
):
    """Read ``PATH/<class>/<image>`` (or ``PATH/train`` + ``PATH/test``) with torchvision's
    ``ImageFolder``; returns ``(kind, arrays, class_names)``.

    Each image is decoded straight into its row of one preallocated array per folder (never a
    list of images and a stacked copy of it). ``pool_order`` (``n -> permutation of range(n)``,
    for a single pool folder only): row ``j`` of the pool is its image ``pool_order(n)[j]`` and the
    kind is ``"pool-in-order"``, so that a split in that order is three slices of one array.

    Every image is converted to one colour mode -- greyscale ``L`` (1 channel) when all images
    of the dataset are greyscale, else ``RGB`` (3 channels; greyscale images are replicated,
    alpha is dropped) -- and resized (bilinear, antialiased, aspect ratio not kept) to
    ``image_size`` = ``(height, width)``; by default the size of the first image (first class
    in sorted order, first file in sorted order, of ``train/`` when there is one). An image
    already of that size is not resampled, so a folder of same-size images reads exactly.

    ``cache`` (a :class:`pate.teachers.feature_cache.FeatureCache`, or None): each folder's
    images are decoded a chunk at a time into an entry of the cache and returned as its
    read-only memory map, so that memory stays bounded by a chunk and a later run (or stage) on
    the same files skips the decoding. The entry's key is the sha256 of the files' bytes in row
    order with the mode and size (a copied folder hits; an edited image misses); without a
    cache every image is decoded into one in-memory array.
    """
    if not path.is_dir():
        raise DatasetNotFoundError(
            f"image folder {path} does not exist; give imagefolder:PATH "
            "of a directory laid out as PATH/<class>/<image>"
        )
    from torchvision import transforms

    split = (path / "train").is_dir() and (path / "test").is_dir()
    folders = [_image_folder(path / "train", None)] if split else [_image_folder(path, None)]
    classes = list(folders[0].classes)
    if split:
        folders.append(_image_folder(path / "test", classes))
    # the file digests only where a cache keys on them (the files are read once either way)
    scanned = [[_image_header(p, digest=cache is not None) for p, _ in f.samples] for f in folders]
    mode = "L" if all(m in _GREY_MODES for h in scanned for m, _, _ in h) else "RGB"
    size = image_size if image_size is not None else scanned[0][0][1]
    transform = transforms.Compose(
        [transforms.Lambda(lambda im: im.convert(mode)), transforms.Resize(size), _ToArray()]
    )
    arrays = []
    for folder, files in zip(folders, scanned):
        folder.transform = transform
        n = len(folder.samples)
        order = np.arange(n) if split or pool_order is None else np.asarray(pool_order(n))
        ys = np.asarray(folder.targets, dtype=np.int64)[order]
        if cache is None:
            xs = _decode(folder, order, np.empty((n, 1 if mode == "L" else 3, *size), np.float32))
        else:
            xs = cached_data.decoded_images(
                cache,
                folder,
                order,
                [files[i][2] for i in order],
                mode=mode,
                size=size,
                decode=_decode,
            )
        arrays += [xs, ys]
    logger.info(
        "imagefolder %s: %d images, %d classes, %s %dx%d",
        path,
        sum(len(f.samples) for f in folders),
        len(classes),
        mode,
        size[0],
        size[1],
    )
    kind = "train-test" if split else ("pool" if pool_order is None else "pool-in-order")
    return kind, tuple(arrays), classes
