"""Running one stage of a run: its prerequisites, the stages that do not apply (recorded as
skipped), and its record in ``stages/<stage>.json``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from pate.analysis.errors import InputError
from pate.core import gpu_memory
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.aggregate import aggregate
from pate.run.stages.analysis import analysis_stage
from pate.run.stages.partition import partition
from pate.run.stages.records import skip_reason
from pate.run.stages.report import report
from pate.run.stages.student import student
from pate.run.stages.teachers import teachers
from pate.run.stages.votes import votes
from pate.teachers.errors import ConfigError


def run_stage(run: Run, stage: str) -> dict:
    """Run ``stage`` of ``run`` (its prerequisite must be done, itself not) and mark it done."""
    import time

    if stage not in STAGE_FUNCTIONS:
        raise InputError(f"stage must be one of {', '.join(rundir.STAGES)}, got {stage!r}")
    # stages that do not apply to this run (and come before this one) are recorded as skipped
    for earlier in rundir.STAGES[: rundir.STAGES.index(stage) + 1]:
        reason = skip_reason(run.config, earlier)
        if reason is None:
            break
        if not run.done(earlier):  # once: a skipped stage keeps its record
            run.start()
            run.mark(earlier, {"skipped": True, "reason": reason, "seconds": 0.0})
        info = run.stage_info(earlier)
        if earlier == stage:
            return info
    before = rundir.PREREQUISITES[stage]
    if before is not None and not run.done(before):
        raise ConfigError(
            f"{run.run_dir}: stage {stage!r} needs stage {before!r} first (run "
            f"`pate {rundir.COMMANDS[before]} --run-dir {run.run_dir}`, or `pate run "
            f"--run-dir {run.run_dir} --resume`)"
        )
    if run.done(stage):
        raise ConfigError(
            f"{run.run_dir}: stage {stage!r} is already done; start a new run directory to redo it"
        )
    run.start()
    from pate.core import threads as cpu_threads

    # [run] threads, else $OMP_NUM_THREADS, else the usable CPUs: the record the summary keeps
    threads = cpu_threads.configure(
        explicit=run.config.run.threads,
        explicit_source=run.context.threads_source,
        torch=stage in rundir.TORCH_STAGES,
    )
    gpu_memory.reset()
    t0 = time.perf_counter()
    with _front_end_device(run, stage):
        info = STAGE_FUNCTIONS[stage](run) or {}
    info["seconds"] = round(time.perf_counter() - t0, 2)
    info["threads"] = threads
    peaks = gpu_memory.peaks()
    if peaks is not None:
        info["gpu_memory"] = peaks  # per CUDA device: the stage's peak (pate.core.gpu_memory)
    return run.mark(stage, info)


def _front_end_device(run: Run, stage: str):
    """A stage that computes with torch computes the ScatterNet front-end on the run's device
    (``[run] device``; a GPU's features are cached under their own key)."""
    if stage not in rundir.TORCH_STAGES:
        return contextlib.nullcontext()
    from pate.teachers.devices import resolve_device
    from pate.teachers.features import computing_on

    try:
        device = resolve_device(run.config.run.device)
    except ValueError:  # a GPU only the cluster's workers have (docs/cluster.md): here the CPU
        device = "cpu"
    return computing_on(device)


STAGE_FUNCTIONS: dict[str, Callable[[Run], dict]] = {
    "partition": partition,
    "teachers": teachers,
    "votes": votes,
    "aggregate": aggregate,
    "student": student,
    "analysis": analysis_stage,
    "report": report,
}
