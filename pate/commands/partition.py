"""`pate partition`: split the sensitive records among the teachers (writes partition.npz).

No torch import: the command starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "partition",
        help="split the sensitive records into disjoint teacher shards",
        description=(
            "Assign every sensitive record to exactly one teacher and save the assignment, its "
            "seed and a digest of the ids to <run-dir>/partition.npz. Give the records as a count "
            "(--num-records, random split), as their labels (--labels, stratified by default) or "
            "as one privacy-unit id per record (--unit-ids: all records of a unit, e.g. a "
            "patient, go to the same teacher, so the guarantee is per unit)."))
    p.add_argument("--run-dir", required=True, help="run directory (created if missing)")
    p.add_argument("--num-teachers", required=True, type=int, help="number of teachers K")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--num-records", type=int, help="number of sensitive records N")
    src.add_argument("--labels", help="(N,) integer labels of the records (.npy)")
    src.add_argument("--unit-ids", help="(N,) privacy-unit id of each record (.npy, int or str)")
    p.add_argument("--num-classes", type=int,
                   help="number of classes of --labels (default: max label + 1)")
    p.add_argument("--mode", choices=("random", "stratified", "unit"),
                   help="split mode (default: random with --num-records, stratified with "
                        "--labels, unit with --unit-ids)")
    rnd = p.add_mutually_exclusive_group(required=True)
    rnd.add_argument("--seed", type=int, help="root seed of the run (reproducible split)")
    rnd.add_argument("--secure", action="store_true",
                     help="draw the split from OS entropy (no seed; not reproducible)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing partition.npz (teachers trained on the old split "
                        "become invalid)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=run)


def _load_array(path: str, flag: str):
    import numpy as np

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{flag}: no file at {path!r}")
    try:
        return np.load(file, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{flag}: {path!r} is not a readable .npy array without pickles "
                         f"({exc})") from None


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from analysis.validation import check_int
    from pate.partition import (PARTITION_FILENAME, partition_by_unit, partition_random,
                                partition_stratified)
    from pate.rng import make_streams

    # ---- validate everything before touching the disk or drawing randomness
    num_teachers = check_int(args.num_teachers, "--num-teachers", minimum=1)
    if args.seed is not None:
        check_int(args.seed, "--seed", minimum=0)
    default_mode = ("random" if args.num_records is not None
                    else "stratified" if args.labels is not None else "unit")
    mode = args.mode or default_mode
    if mode == "unit" and args.unit_ids is None:
        raise ValueError("--mode unit needs --unit-ids (one privacy-unit id per record)")
    if mode == "stratified" and args.labels is None:
        raise ValueError("--mode stratified needs --labels")
    if args.unit_ids is not None and mode != "unit":
        raise ValueError(f"--unit-ids is given but --mode is {mode!r}; a unit split is the only "
                         "one that keeps each unit in one shard: drop --mode or use --mode unit")
    if args.num_classes is not None and args.labels is None:
        raise ValueError("--num-classes only applies with --labels")
    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--run-dir {args.run_dir!r} exists and is not a directory")
    target = run_dir / PARTITION_FILENAME
    if target.exists() and not args.overwrite:
        raise ValueError(f"{str(target)!r} already exists; teachers may have been trained on it. "
                         "Use a new --run-dir, or --overwrite to replace it")

    labels = unit_ids = None
    if args.labels is not None:
        labels = _load_array(args.labels, "--labels")
        if labels.ndim != 1:
            raise ValueError(f"--labels must be 1-D (one label per record), got shape {labels.shape}")
        if labels.size == 0:
            raise ValueError("--labels is empty")
        if not np.issubdtype(labels.dtype, np.integer):
            raise TypeError(f"--labels must hold integer class labels, got dtype {labels.dtype}")
        num_classes = args.num_classes
        if num_classes is None:
            num_classes = max(2, int(labels.max()) + 1)
        num_classes = check_int(num_classes, "--num-classes", minimum=2)
    if args.unit_ids is not None:
        unit_ids = _load_array(args.unit_ids, "--unit-ids")

    streams = make_streams(args.seed, secure=bool(args.secure))
    rng = streams.partition
    if mode == "unit":
        partition = partition_by_unit(unit_ids, num_teachers=num_teachers, rng=rng,
                                      seed=streams.seed)
    elif mode == "stratified":
        partition = partition_stratified(labels, num_teachers=num_teachers,
                                         num_classes=num_classes, rng=rng, seed=streams.seed)
    else:
        num_records = (check_int(args.num_records, "--num-records", minimum=1)
                       if args.num_records is not None else int(labels.size))
        partition = partition_random(num_records, num_teachers=num_teachers, rng=rng,
                                     seed=streams.seed)

    run_dir.mkdir(parents=True, exist_ok=True)
    partition.save(target)
    summary = {**partition.summary(), "path": str(target), "secure": bool(args.secure)}
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(f"partition: {summary['num_records']} records -> {summary['num_teachers']} teachers "
              f"({summary['mode']}), shard sizes {summary['shard_size_min']}.."
              f"{summary['shard_size_max']}"
              + (f", {summary['num_units']} units" if "num_units" in summary else ""))
        print(f"guarantee: {summary['neighbouring_relation']}")
        print(f"seed: {'none (secure, OS entropy)' if args.secure else summary['seed']}; "
              f"ids digest {summary['ids_digest'][:16]}...")
        print(f"wrote {target}")
    return 0
