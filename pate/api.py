"""The Python API: sensitive data -> teachers -> noisy labels -> student -> epsilon, in one
call. ``pate.fit`` runs the stages of ``pate run`` on data given in memory or by name, with model
objects, charges the same ledger and writes the same run directory and report; ``pate.plan``
shows the plan first, ``pate.export`` the publishable bundle. The noise keywords, the declared
facts and :class:`PateResult`: docs/api.md."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from pate.analysis.errors import InputTypeError
from pate.core.errors import BudgetExceededError
from pate.run.config import RunConfig, SettingError, python_wording
from pate.run.config.tables import (
    RELEASE_DEFAULTS,
    AggregatorTable,
    DataTable,
    KnnTable,
    PartitionTable,
    PrivacyTable,
    RunTable,
    StudentTable,
    TeachersTable,
)
from pate.run.memory_data import TABLE_KEYWORDS, data_source
from pate.run.planner import PlanError  # what plan() and fit() raise for an unusable plan
from pate.teachers.errors import ConfigError

__all__ = ["fit", "plan", "export", "PateResult", "PlanError"]


@dataclasses.dataclass(frozen=True)
class PateResult:
    """What :func:`fit` returns (its fields: docs/api.md)."""

    student: Any
    labels: np.ndarray
    answered_mask: np.ndarray
    epsilon: float
    delta: float
    privacy: dict  # every figure of analysis.json: INTERNAL
    report: dict  # report.json: the publishable report
    run_dir: pathlib.Path
    label_scores: np.ndarray | None = None
    utility: dict = dataclasses.field(default_factory=dict)  # INTERNAL, but report["utility"]
    warnings: list = dataclasses.field(default_factory=list)  # the report's, also logged
    internal_report: dict = dataclasses.field(default_factory=dict)  # never publish it

    def predict(self, rows) -> np.ndarray:
        """The released student's predictions (raw rows of a table: ``student`` encodes them)."""
        return self.student.predict(rows)

    @property
    def report_path(self) -> pathlib.Path:
        return self.run_dir / "report.html"

    def __repr__(self) -> str:
        u, public = self.utility, (self.report.get("utility") or {})
        figures = {
            "student": u.get("student_accuracy"),
            "teachers": u.get("teacher_mean_accuracy"),
            "plurality": u.get("plurality_vote_accuracy"),
        }
        shown = {k: f"{k}={100 * v:.1f}%" for k, v in figures.items() if v is not None}
        extra = ""
        if "student" in shown and "student_accuracy" in public:
            extra += ", " + shown.pop("student")
        if self.warnings:
            extra += f", warnings={len(self.warnings)}"
        if shown:
            extra += ", INTERNAL (do not publish): " + ", ".join(shown.values())
        asked = (self.report.get("queries") or {}).get("asked", self.labels.size)
        return (
            f"PateResult(epsilon={self.epsilon:.4g}, delta={self.delta:g}, answered="
            f"{int(self.answered_mask.sum())} of {asked} asked ({self.labels.size} public "
            f"items){extra}, run_dir={str(self.run_dir)!r})"
        )


# ------------------------------------------------------------------------------ models


def _model_setting(model: Any, what: str) -> tuple[Any, Any]:
    """(config value, Python object or None): names stay names; objects are recorded by name
    and handed to the stage directly (never saved)."""
    if isinstance(model, str):
        return model, None
    if callable(model) or (hasattr(model, "fit") and hasattr(model, "get_params")):
        cls = model if isinstance(model, type) else type(model)
        label = (
            getattr(model, "__qualname__", None)
            if callable(model) and not hasattr(model, "fit")
            else cls.__qualname__
        )
        module = getattr(model, "__module__", None) or cls.__module__
        return f"python:{module}.{label}", model
    raise InputTypeError(
        f"{what} must be a zoo name (e.g. 'mlp', 'cnn28'), a factory returning a "
        f"torch.nn.Module, or a scikit-learn estimator; got {type(model).__name__}"
    )


# ------------------------------------------------------------------------------ fit


