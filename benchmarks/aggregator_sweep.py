"""How the utility benchmark's aggregators were chosen: Confident-GNMax settings compared by the
student they give, per target eps, on one base run's votes (Fashion-MNIST).

For each ``target/T/sigma1/sigma2`` setting: the query plan of the utility benchmark
(:func:`utility_planning.plan_queries`, release parameters from
:func:`utility_planning.release_parameters`; benchmarks/utility_planning.py), the planning
draw's answers (seed = the run's seed + 1, as the benchmark plans) as the labels of the first
answered public items, and a FixMatch student with the pipeline's default recipe
(``cnn28``, 8 x 500 steps, batch 32, mu 3, EMA 0.99, seed 0, one torch thread). Printed per setting:
the route, answered items, label accuracy, and the student's accuracy on the public items
8000-8999 with their true labels (``val``: a labelled public validation set, the one this
comparison was decided on) and on the evaluation split (``eval``).

**This looks at the teachers' votes and at true labels**: what it decides is not covered by the
reported eps (see the README, "What was tuned on what"). Run on demand, never as a test:

    .venv/bin/python benchmarks/aggregator_sweep.py --base-run runs/utility-500/base \\
        1/300/100/40 1/350/250/120 0.5/350/250/120 2/350/250/120

About 90 s per setting on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def parse_setting(text: str) -> tuple[float, dict]:
    """``"target/T/sigma1/sigma2"`` -> (target, aggregator)."""
    parts = text.split("/")
    try:
        values = [float(v) for v in parts]
    except ValueError:
        values = []
    if len(values) != 4 or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"a setting is target/T/sigma1/sigma2 with four positive numbers, e.g. 1/350/250/120; "
            f"got {text!r}"
        )
    target, threshold, sigma1, sigma2 = values
    return target, {
        "mechanism": "confident-gnmax",
        "threshold": threshold,
        "sigma1": sigma1,
        "sigma2": sigma2,
    }


def main(argv: list[str] | None = None) -> int:
    from pate.run import rundir  # the run directory's file names

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("settings", nargs="+", type=parse_setting, metavar="TARGET/T/SIGMA1/SIGMA2")
    p.add_argument(
        "--base-run",
        required=True,
        help=f"a run directory with {rundir.VOTES} and {rundir.CONFIG} (run up to its votes stage)",
    )
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--steps", type=int, default=4000, help="student steps (multiple of 500)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-root", default=None)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    base = pathlib.Path(args.base_run)
    if not (base / rundir.VOTES).is_file() or not (base / rundir.CONFIG).is_file():
        p.error(
            f"--base-run {str(base)!r} has no {rundir.VOTES} and {rundir.CONFIG} (run the pipeline "
            "up to its votes stage first)"
        )
    if not 0 < args.delta < 1:
        p.error(f"--delta must be in (0, 1), got {args.delta}")
    if args.steps < 500 or args.steps % 500:
        p.error(f"--steps must be a positive multiple of 500, got {args.steps}")

    import torch
    import utility_planning

    from pate.student.train import train_student
    from pate.teachers.data import load_pate_data

    torch.set_num_threads(args.threads)
    config = json.loads((base / rundir.CONFIG).read_text())
    seed = int(config["run"]["seed"]) + 1
    data = load_pate_data("fashion-mnist", root=args.data_root)
    y = data.public.y
    votes = np.load(base / rundir.VOTES, allow_pickle=False)
    rows = []
    for target, aggregator in args.settings:
        release = utility_planning.release_parameters(target, delta=args.delta, conversion="tight")
        plan = utility_planning.plan_queries(
            votes,
            target=target,
            release=release,
            delta=args.delta,
            conversion="tight",
            seed=seed,
            aggregator=aggregator,
        )
        drawn = utility_planning.planning_draw(votes, seed=seed, aggregator=aggregator)
        answered = np.flatnonzero(drawn.answered_mask)[: plan["planned_answered"]]
        labels = np.full(y.shape[0], -1, dtype=np.int64)
        labels[answered] = drawn.labels[answered]
        t0 = time.perf_counter()
        student = train_student(
            data.public.x,
            labels,
            model="cnn28",
            method="fixmatch",
            epochs=args.steps // 500,
            steps_per_epoch=500,
            batch_size=32,
            unlabeled_ratio=3,
            ema_decay=0.99,
            flip=True,
            num_classes=data.num_classes,
            random_state=0,
            device="cpu",
            progress=False,
        )
        row = {
            "target": target,
            **utility_planning.noise_params(aggregator),
            "route": plan["route"],
            "answered": int(answered.size),
            "label_accuracy": float(np.mean(labels[answered] == y[answered]))
            if answered.size
            else None,
            "val": float(np.mean(student.predict(data.public.x[8000:]) == y[8000:])),
            "eval": float(student.score(data.evaluation.x, data.evaluation.y)),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
