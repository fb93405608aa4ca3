"""Issue #48, case 2: the set of classes came from the private labels, and the names were
published -- one added CSV row labelled ``zz_rare_condition`` turned "2 classes" into "3 classes"
and put the name into the report. The label set is now declared (``[data] classes``,
``pate.fit(classes=...)``, a source's own names, or the public labels); a private label outside it
is refused before anything is charged."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import pate
from pate.analysis.errors import InputError
from pate.teachers.data import load_pate_data

NAMES = ["benign", "malignant"]
RARE = "zz_rare_condition"
#: The declared number of private records (3 rows in 5 of the table are marked private).
RECORDS = 180


def _table(path: pathlib.Path, *, extra: str | None = None, rows: int = 300) -> str:
    """A breast-cancer-like table: two features, a text label, each row marked; ``extra``
    inserts one more private row with that label in the middle (row 152 of the file)."""
    rng = np.random.default_rng(0)
    marks = ("private", "private", "public", "private", "evaluation")
    lines = ["radius,texture,label,split"] + [
        f"{rng.normal():.4f},{rng.normal():.4f},{NAMES[i % 2]},{marks[i % 5]}" for i in range(rows)
    ]
    if extra is not None:
        lines.insert(151, f"0.5000,0.5000,{extra},private")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"csv:{path}"


def test_the_issue_s_extra_row_of_a_new_label_is_refused_before_any_ledger_event(tmp_path):
    source = _table(tmp_path / "d1.csv", extra=RARE)
    ledger = tmp_path / "ledger.sqlite3"
    with pytest.raises(InputError) as caught:
        pate.fit(source, records=RECORDS, target_eps=2.0, ledger=ledger, run_dir=tmp_path / "run")
    message = str(caught.value)
    # the source, the row as the file counts it (header = row 1), the value, the way out
    assert "d1.csv" in message and "row 152" in message and repr(RARE) in message
    assert "nothing was trained, written or charged" in message
    assert not ledger.exists() and not (tmp_path / "run").exists()
    # declared without the rare class: the same refusal, from the config's [data] classes too
    with pytest.raises(InputError, match=rf"row 152 .*{RARE}.*outside the declared classes"):
        pate.plan(source, classes=NAMES, records=RECORDS, target_eps=2.0, ledger=ledger)
    assert not ledger.exists()


def test_declared_classes_give_d_and_d_plus_one_the_same_classes(tmp_path):
    declared = [*NAMES, RARE]
    d = _table(tmp_path / "d.csv")
    d1 = _table(tmp_path / "d1.csv", extra=RARE)
    plans = [
        pate.plan(s, classes=declared, records=RECORDS, target_eps=2.0, ledger=False)
        for s in (d, d1)
    ]
    assert plans[0].facts.classes == plans[1].facts.classes == 3
    loaded = [load_pate_data(s, classes=declared) for s in (d, d1)]
    assert loaded[0].class_names == loaded[1].class_names == tuple(declared)
    assert loaded[0].num_classes == loaded[1].num_classes == 3
    assert np.bincount(loaded[1].private.y, minlength=3)[2] == 1  # the rare record is kept


def test_without_a_declaration_the_public_labels_give_the_set_never_the_private_ones(tmp_path):
    d = load_pate_data(_table(tmp_path / "d.csv"))
    assert d.class_names == tuple(NAMES) and d.num_classes == 2  # the public rows' labels
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 3)), np.arange(60) % 3
    with pytest.raises(InputError, match=r"not declared.*\[data\] classes.*classes="):
        pate.plan((x, y), x[:10], evaluation=(x[:6], y[:6]), target_eps=2.0, ledger=False)
    public_labels = np.array([0, 1] * 5)  # class 2 is in no public label: not in the set
    with pytest.raises(InputError, match=r"pate.fit private y: row 2 has label 2, outside"):
        pate.plan(
            (x, y), (x[:10], public_labels), evaluation=(x[:6], y[:6]), target_eps=2.0, ledger=False
        )


def test_an_evaluation_label_outside_the_declared_set_is_refused(tmp_path):
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(60, 3)), np.arange(60) % 2
    bad = np.array([0, 1, 0, 2, 1, 0])
    with pytest.raises(InputError, match=r"pate.fit evaluation y: row 3 has label 2, outside"):
        pate.fit(
            (x, y),
            x[:10],
            evaluation=(x[:6], bad),
            classes=NAMES,
            target_eps=2.0,
            ledger=tmp_path / "ledger.sqlite3",
            run_dir=tmp_path / "run",
        )
    assert not (tmp_path / "ledger.sqlite3").exists() and not (tmp_path / "run").exists()


def test_the_declared_classes_are_checked_like_any_setting(tmp_path):
    source = _table(tmp_path / "d.csv")
    for bad, match in (
        ("benign", "list of class names"),
        (["benign"], "at least two"),
        (["a", "a"], "once"),
        (["a", ""], "non-empty"),
    ):
        with pytest.raises((TypeError, ValueError), match=match):
            load_pate_data(source, classes=bad)
    from pate.run.config import load
    from pate.teachers.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[data\] classes"):
        load("digits", ledger=False, overrides={"data": {"classes": ["a", "a"]}})
