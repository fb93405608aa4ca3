"""`pate run`: the whole pipeline from a TOML config (see pate.run.pipeline)."""

from __future__ import annotations

import argparse
import json
import pathlib

from pate.analysis.errors import InputError
from pate.run import rundir

#: The config tables whose keys are flags of `pate run` and `pate plan` (docs/cli.md).
RUN_TABLES = ("cluster", "aggregator")


def add_parser(subparsers) -> None:
    from pate.run.config import packaged_configs

    p = subparsers.add_parser(
        "run",
        help="partition -> teachers -> votes -> aggregate -> student -> analysis -> report",
        description=(
            "Run the whole PATE pipeline from a TOML config into a run directory (runs/<name>/ by "
            "default): partition the private data, train the teachers, vote on the public data, "
            "answer queries within the privacy budget (charged to the privacy-budget ledger), "
            "train the student, analyse, and write the privacy report. The config is validated "
            "completely before anything is written. --resume continues an interrupted run without "
            "redoing finished stages or charging any query twice."
        ),
    )
    p.add_argument(
        "--config",
        help="a TOML file, or a config shipped with pate-learn: "
        f"{', '.join(packaged_configs())} (`pate init-config --list`); with "
        "--resume --run-dir DIR it may be left out: the run's own config.json is "
        "used",
    )
    p.add_argument("--run-dir", help="override [run] run_dir (default runs/<name>)")
    p.add_argument("--resume", action="store_true", help="continue the run in the run directory")
    p.add_argument(
        "--until",
        choices=rundir.STAGES,
        help="stop after this stage (run again with --resume to continue)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print report.json on stdout at the end")
    from pate.cli.commands.stage_cli import add_start_arguments, add_threads_argument

    add_threads_argument(p)
    # --backend ray (docs/cluster.md), --target-eps 1, --sigma2 auto
    add_start_arguments(p, RUN_TABLES)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pate.cli.commands.analyze import epsilon_summary
    from pate.cli.commands.stage_cli import mark_threads_flag, start_flags
    from pate.run.config import build, load
    from pate.run.pipeline import Pipeline

    flags = start_flags(args)
    if args.config is None:
        if not (args.resume and args.run_dir):
            raise InputError(
                "--config is required (a TOML file or a packaged name such as "
                "digits); only `pate run --resume --run-dir DIR` may leave it out"
            )
        saved = pathlib.Path(args.run_dir) / rundir.CONFIG
        if not saved.is_file():
            raise FileNotFoundError(
                f"--run-dir {args.run_dir} holds no run ({saved} is missing); "
                "start it with --config FILE"
            )
        config = build(
            json.loads(saved.read_text()), where=str(saved), run_dir=args.run_dir, **flags
        )
    else:
        config = load(args.config, run_dir=args.run_dir, **flags)
    pipeline = Pipeline(config, resume=args.resume, progress=not args.no_progress)
    mark_threads_flag(args, pipeline.ctx)
    result = pipeline.run(until=args.until)
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.until in (None, "report"):
        p, q = result["privacy"], result["queries"]
        print(f"run directory      {pipeline.run_dir}")
        print(f"queries            {q['asked']} asked, {q['answered']} answered")
        print(f"epsilon (delta={p['delta']:g})  {epsilon_summary(p)}")
        for line in internal_summary(pipeline.run_dir / rundir.REPORT_INTERNAL_JSON):
            print(line)
        print(f"report             {pipeline.run_dir / 'report.md'} (publishable)")
        print(f"internal report    {pipeline.run_dir / rundir.REPORT_INTERNAL_MD} (do not publish)")
    else:
        print(
            f"stopped after {args.until}; continue with: pate run --run-dir {pipeline.run_dir} "
            "--resume"
        )
    return 0


def internal_summary(path: pathlib.Path) -> list[str]:
    """The stdout lines of the internal figures (the student on evaluation data not declared
    public, the teachers, the plurality vote), each marked INTERNAL; the student's accuracy
    unmarked where its evaluation data is public."""
    try:
        u = json.loads(path.read_text(encoding="utf-8"))["utility"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    mark = "INTERNAL, do not publish: "
    student = f"student accuracy   {u['student_accuracy']:.4f}"
    if u.get("evaluation_public") is not True:
        student += f" ({mark}evaluation data not declared public)"
    lines = [student]
    if u.get("teacher_mean_accuracy") is not None:  # none without teachers (Private-kNN)
        lines.append(
            f"teachers           {u['teacher_mean_accuracy']:.4f} mean, "
            f"{u['plurality_vote_accuracy']:.4f} plurality vote ({mark}from the private records)"
        )
    return lines
