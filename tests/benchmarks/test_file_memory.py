"""benchmarks/file_memory.py: the files it writes and one small measurement of this checkout (the
side-by-side comparison runs on demand, not here)."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("file_memory")


def test_the_table_has_a_header_features_and_labels(bench, tmp_path):
    bench.write_table(tmp_path / "t.csv", 12, 3)
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "f0,f1,f2,label,split" and len(lines) == 13
    table = np.loadtxt(tmp_path / "t.csv", delimiter=",", skiprows=1, usecols=range(4))
    assert table.shape == (12, 4) and set(table[:, 3]) <= set(range(5))
    assert [line.rsplit(",", 1)[1] for line in lines[1:]] == list(bench.split_marks(12))


@pytest.mark.skipif(shutil.which("time") is None, reason="needs GNU time")
def test_one_checkout_small_table(bench, tmp_path):
    out = tmp_path / "result.json"
    root = str(pathlib.Path(bench.__file__).resolve().parents[1])  # this checkout
    assert bench.main(["--root", root, "--rows", "400", "--columns", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (run,) = result["runs"]
    assert result["rows"] == 400 and result["file_mib"] >= 0.0
    assert run["load_mib"] > 0.9 * run["imports_mib"] > 0 and run["load_seconds"] > 0
    assert run["reading_mib"] == round(run["load_mib"] - run["imports_mib"], 1)


def test_every_format_loads_as_the_same_table(bench, tmp_path):
    from pate.teachers.data import load_pate_data

    sizes = []
    for fmt in bench.FORMATS:
        folder = tmp_path / fmt
        folder.mkdir()
        data = load_pate_data(bench.write_file(folder, fmt, 50, 3))
        sizes.append((len(data.private), len(data.public), len(data.evaluation), data.input_shape))
    assert sizes[1:] == sizes[:-1] and sizes[0] == (35, 10, 5, (3,))


@pytest.mark.skipif(shutil.which("time") is None, reason="needs GNU time")
def test_cache_rows_for_a_compressed_pool(bench, tmp_path):
    out = tmp_path / "result.json"
    root = str(pathlib.Path(bench.__file__).resolve().parents[1])
    argv = ["--root", root, "--rows", "300", "--columns", "4", "--format", "npz-pool-compressed"]
    assert bench.main([*argv, "--cache", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (run,) = result["runs"]
    assert result["format"] == "npz-pool-compressed"
    for what in ("load", "cache_miss", "cache_hit"):
        assert run[f"{what}_mib"] > 0.9 * run["imports_mib"] and run[f"{what}_seconds"] > 0
