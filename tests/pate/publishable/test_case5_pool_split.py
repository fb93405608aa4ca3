"""Issue #48, case 5: a single pool (``csv:PATH``, npz ``x, y``) was split by ``permutation(n)``
with seed 0 into private / public / evaluation: inserting one row in the middle moved 45 of 400
private records, the "public" rows came out of the user's sensitive file, and evaluation figures
on pool records were published. Now the user marks each row; a pool without marks is refused;
a held-out evaluation split is a keyed hash of each record under a random key kept in the run;
and evaluation on private-pool records is recorded as internal."""

from __future__ import annotations

import json
import os
import pathlib
import stat

import numpy as np
import pytest

import pate
from pate.analysis.errors import InputError
from pate.teachers.data import load_pate_data

KEY = bytes(range(32))


def _rows(n: int = 500, *, seed: int = 0) -> list[str]:
    """``n`` rows ``f1,f2,label,split`` (marks: a fifth public, the rest private)."""
    rng = np.random.default_rng(seed)
    return [
        f"{rng.normal():.5f},{rng.normal():.5f},{i % 2},{'public' if i % 5 == 2 else 'private'}"
        for i in range(n)
    ]


def _write(path: pathlib.Path, rows: list[str]) -> str:
    path.write_text("f1,f2,label,split\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return f"csv:{path}"


def _records(split) -> set[bytes]:
    return {row.tobytes() + bytes([label]) for row, label in zip(split.x, split.y)}


def test_a_pool_without_marks_is_refused_before_any_charge(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pool.npz", x=rng.normal(size=(200, 3)), y=np.arange(200) % 2)
    (tmp_path / "pool.csv").write_text(
        "f1,label\n" + "\n".join(f"{i},{i % 2}" for i in range(200)) + "\n"
    )
    from PIL import Image

    for k in range(4):  # one image folder of two classes, no train/ and test/
        (tmp_path / "images" / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        Image.new("L", (4, 4), 60 * k).save(tmp_path / "images" / f"c{k % 2}" / f"{k}.png")
    ledger = tmp_path / "ledger.sqlite3"
    for source, how in (
        (f"npz:{tmp_path / 'pool.npz'}", "Add an array 'split'"),
        (f"csv:{tmp_path / 'pool.csv'}", "Add a column named 'split'"),
        (f"imagefolder:{tmp_path / 'images'}", "/train/<class>/<image>"),
    ):
        with pytest.raises(InputError) as caught:
            pate.fit(
                source,
                classes=["a", "b"],
                records=200,  # declared, as own data must: the pool is refused when read
                target_eps=2.0,
                ledger=ledger,
                run_dir=tmp_path / "r",
            )
        message = str(caught.value)
        assert "no marking of which rows are public" in message and how in message
        assert "nothing was trained, written or charged" in message
        assert not ledger.exists() and not (tmp_path / "r").exists()


def test_inserting_a_row_moves_no_private_record_to_public_or_evaluation(tmp_path):
    rows = _rows()
    d = load_pate_data(_write(tmp_path / "d.csv", rows), split_key=KEY)
    rows.insert(250, "0.12345,0.54321,1,private")
    d1 = load_pate_data(_write(tmp_path / "d1.csv", rows), split_key=KEY)
    private, private1 = _records(d.private), _records(d1.private)
    assert not private & (_records(d1.public) | _records(d1.evaluation))
    assert _records(d.public) == _records(d1.public)  # the marked rows, nothing else
    assert _records(d.evaluation) <= _records(d1.evaluation)
    assert (
        private <= private1
        and len(private1 | _records(d1.evaluation)) == len(private | _records(d.evaluation)) + 1
    )  # one record added, none moved
    assert d.public_from_pool == len(d.public) == 100


def test_an_npz_pool_through_the_feature_cache_moves_nothing_on_insert(tmp_path):
    """The cache writes a pool in its marks' order (private, public, evaluation): an inserted
    row is another file and another entry, and still moves no record between splits."""
    from pate.teachers.feature_cache import FeatureCache

    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(300, 4)), np.arange(300) % 3
    marks = np.where(np.arange(300) % 4 == 1, "public", "private")
    cache = FeatureCache(tmp_path / "cache")
    np.savez_compressed(tmp_path / "d.npz", x=x, y=y, split=marks)
    d = load_pate_data(f"npz:{tmp_path / 'd.npz'}", cache=cache, split_key=KEY)
    at = 150
    np.savez_compressed(
        tmp_path / "d1.npz",
        x=np.insert(x, at, 7.0, axis=0),
        y=np.insert(y, at, 2),
        split=np.insert(marks, at, "private"),
    )
    d1 = load_pate_data(f"npz:{tmp_path / 'd1.npz'}", cache=cache, split_key=KEY)
    assert not _records(d.private) & (_records(d1.public) | _records(d1.evaluation))
    assert _records(d.public) == _records(d1.public)
    assert _records(d.evaluation) <= _records(d1.evaluation)


def test_the_held_out_evaluation_split_is_stable_and_keyed_per_run(tmp_path):
    from pate.run.config import SPLIT_KEY_PATH, load

    rows = _rows()
    source = _write(tmp_path / "d.csv", rows)
    d = load_pate_data(source, split_key=KEY)
    assert 0 < len(d.evaluation) < len(d.private)  # about a tenth of the private rows
    removed = [r for k, r in enumerate(rows) if k != 18]  # row 18 is a private one
    smaller = load_pate_data(_write(tmp_path / "d-1.csv", removed), split_key=KEY)
    gone = _records(d.private) - _records(smaller.private)
    gone |= _records(d.evaluation) - _records(smaller.evaluation)
    assert len(gone) == 1  # only the removed record left its split
    assert _records(smaller.evaluation) <= _records(d.evaluation)

    def config(run: str) -> dict:
        return load(
            "digits",
            ledger=False,
            run_dir=str(tmp_path / run),
            # records: the rows marked private, declared as own data must
            overrides={"data": {"name": source, "classes": ["no", "yes"], "records": 400}},
        )

    first = config("a").load_data(run_dir=tmp_path / "a", keep_split_key=True)
    again = config("a").load_data(run_dir=tmp_path / "a", keep_split_key=True)
    other = config("b").load_data(run_dir=tmp_path / "b", keep_split_key=True)
    assert _records(first.evaluation) == _records(again.evaluation)  # the run's stored key
    assert _records(first.evaluation) != _records(other.evaluation)  # another run, another key
    key = tmp_path / "a" / pathlib.Path(*SPLIT_KEY_PATH)
    assert len(key.read_bytes()) == 32 and key.read_bytes() != KEY
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key.parent).st_mode) == 0o700


