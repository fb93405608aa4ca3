"""`pate report`: (re)generate a run's privacy report from its analysis.json (no torch import)."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="write the auditor-ready privacy report of a run (report.json/.md/.html, plots)",
        description=(
            "Regenerate the privacy reports of a run from RUN_DIR/analysis.json (written by the "
            "pipeline's analysis stage). The publishable report: report.json, report.md, "
            "report.html (self-contained, renders offline) and plots/*.png, holding only what "
            "was declared public, charged or derived from those (docs/publishing.md). The "
            "internal report, everything else marked NOT PRIVATE (the smooth sensitivity, the "
            "data-dependent epsilon, the teachers' figures, the vote margins): "
            "private/report_internal.md and .json, private/plots/*.png. No privacy number is "
            "recomputed and the votes are not read."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (holds analysis.json)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print report.json on stdout instead of the paths written",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pate.run import rundir, stages
    from pate.run.report import INTERNAL_REPORT_FILES, REPORT_FILES, write_report

    run_dir = Path(args.run_dir)
    if (run_dir / rundir.STATE).exists() and not (
        run_dir / rundir.STAGE_DIR / "report.json"
    ).exists():
        # a run directory: the report stage, marked done like `pate run` marks it
        run = rundir.Run.open(run_dir, progress=False)
        if not run.done("analysis"):
            from pate.teachers.errors import ConfigError

            raise ConfigError(
                f"{run_dir}: the report needs the analysis stage first: "
                f"pate analyze --run-dir {run_dir}"
            )
        stages.run_stage(run, "report")
        report = rundir.read_summary(run_dir / rundir.REPORT_JSON, frozenset({"plots", "warnings"}))
    else:  # a finished run, or a bare analysis.json: regenerate
        report = write_report(args.run_dir)
    if args.json:
        sys.stdout.write((run_dir / "report.json").read_text(encoding="utf-8"))
        return 0
    for name in REPORT_FILES:
        print(run_dir / name)
    for rel in report["plots"].values():
        print(run_dir / rel)
    for name in INTERNAL_REPORT_FILES:
        print(f"{run_dir / name} (internal: do not publish)")
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
