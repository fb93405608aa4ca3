"""Student accuracy on Fashion-MNIST for a labels budget: supervised vs semi-supervised (FixMatch).

The student is trained on the PATE public split (the first 9000 Fashion-MNIST test images) with
labels on the first ``k`` items only (the papers' first-k protocol) and evaluated on the
held-out evaluation split (the last 1000 test images). The labels are the TRUE labels of those
items, optionally corrupted by a documented noise model standing in for the aggregator's
mistakes: with probability ``--label-noise p`` each label is replaced by a class drawn
uniformly among the 9 *other* classes (symmetric noise), independently per item, from
``numpy.random.default_rng(seed)``. Both methods get the same number of optimiser steps, the
same model (``--model``, default ``cnn28``), the same weak augmentation (flip + 4-pixel
translation) and the same seed; FixMatch additionally sees the unlabelled public items.

With ``--labels-from RUN_DIR`` the labelled items are instead those a PATE run answered (its
``labels.npy``), trained once with the run's released labels and once with the TRUE labels of the
same items: what the aggregator's mistakes cost, apart from which items it answered. Add
``--soft-targets T`` (a class-means run, which publishes its rule's class scores,
``label_scores.npy``) to train the released labels to ``softmax(T * scores)`` instead, as
``[student] targets = "soft"`` does.

Usage (the defaults give the README numbers: about 5.5 minutes on 2 shared CPU cores):

    .venv/bin/python benchmarks/student_fmnist.py
    .venv/bin/python benchmarks/student_fmnist.py --labels 1000 --label-noise 0.2 --json out.json
    .venv/bin/python benchmarks/student_fmnist.py --labels-from runs/utility-v3/pate-eps1 \
        --methods fixmatch --steps 4000

Prints one line per (labels, noise, method) with the evaluation accuracy and the training time,
then the FixMatch - supervised gain per setting.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np


def noisy_labels(y: np.ndarray, *, k: int, noise: float, num_classes: int, seed: int) -> np.ndarray:
    """True labels of the first ``k`` items, each flipped w.p. ``noise`` to another class; -1 after."""
    rng = np.random.default_rng(seed)
    labels = np.full(y.shape[0], -1, dtype=np.int64)
    labels[:k] = y[:k]
    flip = rng.random(k) < noise
    offset = rng.integers(1, num_classes, size=k)  # uniform among the other classes
    labels[:k] = np.where(flip, (y[:k] + offset) % num_classes, y[:k])
    return labels


def _noise(noise) -> str:
    return noise if isinstance(noise, str) else f"{noise:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--labels", type=int, nargs="+", default=[250, 1000], help="labels budgets k")
    p.add_argument(
        "--label-noise",
        type=float,
        nargs="+",
        default=[0.0],
        help="symmetric label-noise rates (0 = true labels)",
    )
    p.add_argument(
        "--labels-from",
        metavar="RUN_DIR",
        help="label the items this PATE run answered: its released labels, then their "
        "true labels (replaces --labels / --label-noise)",
    )
    p.add_argument(
        "--label-sets",
        nargs="+",
        default=["released", "true"],
        choices=("released", "true"),
        help="with --labels-from: train on the run's released labels, on the true labels "
        "of the same items, or both (default)",
    )
    p.add_argument(
        "--soft-targets",
        type=float,
        metavar="T",
        help="with --labels-from a class-means run: train the released labels to "
        "softmax(T * its label_scores.npy) (the true-label set stays one-hot)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=["supervised", "fixmatch"],
        choices=("supervised", "fixmatch"),
    )
    p.add_argument(
        "--model",
        default="cnn28",
        help="student model: a zoo name (cnn28, wrn16_4, ...) or 'module:factory'",
    )
    p.add_argument("--lr", type=float, default=0.03, help="SGD learning rate")
    p.add_argument("--steps", type=int, default=6000, help="optimiser steps per run (both methods)")
    p.add_argument("--batch-size", type=int, default=32, help="labelled items per step")
    p.add_argument("--unlabeled-ratio", type=int, default=3, help="FixMatch mu")
    p.add_argument("--ema-decay", type=float, default=0.99)
    p.add_argument(
        "--distribution-alignment",
        action="store_true",
        help="FixMatch pseudo-labels aligned to a uniform class distribution",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1 is fastest for this small CNN on a shared machine)",
    )
    p.add_argument(
        "--data-root", default=None, help="Fashion-MNIST directory (default: the system one)"
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    from pate.run import rundir  # the run directory's file names

    released = None
    if args.labels_from:
        path = pathlib.Path(args.labels_from) / rundir.LABELS
        if not path.is_file():
            p.error(
                f"--labels-from {args.labels_from!r} has no {rundir.LABELS} (a PATE run directory "
                "after its aggregate stage)"
            )
        released = np.load(path, allow_pickle=False)
        if (
            released.ndim != 1
            or not np.issubdtype(released.dtype, np.integer)
            or not np.any(released >= 0)
        ):
            p.error(f"--labels-from: {path} is not a 1-D integer array with answered items")
    soft = None
    if args.soft_targets is not None:
        from scipy.special import softmax

        scores_path = args.labels_from and pathlib.Path(args.labels_from) / rundir.LABEL_SCORES
        if not scores_path or not scores_path.is_file():
            p.error(
                "--soft-targets needs --labels-from a class-means run directory (its "
                f"{rundir.LABEL_SCORES}, the rule's class scores)"
            )
        if not args.soft_targets > 0:
            p.error(f"--soft-targets must be a temperature > 0, got {args.soft_targets}")
        scores = np.load(scores_path, allow_pickle=False)
        if scores.shape[0] != released.shape[0] or scores.ndim != 2:
            p.error(
                f"--soft-targets: {scores_path} has shape {scores.shape}, not one row per label"
            )
        soft = np.zeros(scores.shape)
        soft[released >= 0] = softmax(args.soft_targets * scores[released >= 0], axis=1)

    import torch

    from pate.student.train import train_student
    from pate.teachers.data import load_pate_data

    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its kernels
    data = load_pate_data("fashion-mnist", root=args.data_root)
    x, y = data.public.x, data.public.y
    steps_per_epoch = 100
    epochs = max(1, args.steps // steps_per_epoch)
    print(
        f"Fashion-MNIST: public {x.shape[0]}, evaluation {len(data.evaluation)}; "
        f"model {args.model}, {epochs * steps_per_epoch} steps, batch {args.batch_size}, "
        f"mu {args.unlabeled_ratio}, EMA {args.ema_decay}, seed {args.seed}, "
        f"torch threads {args.threads}",
        flush=True,
    )
    if released is not None:
        full = np.full(y.shape[0], -1, dtype=np.int64)
        full[: released.shape[0]] = released
        answered = full >= 0
        true_on_answered = np.where(answered, y, -1)
        settings = [
            (int(answered.sum()), kind, full if kind == "released" else true_on_answered)
            for kind in args.label_sets
        ]
        if soft is not None:
            targets = np.zeros((y.shape[0], soft.shape[1]))
            targets[: soft.shape[0]] = soft
    else:
        settings = [
            (
                k,
                noise,
                noisy_labels(y, k=k, noise=noise, num_classes=data.num_classes, seed=args.seed),
            )
            for k in args.labels
            for noise in args.label_noise
        ]
    results = []
    total = time.perf_counter()
    for k, noise, labels in settings:
        realised = float(np.mean(labels[labels >= 0] != y[labels >= 0]))
        soft_targets = targets if soft is not None and noise == "released" else None
        for method in args.methods:
            t0 = time.perf_counter()
            student = train_student(
                x,
                labels,
                soft_targets=soft_targets,
                model=args.model,
                method=method,
                learning_rate=args.lr,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                batch_size=args.batch_size,
                unlabeled_ratio=args.unlabeled_ratio,
                ema_decay=args.ema_decay,
                flip=True,
                distribution_alignment=args.distribution_alignment,
                num_classes=data.num_classes,
                random_state=args.seed,
                device=args.device,
                progress=sys.stderr.isatty(),
            )
            seconds = time.perf_counter() - t0
            acc = student.score(data.evaluation.x, data.evaluation.y)
            row = {
                "labels": k,
                "label_noise": noise,
                "realised_label_error": realised,
                "method": method,
                "accuracy": acc,
                "seconds": seconds,
                "steps": epochs * steps_per_epoch,
                "device": str(student.device_),
                "last_epoch_seconds": student.history_[-1]["seconds"],
                "model": args.model,
                "batch_size": args.batch_size,
                "unlabeled_ratio": args.unlabeled_ratio,
                "ema_decay": args.ema_decay,
                "distribution_alignment": args.distribution_alignment,
                "targets": "hard" if soft_targets is None else "soft",
                **({} if soft_targets is None else {"temperature": args.soft_targets}),
            }
            results.append(row)
            print(
                f"labels {k:5d}  noise {_noise(noise)} (realised {realised:.3f})  {method:10s}  "
                f"accuracy {acc:.4f}  time {seconds:6.1f} s",
                flush=True,
            )
    print(f"total {time.perf_counter() - total:.1f} s")
    by = {(r["labels"], r["label_noise"], r["method"]): r["accuracy"] for r in results}
    for k, noise, _ in settings:
        if (k, noise, "fixmatch") in by and (k, noise, "supervised") in by:
            gain = by[(k, noise, "fixmatch")] - by[(k, noise, "supervised")]
            print(f"labels {k:5d}  noise {_noise(noise)}: FixMatch - supervised = {gain:+.4f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