def test_evaluation_on_private_pool_records_is_marked_internal(tmp_path):
    from sklearn.linear_model import LogisticRegression

    from pate.run import rundir

    source = _write(tmp_path / "d.csv", _rows(400))
    assert load_pate_data(source).evaluation_public is False  # held out of the private rows
    marked = [
        r.replace("private", "evaluation") if k % 10 == 3 else r for k, r in enumerate(_rows())
    ]
    declared = _write(tmp_path / "e.csv", marked)
    assert load_pate_data(declared).evaluation_public is False  # rows of the sensitive file
    assert load_pate_data(declared, evaluation_public=True).evaluation_public is True
    assert load_pate_data("digits").evaluation_public is True  # a public benchmark's split
    result = pate.fit(
        source,
        classes=["no", "yes"],
        records=320,  # the rows marked private
        student=LogisticRegression(max_iter=200),
        mechanism="class-means",
        sigma=5.0,
        budget_eps=100.0,
        ledger=False,
        run_dir=tmp_path / "run",
    )
    analysis = json.loads(
        rundir.Run.open(result.run_dir, progress=False).path(rundir.ANALYSIS).read_text()
    )
    assert analysis["utility"]["evaluation_public"] is False
    assert analysis["utility"]["public_from_pool"] == 80


def test_pate_fit_declares_a_pool_s_split_column_and_public_evaluation(tmp_path):
    rows = [
        r.replace(",private", ",evaluation") if k % 10 == 3 else r for k, r in enumerate(_rows())
    ]
    table = tmp_path / "d.csv"
    table.write_text("f1,f2,label,part\n" + "\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="Add a column named 'split'"):
        pate.plan(f"csv:{table}", classes=["no", "yes"], records=350, target_eps=2.0, ledger=False)
    plan = pate.plan(
        f"csv:{table}",
        classes=["no", "yes"],
        records=350,  # the rows marked private
        split_column="part",
        evaluation_public=True,
        target_eps=2.0,
        ledger=False,
    )
    assert plan.facts.public_items == 100
    x = np.zeros((20, 2))
    with pytest.raises(TypeError, match="split_column= applies to a source that is one pool"):
        pate.plan((x, np.arange(20) % 2), x, evaluation=(x, np.arange(20) % 2), split_column="s")
