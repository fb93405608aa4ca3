"""Issue #48, case 6: the teachers' accuracies, the noise-free plurality vote's accuracy, the
answers' agreement with it and the warning that fires on it ("Most answered labels disagree
with the teachers' plurality vote") are internal: in the internal report, marked, and never in
the publishable report.md / report.html / report.json; ``print(result)`` and ``pate run``'s
stdout mark them INTERNAL."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pate
from pate.cli.commands.run import internal_summary
from pate.run.report import formatting

DISAGREE = (
    "answered labels disagree with the"  # "... teachers' plurality vote" / "... plurality vote"
)
MARK = "INTERNAL (do not publish):"


def flat(split):
    return split.x.reshape(len(split.x), -1)


@pytest.fixture(scope="module")
def drowned(tmp_path_factory, digits):
    """Forty logistic-regression teachers on 25 digits each (their plurality vote is right on
    most items, each of them less often), GNMax noise at the planner's limit (sigma = teachers /
    2): most answers differ from the plurality vote and its warning fires."""
    from sklearn.linear_model import LogisticRegression

    tmp = tmp_path_factory.mktemp("case6")
    result = pate.fit(
        (flat(digits.private), digits.private.y),
        flat(digits.public),
        evaluation=(flat(digits.evaluation), digits.evaluation.y),
        teacher=LogisticRegression(max_iter=300),
        student=LogisticRegression(max_iter=300),
        num_teachers=40,
        mechanism="gnmax",
        sigma=20.0,
        queries=150,
        records=len(digits.private.y),
        classes=[str(d) for d in range(10)],
        budget_eps=1e6,
        ledger=tmp / "ledger.sqlite3",
        run_dir=tmp / "run",
    )
    return result


def _texts(run_dir):
    return {
        name: (run_dir / name).read_text(encoding="utf-8")
        for name in ("report.md", "report.html", "report.json")
    }


def test_the_run_has_teacher_figures_and_the_plurality_warning_fires(drowned):
    u = drowned.utility  # the internal figures, for the operator
    assert u["teacher_mean_accuracy"] > 0.5 and u["plurality_vote_accuracy"] > 0.6
    assert u["answered_plurality_agreement"] < 0.5
    internal = drowned.internal_report
    assert any(DISAGREE in w for w in internal["utility"]["internal_warnings"])


def test_teacher_figures_and_the_warning_are_only_in_the_internal_report(drowned, leaks):
    u = drowned.utility
    public = drowned.report
    assert public == json.loads((drowned.run_dir / "report.json").read_text())
    for key in (
        "teacher_mean_accuracy",
        "teacher_accuracy_std",
        "plurality_vote_accuracy",
        "answered_plurality_agreement",
        "answered_plurality_agreement_note",
        "internal_warnings",
    ):
        assert key not in public["utility"], key
    figures = [
        formatting.pct(u["teacher_mean_accuracy"]),
        formatting.pct(u["plurality_vote_accuracy"]),
        formatting.pct(u["answered_plurality_agreement"]),
    ]
    for name, text in _texts(drowned.run_dir).items():
        assert DISAGREE not in text, name
        assert "**Teachers**" not in text and "Teachers, mean" not in text, name
        for figure in figures:
            assert not leaks(text, figure, public), (name, figure)
        for value in (u["teacher_mean_accuracy"], u["plurality_vote_accuracy"]):
            assert not leaks(text, repr(value), public), (name, value)
    internal_md = (drowned.run_dir / "private" / "report_internal.md").read_text()
    for figure in figures:
        assert figure in internal_md
    marked = f"**{MARK}**"
    teachers = next(line for line in internal_md.splitlines() if line.startswith("- **Teachers**"))
    assert marked in teachers and formatting.pct(u["teacher_mean_accuracy"]) in teachers
    warning = next(line for line in internal_md.splitlines() if DISAGREE in line)
    assert warning.startswith(f"- {marked}")


def test_result_warnings_and_print_mark_the_internal_figures(drowned):
    u = drowned.utility
    warnings = [w for w in drowned.warnings if DISAGREE in w]
    assert warnings and all(w.startswith(MARK) for w in warnings)
    assert not any(DISAGREE in w for w in drowned.report["warnings"])
    shown = repr(drowned)
    assert str(drowned) == shown
    public, _, internal = shown.partition(f", {MARK} ")
    assert internal, shown
    for label, value in (
        ("teachers", u["teacher_mean_accuracy"]),
        ("plurality", u["plurality_vote_accuracy"]),
        ("student", u["student_accuracy"]),  # evaluation data not declared public
    ):
        assert f"{label}={100 * value:.1f}%" in internal
        assert f"{label}=" not in public
    assert f"epsilon={drowned.epsilon:.4g}" in public


def test_pate_run_prints_the_teacher_figures_marked_internal(drowned):
    u = drowned.utility
    lines = internal_summary(drowned.run_dir / "private" / "report_internal.json")
    teachers = next(line for line in lines if line.startswith("teachers"))
    assert f"{u['teacher_mean_accuracy']:.4f}" in teachers
    assert f"{u['plurality_vote_accuracy']:.4f}" in teachers
    assert "INTERNAL, do not publish" in teachers
    assert all("INTERNAL, do not publish" in line for line in lines)


def test_a_warning_judged_on_public_figures_stays_public():
    """The split of the utility warnings: the one about too few labels is judged on the charged
    answer count alone; the one on the plurality vote only with the internal figures."""
    from pate.run.utility_warnings import split_utility_warnings

    u = {
        "student_accuracy": 0.12,
        "majority_class_rate": 0.11,
        "plurality_vote_accuracy": 0.9,
        "answered_plurality_agreement": 0.2,
        "label_accuracy_answered": 0.2,
        "student_steps": None,
    }
    public, internal = split_utility_warnings(u, num_classes=10, answered=40)
    assert [w for w in public if "Only 40 labels" in w] == public and len(public) == 1
    assert any(DISAGREE in w for w in internal)
    assert not any(DISAGREE in w for w in public)
    # with the evaluation data declared public the student's warning is public, its
    # plurality clause still not
    public, internal = split_utility_warnings(
        dict(u, evaluation_public=True), num_classes=10, answered=40
    )
    assert any("near chance" in w for w in public) and not any(DISAGREE in w for w in public)
    assert np.all([DISAGREE in w for w in internal])
