"""`pate cache list|clear` (pate.cli.commands.cache) and `[run] feature_cache`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate.cli import main
from pate.run.config import load
from pate.teachers import feature_cache


def _fill(root, n=5):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    key = feature_cache.EntryKey.of(x, front_end="double", settings={}, output_shape=(4,))
    feature_cache.FeatureCache(root).features(key, x, lambda b: b * 2.0)
    return key


def test_list_and_clear(tmp_path, capsys):
    root = tmp_path / "cache"
    assert main(["cache", "list", "--cache-dir", str(root)]) == 0
    assert "holds no entries" in capsys.readouterr().out
    key = _fill(root)
    _fill(root, n=7)
    assert main(["cache", "list", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert key.name[:14] in out and "double" in out and "2 entries" in out and " ok" in out
    assert main(["cache", "list", "--cache-dir", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(e["rows"] for e in listed["entries"]) == [5, 7]
    assert listed["bytes"] == sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out and not root.exists()
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert "nothing removed" in capsys.readouterr().out


def test_the_default_cache_and_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(feature_cache.ENV, raising=False)
    _fill(tmp_path / "runs" / ".feature-cache")
    assert main(["cache", "list"]) == 0
    assert "1 entries" in capsys.readouterr().out
    monkeypatch.setenv(feature_cache.ENV, str(tmp_path / "elsewhere"))
    assert main(["cache", "list"]) == 0
    assert "elsewhere holds no entries" in capsys.readouterr().out
    monkeypatch.setenv(feature_cache.ENV, "off")
    assert main(["cache", "clear"]) == 0
    assert "is off" in capsys.readouterr().out
    assert (tmp_path / "runs" / ".feature-cache").exists()


def test_the_cache_of_a_config(tmp_path, small_digits, monkeypatch, capsys):
    monkeypatch.delenv(feature_cache.ENV, raising=False)
    config = small_digits(tmp_path, replace=(("[run]", '[run]\nfeature_cache = "fc"'),))
    assert load(config).run.feature_cache_root(run_dir="runs/x") == tmp_path / "fc"
    _fill(tmp_path / "fc")
    assert main(["cache", "clear", "--config", str(config)]) == 0
    assert "removed 1 entries" in capsys.readouterr().out and not (tmp_path / "fc").exists()
    plain = load(small_digits(tmp_path, name="plain.toml"))
    assert (
        plain.run.feature_cache_root(run_dir=tmp_path / "runs" / "a")
        == tmp_path / "runs" / ".feature-cache"
    )
    off = load(
        small_digits(
            tmp_path, name="off.toml", replace=(("[run]", "[run]\nfeature_cache = false"),)
        )
    )
    assert off.run.feature_cache_root(run_dir="runs/x") is None


@pytest.mark.parametrize(
    "value, message",
    [
        ('""', "[run] feature_cache must be a folder path"),
        ("3", "[run] feature_cache must be"),
    ],
)
def test_bad_feature_cache_settings_are_clear_errors(tmp_path, small_digits, value, message):
    config = small_digits(tmp_path, replace=(("[run]", f"[run]\nfeature_cache = {value}"),))
    with pytest.raises(ValueError) as info:
        load(config)
    assert message in str(info.value)


def test_cache_needs_an_action(capsys):
    with pytest.raises(SystemExit):
        main(["cache"])
    assert "list" in capsys.readouterr().err


def test_the_teachers_stage_reads_scatternet_features_through_the_cache(
    tmp_path, small_digits, monkeypatch
):
    """[teachers] features = "scatternet": the second run's teachers stage reads the three
    splits' features that the first one cached, and trains the same teachers."""
    from pate.run import rundir, stages
    from pate.run.rundir import Run

    monkeypatch.delenv(feature_cache.ENV, raising=False)
    config = small_digits(
        tmp_path,
        replace=(
            ('model = "cnn8"', 'model = "linear"\nfeatures = "scatternet"'),
            ("epochs = 16", "epochs = 2"),
        ),
    )
    summaries, predictions = [], []
    for name in ("first", "second"):
        run = Run.create(load(config, ledger=False), progress=False, run_dir=tmp_path / name)
        stages.run_stage(run, "partition")
        summaries.append(stages.run_stage(run, "teachers")["feature_cache"])
        with np.load(run.path(rundir.TEACHER_PREDICTIONS)) as saved:
            predictions.append(saved["public"])
    assert [(s["misses"], s["hits"]) for s in summaries] == [(3, 0), (0, 3)]
    assert {e["rows"] for e in summaries[1]["entries"]} == {1000, 597, 200}
    np.testing.assert_array_equal(predictions[0], predictions[1])
