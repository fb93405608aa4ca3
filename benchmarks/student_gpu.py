"""The stronger student on a GPU: WRN-16-4 FixMatch on PATE's released labels, and its ceiling.

Runs :mod:`benchmarks.student_fmnist` (one process per setting, side by side on one GPU) for:

* ``ceiling``: all 9000 public items with their TRUE labels, supervised (the student's
  true-label ceiling, the issue's "stronger student" target);
* one FixMatch run per ``--labels NAME=RUN_DIR``: the labels that PATE run released
  (its ``labels.npy``), the unanswered public items as unlabelled data (``--label-method
  supervised``: supervised with the ceiling's settings instead, on the answered items);
* ``--true-of NAME``: the same answered items with their TRUE labels (what the aggregator's
  mistakes cost, apart from which items it answered).

The number of optimiser steps is chosen from a timed FixMatch run on the same GPU (the last 100
of 300 steps: the first ones include cuDNN's kernel search, 207 ms per step instead of 40 ms
on an H100) so that every setting finishes within ``--budget-seconds``: the processes share the
GPU, and a FixMatch step of this size keeps an H100 busy (two side by side took 79 ms per step
each, 40 ms alone), so their costs add up; the
settings are dropped from the end of the list when fewer than ``--min-steps`` would fit. The
steps used are in the output (each row's ``steps``). Nothing here looks at the evaluation split
to choose anything: the step count comes from time alone, the other settings are FixMatch's
published ones (batch 64, mu 7, EMA 0.999, lr 0.03, threshold 0.95).

Usage (on a machine with a CUDA GPU; data in a torchvision root, labels from PATE runs):

    python benchmarks/student_gpu.py --out OUT --data-root DATA \
        --labels pate1000-eps1=runs/eps1 knn-round2=runs/fashion-mnist-knn-round2 \
        --true-of pate1000-eps1 --budget-seconds 300
    python benchmarks/student_gpu.py --out OUT --data-root DATA --label-method supervised \
        --labels cm-eps1=runs/u-cml/class-means-eps1 cm-eps0.5=runs/u-cml/class-means-eps0.5

Writes ``OUT/student_gpu.json`` (rows as :mod:`benchmarks.student_fmnist` writes them, plus
``setting``) and one log per setting.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
FIXMATCH = [
    "--methods",
    "fixmatch",
    "--batch-size",
    "64",
    "--unlabeled-ratio",
    "7",
    "--ema-decay",
    "0.999",
]
# The supervised ceiling: 128 true labels per step, weak augmentation only.
SUPERVISED = ["--methods", "supervised", "--batch-size", "128", "--ema-decay", "0.999"]
SUPERVISED_COST = 0.2  # its step's cost relative to a FixMatch step (128 vs 960 images)


def _command(args, extra: list[str], steps: int, json_path: pathlib.Path) -> list[str]:
    return (
        [
            sys.executable,
            str(HERE / "student_fmnist.py"),
            "--model",
            args.model,
            "--device",
            args.device,
            "--threads",
            "2",
            "--steps",
            str(steps),
            "--json",
            str(json_path),
        ]
        + (["--data-root", args.data_root] if args.data_root else [])
        + extra
    )


def labelled_setting(name: str, run_dir: str, kind: str, method: str) -> tuple:
    """``(name, arguments, cost in FixMatch steps)`` of a student on a PATE run's answered items
    (``kind``: their "released" or "true" labels), trained with FixMatch's published settings
    (the unanswered items unlabelled) or, ``method = "supervised"``, the ceiling's."""
    extra, cost = (FIXMATCH, 1.0) if method == "fixmatch" else (SUPERVISED, SUPERVISED_COST)
    return name, ["--labels-from", run_dir, "--label-sets", kind] + extra, cost


