"""Issue #33: an ``imagefolder:`` decoded into the feature cache, memory-mapped from there and
reused by every later load of the same files (a stage, a run, another run directory)."""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest

from pate.analysis.errors import InputError
from pate.teachers import cached_data, image_folder
from pate.teachers.data import load_pate_data
from pate.teachers.feature_cache import FeatureCache

REPO = pathlib.Path(__file__).resolve().parents[2]


def _folder(root: pathlib.Path) -> str:
    """Random RGB and greyscale PNGs of two sizes in three classes, in ``train``/``test``
    folders; returns the ``imagefolder:`` name."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for part in ("train", "test"):
        for i in range(24 if part != "test" else 12):
            cls = root / part / f"c{i % 3}"
            cls.mkdir(parents=True, exist_ok=True)
            side = (10, 12) if i % 2 else (7, 9)
            if i % 4 == 1:
                image = Image.fromarray(rng.integers(0, 256, side, dtype=np.uint8))
            else:
                image = Image.fromarray(rng.integers(0, 256, (*side, 3), dtype=np.uint8))
            image.save(cls / f"{i}.png")
    return f"imagefolder:{root}"


def _splits(data):
    return (data.private, data.public, data.evaluation)


def _no_decoding(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("decoded again: the cache entry was not used")

    monkeypatch.setattr(image_folder, "_decode", refuse)


def test_cached_images_equal_decoded_ones_and_are_decoded_once(tmp_path, monkeypatch):
    name = _folder(tmp_path / "images")
    sizes: dict = {}
    plain = load_pate_data(name, image_size=8, **sizes)
    cache = FeatureCache(tmp_path / "cache")
    first = load_pate_data(name, image_size=8, cache=cache, **sizes)
    _no_decoding(monkeypatch)
    again = FeatureCache(tmp_path / "cache")
    second = load_pate_data(name, image_size=8, cache=again, **sizes)
    assert [e["hit"] for e in cache.summary()["entries"]] == [False, False]
    assert again.summary()["hits"] == len(cache.summary()["entries"])
    assert again.summary()["misses"] == 0
    for a, b, c in zip(_splits(plain), _splits(first), _splits(second)):
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.x, c.x)
        np.testing.assert_array_equal(a.y, c.y)
    assert (plain.num_classes, plain.input_shape) == (second.num_classes, second.input_shape)
    assert plain.class_names == second.class_names == ("c0", "c1", "c2")
    # the private split is the cache's read-only map; the others are in memory (the student's
    # pool may be written to by whoever holds it)
    assert not second.private.x.flags.writeable
    assert second.public.x.flags.writeable and second.evaluation.x.flags.writeable
    assert [e["front_end"] for e in again.entries()] == [cached_data.DECODED_IMAGES] * len(
        again.entries()
    )


def test_a_copied_folder_hits_and_an_edited_image_misses(tmp_path, monkeypatch):
    from PIL import Image

    name = _folder(tmp_path / "images")
    cache = FeatureCache(tmp_path / "cache")
    before = load_pate_data(name, image_size=8, cache=cache)
    shutil.copytree(tmp_path / "images", tmp_path / "copy")
    with monkeypatch.context() as patched:
        _no_decoding(patched)
        copied = load_pate_data(f"imagefolder:{tmp_path / 'copy'}", image_size=8, cache=cache)
    for a, b in zip(_splits(before), _splits(copied)):
        np.testing.assert_array_equal(a.x, b.x)
    Image.new("RGB", (9, 7), (255, 0, 0)).save(tmp_path / "copy" / "train" / "c0" / "0.png")
    edited = load_pate_data(f"imagefolder:{tmp_path / 'copy'}", image_size=8, cache=cache)
    # train, test; both hit; the edited train folder misses, its test folder hits
    assert [e["hit"] for e in cache.summary()["entries"]] == [False, False, True, True, False, True]
    assert len(cache.entries()) == 3
    red = np.zeros((3, 8, 8), np.float32)
    red[0] = 1.0
    rows = [s.x for s in _splits(edited)]
    assert any((x == red).all(axis=(1, 2, 3)).any() for x in rows)  # the new image is read
    assert not any((x == red).all(axis=(1, 2, 3)).any() for x in (s.x for s in _splits(before)))


def test_another_size_is_another_entry(tmp_path):
    name = _folder(tmp_path / "images")
    cache = FeatureCache(tmp_path / "cache")
    assert load_pate_data(name, image_size=8, cache=cache).input_shape == (3, 8, 8)
    assert load_pate_data(name, image_size=(6, 5), cache=cache).input_shape == (3, 6, 5)
    assert [e["hit"] for e in cache.summary()["entries"]] == [False] * 4


def test_a_corrupt_entry_is_rebuilt_not_trusted(tmp_path, caplog):
    name = _folder(tmp_path / "images")
    cache = FeatureCache(tmp_path / "cache")
    # copied: the private split maps the very file damaged below
    good = [np.array(s.x) for s in _splits(load_pate_data(name, image_size=8, cache=cache))]
    entry = max(cache.entries(), key=lambda e: e["rows"])  # the train folder's
    path = cache.root / entry["name"] / "features.npy"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with caplog.at_level("WARNING", logger="pate.teachers.feature_cache"):
        rebuilt = load_pate_data(name, image_size=8, cache=FeatureCache(tmp_path / "cache"))
    assert "is not used and is rebuilt" in caplog.text
    for a, b in zip(good, _splits(rebuilt)):
        np.testing.assert_array_equal(a, b.x)


def test_an_image_that_fails_to_decode_leaves_no_entry(tmp_path):
    name = _folder(tmp_path / "images")
    png = (tmp_path / "images" / "train" / "c1" / "4.png").read_bytes()
    (tmp_path / "images" / "train" / "c1" / "4.png").write_bytes(png[: len(png) // 2])
    cache = FeatureCache(tmp_path / "cache")
    with pytest.raises(InputError, match=r"4\.png cannot be read as an image"):
        load_pate_data(name, image_size=8, cache=cache)
    assert cache.entries() == []
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp-")]


def test_the_cache_must_be_a_feature_cache(tmp_path):
    with pytest.raises(TypeError, match="cache must be a FeatureCache"):
        load_pate_data("digits", cache=str(tmp_path))


def test_a_run_decodes_once_into_the_cache_beside_it(tmp_path, monkeypatch):
    """`pate run` on an image folder: the decoded images land in `.feature-cache` beside the
    run directory; a second run elsewhere in that folder decodes nothing; `[run] feature_cache
    = false` keeps them in memory and writes no cache."""
    from pate.run.config import load
    from pate.run.pipeline import Pipeline

    monkeypatch.delenv("PATE_FEATURE_CACHE", raising=False)
    name = _folder(tmp_path / "images")

    def config(run: str, **run_table):
        return load(
            REPO / "configs" / "digits.toml",
            run_dir=str(tmp_path / "runs" / run),
            ledger=False,
            overrides={
                "data": {
                    "name": name,
                    "image_size": 8,
                    "public_size": 8,
                    "eval_size": 4,
                    "records": 24,
                },
                "partition": {"num_teachers": 2},
                "aggregator": {"noise_seed": 0, "queries": 8},
                "run": run_table,
            },
        )

    first = Pipeline(config("a"), progress=False)
    first.run(until="partition")
    entries = FeatureCache(tmp_path / "runs" / ".feature-cache").entries()
    assert {e["front_end"] for e in entries} == {cached_data.DECODED_IMAGES}
    assert sorted(e["rows"] for e in entries) == [12, 24]
    with monkeypatch.context() as patched:
        _no_decoding(patched)
        Pipeline(config("b"), progress=False).run(until="partition")
    off = Pipeline(config("c", feature_cache=False), progress=False)
    off.run(until="partition")
    assert off.ctx.data.private.x.flags.writeable  # decoded into memory
    assert len(FeatureCache(tmp_path / "runs" / ".feature-cache").entries()) == 2
