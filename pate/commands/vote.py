"""`pate vote`: the teachers' vote matrix on the public split, for the aggregator.

Reads ``<run_dir>/teachers/predictions.npz`` (written by ``pate train-teachers``) and
``metrics.json`` (for the number of classes), counts the votes with
:func:`pate.votes.votes_from_predictions` and writes ``<run_dir>/votes.npy`` atomically.
Only the shape is printed: votes are sensitive. No torch import.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "vote",
        help="count the teachers' votes on the public split (writes votes.npy)",
        description=(
            "Build the (queries, classes) vote matrix from the teachers' predictions on the "
            "public split (<run-dir>/teachers/predictions.npz) and write <run-dir>/votes.npy for "
            "`pate aggregate`. Only its shape is printed."))
    p.add_argument("--run-dir", required=True, help="run directory of `pate train-teachers`")
    p.add_argument("--overwrite", action="store_true", help="replace an existing votes.npy")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from pate.votes import VOTES_FILENAME, describe_votes, save_votes, votes_from_predictions

    run_dir = Path(args.run_dir)
    teachers_dir = run_dir / "teachers"
    preds_path, metrics_path = teachers_dir / "predictions.npz", teachers_dir / "metrics.json"
    if not preds_path.is_file() or not metrics_path.is_file():
        raise FileNotFoundError(f"no finished teacher ensemble in {str(teachers_dir)!r} (missing "
                                f"predictions.npz or metrics.json); run `pate train-teachers "
                                f"--run-dir {run_dir}` (with --resume if it was interrupted)")
    target = run_dir / VOTES_FILENAME
    if target.exists() and not args.overwrite:
        raise ValueError(f"{str(target)!r} already exists; pass --overwrite to rebuild it")
    try:
        metrics = json.loads(metrics_path.read_text())
        num_classes = int(metrics["num_classes"])
        with np.load(preds_path, allow_pickle=False) as npz:
            public = npz["public"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{str(teachers_dir)!r} holds unreadable teacher outputs ({exc}); "
                         "re-run `pate train-teachers`") from None
    votes = votes_from_predictions(public, num_classes=num_classes)
    path = save_votes(run_dir, votes)
    summary = {"votes": str(path), "queries": int(votes.shape[0]),
               "classes": int(votes.shape[1]), "teachers": int(public.shape[0])}
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(f"votes: {describe_votes(votes)}; wrote {path}")
    return 0
