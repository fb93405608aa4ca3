"""The built-in datasets, read offline: Fashion-MNIST, MNIST, KMNIST (IDX files), CIFAR-10 (its
python batches), SVHN (its ``.mat`` files), each as ``(x_train, y_train, x_test, y_test)``, images
float32 in ``[0, 1]``; a missing one raises :class:`pate.teachers.errors.DatasetNotFoundError`
saying how to obtain it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import pickle

import numpy as np

from pate.analysis.errors import InputError
from pate.teachers.errors import DatasetNotFoundError

DEFAULT_FASHION_MNIST_DIR = pathlib.Path("/usr/share/datasets/fashion-mnist")
#: Names accepted by :func:`pate.teachers.data.load_pate_data` (plus the ``npz:``/``csv:``/
#: ``imagefolder:`` prefixes).
DATASET_NAMES = ("fashion-mnist", "mnist", "kmnist", "cifar10", "svhn", "digits")
_DIGIT_NAMES = tuple(str(i) for i in range(10))
#: The class names of the built-in datasets, in label order (torchvision's, digits as "0".."9").
CLASS_NAMES = {
    "fashion-mnist": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    "mnist": _DIGIT_NAMES,
    "kmnist": ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
    "cifar10": (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ),
    "svhn": _DIGIT_NAMES,
    "digits": _DIGIT_NAMES,
}


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
        raise InputError(f"{path} is not an IDX file (bad magic number)")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    code, ndim = raw[2], raw[3]
    if code not in dtypes:
        raise InputError(f"{path} has an unknown IDX type code {code:#x}")
    header = 4 + 4 * ndim
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">u4"))
    dtype = np.dtype(dtypes[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise InputError(
            f"{path} is truncated or corrupt: header says shape {shape} "
            f"({expected} bytes) but {len(raw) - header} bytes follow"
        )
    return (
        np.frombuffer(raw, dtype=dtype, offset=header)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def unit_float32(images: np.ndarray) -> np.ndarray:
    """uint8 images as float32 in [0, 1], bit for bit ``images.astype(np.float32) / 255.0``,
    written once into the result (no float32 temporary beside it)."""
    out = np.empty(images.shape, dtype=np.float32)
    np.divide(images, np.float32(255.0), out=out, dtype=np.float32)
    return out


_IDX_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_TV_CLASS = {
    "fashion-mnist": "FashionMNIST",
    "mnist": "MNIST",
    "kmnist": "KMNIST",
    "cifar10": "CIFAR10",
    "svhn": "SVHN",
}


def _how_to_get(name: str, root: pathlib.Path | None) -> str:
    where = f"--data-root {root}" if root is not None else "--data-root DIR"
    apt = (
        "install Debian's package (`apt-get install dataset-fashion-mnist`, files in "
        f"{DEFAULT_FASHION_MNIST_DIR}), or "
        if name == "fashion-mnist"
        else ""
    )
    return (
        f"To obtain {name}: {apt}point {where} at a torchvision root that holds it, or add "
        f"--download (download=True) to let torchvision fetch it into that root."
    )


def _root(name: str, root: pathlib.Path | None) -> pathlib.Path:
    if root is None:
        raise DatasetNotFoundError(f"{name} has no default location; " + _how_to_get(name, None))
    return root


def _download(name: str, root: pathlib.Path) -> None:
    import torchvision  # only when the user asked for a download

    cls = getattr(torchvision.datasets, _TV_CLASS[name])
    for train in (True, False):
        if name == "svhn":
            cls(str(root), split="train" if train else "test", download=True)
        else:
            cls(str(root), train=train, download=True)


def _fetched(name: str, root: pathlib.Path, download: bool, files: list[pathlib.Path]) -> None:
    """Let torchvision fetch dataset ``name`` into ``root`` where ``download`` and ``files`` are
    missing; refuse them still missing."""
    if download and not all(f.is_file() for f in files):
        _download(name, root)
    if not all(f.is_file() for f in files):
        raise DatasetNotFoundError(
            f"{name} files ({', '.join(f.name for f in files)}) not found in {files[0].parent}. "
            + _how_to_get(name, root)
        )


def _training_images(images: np.ndarray, cache, files: list[pathlib.Path], name: str):
    """The training split's uint8 ``images`` as float32 in ``[0, 1]``: with a ``cache``
    (:class:`pate.teachers.feature_cache.FeatureCache`) a read-only memory map of an entry keyed
    by the ``files`` they were read from (converted once, a chunk at a time; the training split
    is the private one), else in memory."""
    if cache is None:
        return unit_float32(images)
    from pate.teachers import cached_data
    from pate.teachers.feature_cache import file_digest

    h = hashlib.sha256(b"pate-learn built-in dataset files v1\0")
    for f in files:
        h.update(bytes.fromhex(file_digest(f)))
    settings = {"dataset": name, "split": "train", "scale": "uint8/255"}
    return cached_data.converted_rows(
        cache, images, unit_float32, digest=h.hexdigest(), settings=settings
    )


def load_idx_dataset(name: str, root: pathlib.Path | None, download: bool, *, cache=None):
    """Fashion-MNIST / MNIST / KMNIST from IDX files (Debian's folder or a torchvision root);
    with a ``cache`` the training images are memory-mapped from it (:func:`_training_images`)."""
    if root is None and name == "fashion-mnist":
        candidates = [DEFAULT_FASHION_MNIST_DIR]
    else:
        candidates = [_root(name, root) / _TV_CLASS[name] / "raw", root]
    for attempt in range(1 + download):
        if attempt:
            _download(name, root)
        for directory in candidates:
            found = [[directory / f"{s}.gz", directory / s] for s in _IDX_STEMS]
            paths = [next((p for p in pair if p.is_file()), None) for pair in found]
            if None not in paths:
                xtr, ytr, xte, yte = (read_idx(p) for p in paths)
                xtr = _training_images(xtr[:, None], cache, [paths[0]], name)
                return xtr, ytr, unit_float32(xte[:, None]), yte
    looked = ", ".join(str(d) for d in candidates)
    raise DatasetNotFoundError(
        f"{name} IDX files ({', '.join(s + '[.gz]' for s in _IDX_STEMS)}) "
        f"not found in {looked}. " + _how_to_get(name, root)
    )


def load_cifar10(root: pathlib.Path | None, download: bool, *, cache=None):
    """CIFAR-10 from the user's own python batches in ``root`` (the one pickle read: never a
    run directory's file)."""
    folder = _root("cifar10", root) / "cifar-10-batches-py"
    files = [folder / f"data_batch_{i}" for i in range(1, 6)] + [folder / "test_batch"]
    _fetched("cifar10", root, download, files)

    def read(path):
        with open(path, "rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        return (
            np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32),
            np.asarray(batch["labels"], dtype=np.int64),
        )

    parts = [read(f) for f in files[:5]]
    xtr = _training_images(np.concatenate([p[0] for p in parts]), cache, files[:5], "cifar10")
    ytr = np.concatenate([p[1] for p in parts])
    xte, yte = read(files[5])
    return xtr, ytr, unit_float32(xte), yte


def load_svhn(root: pathlib.Path | None, download: bool, *, cache=None):
    """SVHN from ``train_32x32.mat`` and ``test_32x32.mat`` in ``root`` (label 10 -> 0)."""
    files = [_root("svhn", root) / "train_32x32.mat", root / "test_32x32.mat"]
    _fetched("svhn", root, download, files)
    from scipy.io import loadmat

    out = []
    for f in files:
        mat = loadmat(str(f))
        x = np.transpose(mat["X"], (3, 2, 0, 1))
        x = _training_images(x, cache, [f], "svhn") if f == files[0] else unit_float32(x)
        y = mat["y"].astype(np.int64).reshape(-1)
        y[y == 10] = 0  # SVHN stores digit 0 as label 10 (torchvision does the same mapping)
        out += [x, y]
    return tuple(out)