def fit(
    private,
    public=None,
    *,
    evaluation=None,
    label: str | None = None,
    id: str | None = None,
    drop: list[str] | None = None,
    preprocess: Any = None,
    records: int | None = None,
    classes: list[str] | None = None,
    split_column: str | None = None,
    evaluation_public: bool | None = None,
    teacher: Any = "auto",
    student: Any = "auto",
    num_teachers: int | None = None,
    mechanism: str = "auto",
    threshold=None,
    sigma1=None,
    sigma2=None,
    sigma=None,
    scale=None,
    k=None,
    sampling_rate=None,
    count_weight=None,
    knn: dict | None = None,
    target_eps: float | None = None,
    delta: float = 1e-5,
    queries: int | None = None,
    budget_eps: float | None = None,
    release: bool = False,
    release_order=None,
    release_beta=None,
    release_sigma_ss=None,
    conversion: str = "classic",
    ledger: bool | str | pathlib.Path = True,
    dataset: str | None = None,
    run_dir: str | pathlib.Path | None = None,
    name: str = "pate",
    seed: int | None = None,
    noise_seed: int | None = None,
    device: str = "auto",
    partition: str | None = None,
    teacher_params: dict | None = None,
    student_params: dict | None = None,
    progress: bool = False,
    resume: bool = False,
    threads: int | None = None,
) -> PateResult:
    """Train teachers on ``private``, label ``public`` privately, train the student; return it
    with the labels and the privacy figures (the arguments, declared facts and the result:
    docs/api.md).

    ``private`` is ``(x, y)``, a torch Dataset/DataLoader of pairs, a table, or a dataset name /
    source (then ``public`` and ``evaluation`` come from its splits). ``budget_eps`` is the
    dataset's lifetime budget in the ledger, registered the first time its records are charged
    (default: ``target_eps``; later a different one is refused: ``pate budget set``);
    ``target_eps`` is what this run may spend, refused before any training when the ledger has
    less left. What is left out (``num_teachers``, ``queries``, ``mechanism="auto"``) the
    planner chooses (:func:`plan`). ``teacher_params`` / ``student_params``: ``[teachers]`` /
    ``[student]`` settings; ``resume=True`` continues ``run_dir``; ``threads``: CPU threads
    (:mod:`pate.core.threads`).
    """
    config, data, _, models = _configured(locals())
    from pate.run.pipeline import Pipeline

    try:
        pipeline = Pipeline(config, resume=resume, progress=progress, data=data)
        if threads is not None:
            pipeline.ctx.context.threads_source = "keyword"
        if data is not None:
            pipeline.ctx.provide_data(data)
        for key, model in models.items():
            if model is not None:
                setattr(pipeline.ctx.context, key, model)
        return _result(pipeline.ctx, pipeline.run())
    except (ConfigError, BudgetExceededError) as exc:
        _reword(exc)
        raise


def _reword(exc: Exception) -> None:
    """Word an error (raised naming TOML keys and command lines) for the caller of :func:`fit`
    or :func:`plan`, once, in place: its message, and a plan error's ``setting`` and ``fix``."""
    exc.args = (python_wording(str(exc)), *exc.args[1:])
    if isinstance(exc, PlanError):
        exc.setting, exc.fix = python_wording(exc.setting), python_wording(exc.fix)


def plan(private, public=None, **keywords):
    """The plan of :func:`fit` with the same arguments, from the declared number of private
    records before any model is trained or budget spent (:mod:`pate.run.planner`): what the
    planner fills in, what to expect and the warnings. Returns a
    :class:`pate.run.planner.Plan`; raises :class:`pate.run.planner.PlanError` (naming the
    keyword and a fix) for a plan that cannot give a useful student. Nothing is written; the
    ledger is only read."""
    from pate.run import planner
    from pate.run.config import planning

    arguments = inspect.signature(fit).bind(private, public, **keywords)
    arguments.apply_defaults()
    given = dict(arguments.arguments, resume=False)
    unused = pathlib.Path(tempfile.gettempdir()) / "pate-plan-unused"
    if given["run_dir"] is None:
        given["run_dir"] = unused
    config, data, identity, _ = _configured(given)
    if data is None:  # the cache of the run dir given (none for the unnamed default)
        data = config.load_data(cache=given["run_dir"] != unused)
    remaining = planner.ledger_remaining(config.privacy.ledger_path(), data, identity)
    try:
        return planning.plan(config, data, remaining_eps=remaining)[1]
    except ConfigError as exc:
        _reword(exc)
        raise


