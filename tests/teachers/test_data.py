"""Dataset loaders: IDX parsing, torchvision layout, PATE split sizes, user formats, errors."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from pate.analysis.errors import InputError
from pate.teachers.builtin_datasets import read_idx
from pate.teachers.data import ArraySplit, load_pate_data
from pate.teachers.errors import DatasetNotFoundError


def _write_idx(path, array, *, compress=True):
    array = np.asarray(array, dtype=np.uint8)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    data = header + array.tobytes()
    if compress:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


def _fake_mnist_root(tmp_path, folder="FashionMNIST", n_train=30, n_test=25, compress=True):
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) * 3) % 10,
    }
    for stem, arr in arrays.items():
        _write_idx(raw / (stem + (".gz" if compress else "")), arr, compress=compress)
    return arrays


@pytest.mark.parametrize("compress", [True, False])
def test_read_idx_round_trip(tmp_path, compress):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.gz" if compress else "a")
    _write_idx(path, arr, compress=compress)
    out = read_idx(path)
    assert out.shape == (2, 3, 4) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="magic"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(struct.pack(">BBBBI", 0, 0, 8, 1, 10) + b"\x00" * 3)
    with pytest.raises(ValueError, match="truncated"):
        read_idx(short)


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_from_torchvision_root(tmp_path, compress):
    arrays = _fake_mnist_root(tmp_path, compress=compress)
    data = load_pate_data("fashion-mnist", root=tmp_path, public_size=15, eval_size=5)
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10
    assert len(data.private) == 30 and len(data.public) == 15 and len(data.evaluation) == 5
    assert data.private.x.dtype == np.float32 and data.private.y.dtype == np.int64
    assert 0.0 <= data.private.x.min() and data.private.x.max() <= 1.0
    test_x = arrays["t10k-images-idx3-ubyte"].astype(np.float32) / 255
    np.testing.assert_allclose(data.public.x[:, 0], test_x[:15])  # first public_size items
    np.testing.assert_allclose(data.evaluation.x[:, 0], test_x[-5:])  # last eval_size items
    np.testing.assert_array_equal(data.private.y, arrays["train-labels-idx1-ubyte"])


def test_protocol_split_sizes_are_checked(tmp_path):
    _fake_mnist_root(tmp_path, folder="MNIST")
    with pytest.raises(ValueError, match="exceeds the 25 test items"):
        load_pate_data("mnist", root=tmp_path, public_size=20, eval_size=10)


def test_default_fashion_mnist_location_is_debian_package():
    import pathlib

    if not pathlib.Path("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").exists():
        pytest.skip("dataset-fashion-mnist not installed")
    data = load_pate_data("fashion-mnist", public_size=50, eval_size=20)
    assert len(data.private) == 60000 and len(data.public) == 50 and len(data.evaluation) == 20


def test_missing_dataset_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_pate_data("fashion-mnist", root=tmp_path)
    msg = str(err.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "--download" in msg
    with pytest.raises(DatasetNotFoundError, match="--download"):
        load_pate_data("cifar10", root=tmp_path)
    with pytest.raises(DatasetNotFoundError, match="no default location"):
        load_pate_data("svhn")
    with pytest.raises(ValueError, match="needs root"):
        load_pate_data("mnist", download=True)


def test_digits_split():
    data = load_pate_data("digits")
    assert (len(data.private), len(data.public), len(data.evaluation)) == (1000, 597, 200)
    assert data.input_shape == (1, 8, 8) and data.num_classes == 10
    assert data.private.x.max() <= 1.0 and data.private.x.min() >= 0.0
    # the fixed permutation is the same every call, and the splits are disjoint
    again = load_pate_data("digits")
    np.testing.assert_array_equal(again.public.x, data.public.x)
    rows = np.concatenate(
        [s.x.reshape(len(s), -1) for s in (data.private, data.public, data.evaluation)]
    )
    assert len(rows) == 1797


def _marks(n, public, evaluation=0):
    """Split marks of a pool of ``n`` rows: private first, then ``public``, then ``evaluation``."""
    return np.array(
        ["private"] * (n - public - evaluation) + ["public"] * public + ["evaluation"] * evaluation
    )


def test_npz_splits_and_pool(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "d.npz"
    np.savez(
        path,
        x_private=rng.random((40, 5)),
        y_private=np.arange(40) % 3,
        x_public=rng.random((10, 5)),
        x_evaluation=rng.random((8, 5)),
        y_evaluation=np.arange(8) % 3,
    )
    with pytest.raises(InputError, match=r"classes is not declared.*\[data\] classes"):
        load_pate_data(f"npz:{path}")  # unlabelled public split: nothing declares the classes
    data = load_pate_data(f"npz:{path}", classes=["a", "b", "c"])
    assert len(data.private) == 40 and data.num_classes == 3 and data.input_shape == (5,)
    assert np.all(data.public.y == -1)  # unlabelled public split
    # an evaluation split of its own is the user's data: internal unless declared public
    assert not data.evaluation_public and data.public_from_pool == 0
    declared = load_pate_data(f"npz:{path}", classes=["a", "b", "c"], evaluation_public=True)
    assert declared.evaluation_public
    pool = tmp_path / "p.npz"
    np.savez(pool, x=rng.random((100, 4)), y=np.arange(100) % 2, split=_marks(100, 30, 10))
    data = load_pate_data(f"npz:{pool}")
    assert (len(data.private), len(data.public), len(data.evaluation)) == (60, 30, 10)
    assert not data.evaluation_public and data.public_from_pool == 30
    assert load_pate_data(f"npz:{pool}", evaluation_public=True).evaluation_public
    with pytest.raises(ValueError, match="do not pass public_size"):
        load_pate_data(f"npz:{pool}", public_size=60, eval_size=40)


def test_csv_with_header_and_string_labels(tmp_path):
    path = tmp_path / "t.csv"
    marks = _marks(50, 10, 5)
    lines = ["age,income,label,split"] + [
        f"{i},{i * 2.5},{'yes' if i % 2 else 'no'},{marks[i]}" for i in range(50)
    ]
    path.write_text("\n".join(lines) + "\n")
    data = load_pate_data(f"csv:{path}")
    assert data.input_shape == (2,) and data.num_classes == 2
    assert len(data.private) == 35 and data.class_names == ("no", "yes")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,label,split\n1,x,0,private\n2,3,1,public\n")
    with pytest.raises(ValueError, match="numeric"):
        load_pate_data(f"csv:{bad}")


def test_imagefolder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(2)
    for split, n in (("train", 7), ("test", 5)):
        for cls in ("cat", "dog"):
            (tmp_path / "imgs" / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                    tmp_path / "imgs" / split / cls / f"{i}.png"
                )
    data = load_pate_data(f"imagefolder:{tmp_path / 'imgs'}", public_size=6, eval_size=4)
    assert data.input_shape == (3, 8, 8) and data.num_classes == 2 and len(data.private) == 14
    assert data.class_names == ("cat", "dog") and not data.evaluation_public  # not declared


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dataset"):
        load_pate_data("imagenet")
    with pytest.raises(TypeError):
        load_pate_data(3)
    with pytest.raises(ValueError, match="public_size"):
        load_pate_data("digits", public_size=0)
    with pytest.raises(DatasetNotFoundError):
        load_pate_data("npz:/nonexistent/file.npz")
    with pytest.raises(ValueError, match="shape"):
        ArraySplit(np.zeros((3, 2)), np.zeros(4))


# --------------------------------------------------------------------------- imagefolder

# Solid-colour images: a class's pixels are known exactly whatever the resize does.
_ANT, _BEE, _CAT_RGB, _CAT_GREY = (200, 10, 10), 77, (0, 128, 255), 128


def _solid(path, size_wh, colour):
    from PIL import Image

    mode = "L" if isinstance(colour, int) else "RGB"
    Image.new(mode, size_wh, colour).save(path)


def _mixed_folder(root, *, with_grey_cat=True):
    """3 classes; sizes (w x h) 20x30, 40x40, 33x17; ant RGB, bee greyscale, cat both."""
    sizes = [(20, 30), (40, 40), (33, 17)]
    for cls in ("ant", "bee", "cat"):
        (root / cls).mkdir(parents=True)
    for i in range(6):
        size = sizes[i % 3]
        _solid(root / "ant" / f"{i}.png", size, _ANT)
        _solid(root / "bee" / f"{i}.png", size, _BEE)
        grey = with_grey_cat and i % 2 == 1
        _solid(root / "cat" / f"{i}.png", size, _CAT_GREY if grey else _CAT_RGB)
    (root / "cat" / "notes.txt").write_text("not an image")  # skipped: not an image suffix
    return 18


def _mixed_train_test(root):
    """:func:`_mixed_folder` as ``root/train`` (private) and again as ``root/test`` (public)."""
    _mixed_folder(root / "train")
    return _mixed_folder(root / "test")


def _expected_colours(label):
    return {0: {_ANT}, 1: {(_BEE,) * 3}, 2: {_CAT_RGB, (_CAT_GREY,) * 3}}[label]


def _check_solid(data):
    for split in (data.private, data.public, data.evaluation):
        for x, y in zip(split.x, split.y):
            colour = tuple(int(round(v)) for v in x[:, 0, 0] * 255)
            assert colour in _expected_colours(int(y)), (int(y), colour)
            np.testing.assert_array_equal(x, x[:, :1, :1] * np.ones_like(x))  # still solid


def test_imagefolder_mixed_sizes_and_modes(tmp_path):
    n = 2 * _mixed_train_test(tmp_path / "imgs")
    data = load_pate_data(f"imagefolder:{tmp_path / 'imgs'}", public_size=4, eval_size=3)
    # default size: the first image (ant/0.png, 20 wide x 30 high); colour as one image is RGB
    assert data.input_shape == (3, 30, 20)
    assert {s.x.shape[1:] for s in (data.private, data.public, data.evaluation)} == {(3, 30, 20)}
    assert data.class_names == ("ant", "bee", "cat") and data.num_classes == 3
    labels = np.concatenate([data.private.y, data.public.y, data.evaluation.y])
    assert len(labels) == 18 + 7 and np.bincount(labels[:18]).tolist() == [6, 6, 6] and n == 36
    assert data.private.x.dtype == np.float32
    assert 0.0 <= data.private.x.min() <= data.private.x.max() <= 1.0
    _check_solid(data)

    square = load_pate_data(
        f"imagefolder:{tmp_path / 'imgs'}", public_size=4, eval_size=3, image_size=16
    )
    assert square.input_shape == (3, 16, 16)
    _check_solid(square)
    np.testing.assert_array_equal(square.private.y, data.private.y)  # same split, other size
    wide = load_pate_data(
        f"imagefolder:{tmp_path / 'imgs'}", public_size=4, eval_size=3, image_size=(12, 20)
    )
    assert wide.input_shape == (3, 12, 20)


def test_imagefolder_all_greyscale_stays_one_channel(tmp_path):
    for split in ("train", "test"):
        for cls, value in (("dark", 30), ("light", 220)):
            (tmp_path / "g" / split / cls).mkdir(parents=True)
            for i, size in enumerate([(10, 10), (7, 13), (21, 9), (10, 10)]):
                _solid(tmp_path / "g" / split / cls / f"{i}.png", size, value)
    data = load_pate_data(f"imagefolder:{tmp_path / 'g'}", public_size=2, eval_size=2, image_size=8)
    assert data.input_shape == (1, 8, 8) and data.class_names == ("dark", "light")
    for split in (data.private, data.public, data.evaluation):
        for x, y in zip(split.x, split.y):
            np.testing.assert_array_equal(x, np.float32((30, 220)[y]) / np.float32(255.0))


def test_imagefolder_same_size_images_read_exactly(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(5)
    pixels = {}
    for split in ("train", "test"):
        for cls in ("a", "b"):
            (tmp_path / "f" / split / cls).mkdir(parents=True)
            for i in range(5):
                arr = rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)
                Image.fromarray(arr).save(tmp_path / "f" / split / cls / f"{i}.png")
                pixels[arr.tobytes()] = cls
    data = load_pate_data(f"imagefolder:{tmp_path / 'f'}", public_size=2, eval_size=2)
    assert data.input_shape == (3, 6, 9)
    for split in (data.private, data.public, data.evaluation):
        for x, y in zip(split.x, split.y):
            raw = np.round(np.transpose(x, (1, 2, 0)) * 255).astype(np.uint8).tobytes()
            assert pixels[raw] == data.class_names[y]
            assert np.array_equal(x * np.float32(255), np.round(x * 255))  # exact uint8 / 255


def test_a_single_image_folder_is_refused_not_split_into_public_images(tmp_path):
    """Issue #48: a single folder was split with seed 0 into "public" images of the user's
    sensitive folder; the train/test layout says which images are public."""
    _mixed_folder(tmp_path / "pool")
    with pytest.raises(InputError, match=r"no marking of which rows are public.*/train/<class>"):
        load_pate_data(f"imagefolder:{tmp_path / 'pool'}")


def test_imagefolder_train_test_layout(tmp_path):
    _mixed_folder(tmp_path / "tt" / "train")
    (tmp_path / "tt" / "test" / "bee").mkdir(parents=True)  # a test split may lack a class
    (tmp_path / "tt" / "test" / "cat").mkdir()
    for i, size in enumerate([(5, 5), (50, 25), (9, 31), (12, 12)]):
        _solid(
            tmp_path / "tt" / "test" / ("bee" if i % 2 else "cat") / f"{i}.png",
            size,
            _BEE if i % 2 else _CAT_RGB,
        )
    with pytest.raises(InputError, match=r"class folder .*ant'? is outside the declared"):
        load_pate_data(f"imagefolder:{tmp_path / 'tt'}", public_size=3, eval_size=1)
    abc = ["ant", "bee", "cat"]  # declared: the test folders alone lack "ant"
    data = load_pate_data(
        f"imagefolder:{tmp_path / 'tt'}",
        public_size=3,
        eval_size=1,
        image_size=(10, 14),
        classes=abc,
    )
    assert data.input_shape == (3, 10, 14) and data.class_names == ("ant", "bee", "cat")
    assert len(data.private) == 18 and len(data.public) == 3 and len(data.evaluation) == 1
    # test labels follow the training folder's class indices, not the test folder's own
    assert sorted(np.concatenate([data.public.y, data.evaluation.y]).tolist()) == [1, 1, 2, 2]
    _check_solid(data)

    (tmp_path / "tt" / "test" / "dog").mkdir()
    _solid(tmp_path / "tt" / "test" / "dog" / "0.png", (8, 8), _ANT)
    with pytest.raises(InputError, match="dog"):
        load_pate_data(f"imagefolder:{tmp_path / 'tt'}", public_size=3, eval_size=1, classes=abc)


def test_imagefolder_errors(tmp_path):
    from pate.analysis.errors import InputError

    with pytest.raises(DatasetNotFoundError, match="imagefolder:PATH"):
        load_pate_data(f"imagefolder:{tmp_path / 'missing'}")
    (tmp_path / "empty" / "train").mkdir(parents=True)
    (tmp_path / "empty" / "test").mkdir()
    with pytest.raises(ValueError, match="no class sub-directories"):
        load_pate_data(f"imagefolder:{tmp_path / 'empty'}")
    (tmp_path / "empty" / "test" / "a").mkdir()
    with pytest.raises(ValueError, match="holds no images"):
        load_pate_data(f"imagefolder:{tmp_path / 'empty'}")
    _mixed_train_test(tmp_path / "bad")
    (tmp_path / "bad" / "train" / "bee" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(InputError, match="broken.png"):
        load_pate_data(f"imagefolder:{tmp_path / 'bad'}")
    good = f"imagefolder:{tmp_path / 'empty'}"
    with pytest.raises(ValueError, match="image_size"):
        load_pate_data(good, image_size=0)
    with pytest.raises(ValueError, match="image_size"):
        load_pate_data(good, image_size=(8, 8, 3))
    with pytest.raises(TypeError, match="image_size"):
        load_pate_data(good, image_size=7.5)
    with pytest.raises(ValueError, match="image_size.*imagefolder"):
        load_pate_data("digits", image_size=8)


def test_class_names():
    digits = load_pate_data("digits")
    assert digits.class_names == tuple(str(i) for i in range(10)) and digits.num_classes == 10


def test_class_names_of_user_files(tmp_path):
    marks = _marks(30, 6, 5)
    rows = ["f1,f2,label,split"] + [
        f"{i},{i % 3},{('setosa', 'virginica', 'versicolor')[i % 3]},{marks[i]}" for i in range(30)
    ]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    data = load_pate_data(f"csv:{tmp_path / 't.csv'}")  # the public rows' labels, sorted
    assert data.class_names == ("setosa", "versicolor", "virginica")
    numeric = tmp_path / "n.csv"
    numeric.write_text(
        "a,label,split\n" + "\n".join(f"{i},{i % 2},{_marks(20, 4, 4)[i]}" for i in range(20))
    )
    assert load_pate_data(f"csv:{numeric}").class_names == ("0", "1")
    declared = load_pate_data(f"csv:{numeric}", classes=["benign", "malignant"])
    assert declared.class_names == ("benign", "malignant")  # numeric labels index the names

    x, y = np.random.default_rng(0).random((40, 4)), np.arange(40) % 2
    np.savez(
        tmp_path / "named.npz",
        x=x,
        y=y,
        split=_marks(40, 5, 5),
        class_names=np.array(["no", "yes", "maybe"]),
    )
    named = load_pate_data(f"npz:{tmp_path / 'named.npz'}")
    assert named.class_names == ("no", "yes", "maybe") and named.num_classes == 3
    np.savez(tmp_path / "short.npz", x=x, y=y, split=_marks(40, 5, 5), class_names=["only"])
    with pytest.raises(InputError, match="row 1 has label 1, outside the declared 1 classes"):
        load_pate_data(f"npz:{tmp_path / 'short.npz'}")


# --------------------------------------------------------------------------- input checks
# Issue #30: bad input used to be trained on and charged (NaN features, a label of 10**7 sized
# every vote histogram for 10**7 + 1 classes, a label 2.5 was truncated to 2). Every source is
# now refused at load time, naming the split, the row (and column) and the value.


def _splits_npz(path, **replace):
    rng = np.random.default_rng(2)
    arrays = dict(
        x_private=rng.random((40, 5)),
        y_private=np.arange(40) % 3,
        x_public=rng.random((10, 5)),
        x_evaluation=rng.random((8, 5)),
        y_evaluation=np.arange(8) % 3,
    )
    arrays.update(replace)
    np.savez(path, **arrays)
    return f"npz:{path}"


@pytest.mark.parametrize("split, size", [("private", 40), ("public", 10), ("evaluation", 8)])
@pytest.mark.parametrize(
    "value, kind",
    [(np.nan, "a missing value"), (-np.inf, "infinite"), (1e39, "beyond float32's range")],
)
def test_non_finite_features_are_refused_naming_split_row_column_and_value(
    tmp_path, split, size, value, kind
):
    x = np.random.default_rng(3).random((size, 5))
    x[6, 4] = value
    x[7, 0] = np.nan
    source = _splits_npz(tmp_path / "d.npz", **{f"x_{split}": x})
    with pytest.raises(InputError) as caught:
        load_pate_data(source)
    message = str(caught.value)
    assert (
        f"{split} split (x_{split}): row 6, column 4 is {value!r} ({kind}; 2 non-finite" in message
    )
    assert "\n" not in message


def test_non_finite_image_features_name_the_position():
    data = load_pate_data("digits")
    x = data.private.x.copy()
    x[12, 0, 3, 5] = np.nan
    from pate.teachers.data_checks import check_features

    with pytest.raises(InputError, match=r"private: row 12, position \(0, 3, 5\) is nan"):
        check_features(x, "private")


def test_labels_that_are_not_class_indices_are_refused(tmp_path):
    y = (np.arange(40) % 3).astype(np.float64)
    y[11] = 2.5
    with pytest.raises(
        InputError,
        match=r"private split \(y_private\): row 11 is 2.5, not an "
        "integer class index",
    ):
        load_pate_data(_splits_npz(tmp_path / "a.npz", y_private=y))
    y[11] = np.nan
    with pytest.raises(InputError, match="row 11 is nan, not an integer"):
        load_pate_data(_splits_npz(tmp_path / "b.npz", y_private=y))
    y[11] = -2
    with pytest.raises(InputError, match="row 11 is -2.0, a negative label"):
        load_pate_data(_splits_npz(tmp_path / "c.npz", y_private=y))
    ye = np.arange(8) % 3
    ye[5] = -1  # unknown: allowed in the public split only
    with pytest.raises(
        InputError, match=r"evaluation split \(y_evaluation\): row 5 is -1, a negative"
    ):
        load_pate_data(_splits_npz(tmp_path / "d.npz", y_evaluation=ye))
    # integer-valued floats are class indices; -1 marks an unknown public label
    y[11] = 2.0
    data = load_pate_data(
        _splits_npz(
            tmp_path / "e.npz", y_private=y, y_public=np.array([-1, 0, 1, 2, -1, 0, 1, 2, 0, 1.0])
        )
    )
    assert data.private.y[11] == 2 and data.private.y.dtype == np.int64
    assert data.public.y[0] == -1 and data.num_classes == 3


def test_array_split_never_truncates_a_label():
    with pytest.raises(InputError, match="row 1 is 2.5"):
        ArraySplit(np.zeros((2, 3)), np.array([1.0, 2.5]))
    assert ArraySplit(np.zeros((2, 3)), np.array([1.0, 2.0])).y.tolist() == [1, 2]


def test_a_huge_label_is_refused_at_once_not_sized_into_the_votes(tmp_path):
    """A label of 10**7 made 10**7 + 1 classes: 17 GB and rising in the teachers stage."""

    y = np.arange(40) % 3
    y[17] = 10**7
    source = _splits_npz(tmp_path / "d.npz", y_private=y)
    abc = ["a", "b", "c"]
    with pytest.raises(InputError) as caught:
        load_pate_data(source, classes=abc)
    assert ("private split: row 17 has label 10000000, outside the declared 3 classes") in str(
        caught.value
    )
    ye = np.arange(8) % 3
    ye[2] = 3  # outside the declared set: refused in any split
    with pytest.raises(InputError, match="evaluation split: row 2 has label 3, outside"):
        load_pate_data(_splits_npz(tmp_path / "e.npz", y_evaluation=ye), classes=abc)
    many = [f"c{i}" for i in range(41)]  # more declared classes than private records
    with pytest.raises(InputError, match="41 classes are declared .* only 40 records"):
        load_pate_data(_splits_npz(tmp_path / "f.npz"), classes=many)
    assert load_pate_data(_splits_npz(tmp_path / "f.npz"), classes=many[:40]).num_classes == 40
    y[17] = 2**40  # beyond any class count: refused before the int64 cast
    with pytest.raises(InputError, match="row 17 is 1099511627776, not a plausible class index"):
        load_pate_data(_splits_npz(tmp_path / "g.npz", y_private=y.astype(np.uint64)), classes=abc)


def test_declared_classes_need_private_records(tmp_path):
    x, y = np.random.default_rng(0).random((12, 4)), np.arange(12) % 2
    names = np.array([f"c{i}" for i in range(9)])
    np.savez(tmp_path / "n.npz", x=x, y=y, split=_marks(12, 2, 2), class_names=names)
    with pytest.raises(InputError, match="9 classes are declared .* only 8 records"):
        load_pate_data(f"npz:{tmp_path / 'n.npz'}")


def test_a_pool_is_checked_with_the_file_s_row_numbers(tmp_path):
    x, y = np.random.default_rng(0).random((100, 4)), np.arange(100) % 2
    x[63, 1] = np.inf
    marks = _marks(100, 30, 10)
    np.savez(tmp_path / "p.npz", x=x, y=y, split=marks)
    with pytest.raises(InputError, match=r"p.npz: x \(the pool\): row 63, column 1 is inf"):
        load_pate_data(f"npz:{tmp_path / 'p.npz'}")
    x[63, 1] = 0.5
    y = y.astype(float)
    y[70] = 0.5
    np.savez(tmp_path / "q.npz", x=x, y=y, split=marks)
    with pytest.raises(InputError, match=r"q.npz: y \(the pool\): row 70 is 0.5"):
        load_pate_data(f"npz:{tmp_path / 'q.npz'}")
    marks[12] = "publik"
    np.savez(tmp_path / "r.npz", x=x, y=np.arange(100) % 2, split=marks)
    with pytest.raises(InputError, match=r"r.npz: split \(the pool\): row 12 is 'publik'"):
        load_pate_data(f"npz:{tmp_path / 'r.npz'}")


def test_csv_values_are_named_by_the_file_s_row_and_column(tmp_path):
    path = tmp_path / "t.csv"
    marks = _marks(30, 5, 5)
    rows = ["age,income,label,split"] + [f"{i},{i * 2.5},{i % 2},{marks[i]}" for i in range(30)]
    rows[9] = "8,nan,0,private"  # row 10 of the file (the header is row 1)
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match="t.csv: row 10, column 'income' is nan"):
        load_pate_data(f"csv:{path}")
    rows[9] = "8,20.0,2.5,private"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match="label column: row 10 .marked private. has label '2.5'"):
        load_pate_data(f"csv:{path}")
    # negative numbers stay what they were: class names (e.g. -1 / 1), sorted into indices
    rows = ["a,label,split"] + [f"{i},{-1 if i % 2 else 1},{marks[i]}" for i in range(30)]
    path.write_text("\n".join(rows) + "\n")
    assert load_pate_data(f"csv:{path}").class_names == ("-1", "1")


def test_csv_is_read_row_by_row_into_the_same_arrays(tmp_path):
    """Issue #33: the table is read in two passes into one preallocated array (no list of
    string cells); the values are those of numpy's own parser, label column anywhere."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4)) * 10.0 ** rng.integers(-3, 4, size=(300, 4))
    y = rng.integers(0, 3, 300)
    y[:3] = [0, 1, 2]
    marks = rng.choice(["private", "public", "evaluation"], 300)
    marks[:3] = "public"
    table = [
        [*map(repr, map(float, x[i, :2])), str(y[i]), marks[i], *map(repr, map(float, x[i, 2:]))]
        for i in range(300)
    ]
    path = tmp_path / "t.csv"
    body = "\n".join(",".join(row) for row in table)
    path.write_text("a,b,label,split,c,d\n\n" + body + "\n,,,,,\n")  # blank rows are skipped
    data = load_pate_data(f"csv:{path}")
    for code, split in enumerate((data.private, data.public, data.evaluation)):
        rows = marks == ("private", "public", "evaluation")[code]  # in the file's order
        np.testing.assert_array_equal(split.x, x[rows].astype(np.float32))
        np.testing.assert_array_equal(split.y, y[rows])
    (tmp_path / "header.csv").write_text("a,b,label\n")
    with pytest.raises(ValueError, match="header row and no records"):
        load_pate_data(f"csv:{tmp_path / 'header.csv'}")
    (tmp_path / "ragged.csv").write_text("1,2,0\n3,4,1\n5,0\n")
    with pytest.raises(ValueError, match="row 3 has 2 columns, expected 3"):
        load_pate_data(f"csv:{tmp_path / 'ragged.csv'}")


