"""``pate run``: the stages of :mod:`pate.run.stages` in sequence over a run directory, after the
plan (``plan.json``) and :func:`pate.run.stages.preflight`; ``resume=True`` skips finished stages
and continues an interrupted one (what must not change: :func:`pate.run.rundir.comparable`).
How it plans, checks, resumes and draws: docs/pipeline.md."""

from __future__ import annotations

import logging
import os
import pathlib

from pate.analysis.errors import InputError
from pate.run import planner, rundir, stages
from pate.run.config import RunConfig, plan
from pate.run.rundir import Run
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")

#: The run's plan (:mod:`pate.run.planner`), written when the run starts.
PLAN = "plan.json"


class Pipeline:
    """One run of the whole pipeline. Settings ``config`` leaves to the planner are filled in
    here, once (from ``data`` when given in memory); ``ledger_path`` overrides ``[privacy]
    ledger``. Creating it checks the run directory but writes nothing; :meth:`run` does the work."""

    def __init__(
        self,
        config: RunConfig,
        *,
        resume: bool = False,
        progress: bool = True,
        ledger_path: str | os.PathLike | None = None,
        data=None,
    ) -> None:
        if ledger_path is not None:
            config = config.with_ledger(ledger_path)
        run_dir = config.run.directory()
        #: the plan made here, once (:meth:`_plan` logs and writes it)
        self._made_plan = None
        started = (run_dir / rundir.STATE).exists()
        if started and not resume:
            raise ConfigError(
                f"run directory {run_dir} already holds a run; pass --resume to continue it, or "
                "choose another --run-dir / [run] name"
            )
        if config.needs_plan:  # settings left to the planner: filled in before the run opens
            data = config.load_data(run_dir=run_dir) if data is None else data
            config, self._made_plan = plan(config, data)
        if started:
            run = Run.open(run_dir, progress=progress)
            recorded = run.state.get("config_comparable")
            still_open = rundir.open_tables(run)  # [student] until it trained
            now = rundir.comparable(config.to_dict(), ignore=still_open)
            if (
                not isinstance(recorded, dict)
                or rundir.comparable(recorded, ignore=still_open) != now
            ):
                raise ConfigError(_differs(run_dir, recorded, now, ignore=still_open))
            #: a table still open changed: config.json is rewritten once the checks passed
            self._changed = rundir.comparable(recorded) != rundir.comparable(config.to_dict())
            run.config = config  # the device may differ
            self.ctx = run
        else:
            self._changed = False
            self.ctx = Run.create(config, progress=progress, run_dir=run_dir)

    @property
    def run_dir(self) -> pathlib.Path:
        return self.ctx.run_dir

    @property
    def config(self) -> RunConfig:
        return self.ctx.config

    def _plan(self):
        """The plan (``PlanError`` when it cannot give a useful student), logged here and written
        to ``plan.json`` once the run starts; None once the run has one."""
        if self.ctx.done(rundir.STAGES[0]) or (self.run_dir / PLAN).exists():
            return None
        made = self._made_plan
        if made is None:  # nothing was left to the planner: its checks, once
            _, made = plan(self.config, self.ctx.data)
        planner.log_plan(made)
        return made

    def run(self, *, until: str | None = None, internal: bool = False) -> dict:
        """Run (or resume) every stage up to and including ``until``; returns the publishable
        report (with ``internal``, the internal one), or the stage summaries when ``until``
        stops before the report."""
        if until is not None and until not in rundir.STAGES:
            raise InputError(f"until must be one of {', '.join(rundir.STAGES)}, got {until!r}")
        last = rundir.STAGES.index(until) if until is not None else len(rundir.STAGES) - 1
        todo = [s for s in rundir.STAGES[: last + 1] if not self.ctx.done(s)]
        stages.check_device(self.config, todo, context=self.ctx.context)  # before the data is read
        plan = self._plan()
        stages.preflight(self.ctx, stages=todo)
        self.ctx.start()
        if self._changed:  # a corrected [student] table, checked by the preflight
            self.ctx.update_config(self.config)
        if plan is not None:
            planner.write_plan(self.run_dir / PLAN, plan)
        results = {}
        for stage in rundir.STAGES:
            if self.ctx.done(stage):
                logger.info("%s: already done, skipped", stage)
                results[stage] = self.ctx.stage_info(stage)
            else:
                logger.info("%s: running", stage)
                results[stage] = stages.run_stage(self.ctx, stage)
                logger.info("%s: done in %.1f s", stage, results[stage]["seconds"])
            if stage == until:
                return results
        from pate.core.io import read_json

        return read_json(
            self.run_dir / (rundir.REPORT_INTERNAL_JSON if internal else rundir.REPORT_JSON)
        )


def _differs(run_dir, recorded, now: dict, *, ignore=()) -> str:
    """Why a config cannot resume ``run_dir``: the first key that differs, by name, and what
    works instead."""
    where = "the configuration"
    if isinstance(recorded, dict):
        recorded = rundir.comparable(recorded, ignore=ignore)
        for table in sorted(set(recorded) | set(now)):
            a, b = recorded.get(table, {}), now.get(table, {})
            if a != b and isinstance(a, dict) and isinstance(b, dict):
                key = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))[0]
                where = (
                    f"[{table}] {key} (started with {a.get(key, '(unset)')!r}, now "
                    f"{b.get(key, '(unset)')!r})"
                )
                break
    return (
        f"--resume: {where} differs from the configuration {run_dir} was started with (its "
        f"config.json); continue it as it was with `pate run --run-dir {run_dir} --resume`, "
        "or start a new run (another --run-dir / [run] name, or fork_run to keep its "
        "teachers)"
    )


def fork_run(source, config: dict) -> pathlib.Path:
    """A new run directory (``config``'s) started from a finished run's partition, teachers and
    votes (:func:`pate.run.stages.fork`); finish it with ``Pipeline(config, resume=True).run()``."""
    return stages.fork(source, config)
