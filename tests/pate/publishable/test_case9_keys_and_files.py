"""Issue #48, case 9: secrets that are secret, and a run folder that says what to share.

The partition key used to come from ``[run] seed`` (default 0): anyone could reproduce the shards.
Now the run's keys come from OS entropy and live in the owner-only ``private/`` folder, with every
private-derived file of the run; a run the user seeds on purpose says in its report that its keys
are not private. ``pate export`` writes the publishable bundle and refuses anything internal.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import stat

import numpy as np
import pytest

import pate
from pate.cli import main
from pate.core import keys as run_keys
from pate.core.partition import Partition, teacher_of
from pate.ledger import record_keys
from pate.run import rundir
from pate.teachers.data import load_pate_data
from pate.teachers.errors import ConfigError

#: The banner of a report whose keys were derived from [run] seed (templates/report.md.j2).
KEYS_SEEDED_BANNER = "**This run's keys are seeded, not private: they were derived from [run] seed"

#: What may lie outside private/: settings, the charged outputs, the student, the public report.
PUBLISHABLE_ARRAYS = {rundir.LABELS, rundir.ANSWERED, rundir.LABEL_SCORES}


def unseeded(small_digits, folder, **kwargs) -> pathlib.Path:
    """configs/digits.toml (short training) without its ``[run] seed``."""
    replace = (("seed = 0\n", ""), *kwargs.pop("replace", ()))
    return small_digits(folder, replace=replace, **kwargs)


def run(config, run_dir, ledger, *more) -> None:
    args = ["--config", str(config), "--run-dir", str(run_dir), "--ledger", str(ledger)]
    assert main(["run", *args, "--no-progress", *more]) == 0


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, small_digits):
    """A whole digits run with default settings (no seed)."""
    tmp = tmp_path_factory.mktemp("case9")
    run(unseeded(small_digits, tmp), tmp / "run", tmp / "ledger.sqlite3")
    return tmp / "run"


@pytest.fixture(scope="module")
def seeded_run(tmp_path_factory, small_digits):
    """A whole digits run with ``[run] seed = 0`` (configs/digits.toml's, on purpose)."""
    tmp = tmp_path_factory.mktemp("case9-seeded")
    run(small_digits(tmp), tmp / "run", tmp / "ledger.sqlite3")
    return tmp / "run"


def test_two_default_runs_get_different_partitions_from_stored_keys(tmp_path, small_digits):
    config = unseeded(small_digits, tmp_path)
    parts, keys = [], []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        assert (
            main(
                [
                    "partition",
                    "--config",
                    str(config),
                    "--run-dir",
                    str(run_dir),
                    "--ledger",
                    str(tmp_path / "ledger.sqlite3"),
                    "--no-progress",
                ]
            )
            == 0
        )
        parts.append(Partition.load(run_dir / rundir.PARTITION))
        keys.append(run_keys.read_keys(run_dir / rundir.KEYS)["partition"])
        assert mode(run_dir / rundir.KEYS) == 0o600 and mode(run_dir / rundir.PRIVATE_DIR) == 0o700
        # a resume reads the same key back
        assert rundir.Run.open(run_dir).key("partition") == keys[-1]
    assert keys[0] != keys[1] and len(keys[0]) == run_keys.KEY_BYTES
    assert not np.array_equal(parts[0].assignment, parts[1].assignment)
    assert parts[0].seed is None  # not from a seed
    # each partition is the keyed hash under its stored key: whoever lacks private/ lacks it
    private = load_pate_data("digits").private
    keys_s16 = record_keys(private.x, private.y)
    raw, width = keys_s16.tobytes(), keys_s16.dtype.itemsize  # S16: bytes() would drop b"\0"s
    items = [raw[i : i + width] for i in range(0, len(raw), width)]
    assert np.array_equal(teacher_of(items, num_teachers=10, key=keys[0]), parts[0].assignment)


def test_a_seeded_run_says_its_keys_are_not_private(seeded_run, default_run):
    report = json.loads((seeded_run / rundir.REPORT_JSON).read_text())
    assert report["privacy"]["keys_seeded"] is True
    assert KEYS_SEEDED_BANNER in (seeded_run / rundir.REPORT_MD).read_text()
    assert any("not private" in w and "[run] seed" in w for w in report["warnings"])
    assert not (seeded_run / rundir.KEYS).exists()  # derived from the seed, nothing to keep
    default = json.loads((default_run / rundir.REPORT_JSON).read_text())
    assert default["privacy"]["keys_seeded"] is False
    assert KEYS_SEEDED_BANNER not in (default_run / rundir.REPORT_MD).read_text()


def test_the_private_folder_holds_the_sensitive_files(default_run):
    private = default_run / rundir.PRIVATE_DIR
    assert mode(private) == 0o700
    for name in (
        rundir.PARTITION,
        rundir.VOTES,
        rundir.TEACHER_PREDICTIONS,
        rundir.AGGREGATE,
        rundir.ANALYSIS,
        rundir.KEYS,
        f"{rundir.STAGE_DIR}/votes.json",
    ):
        path = default_run / name
        assert path.is_file() and path.resolve().is_relative_to(private.resolve()), name
    for path in private.rglob("*"):  # owner-only, whatever wrote it (torch checkpoints too)
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    outside = [
        p.relative_to(default_run).as_posix()
        for p in default_run.rglob("*")
        if p.is_file() and not p.is_relative_to(private)
    ]
    arrays = {p for p in outside if p.endswith((".npy", ".npz"))}
    assert arrays <= PUBLISHABLE_ARRAYS, arrays - PUBLISHABLE_ARRAYS
    assert not any(p.startswith(("teachers/", "stages/")) for p in outside)
    assert {
        rundir.REPORT_MD,
        rundir.REPORT_HTML,
        rundir.REPORT_JSON,
        rundir.STUDENT_WEIGHTS,
    } <= set(outside)


def test_class_means_embeddings_are_private(tmp_path, small_digits):
    """The private records' embeddings and labels (knn_embeddings.npz) go to private/."""
    config = unseeded(
        small_digits,
        tmp_path,
        replace=(
            (
                "[partition]\nnum_teachers = 10            # 100 private images per teacher\n"
                'mode = "random"\n',
                "",
            ),
            (
                'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0',
                'mechanism = "class-means"\nsigma = 3.0',
            ),
        ),
        extra='\n[knn]\nfeatures = "none"\ndims = 16\n',
    )
    run_dir = tmp_path / "run"
    run(config, run_dir, tmp_path / "ledger.sqlite3", "--until", "votes")
    assert (run_dir / rundir.KNN_EMBEDDINGS).is_file()
    assert (run_dir / rundir.KNN_EMBEDDINGS).parent == run_dir / rundir.PRIVATE_DIR
    assert not list(run_dir.glob("*.npz"))


def test_export_writes_the_bundle_and_its_manifest(default_run, tmp_path):
    out = tmp_path / "bundle"
    assert main(["export", str(default_run), str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    paths = [entry["path"] for entry in manifest["files"]]
    assert {
        rundir.STUDENT_WEIGHTS,
        rundir.REPORT_MD,
        rundir.REPORT_HTML,
        rundir.REPORT_JSON,
    } <= set(paths)
    assert not any(p.startswith(rundir.PRIVATE_DIR) for p in paths)
    assert rundir.LABELS not in paths  # only on request (--labels)
    for entry in manifest["files"]:
        data = (out / entry["path"]).read_bytes()
        assert (
            hashlib.sha256(data).hexdigest()
            == entry["sha256"]
            == (hashlib.sha256((default_run / entry["path"]).read_bytes()).hexdigest())
        )
        assert entry["what"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(
        [*paths, "manifest.json"]
    )
    # from Python, with the released labels
    pate.export(default_run, tmp_path / "with-labels", labels=True)
    assert (tmp_path / "with-labels" / rundir.LABELS).is_file()


def test_export_carries_the_students_table_encoder(default_run, tmp_path, caplog):
    import pandas as pd

    from pate.student.raw_rows import write_encoder_file
    from pate.teachers.table_encoding import TableColumns, TableEncoder

    copy = tmp_path / "copy"
    shutil.copytree(default_run, copy, symlinks=True)
    columns = TableColumns(label="y", id=None, numeric=("a",), categorical=())
    encoder = TableEncoder.fit_public(pd.DataFrame({"a": [1.0, 2.0, 5.0]}), columns)
    write_encoder_file(copy / rundir.STUDENT_ENCODER, encoder, ("no", "yes"))
    manifest = json.loads((pate.export(copy, tmp_path / "built-in") / "manifest.json").read_text())
    what = {entry["path"]: entry["what"] for entry in manifest["files"]}
    assert "fitted on public rows only" in what[rundir.STUDENT_ENCODER]
    state = json.loads((copy / rundir.STUDENT_ENCODER).read_text())
    state.update(encoder=None, transformer="ColumnTransformer")
    (copy / rundir.STUDENT_ENCODER).write_text(json.dumps(state))
    manifest = json.loads((pate.export(copy, tmp_path / "user") / "manifest.json").read_text())
    what = {entry["path"]: entry["what"] for entry in manifest["files"]}
    assert "ColumnTransformer, is NOT included" in what[rundir.STUDENT_ENCODER]
    assert "must pass it" in caplog.text


def test_export_refuses_anything_internal(default_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(default_run, copy, symlinks=True)
    # a plot of the report that is a private file (by its path, or through a link)
    report = json.loads((copy / rundir.REPORT_JSON).read_text())
    (copy / "plots" / "leak.png").symlink_to(copy / rundir.VOTES)
    (tmp_path / "outside.png").write_bytes(b"not the run's")
    for rel in (rundir.ANALYSIS, "plots/leak.png", "../outside.png"):
        (copy / rundir.REPORT_JSON).write_text(
            json.dumps(dict(report, plots={"confusion_matrix": rel}))
        )
        with pytest.raises(ConfigError):
            pate.export(copy, tmp_path / "out")
    # a report.json that carries its internal part
    (copy / rundir.REPORT_JSON).write_text(json.dumps(dict(report, internal={"eps": 1.0})))
    assert main(["export", str(copy), str(tmp_path / "out")]) == 2
    assert f"RUN_DIR {copy}" in capsys.readouterr().err
    # an unfinished run: no report stage
    (copy / rundir.REPORT_JSON).write_text(json.dumps(report))
    os.remove(copy / rundir.STAGE_DIR / "report.json")
    with pytest.raises(ConfigError, match="missing or unfinished"):
        pate.export(copy, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # OUT must be new or empty
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(ConfigError, match=r"out .*full exists and is not an empty folder"):
        pate.export(default_run, tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "mine"
    assert not list(tmp_path.glob(".*export-*"))  # nothing half-written left behind


def test_a_run_of_an_older_format_is_refused_with_it_named(default_run, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    state = json.loads((default_run / rundir.STATE).read_text())
    (old / rundir.STATE).write_text(json.dumps(dict(state, format=2)))
    shutil.copy(default_run / rundir.CONFIG, old / rundir.CONFIG)
    with pytest.raises(
        ConfigError, match=r"run format 2, .* reads run format 3 only\); start a new run"
    ):
        rundir.Run.open(old)
    with pytest.raises(ConfigError, match="run format 2"):
        pate.export(old, tmp_path / "out")


def test_a_fork_keeps_the_keys_in_its_own_private_folder(default_run, tmp_path):
    from pate.run.config import build
    from pate.run.pipeline import fork_run

    raw = json.loads((default_run / rundir.CONFIG).read_text())
    target = fork_run(default_run, build(raw, run_dir=str(tmp_path / "fork")))
    assert run_keys.read_keys(target / rundir.KEYS) == run_keys.read_keys(default_run / rundir.KEYS)
    assert mode(target / rundir.PRIVATE_DIR) == 0o700 and (target / rundir.VOTES).is_file()


def test_keys_drawn_before_the_run_started_are_kept(tmp_path, small_digits):
    """A key stored before the run started (a pool's split key in private/keys.json) does not
    make the run directory "not empty", and is kept."""
    run_dir = tmp_path / "run"
    split = run_keys.fresh_key()
    run_keys.write_keys(run_dir / rundir.KEYS, {"split": split})
    config = unseeded(small_digits, tmp_path)
    argv = ["partition", "--config", str(config), "--run-dir", str(run_dir), "--no-ledger"]
    assert main([*argv, "--no-progress"]) == 0
    stored = run_keys.read_keys(run_dir / rundir.KEYS)
    assert stored["split"] == split and set(stored) == {"split", "partition"}
