"""The Python API: sensitive data -> teachers -> noisy labels -> student -> epsilon, in one call.

``pate.fit`` runs the very stages of ``pate run`` (:mod:`pate.run.stages`) on data given in memory
(numpy arrays, torch ``Dataset``/``DataLoader``) or by name (``"digits"``, ``"npz:PATH"``,
``"csv:PATH"``, ``"imagefolder:PATH"``, ``"fashion-mnist"``), with teacher and student models
given as Python objects: a factory returning a ``torch.nn.Module`` (e.g. ``lambda:
nn.Sequential(...)``, or one taking ``input_shape=`` / ``num_classes=``), a scikit-learn
estimator (a ``Pipeline`` too) or a zoo name. It charges the same ledger, writes the same run
directory and report, and returns the trained student, the released labels and the privacy
figures::

    import pate
    result = pate.fit((x_private, y_private), x_public, evaluation=(x_eval, y_eval),
                      records=5000, teacher=make_net, num_teachers=50, target_eps=2.0,
                      delta=1e-5)
    result.student.predict(x_new), result.epsilon, result.report_path

Noise: give the mechanism's parameters (``threshold=, sigma1=, sigma2=`` for Confident GNMax,
``sigma=`` for GNMax, ``scale=`` for LNMax; ``mechanism="private-knn"`` takes ``k=,
sampling_rate=, threshold=, sigma1=, sigma2=`` and ``knn={"features": ..., "dims": ...}``, and
``mechanism="class-means"`` takes ``sigma=`` and optionally ``count_weight=`` (default 0.3; one
release labels every query) and ``knn=`` too,
with ``"rule": "lda"`` or ``"logistic"`` (how the release labels: :mod:`pate.core.mean_release`);
both train no teachers: ``teacher`` and ``num_teachers`` are not used), or ``target_eps`` to calibrate them
(:func:`pate.run.config.calibration`: the smallest noise whose data-independent cost of ``queries``
queries, all answered, is at most ``target_eps``; like Opacus' ``make_private_with_epsilon``).
The noise comes from OS entropy unless ``noise_seed`` is given (the run is then NOT private).

Declared facts (public, never read from the private records; docs/publishing.md): ``classes``
declares the label set (class names; label ``i`` is ``classes[i]``; else the public labels or a
built-in dataset's names), and a private or evaluation label outside it is refused before
anything is spent. ``records`` is the approximate number of private records (needed for your
own data; a built-in dataset such as ``"digits"`` declares its own): the plan, the report and
the student are sized from it, never from the exact count, which is internal; a declaration more
than a factor 2 away from the true count is refused before any work. For a source that is one
pool of records (``csv:``, an npz ``x, y``): ``split_column`` names the column / array marking
each row private, public or evaluation (default ``"split"``), ``evaluation_public=True``
declares the rows marked evaluation public (``[data]`` keys of the same names;
:mod:`pate.teachers.data`). ``dataset`` names the private records in the report and the ledger
(default for arrays: ``"in-memory data"``; never derived from the records; a name another set of
records holds gets a number).

Symbols
-------
``fit(private, public=None, *, evaluation=None, teacher, num_teachers=None, ...) -> PateResult``
``plan(...) -> pate.run.planner.Plan``  the same arguments: the plan, before anything is read, trained or spent
``export(run_dir, out, *, labels=False) -> pathlib.Path``  the publishable bundle of a finished run
``PateResult``
    ``student`` (fitted: ``predict``, ``score``), ``labels`` ((public,) int64, -1 = not
    answered), ``answered_mask``, ``epsilon`` (the guarantee), ``delta``, ``privacy`` (every
    figure of ``analysis.json``: internal), ``report`` (``report.json``: the publishable
    report), ``internal_report`` (``private/report_internal.json``: never publish it),
    ``run_dir``, ``report_path``,
    ``label_scores`` ((public, classes) class scores of the labelling rule, NaN where not
    answered, for mechanisms that publish them -- class-means -- else None; a student trains to
    their softmax with ``student_params={"targets": "soft"}``), ``utility`` (what the run is
    worth: student, teachers' mean and plurality-vote accuracy, answered labels and their
    agreement with the plurality vote, the majority-class rate -- internal, except what
    ``report["utility"]`` repeats; ``print(result)`` marks them) and ``warnings``
    (the report's: a student near chance or far below its labels or the plurality vote, too few
    labels, a too-short student, unscaled inputs to a raw model; each says what to change).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np

from pate.run.memory_data import data_source
from pate.run.planner import PlanError  # what plan() and fit() raise for an unusable plan

__all__ = ["fit", "plan", "export", "PateResult", "PlanError"]

#: A threshold fixed before any data is seen: the teachers must agree at 80 % (Scalable PATE's
#: MNIST setting is T = 200 of 250 teachers).
DEFAULT_THRESHOLD_FRACTION = 0.8
#: The sanitized release's parameters when ``release=True`` and none are given (the
#: Fashion-MNIST config's: order 10 < 1 / (2 beta) = 12.5).
DEFAULT_RELEASE = {"release_order": 10.0, "release_beta": 0.04, "release_sigma_ss": 6.0}
_NOISE_PARAMS = ("threshold", "sigma1", "sigma2", "sigma", "scale")


@dataclasses.dataclass(frozen=True)
class PateResult:
    """What :func:`fit` returns (see the module docstring)."""

    student: Any
    labels: np.ndarray
    answered_mask: np.ndarray
    epsilon: float
    delta: float
    #: every privacy figure of ``analysis.json`` (INTERNAL: the smooth sensitivity, the
    #: data-dependent epsilon; publish ``report["privacy"]`` instead)
    privacy: dict
    #: the publishable report (``report.json``): only what may be published
    report: dict
    run_dir: pathlib.Path
    label_scores: np.ndarray | None = None
    #: what the run is worth (the internal report's ``utility``): ``student_accuracy``,
    #: ``teacher_mean_accuracy``, ``plurality_vote_accuracy``, ``answered_labels``,
    #: ``answered_plurality_agreement``, ``label_accuracy_answered``,
    #: ``majority_class_rate``, ``chance_rate``, ``student_steps``; INTERNAL except what
    #: ``report["utility"]`` repeats
    utility: dict = dataclasses.field(default_factory=dict)
    #: the report's warnings (utility first: each says what to change), also logged; those that
    #: fire on internal figures start with "INTERNAL (do not publish):"
    warnings: list = dataclasses.field(default_factory=list)
    #: the internal report (``private/report_internal.json``): everything, internal figures
    #: included; never publish it
    internal_report: dict = dataclasses.field(default_factory=dict)

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
        return (
            f"PateResult(epsilon={self.epsilon:.4g}, delta={self.delta:g}, answered="
            f"{int(self.answered_mask.sum())}/{self.labels.size}{extra}, "
            f"run_dir={str(self.run_dir)!r})"
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
    raise TypeError(
        f"{what} must be a zoo name (e.g. 'mlp', 'cnn28'), a factory returning a "
        f"torch.nn.Module, or a scikit-learn estimator; got {type(model).__name__}"
    )


# ------------------------------------------------------------------------------ fit


def fit(
    private,
    public=None,
    *,
    evaluation=None,
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
    partition: str = "random",
    teacher_params: dict | None = None,
    student_params: dict | None = None,
    progress: bool = False,
    resume: bool = False,
    threads: int | None = None,
) -> PateResult:
    """Train teachers on ``private``, label ``public`` privately, train the student; return it
    with the labels and the privacy figures (see the module docstring).

    ``private`` is ``(x, y)`` (or a torch Dataset/DataLoader of pairs, or a dataset name / source
    string, then ``public`` and ``evaluation`` come from that source's splits); ``public`` the
    public inputs (labels, if given, are used to report label accuracy and, with no
    ``classes``, give the label set); ``evaluation`` labelled held-out data for the report.
    ``classes``, ``records``, ``split_column``, ``evaluation_public`` and ``dataset`` are the
    public facts the user declares (module docstring, "Declared facts"). ``budget_eps`` is the
    dataset's lifetime
    budget in the ledger, registered the first time the records are charged (default then:
    ``target_eps``; afterwards the ledger's applies, and a different ``budget_eps`` is refused:
    raise it with ``pate.ledger.Ledger(path).set_budget`` or ``pate budget set``); ``target_eps``
    is what this run may spend, refused before any training when the ledger has less left.
    ``num_teachers``, ``queries`` (how many public items are asked) and ``mechanism="auto"`` are
    chosen by the planner when left out (:func:`plan` shows its choice and refuses, before any
    work, a run that cannot give a useful student: :mod:`pate.run.planner`). ``teacher_params`` /
    ``student_params`` are ``[teachers]`` / ``[student]``
    settings (e.g. ``{"epochs": 20}``). ``resume=True`` continues ``run_dir`` (same data, same
    models). ``threads`` is the number of CPU threads to compute with (``[run] threads``; left
    out: ``$OMP_NUM_THREADS``, else the CPUs this process may use: :mod:`pate.core.threads`).
    """
    _prepare_threads(threads)
    config, data, _, teacher_object, student_object = _prepare(_arguments(locals()))
    return _run_pipeline(
        config,
        data,
        models={"teacher_model": teacher_object, "student_model": student_object},
        resume=resume,
        progress=progress,
        threads_given=threads is not None,
    )


def _run_pipeline(
    config: dict, data, *, models: dict, resume: bool, progress: bool, threads_given: bool
) -> PateResult:
    """Run every stage of ``config`` (on ``data`` when given in memory, with the caller's model
    objects ``models`` that are not None) and return the result."""
    from pate.run import config as C
    from pate.run.pipeline import Pipeline

    pipeline = Pipeline(config, resume=resume, progress=progress, wording="python")
    pipeline.ctx.context.caller = C.PYTHON_SOURCE  # messages name keyword arguments
    if threads_given:
        pipeline.ctx.context.threads_source = "keyword"
    if data is not None:
        pipeline.ctx.provide_data(data)
    for key, model in models.items():
        if model is not None:
            setattr(pipeline.ctx.context, key, model)
    report = pipeline.run()
    return _result(pipeline.ctx, report)


def plan(
    private,
    public=None,
    *,
    evaluation=None,
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
    partition: str = "random",
    teacher_params: dict | None = None,
    student_params: dict | None = None,
    progress: bool = False,
    resume: bool = False,
    threads: int | None = None,
):
    """The plan of :func:`fit` with the same arguments, made from the declared number of private
    records (``records=``) before any model is trained or any budget is spent
    (:mod:`pate.run.planner`): what the
    planner fills in (``num_teachers``, ``queries``, the threshold, the mechanism when "auto"),
    what to expect (records per teacher, noise relative to the ensemble, the answers the budget
    buys, the guarantee) and the warnings. Returns a :class:`pate.run.planner.Plan`; raises
    :class:`pate.run.planner.PlanError` (naming the keyword argument and a fix) when the plan cannot
    give a useful student. Nothing is written; the ledger is only read (what it has left).
    ``threads`` is checked and kept in the plan's config; the plan itself sets no thread count."""
    _prepare_threads(threads)
    import tempfile

    from pate.run import planner as P

    unused = pathlib.Path(tempfile.gettempdir()) / "pate-plan-unused"
    if run_dir is None:
        run_dir = unused
    arguments = _arguments(locals())
    arguments["resume"] = False
    from pate.run import config as C

    config, data, identity, _, _ = _prepare(arguments)
    if data is None:  # the cache of the run dir given (none for the unnamed default)
        data = C.load_data(config, cache=arguments["run_dir"] != unused)
    remaining = P.ledger_remaining(C.ledger_path(config), data, identity)
    facts = C.plan_facts(config, data, "python")
    return C.plan_for(config, facts, wording="python", remaining_eps=remaining)


def _prepare_threads(threads) -> None:
    """Check ``threads=`` before any work, and make idle OpenMP threads sleep if torch is not
    loaded yet (:func:`pate.core.threads.prepare_environment`; where it is, the first stage's log line
    says that it was too late: :func:`pate.core.threads.configure`)."""
    from pate.core import threads as T

    if threads is not None:
        T.check_threads(threads, "threads=")
    T.prepare_environment()


def _arguments(scope: dict) -> dict:
    """The keyword arguments of fit/plan from their local scope (the same names)."""
    import inspect

    names = inspect.signature(fit).parameters
    return {name: scope[name] for name in names}


def _fit_arguments(*args, **kwargs) -> dict:
    """fit's arguments by name (its defaults filled in) of the call ``fit(*args, **kwargs)``:
    what :func:`_prepare` takes."""
    import inspect

    bound = inspect.signature(fit).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


# the noise and mechanism parameters of fit/plan, passed on to [aggregator] when given
_NOISE_KEYWORDS = (
    "threshold",
    "sigma1",
    "sigma2",
    "sigma",
    "scale",
    "k",
    "sampling_rate",
    "count_weight",
)
# fit's keywords that make the [privacy] table (:func:`_privacy_table`)
_PRIVACY_KEYWORDS = (
    "delta",
    "release",
    "conversion",
    "release_order",
    "release_beta",
    "release_sigma_ss",
    "budget_eps",
    "dataset",
)


def _prepare(arguments: dict):
    """``(config, data, identity, teacher_object, student_object)`` of fit's / plan's keyword
    arguments (by name, :func:`_arguments`): the config validated, the data given in memory
    (None for a dataset name), its identity, the model objects given for teacher and student."""
    from pate.run import config as C

    a = arguments
    declared = {k: a[k] for k in ("classes", "split_column", "evaluation_public")}
    data, identity, data_table = data_source(
        a["private"], a["public"], a["evaluation"], declared, a["dataset"]
    )
    if a["records"] is not None:
        data_table["records"] = a["records"]
    raw, teacher_object, student_object = _raw_config(a, data_table)
    run_dir = _run_dir(a["run_dir"], name=a["name"], resume=a["resume"])
    ledger = a["ledger"]
    ledger_setting = ledger if isinstance(ledger, bool) else str(pathlib.Path(ledger).resolve())
    config = C.from_dict(
        raw,
        source="pate.fit",
        run_dir=str(run_dir),
        ledger=False
        if ledger_setting is False
        else (None if ledger_setting is True else ledger_setting),
        data=data,
        wording="python",
    )
    return config, data, identity, teacher_object, student_object


def _raw_config(a: dict, data_table: dict) -> tuple[dict, Any, Any]:
    """``(raw config, teacher_object, student_object)`` of fit's keyword arguments ``a``, before
    validation; ``data_table`` is the ``[data]`` table (:func:`pate.run.memory_data.data_source`)."""
    given = {name: a[name] for name in _NOISE_KEYWORDS if a[name] is not None}
    num_teachers, knn, threads = a["num_teachers"], a["knn"], a["threads"]
    aggregator, no_teachers = _aggregator_table(
        a["mechanism"],
        given,
        num_teachers=num_teachers,
        knn=knn,
        target_eps=a["target_eps"],
        queries=a["queries"],
        noise_seed=a["noise_seed"],
    )
    privacy = _privacy_table(**{name: a[name] for name in _PRIVACY_KEYWORDS})
    teacher_value, teacher_object = _model_setting(a["teacher"], "teacher")
    student_value, student_object = _model_setting(a["student"], "student")
    raw = {
        "run": {
            "name": a["name"],
            **({} if a["seed"] is None else {"seed": a["seed"]}),
            "device": a["device"],
            **({} if threads is None else {"threads": threads}),
        },
        "data": data_table,
        "partition": {
            "num_teachers": "auto" if num_teachers is None else num_teachers,
            "mode": a["partition"],
        },
        "teachers": dict(a["teacher_params"] or {}, model=teacher_value),
        "aggregator": aggregator,
        "privacy": privacy,
        "student": dict(a["student_params"] or {}, model=student_value),
    }
    if no_teachers:
        del raw["partition"]
        if knn is not None:
            raw["knn"] = dict(knn)
    return raw, teacher_object, student_object


def _aggregator_table(
    mechanism: str, given: dict, *, num_teachers, knn, target_eps, queries, noise_seed
) -> tuple[dict, bool]:
    """``([aggregator] table, no_teachers)`` of fit's arguments; ``given``: the noise and
    mechanism parameters passed (not None). ``no_teachers``: the mechanism reads the private
    records itself (Private-kNN, class-means)."""
    from pate import mechanisms
    from pate.run import planner as P

    given = dict(given)
    if mechanism == "auto" and target_eps is None:  # fixed noise: the auto rule's mechanism
        mechanism = P.FIXED_NOISE_MECHANISM
    spec = mechanisms.get(P.AUTO_MECHANISM if mechanism == "auto" else mechanism)
    no_teachers = spec.kind.reads_private_records  # Private-kNN: the records vote themselves
    if no_teachers and num_teachers is not None:
        raise TypeError(f"mechanism={mechanism!r} trains no teachers: drop num_teachers=")
    if knn is not None and not no_teachers:
        raise TypeError(
            f"knn= (the public-fitted embedding) applies to the mechanisms that read "
            f"the private records ('private-knn', 'class-means') only, not "
            f"{mechanism!r}"
        )
    voters = given.get("k") if no_teachers else num_teachers
    if target_eps is not None:
        for key in spec.calibrated:
            given.setdefault(key, "auto")
        if "threshold" in spec.param_names and voters is not None:
            given.setdefault("threshold", DEFAULT_THRESHOLD_FRACTION * voters)
    elif not any(key in given for key in spec.param_names):
        raise TypeError(
            "give target_eps= (the noise is calibrated to it) or the noise of "
            f"{mechanism} ({', '.join(f'{k}=' for k in spec.param_names)})"
        )
    aggregator = dict(mechanism=mechanism, **given)
    if target_eps is not None:
        aggregator["target_eps"] = float(target_eps)
    if queries is not None:
        aggregator["queries"] = int(queries)
    if noise_seed is not None:
        aggregator["noise_seed"] = int(noise_seed)
    return aggregator, no_teachers


def _privacy_table(
    *,
    delta,
    release,
    conversion,
    release_order,
    release_beta,
    release_sigma_ss,
    budget_eps,
    dataset,
) -> dict:
    """The ``[privacy]`` table of fit's arguments (the release's defaults: ``DEFAULT_RELEASE``)."""
    release_params = {
        k: v
        for k, v in (
            ("release_order", release_order),
            ("release_beta", release_beta),
            ("release_sigma_ss", release_sigma_ss),
        )
        if v is not None
    }
    # budget_eps is the dataset's lifetime budget in the ledger, target_eps what this run may
    # spend: left out, the ledger's budget applies (pate.run.stages.authorize)
    privacy = dict(
        DEFAULT_RELEASE, **release_params, delta=delta, release=bool(release), conversion=conversion
    )
    if budget_eps is not None:
        privacy["budget_eps"] = budget_eps
    if dataset is not None:
        privacy["dataset"] = dataset
    return privacy


def _run_dir(run_dir, *, name: str, resume: bool):
    """``run_dir``, or a fresh temporary one when left out (refused with ``resume=True``)."""
    if run_dir is None:
        import tempfile

        if resume:
            raise TypeError("resume=True needs the run_dir of the run to continue")
        run_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"pate-{name}-")) / "run"
    return run_dir


def export(run_dir, out, *, labels: bool = False) -> pathlib.Path:
    """Write the publishable bundle of the finished run in ``run_dir`` to the new folder ``out``
    (``pate export``, :mod:`pate.run.export`): the student, the public report and its plots,
    ``manifest.json`` (sha256 of each file); ``labels=True`` adds the released labels. Nothing
    under the run's ``private/`` folder is exported. Returns ``out``."""
    from pate.run.export import export_run

    return export_run(run_dir, out, labels=labels, names=("run_dir", "out"))


def _result(run, report: dict) -> PateResult:
    from pate.core.io import load_npy, read_json
    from pate.run import rundir as R

    student = run.context.fitted_student
    if student is None:
        from pate.student.train import Student

        student = Student.load(run.path(R.STUDENT_WEIGHTS))
    internal = read_json(run.path(R.REPORT_INTERNAL_JSON))
    scores = run.path(R.LABEL_SCORES)
    return PateResult(
        student=student,
        labels=load_npy(run.path(R.LABELS)),
        answered_mask=load_npy(run.path(R.ANSWERED)),
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