#: ``help(pate.plan)`` shows fit's keywords: plan takes the same (bound against fit's signature)
plan.__signature__ = inspect.signature(fit).replace(return_annotation="Plan")  # type: ignore[attr-defined]


def _configured(given: Mapping[str, Any]):
    """``(config, data, identity, models)`` of fit's / plan's keywords (by name): the typed
    config built from them and validated once, the data given in memory (None for a dataset
    name) and its identity, the model objects given for teacher and student (by stage key).
    A config error names the keyword arguments (:func:`pate.run.config.python_wording`).
    ``threads=`` is checked first, and idle OpenMP threads sleep if torch is not loaded yet
    (:func:`pate.core.threads.prepare_environment`)."""
    from pate.core.threads import check_threads, prepare_environment

    if given["threads"] is not None:
        check_threads(given["threads"], "threads=")
    prepare_environment()
    declared = {
        name: given[name]
        for name in ("classes", "split_column", "evaluation_public", *TABLE_KEYWORDS)
    }
    data, identity, data_table = data_source(
        given["private"], given["public"], given["evaluation"], declared, given["dataset"]
    )
    teacher_value, teacher_object = _model_setting(given["teacher"], "teacher")
    student_value, student_object = _model_setting(given["student"], "student")
    ledger, run_dir = given["ledger"], given["run_dir"]
    release = {name: given[name] for name in RELEASE_DEFAULTS if given[name] is not None}
    try:
        aggregator, no_teachers = _aggregator_table(given)
        if run_dir is None:  # a fresh temporary run directory (refused with resume=True)
            if given["resume"]:
                raise InputTypeError("resume=True needs the run_dir of the run to continue")
            run_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"pate-{given['name']}-")) / "run"
        config = RunConfig.of(
            run=RunTable.of(
                name=given["name"],
                seed=given["seed"],
                device=given["device"],
                threads=given["threads"],
                run_dir=str(run_dir),
            ),
            data=DataTable.of(**dict(data_table, records=given["records"])),
            partition=PartitionTable.of()
            if no_teachers
            else PartitionTable.of(
                num_teachers=given["num_teachers"] or "auto", mode=given["partition"]
            ),
            teachers=TeachersTable.of(**dict(given["teacher_params"] or {}, model=teacher_value)),
            aggregator=aggregator,
            # budget_eps is the dataset's lifetime budget in the ledger, target_eps what this run
            # may spend: left out, the ledger's budget applies (pate.run.stages.authorize)
            privacy=PrivacyTable.of(
                **dict(RELEASE_DEFAULTS, **release),
                delta=given["delta"],
                release=bool(given["release"]),
                conversion=given["conversion"],
                budget_eps=given["budget_eps"],
                dataset=given["dataset"],
                ledger=ledger if isinstance(ledger, bool) else str(pathlib.Path(ledger).resolve()),
            ),
            student=StudentTable.of(**dict(given["student_params"] or {}, model=student_value)),
            knn=KnnTable.of(**(given["knn"] or {})),
        )
    except SettingError as exc:
        raise SettingError(
            exc.table, exc.key, exc.value, f"pate.fit: {python_wording(str(exc))}"
        ) from None
    models = {"teacher_model": teacher_object, "student_model": student_object}
    return config, data, identity, models


