"""benchmarks/imagefolder_memory.py: the image folder it writes and one small measurement of this
checkout (the side-by-side comparison runs on demand, not here)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("imagefolder_memory")


@pytest.mark.skipif(shutil.which("time") is None, reason="needs GNU time")
def test_one_checkout_small_folder_with_and_without_a_cache(bench, tmp_path, capsys):
    out = tmp_path / "result.json"
    root = str(pathlib.Path(bench.__file__).resolve().parents[1])  # this checkout
    argv = ["--root", root, "--images", "30", "--side", "8", "--cache", "--json", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["images"] == 30 and result["images_mib_float32"] == 0.0
    (row,) = result["rows"]
    # two separate processes: their peaks differ by a few MiB of noise, so a 30-image load may
    # even read as slightly below the bare imports (CI saw 1105.4 against 1106.0)
    assert row["imports_mib"] > 0 and row["load_mib"] > 0.95 * row["imports_mib"]
    assert row["reading_mib"] == round(row["load_mib"] - row["imports_mib"], 1)
    for what in ("load", "cache_miss", "cache_hit"):  # the two loads through a fresh cache
        assert row[f"{what}_mib"] > row["imports_mib"] / 2 and row[f"{what}_seconds"] > 0


def test_images_are_written_per_class(bench, tmp_path):
    bench.write_images(tmp_path / "f", 25, 4)
    assert sorted(p.name for p in (tmp_path / "f" / "train").iterdir()) == [
        f"c{i}" for i in range(10)
    ]
    test = sorted(p.name for p in (tmp_path / "f" / "test").iterdir())
    assert test == [f"c{i}" for i in range(10)]  # every class declared, some folders empty
    assert sum(1 for _ in (tmp_path / "f").rglob("*.png")) == 25
