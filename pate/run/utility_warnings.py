"""The utility warnings of a run (``analysis.json``'s ``utility.warnings``): plain-language rules
of thumb about what the student is worth, each naming what to change (docs/student.md, "Utility
warnings"), and the scale check of a user's own model on unscaled tabular inputs."""

from __future__ import annotations

from pate.run.rundir import Run

# Utility rules (docs/student.md, "Utility warnings"); rules of thumb, stated in points of
# accuracy on the evaluation split:
#: a student within this many points of the better of the majority-class rate and 1 / classes
#: is "near chance" ...
NEAR_CHANCE = 0.05
#: ... one this many points below the accuracy of its own labels (where the public labels are
#: known) has not learned what it was given ...
BELOW_LABELS = 0.15
#: ... and one this many points below the noiseless plurality vote lost most of what the teachers
#: knew (noise, too few labels or too short a training).
BELOW_PLURALITY = 0.25
#: fewer answered labels than this per class are too few for most students.
MIN_LABELS_PER_CLASS = 10
#: below this share of answered labels agreeing with the teachers' plurality, the noise decides
#: most answers.
MIN_AGREEMENT = 0.5
NOISE_FIX = (
    "use less noise for the same budget: fewer queries (queries=, [aggregator] queries), fewer "
    "teachers, or a larger target epsilon"
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def more_labels_advice(spec) -> str:
    """What buys more answered labels with the mechanism ``spec`` (a registry spec)."""
    if spec.kind.releases_once:
        return "more public items (the one release labels every one of them)"
    if spec.always_answers:
        return "a larger budget or less noise"
    return EVERY_LEVER


#: What buys more answered labels when the mechanism is not known (every lever of any).
EVERY_LEVER = "a larger budget, less noise or a lower threshold"


def utility_warnings(
    u: dict,
    *,
    num_classes: int,
    answered: int,
    smoke_test: bool = False,
    more_labels: str = EVERY_LEVER,
) -> list[str]:
    """Plain-language warnings about what the run's student is worth, each naming what to
    change (the rules above; docs/student.md). ``u``: the ``utility`` object of
    ``analysis.json`` (student_accuracy, majority_class_rate, plurality_vote_accuracy,
    label_accuracy_answered, answered_plurality_agreement, student_steps, scale_warnings). A
    smoke test (it only checks that the pipeline works) trains short on purpose: not warned."""
    out = []
    accuracy_warning = _student_accuracy_warning(
        u, num_classes=num_classes, answered=answered, smoke_test=smoke_test
    )
    if accuracy_warning is not None:
        out.append(accuracy_warning)
    if 0 < answered < MIN_LABELS_PER_CLASS * num_classes:
        out.append(
            f"Only {answered} labels were answered for {num_classes} classes (fewer than "
            f"{MIN_LABELS_PER_CLASS} per class): {more_labels} buys more."
        )
    steps = u.get("student_steps")
    if steps is not None and not smoke_test:
        from pate.student.settings import MIN_STUDENT_STEPS

        if steps < MIN_STUDENT_STEPS:
            out.append(
                f"The student trained only {steps} optimiser steps (fewer than "
                f"{MIN_STUDENT_STEPS}): leave its epochs unset (auto) or raise them "
                f"(student_params={{'epochs': ...}} in pate.fit, [student] epochs in a "
                f"config)."
            )
    out.extend(w[0].upper() + w[1:] + "." for w in u.get("scale_warnings") or [])
    return out


#: The figures of ``utility`` computed from the private records (the teachers' votes; the
#: evaluation data unless it is declared public): a warning that fires on one is internal.
INTERNAL_FIGURES = ("plurality_vote_accuracy", "answered_plurality_agreement")
EVALUATION_FIGURES = ("student_accuracy", "majority_class_rate")


def split_utility_warnings(
    u: dict,
    *,
    num_classes: int,
    answered: int,
    smoke_test: bool = False,
    more_labels: str = EVERY_LEVER,
) -> tuple[list[str], list[str]]:
    """``(public, internal)``: the warnings judged on the publishable figures of ``u`` alone
    (the teachers' and the noise-free plurality vote's figures left out, and the student's
    accuracy unless ``u["evaluation_public"]``), and those that fire only with the internal
    figures (docs/publishing.md: whether a warning appears is itself a bit about the data)."""
    settings = dict(
        num_classes=num_classes, answered=answered, smoke_test=smoke_test, more_labels=more_labels
    )
    everything = utility_warnings(u, **settings)
    view = {**u, **dict.fromkeys(INTERNAL_FIGURES)}
    if u.get("evaluation_public") is not True:
        view = {k: v for k, v in view.items() if k not in EVALUATION_FIGURES}
    public = utility_warnings(view, **settings)
    return public, [w for w in everything if w not in public]


def _student_accuracy_warning(
    u: dict, *, num_classes: int, answered: int, smoke_test: bool = False
) -> str | None:
    """The one warning about the student's accuracy, against chance, its own labels or the
    teachers' plurality vote (the first rule it breaks; None when it breaks none)."""
    if "student_accuracy" not in u:  # measured on data not declared public: judged internally
        return None
    student = u["student_accuracy"]
    plurality = u.get("plurality_vote_accuracy")
    labels = u.get("label_accuracy_answered")
    agreement = u.get("answered_plurality_agreement")
    chance = 1.0 / max(2, num_classes)
    majority = u.get("majority_class_rate")
    baseline = max(chance, majority if majority is not None else 0.0)
    drowned = agreement is not None and agreement < MIN_AGREEMENT and answered > 0
    if student <= baseline + NEAR_CHANCE:
        return (
            f"The student ({_pct(student)}) is near chance: always answering the evaluation "
            f"split's majority class gives {_pct(baseline)}. "
            + _near_chance_cause(
                u, baseline, num_classes=num_classes, answered=answered, smoke_test=smoke_test
            )
        )
    elif labels is not None and student < labels - BELOW_LABELS:
        return (
            f"The student ({_pct(student)}) is far below the accuracy of its own labels "
            f"({_pct(labels)}): it did not learn what it was given. {_training_fix(u, smoke_test)}"
        )
    elif plurality is not None and student < plurality - BELOW_PLURALITY:
        cause = (
            f"most answered labels disagree with the plurality vote; {NOISE_FIX}"
            if drowned
            else "answer more queries, use less noise, or train the student longer"
        )
        return (
            f"The student ({_pct(student)}) is far below the teachers' noiseless plurality "
            f"vote ({_pct(plurality)}): {cause}."
        )
    elif drowned:
        return (
            f"Most answered labels disagree with the teachers' plurality vote: the noise "
            f"decides the answers; {NOISE_FIX}."
        )
    return None


def _training_fix(u: dict, smoke_test: bool = False) -> str:
    """How to train the student better: longer only when its given epochs were short (unset
    epochs train at least MIN_STUDENT_STEPS steps) and the run is not a smoke test, which
    trains short on purpose."""
    from pate.student.settings import MIN_STUDENT_STEPS

    steps = u.get("student_steps")
    if smoke_test:
        return "This smoke test trains its student short on purpose; a real run would not."
    if steps is not None and steps < MIN_STUDENT_STEPS:
        return (
            f"Train it longer: its epochs give {steps} optimiser steps (leave them unset: "
            f"at least {MIN_STUDENT_STEPS})."
        )
    return "Use student='auto' or a model suited to the inputs (scaled tabular features)."


def _near_chance_cause(
    u: dict, baseline: float, *, num_classes: int, answered: int, smoke_test: bool = False
) -> str:
    """Why a student near chance is there, from the figures ``u`` holds (the first that
    applies): teachers who learned too little, noise that decides the answers, too few labels,
    labels near chance themselves, else the student's training."""
    plurality, labels = u.get("plurality_vote_accuracy"), u.get("label_accuracy_answered")
    agreement = u.get("answered_plurality_agreement")
    if plurality is not None and plurality <= baseline + NEAR_CHANCE:
        return (
            f"The teachers' plurality vote is near chance too ({_pct(plurality)}): each "
            "teacher learned too little. Give each teacher more records (fewer teachers), use "
            "teacher='auto', or a model suited to these inputs (scaled tabular features)."
        )
    if agreement is not None and agreement < MIN_AGREEMENT and answered > 0:
        return (
            "Most answered labels disagree with the teachers' plurality vote: the noise "
            f"decides the answers; {NOISE_FIX}."
        )
    if answered < MIN_LABELS_PER_CLASS * num_classes:
        return (
            f"It had {answered} labels for {num_classes} classes: answer more queries (a "
            "larger budget, or less noise)."
        )
    if labels is not None and labels <= baseline + NEAR_CHANCE:
        return (
            f"Its labels are near chance too ({_pct(labels)}): the noise decides them. Use a "
            "larger target epsilon (`pate plan` names one), or more private records per class."
        )
    if labels is None:
        return (
            "Whether its labels are better could not be checked (the public labels are not "
            "known): if `pate plan` warned of weak labels, they are the problem (a larger "
            f"target epsilon); otherwise: {_training_fix(u, smoke_test)}"
        )
    return f"Its labels are better ({_pct(labels)}). {_training_fix(u, smoke_test)}"


def _model_object(run: Run, key: str, setting):
    """The model of ``setting`` for the scale check: a Python object given to pate.fit, the
    estimator a ``module:factory`` returns, else the name (never an error here)."""
    try:
        return run.python_object(key, setting)
    except Exception:  # a model given from Python and not given again: judge it by name
        return setting


def scale_warnings(run: Run, reads_records: bool) -> list[str]:
    """Warnings for a user's own model on unscaled tabular inputs (public statistics only:
    :func:`pate.teachers.scaling.scale_warning`)."""
    from pate.teachers.scaling import scale_warning

    data, s = run.data, run.config
    if len(tuple(data.input_shape)) != 1:
        return []
    out = []
    teachers = s.teachers
    if not reads_records and teachers.standardize != "public":
        model = _model_object(run, "teacher_model", teachers.model)
        warning = scale_warning(data.public.x, model, role="teacher")
        if warning:
            out.append(warning)
    student = _model_object(run, "student_model", s.student.model or "auto")
    if hasattr(student, "fit") and hasattr(student, "get_params"):
        # the torch student standardises its inputs itself (pate.student.train); an estimator
        # given from Python does not
        warning = scale_warning(data.public.x, student, role="student")
        if warning:
            out.append(warning)
    return out


#: Below this share of the gap between the majority class and the non-private reference that the
#: student closes, the run is named weak (issue #50's bar), in the log and the internal report.
WEAK_GAP_CLOSED = 0.8


def gap_closed(utility: dict, reference: float | None) -> float | None:
    """(student - majority) / (reference - majority) of the evaluation figures in ``utility``
    and the non-private ``reference`` accuracy; None where a figure is missing or the reference
    does not beat the majority class. INTERNAL (both figures are)."""
    student, majority = utility.get("student_accuracy"), utility.get("majority_class_rate")
    if reference is None or student is None or majority is None or reference <= majority:
        return None
    return (student - majority) / (reference - majority)
