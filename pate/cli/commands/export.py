"""`pate export RUN_DIR OUT`: the publishable bundle of a finished run (:mod:`pate.run.export`)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write the publishable bundle of a finished run (student, public report, manifest)",
        description=(
            "Write the part of a finished run that may be shared into the new folder OUT: the "
            "released student (student.pt), the public report (report.md, report.html, "
            "report.json) and its publishable plots, and manifest.json (each file's sha256 and "
            "what it is). Nothing under RUN_DIR/private/ (the partition, the teachers, the "
            "votes, the analysis, the internal report, the keys) is ever exported; a run whose "
            "report is missing or unfinished is refused. OUT must not exist or be empty."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory of a finished run")
    p.add_argument("out", metavar="OUT", help="the new folder of the bundle")
    p.add_argument(
        "--labels",
        action="store_true",
        help="add the released labels (labels.npy, answered.npy and, for class-means, "
        "label_scores.npy: outputs of the charged mechanism)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pate.run.export import MANIFEST, export_run

    out = export_run(args.run_dir, args.out, labels=args.labels)
    print(out / MANIFEST)
    return 0
