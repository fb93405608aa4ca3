"""The checks before any work: the device, the run folder can be written, the data's sizes, the
student can be built, the ledger's dataset and budget."""

from __future__ import annotations

import numpy as np

from pate.core.io import check_writable_dir
from pate.run import rundir
from pate.run.config import assignment
from pate.run.rundir import Run, RunContext
from pate.run.stages.budget import authorize, check_budget_fits, resolve_budget_without_ledger
from pate.run.stages.partition import unit_ids_of
from pate.run.stages.records import check_records_data, skip_reason
from pate.teachers.errors import ConfigError


def is_estimator(model) -> bool:
    """A scikit-learn estimator given from Python (a student trained by ``_sklearn_student``)."""
    return hasattr(model, "fit") and hasattr(model, "get_params")


def _computes_here(config: dict, stage: str, context: RunContext | None) -> bool:
    """Whether ``stage`` trains a torch model on this machine's ``[run] device``: a torch student,
    and the teachers on the local backend (a cluster's workers check their own devices)."""
    if stage == "student":
        model = config.student.model  # None: "auto"
        if isinstance(model, str) and model.startswith("python:"):
            return not is_estimator(context and context.student_model)
        return True
    return (
        stage == "teachers"
        and skip_reason(config, "teachers") is None
        and config.cluster.backend == "local"
    )


def check_device(config: dict, stages=rundir.STAGES, *, context: RunContext | None = None) -> None:
    """Refuse a ``[run] device`` this machine lacks before any of ``stages`` that computes here
    runs (else a run without teachers would charge its answers, then fail in its student)."""
    users = [stage for stage in stages if _computes_here(config, stage, context)]
    if not users:
        return
    from pate.teachers.devices import resolve_device

    device = config.run.device
    try:
        resolve_device(device)
    except ValueError as exc:
        raise ConfigError(
            f"[run] device = {device!r} (used by the {' and '.join(users)} "
            f"stage{'s' if len(users) > 1 else ''}): {exc}; nothing was written, "
            "drawn or charged"
        ) from None


def check_data(run: Run) -> None:
    """Checks that need the dataset's sizes (before anything is written)."""
    data, s = run.data, run.config
    queries = s.aggregator.queries
    if queries is not None and queries > len(data.public):
        raise ConfigError(
            f"[aggregator] queries ({queries}) exceeds the {len(data.public)} "
            f"public items of {data.name}"
        )
    if s.aggregator.spec.kind.reads_private_records:
        check_records_data(run)
        return
    k = s.partition.num_teachers
    if k > len(data.private):
        raise ConfigError(
            f"[partition] num_teachers ({k}) exceeds the {len(data.private)} "
            f"private records of {data.name}"
        )
    unit_ids = unit_ids_of(run)
    if unit_ids is None:
        return
    where = "[partition] unit_ids" if data.unit_ids is None else "the id column ([data] id)"
    if unit_ids.shape[0] != len(data.private):
        raise ConfigError(
            f"{where} has {unit_ids.shape[0]} ids but the private "
            f"split has {len(data.private)} records"
        )
    people = np.unique(unit_ids.astype(str)).size
    if k > people:
        raise ConfigError(
            f"[partition] num_teachers ({k}) exceeds the {people} people ({where}) of "
            f"{data.name}: a person's rows go to one teacher"
        )


def check_writable(run: Run) -> None:
    """Every folder the run writes can be written, creating nothing."""
    check_writable_dir(run.run_dir, label="--run-dir")
    for name in (
        rundir.PRIVATE_DIR,
        rundir.STAGE_DIR,
        rundir.TEACHERS,
        rundir.PLOTS_DIR,
        rundir.PRIVATE_PLOTS_DIR,
    ):
        check_writable_dir(run.path(name), label="the run's folder")


def check_student_model(run: Run) -> None:
    """The student the run will train can be built (its ``[student] model`` resolved and its
    network built for the data's shape, no training), checked before anything is charged."""
    from pate.teachers.models import auto_model_name, build_model

    data = run.data
    setting = run.config.student_settings().get("model", "auto")
    try:
        model = run.python_object("student_model", setting)
        if is_estimator(model):
            return
        if model == "auto":
            model = auto_model_name(tuple(data.input_shape))
        build_model(model, input_shape=data.input_shape, num_classes=data.num_classes)
    except ConfigError:
        raise
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        fix = (
            ""
            if not run.started
            else " Correct it and resume: the student's settings may change until it trained "
            f"(`pate run --run-dir {run.run_dir} --resume --config FILE`)."
        )
        raise ConfigError(
            f"{assignment('student', 'model', setting)}: "
            f"{exc}; the student cannot be built, so the run was refused before anything was "
            "written, drawn or charged (the student is a zoo network, a "
            "'package.module:factory' returning a torch.nn.Module or a scikit-learn "
            f"estimator, or an estimator given from Python).{fix}"
        ) from None


def preflight(run: Run, *, stages=rundir.STAGES) -> None:
    """Everything that can fail before any work or file for ``stages`` (those about to run): the
    device, a writable run folder, the run in its own directory, data sizes, a buildable student,
    the ledger's dataset and budget, and that the ledger covers the planned worst case."""
    check_device(run.config, stages, context=run.context)
    check_writable(run)
    if "aggregate" in stages:
        run.check_not_a_copy()
    check_data(run)
    if not run.done("student") and any(
        s in stages for s in rundir.STAGES[: rundir.STAGES.index("student") + 1]
    ):
        check_student_model(run)
    ledger = run.ledger()
    if ledger is None:
        resolve_budget_without_ledger(run)
        return
    try:
        dataset = authorize(run, ledger)
        # nothing drawn yet: not published (aggregate.json, maybe before its stage file), no
        # pending answers (the resume charges and publishes those, whatever is left)
        drawing = not any(
            run.path(name).exists() for name in (rundir.AGGREGATE, rundir.PENDING)
        ) and not run.done("aggregate")
        if drawing and any(
            s in stages for s in rundir.STAGES[: rundir.STAGES.index("aggregate") + 1]
        ):
            check_budget_fits(run, ledger, dataset)
    finally:
        ledger.close()