def _aggregator_table(given: Mapping[str, Any]) -> tuple[AggregatorTable, bool]:
    """``([aggregator] table, no_teachers)`` of fit's keywords. ``no_teachers``: the mechanism
    reads the private records itself (Private-kNN, class-means)."""
    from pate import mechanisms
    from pate.run import planner
    from pate.run.planner.plan_data import THRESHOLD_FRACTION

    # the registered mechanisms' noise parameters that fit takes, passed on when given
    noise = {
        name: given[name] for name in mechanisms.all_param_names() if given.get(name) is not None
    }
    mechanism, num_teachers, knn = given["mechanism"], given["num_teachers"], given["knn"]
    target_eps = given["target_eps"]
    if mechanism == "auto" and target_eps is None:  # fixed noise: the auto rule's mechanism
        mechanism = planner.FIXED_NOISE_MECHANISM
    spec = mechanisms.get(planner.AUTO_MECHANISM if mechanism == "auto" else mechanism)
    no_teachers = spec.kind.reads_private_records  # Private-kNN: the records vote themselves
    if no_teachers and num_teachers is not None:
        raise InputTypeError(f"mechanism={mechanism!r} trains no teachers: drop num_teachers=")
    # "auto" with a target becomes the planner's choice, which may read the records: knn= applies
    auto_reads = (
        mechanism == "auto"
        and target_eps is not None
        and mechanisms.get(
            planner.auto_mechanism_for(given["teacher"], num_teachers)
        ).kind.reads_private_records
    )
    if knn is not None and not (no_teachers or auto_reads):
        raise InputTypeError(
            f"knn= (the public-fitted embedding) applies to the mechanisms that read "
            f"the private records ('private-knn', 'class-means') only, not "
            f"{mechanism!r}" + (" with teachers" if mechanism == "auto" else "")
        )
    voters = noise.get("k") if no_teachers else num_teachers
    if target_eps is not None:
        for name in spec.calibrated:
            noise.setdefault(name, "auto")
        if "threshold" in spec.param_names and voters is not None:
            noise.setdefault("threshold", THRESHOLD_FRACTION * voters)
    elif not any(name in noise for name in spec.param_names):
        raise InputTypeError(
            "give target_eps= (the noise is calibrated to it) or the noise of "
            f"{mechanism} ({', '.join(f'{name}=' for name in spec.param_names)})"
        )
    table = AggregatorTable.of(
        mechanism=mechanism,
        **noise,
        target_eps=None if target_eps is None else float(target_eps),
        queries=None if given["queries"] is None else int(given["queries"]),
        noise_seed=None if given["noise_seed"] is None else int(given["noise_seed"]),
    )
    return table, no_teachers


def export(run_dir, out, *, labels: bool = False) -> pathlib.Path:
    """Write the publishable bundle of the finished run in ``run_dir`` to the new folder ``out``
    (``pate export``, :mod:`pate.run.export`): the student, the public report and its plots,
    ``manifest.json`` (sha256 of each file); ``labels=True`` adds the released labels. Nothing
    under the run's ``private/`` folder is exported. Returns ``out``."""
    from pate.run.export import export_run

    return export_run(run_dir, out, labels=labels, names=("run_dir", "out"))


def _result(run, report: dict) -> PateResult:
    from pate.core.io import load_npy, read_json
    from pate.run import rundir

    student = run.context.fitted_student
    if student is None:
        from pate.student.train import Student

        student = Student.load(run.path(rundir.STUDENT_WEIGHTS))
    encoder = run.data.encoder  # a table's rows
    if encoder is not None:
        from pate.student.raw_rows import RawRowStudent

        student = RawRowStudent(student, encoder, run.data.class_names)
    internal = read_json(run.path(rundir.REPORT_INTERNAL_JSON))
    scores = run.path(rundir.LABEL_SCORES)
    return PateResult(
        student=student,
        labels=load_npy(run.path(rundir.LABELS)),
        answered_mask=load_npy(run.path(rundir.ANSWERED)),
        epsilon=float(report["privacy"]["eps_guarantee"]),
        delta=float(report["privacy"]["delta"]),
        privacy=internal["privacy"],
        report=report,
        run_dir=run.run_dir,
        label_scores=load_npy(scores) if scores.exists() else None,
        utility=dict(internal.get("utility") or {}),
        warnings=list(internal.get("warnings") or []),
        internal_report=internal,
    )