def plan(
    settings: list, *, per_step: float, budget_seconds: float, min_steps: int, max_steps: int
) -> tuple[list, int]:
    """``(chosen settings, steps each)``: the GPU is shared, so all settings' steps together
    (each weighted by its cost in FixMatch steps) must fit in 85 % of the budget (the rest is
    for start-up and evaluation); settings are dropped from the end of the list while fewer
    than ``min_steps`` would fit, down to one. Steps are whole hundreds (the benchmark's epochs)."""
    chosen, steps = list(settings), 0
    while chosen:
        cost = sum(c for *_, c in chosen)
        steps = int(0.85 * budget_seconds / (per_step * cost)) // 100 * 100
        if steps >= min_steps or len(chosen) <= 1:
            break
        chosen = chosen[:-1]
    return chosen, max(100, min(steps, max_steps))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--data-root", default=None, help="torchvision root holding FashionMNIST/raw")
    p.add_argument(
        "--labels",
        nargs="*",
        default=[],
        metavar="NAME=RUN_DIR",
        help="PATE runs whose released labels train a FixMatch student (in priority order)",
    )
    p.add_argument(
        "--true-of",
        nargs="*",
        default=[],
        metavar="NAME",
        help="also train on the TRUE labels of the items these runs answered",
    )
    p.add_argument(
        "--label-method",
        choices=("fixmatch", "supervised"),
        default="fixmatch",
        help="how the --labels / --true-of students train (supervised: the ceiling's "
        "settings, the answered items only; e.g. a class-means run answers all)",
    )
    p.add_argument("--model", default="wrn16_4")
    p.add_argument("--device", default="cuda", help="cuda (the point), or cpu for a dry run")
    p.add_argument(
        "--budget-seconds",
        type=float,
        default=300.0,
        help="wall-clock time for all settings together, after the timing run",
    )
    p.add_argument(
        "--per-step-seconds",
        type=float,
        default=None,
        help="a FixMatch step's time alone on this GPU, measured before (skips the timing run)",
    )
    p.add_argument("--min-steps", type=int, default=2000)
    p.add_argument("--max-steps", type=int, default=20000)
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    if any("=" not in item for item in args.labels):
        p.error(f"--labels takes NAME=RUN_DIR items, got {args.labels!r}")
    runs = dict(item.split("=", 1) for item in args.labels)
    for name in args.true_of:
        if name not in runs:
            p.error(f"--true-of {name!r} is not one of the --labels names {sorted(runs)}")
    out.mkdir(parents=True, exist_ok=True)

    # Settings in priority order: (name, extra arguments, cost of one step in FixMatch steps):
    # the first run's labels, the ceiling, the other runs, the true-label controls.
    released = [
        labelled_setting(name, run_dir, "released", args.label_method)
        for name, run_dir in runs.items()
    ]
    settings = (
        released[:1]
        + [("ceiling", ["--labels", "9000"] + SUPERVISED, SUPERVISED_COST)]
        + released[1:]
        + [
            labelled_setting(f"{name}-true", runs[name], "true", args.label_method)
            for name in args.true_of
        ]
    )

    # Timing run: 300 FixMatch steps alone on the GPU, the last 100 timed.
    t0 = time.perf_counter()
    per_step = args.per_step_seconds
    if per_step is None:
        timing = out / "timing.json"
        calib = ["--labels", "567"] + FIXMATCH
        with open(out / "timing.log", "w") as log:
            subprocess.run(
                _command(args, calib, 300, timing), check=True, stdout=log, stderr=subprocess.STDOUT
            )
        per_step = json.loads(timing.read_text())[0]["last_epoch_seconds"] / 100
        print(
            f"timing run: {per_step * 1000:.1f} ms per FixMatch step alone "
            f"({time.perf_counter() - t0:.0f} s with start-up)",
            flush=True,
        )

    chosen, steps = plan(
        settings,
        per_step=per_step,
        budget_seconds=args.budget_seconds,
        min_steps=args.min_steps,
        max_steps=args.max_steps,
    )
    print(
        f"{len(chosen)} settings ({', '.join(n for n, *_ in chosen)}), {steps} steps each; "
        f"dropped: {', '.join(n for n, *_ in settings[len(chosen) :]) or 'none'}",
        flush=True,
    )

    procs = []
    for name, extra, _ in chosen:
        log = open(out / f"{name}.log", "w")
        procs.append(
            (
                name,
                subprocess.Popen(
                    _command(args, extra, steps, out / f"{name}.json"),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
            )
        )
    import torch

    meta = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "model": args.model,
        "per_step_alone_s": per_step,
        "steps": steps,
        "settings": [n for n, *_ in chosen],
        "dropped": [n for n, *_ in settings[len(chosen) :]],
    }
    rows, failed = [], []
    for name, proc, log in procs:  # written after each setting: a cut-off run keeps its rows
        rc = proc.wait()
        log.close()
        path = out / f"{name}.json"
        if rc != 0 or not path.exists():
            failed.append(name)
        else:
            for row in json.loads(path.read_text()):
                rows.append({"setting": name, **row})
                print(
                    f"{name:24s} {row['method']:10s} labels {row['labels']:5d} "
                    f"({row['label_noise']}, error {row['realised_label_error']:.3f})  "
                    f"accuracy {row['accuracy']:.4f}  {row['seconds']:.0f} s",
                    flush=True,
                )
        meta.update(failed=failed, wall_seconds=time.perf_counter() - t0)
        (out / "student_gpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"total {meta['wall_seconds']:.0f} s; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