def _fake_cifar_root(root):
    """CIFAR-10's python batches: 5 training batches of 4 images, a test batch of 6."""
    import pickle

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 4) for i in range(1, 6)] + [("test_batch", 6)]:
        batch = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": [1] * n}
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)


def test_training_images_go_through_the_cache_once(tmp_path, monkeypatch):
    """Issue #33: with a feature cache the training split (the private one) is memory-mapped
    from an entry of float32 images, bit for bit the in-memory conversion; the test split
    stays in memory; a second load converts nothing."""
    from pate.teachers import builtin_datasets, cached_data
    from pate.teachers.feature_cache import FeatureCache

    _fake_mnist_root(tmp_path / "mnist", compress=True)
    _fake_cifar_root(tmp_path / "cifar")
    cache = FeatureCache(tmp_path / "cache")
    for name, root, sizes in (
        ("fashion-mnist", tmp_path / "mnist", {"public_size": 15, "eval_size": 5}),
        ("cifar10", tmp_path / "cifar", {"public_size": 4, "eval_size": 2}),
    ):
        plain = load_pate_data(name, root=root, **sizes)
        first = load_pate_data(name, root=root, cache=cache, **sizes)
        convert = builtin_datasets.unit_float32

        def refuse(images, convert=convert):
            if len(images) in (30, 20):  # training splits; the test splits (25, 6) in memory
                raise AssertionError("the training images were converted again")
            return convert(images)

        with monkeypatch.context() as patched:
            patched.setattr(builtin_datasets, "unit_float32", refuse)
            second = load_pate_data(name, root=root, cache=cache, **sizes)
        for a, b, c in zip(
            (plain.private, plain.public, plain.evaluation),
            (first.private, first.public, first.evaluation),
            (second.private, second.public, second.evaluation),
        ):
            np.testing.assert_array_equal(a.x, b.x)
            np.testing.assert_array_equal(a.x, c.x)
            np.testing.assert_array_equal(a.y, c.y)
        assert not second.private.x.flags.writeable and second.public.x.flags.writeable
    entries = cache.entries()
    assert [e["front_end"] for e in entries] == [cached_data.CONVERTED] * 2
    assert [e["hit"] for e in cache.summary()["entries"]] == [False, True, False, True]
