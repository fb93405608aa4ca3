"""The user's own image folder, ``imagefolder:PATH``, read with torchvision's ``ImageFolder``
(:func:`load_imagefolder`; the format: docs/teachers.md, "Data").
"""

from __future__ import annotations

import hashlib
import io
import logging
import pathlib
from typing import Any

import numpy as np

from pate.analysis.errors import InputError
from pate.analysis.validation import check_int, describe
from pate.teachers import cached_data
from pate.teachers.data_checks import DECLARE_CLASSES, NOTHING_DONE
from pate.teachers.errors import DatasetNotFoundError
from pate.teachers.own_data import unmarked_pool

logger = logging.getLogger("pate.teachers.data")


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
            raise InputError(
                f"image_size must be one integer or a (height, width) pair, got "
                f"{describe(image_size)}"
            )
        return (
            check_int(image_size[0], "image_size height", minimum=1),
            check_int(image_size[1], "image_size width", minimum=1),
        )
    side = check_int(image_size, "image_size", minimum=1)
    return side, side


def _image_folder(directory: pathlib.Path, classes: list[str] | None, source: str):
    """torchvision's ``ImageFolder`` over ``directory``, with ``classes`` (None: its own class
    folders); a class folder outside ``classes`` is refused by name."""
    from torchvision.datasets import ImageFolder

    class _Folder(ImageFolder):
        def find_classes(self, root):
            if classes is None:
                return super().find_classes(root)
            return list(classes), {c: i for i, c in enumerate(classes)}

    found = sorted(d.name for d in directory.iterdir() if d.is_dir())
    if not found:
        raise InputError(
            f"image folder {directory} has no class sub-directories; lay it out as "
            f"{directory}/<class>/<image>"
        )
    unknown = sorted(set(found) - set(classes or found))
    if unknown:
        raise InputError(
            f"{source}: the class folder {str(directory / unknown[0])!r} is outside the "
            f"declared classes {list(classes or [])} (declared, else the class folders of "
            f"test/, the public split); a label outside the declared set is refused: move "
            f"its images, or {DECLARE_CLASSES} ({NOTHING_DONE})"
        )
    folder = _Folder(
        str(directory),
        allow_empty=True,
        is_valid_file=lambda p: p.lower().endswith(IMAGE_EXTENSIONS),
    )
    if not folder.samples:
        raise InputError(
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
        raise _unreadable(path, exc) from None
    return (*header, hashlib.sha256(data).digest() if digest else None)


def _unreadable(path: str, exc: Exception) -> InputError:
    return InputError(
        f"image folder: {path} cannot be read as an image ({exc}); remove or replace it"
    )


def _decode(folder, order: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Decode the images ``order`` of ``folder`` (its transform set) into the rows of ``out``."""
    for row, i in enumerate(np.asarray(order).tolist()):
        try:
            out[row] = folder[i][0]
        except (OSError, ValueError) as exc:
            raise _unreadable(folder.samples[i][0], exc) from None
    return out


def _to_array(image) -> np.ndarray:
    """PIL image -> float32 ``(C, H, W)`` array in ``[0, 1]`` (``uint8 / 255``)."""
    arr = np.asarray(image, dtype=np.uint8)
    arr = arr[None] if arr.ndim == 2 else np.transpose(arr, (2, 0, 1))
    return arr.astype(np.float32) / 255.0


def load_imagefolder(
    path: pathlib.Path, image_size: tuple[int, int] | None, *, cache=None, classes=None
):
    """``("train-test", arrays, class_names)`` of ``PATH/train/<class>/<image>`` (private) and
    ``PATH/test/<class>/<image>`` (public and evaluation). The classes are ``classes``
    (declared), else the class folders of ``test/``; a training class outside them, or a single
    folder (:func:`unmarked_pool`), is refused. Each image is decoded straight into its row of
    one array per folder (with a ``cache``: into an entry of it, returned memory-mapped)."""
    if not path.is_dir():
        raise DatasetNotFoundError(
            f"image folder {path} does not exist; give imagefolder:PATH of a directory "
            "laid out as PATH/train/<class>/<image> and PATH/test/<class>/<image>"
        )
    from torchvision import transforms

    source = f"imagefolder:{path}"
    if not ((path / "train").is_dir() and (path / "test").is_dir()):
        raise unmarked_pool(
            source,
            f"Lay it out as {path}/train/<class>/<image> (the private records) and "
            f"{path}/test/<class>/<image> (public images, used without protection, and the "
            f"evaluation images)",
        )
    test = _image_folder(path / "test", classes, source)
    classes = list(test.classes)
    folders = [_image_folder(path / "train", classes, source), test]
    # the file digests only where a cache keys on them (the files are read once either way)
    scanned = [[_image_header(p, digest=cache is not None) for p, _ in f.samples] for f in folders]
    mode = "L" if all(m in _GREY_MODES for h in scanned for m, _, _ in h) else "RGB"
    size = image_size if image_size is not None else scanned[0][0][1]
    transform = transforms.Compose(
        [transforms.Lambda(lambda im: im.convert(mode)), transforms.Resize(size), _to_array]
    )
    arrays = []
    for folder, files in zip(folders, scanned):
        folder.transform = transform
        n = len(folder.samples)
        if cache is None:
            out = np.empty((n, 1 if mode == "L" else 3, *size), np.float32)
            xs = _decode(folder, np.arange(n), out)
        else:
            digests = [digest for _, _, digest in files]
            xs = cached_data.decoded_images(
                cache, folder, digests, mode=mode, size=size, decode=_decode
            )
        arrays += [xs, np.asarray(folder.targets, dtype=np.int64)]
    logger.info(
        "imagefolder %s: %d images, %d classes, %s %dx%d",
        path,
        sum(len(f.samples) for f in folders),
        len(classes),
        mode,
        size[0],
        size[1],
    )
    return "train-test", tuple(arrays), classes
