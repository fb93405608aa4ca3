"""Benchmark: ``make demo``'s student training step, one checkout against another, side by side.

``make demo``'s student (FixMatch, zoo ``cnn28`` on 1x28x28 images, 32 labelled + 3 x 32
unlabelled items per step, weak and strong augmentations, EMA) trains
``Student.fit(..., epochs=2, steps_per_epoch=--steps)`` on random images (9000 public, 400
labelled: the step's cost does not depend on the pixels) in a fresh process per measurement, with
the threads pate chooses (:func:`pate.core.threads.configure`). The second epoch is timed (the
first is the warm-up). Each ``--root`` (a checkout: its ``pate`` is imported) is measured in
turn, ``--repeats`` rounds, so that a change of the machine's load hits every root alike; the
median milliseconds per step of each root and the median of the per-round ratios to the first
root are printed and written to ``--out`` as JSON with the load averages.

    git worktree add /tmp/pate-main main     # or any other commit
    env -u OMP_NUM_THREADS .venv/bin/python benchmarks/student_step.py \\
        --root /tmp/pate-main --root . --repeats 5 --out /tmp/student_step.json

OMP_NUM_THREADS is removed from the children's environment (pate chooses the threads). Run on
demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

CHILD = r"""
import json, sys
from pate.core import threads
record = threads.configure()
import numpy as np
from pate.student.train import Student
steps = int(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.random((9000, 1, 28, 28), dtype=np.float32)
y = np.full(9000, -1, dtype=np.int64)
y[:400] = rng.integers(0, 10, 400)
student = Student(method="fixmatch", epochs=2, steps_per_epoch=steps, batch_size=32,
                  unlabeled_ratio=3, ema_decay=0.99, flip=True, num_classes=10, random_state=0,
                  progress=False, device="cpu")
student.fit(x, y)
print(json.dumps({"ms_per_step": 1000 * student.history_[1]["seconds"] / steps,
                  "threads": record["count"], "wait_policy": record["wait_policy"]}))
"""


def measure(root: pathlib.Path, steps: int) -> dict:
    """One child on ``root``'s pate: ``{"ms_per_step", "threads", "wait_policy"}``."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{root} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(samples: dict[str, list[float]]) -> dict:
    """Median ms/step per root and the median of the per-round ratios to the first root."""
    first = next(iter(samples.values()))
    return {
        root: {
            "median_ms_per_step": round(statistics.median(values), 2),
            "median_ratio_to_first": round(
                statistics.median(v / f for v, f in zip(values, first)), 3
            ),
        }
        for root, values in samples.items()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", required=True, help="a checkout (repeatable)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="rounds over the roots")
    parser.add_argument("--out", default=None, help="write the result here as JSON")
    args = parser.parse_args(argv)
    roots = [pathlib.Path(r).resolve() for r in args.root]
    samples: dict[str, list[float]] = {str(r): [] for r in roots}
    loads = []
    for round_ in range(args.repeats):
        loads.append(list(os.getloadavg()))
        for root in roots:
            r = measure(root, args.steps)
            samples[str(root)].append(r["ms_per_step"])
            print(
                f"round {round_ + 1} {root}: {r['ms_per_step']:.1f} ms/step "
                f"({r['threads']} threads, {r['wait_policy']})",
                flush=True,
            )
    result = {
        "samples_ms_per_step": samples,
        "summary": summary(samples),
        "load_average_per_round": loads,
        "steps": args.steps,
        "command": "python benchmarks/student_step.py " + " ".join(argv or sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
