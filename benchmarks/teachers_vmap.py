"""Benchmark: vectorized teacher training (torch.func) vs the library's sequential trainer vs a
plain per-teacher PyTorch loop.

Trains the same ensemble three times in one process -- same architecture, optimiser, epochs,
batches, augmentations and initial weights -- with ``pate.teachers.ensemble.train_teachers``
(``trainer="vectorized"``, then ``trainer="sequential"``, the one ``trainer="auto"`` picks on
CPU), then with a plain loop (one ``nn.Module`` and one ``torch.optim.Adam`` per teacher, one
teacher after another). Prints the wall-clock times, the ratios, the mean teacher accuracies and
plurality-vote accuracies on the evaluation split, and the peak RSS after the vectorized run.
Every run includes predicting the public and evaluation splits (``--public-size``, default 1000
items). ``--skip-sequential`` / ``--skip-loop`` leave runs out.

``--flops`` also counts the arithmetic of the work (``torch.utils.flop_counter.FlopCounterMode``:
the matmul/convolution FLOPs of one forward+backward training step, times the steps of every
teacher's shard and epoch, plus the forward passes predicting the public and evaluation items),
measures the CPU's attainable fp32 rate with a large ``torch.mm`` at the same thread count,
and prints each timed trainer's achieved GFLOP/s and share of that peak, and the share a 5x
speed-up over the plain loop would need. The count is a lower bound on the work (element-wise
operations and the optimiser update are not counted) and the same for every trainer (the
vectorized trainer's padding of short last batches is not counted either).

    .venv/bin/python benchmarks/teachers_vmap.py                 # 250 teachers x 240 images
    .venv/bin/python benchmarks/teachers_vmap.py --threads 2 --device cuda
    .venv/bin/python benchmarks/teachers_vmap.py --threads 2 --skip-sequential --flops

Run on demand (minutes on a CPU), never as a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time

import numpy as np


def plain_loop(data, shards, seeds, config, device):
    """The baseline: each teacher trained on its own with nn.Module + torch.optim (no vmap).

    Returns the (T, N_eval) predictions; like the vectorized run it also predicts the public split.
    """
    import torch
    from torch.nn import functional

    from pate.teachers.schedule import augment, epoch_plan, init_teacher, parse_augmentation

    x = torch.from_numpy(data.private.x).to(device)
    y = torch.from_numpy(data.private.y).to(device)
    x_eval = torch.from_numpy(data.evaluation.x).to(device)
    x_pub = torch.from_numpy(data.public.x).to(device)
    max_shift, flip = parse_augmentation(config.augment, data.input_shape)
    preds = []
    for seed, shard in zip(seeds, shards):
        model = init_teacher(
            config.model, seed, input_shape=data.input_shape, num_classes=data.num_classes
        ).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        for epoch in range(config.epochs):
            plan = epoch_plan(seed, epoch, len(shard), max_shift=max_shift, flip=flip)
            rows = torch.from_numpy(shard[plan.order]).to(device)
            shifts = None if plan.shifts is None else torch.from_numpy(plan.shifts).to(device)
            flips = None if plan.flips is None else torch.from_numpy(plan.flips).to(device)
            for start in range(0, len(shard), config.batch_size):
                sl = slice(start, start + config.batch_size)
                xb = augment(
                    x[rows[sl]],
                    None if shifts is None else shifts[sl],
                    None if flips is None else flips[sl],
                )
                opt.zero_grad(set_to_none=True)
                functional.cross_entropy(model(xb), y[rows[sl]]).backward()
                opt.step()
        with torch.no_grad():  # the same outputs as the vectorized run: public and evaluation
            for i in range(0, len(x_pub), 256):
                model(x_pub[i : i + 256]).argmax(dim=1)
            preds.append(
                torch.cat(
                    [model(x_eval[i : i + 256]).argmax(dim=1) for i in range(0, len(x_eval), 256)]
                )
                .cpu()
                .numpy()
            )
    return np.stack(preds)


def counted_flops(fn) -> int:
    """The FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts while ``fn()`` runs."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def work_flops(
    model_name, input_shape, num_classes, shard_sizes, *, batch_size, epochs, predicted_items
) -> dict:
    """Counted FLOPs of training every teacher (forward+backward of each batch of its shard,
    every epoch; a shard's last batch may be short) and of its forward passes over
    ``predicted_items`` items. Counted once per distinct batch size on a throw-away model."""
    import torch
    from torch.nn import functional

    from pate.teachers.models import build_model

    model = build_model(model_name, input_shape=input_shape, num_classes=num_classes)
    step_cache: dict[int, int] = {}

    def step(b):  # one training step (forward + backward) on a batch of b items
        if b not in step_cache:
            x, y = torch.zeros(b, *input_shape), torch.zeros(b, dtype=torch.long)
            step_cache[b] = counted_flops(lambda: functional.cross_entropy(model(x), y).backward())
        return step_cache[b]

    per_epoch = sum(
        (n // batch_size) * step(batch_size) + (step(n % batch_size) if n % batch_size else 0)
        for n in shard_sizes
    )
    with torch.no_grad():
        x = torch.zeros(batch_size, *input_shape)
        predict_per_item = counted_flops(lambda: model(x)) / batch_size
    training = epochs * per_epoch
    prediction = round(len(shard_sizes) * predicted_items * predict_per_item)
    return {"training": training, "prediction": prediction, "total": training + prediction}


def matmul_peak_gflops(n: int = 2048, repeats: int = 7) -> float:
    """Attainable fp32 rate of this machine at the current torch thread count: the median
    GFLOP/s of ``repeats`` n x n x n ``torch.mm`` calls (2 n^3 FLOPs each), after one warm-up."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / float(np.median(times)) / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default="fashion-mnist")
    p.add_argument("--data-root")
    p.add_argument("--teachers", type=int, default=250)
    p.add_argument("--per-teacher", type=int, default=240, help="images per teacher")
    p.add_argument("--model", default="cnn28")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--augment", default="none")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (both runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--public-size",
        type=int,
        default=1000,
        help="public items both trainers predict (the protocol's 9000 only adds the "
        "same prediction time to both runs)",
    )
    p.add_argument("--skip-loop", action="store_true", help="do not time the plain loop")
    p.add_argument(
        "--skip-sequential",
        action="store_true",
        help="do not time the library's sequential trainer",
    )
    p.add_argument(
        "--flops",
        action="store_true",
        help="count the FLOPs of the work, measure the fp32 matmul peak and print each "
        "trainer's achieved rate and share of that peak (CPU only)",
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)

    import torch

    from pate.core.partition import partition_random
    from pate.core.rng import make_streams
    from pate.ledger import record_keys
    from pate.teachers.data import load_pate_data
    from pate.teachers.devices import resolve_device
    from pate.teachers.ensemble import TeacherConfig, train_teachers
    from pate.teachers.result import plurality_accuracy

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.flops and device != "cpu":
        p.error("--flops compares with the CPU's matmul rate; use it with --device cpu")
    data = load_pate_data(args.data, root=args.data_root, public_size=args.public_size)
    needed = args.teachers * args.per_teacher
    if needed > len(data.private):
        p.error(f"{args.teachers} x {args.per_teacher} > {len(data.private)} private records")
    streams = make_streams(args.seed)
    records = np.sort(streams.partition.permutation(len(data.private))[:needed])
    part = partition_random(
        record_keys(data.private.x[records], data.private.y[records]),
        num_teachers=args.teachers,
        rng=streams.partition,
    )
    shards = [records[s] for s in part.shards]
    seeds = streams.teacher_seeds(args.teachers)
    config = TeacherConfig(
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        augment=args.augment,
        device=device,
        trainer="vectorized",
    )
    y_eval = data.evaluation.y
    print(
        f"{args.teachers} teachers x {args.per_teacher} {args.data} images, model {args.model}, "
        f"Adam lr {args.lr}, {args.epochs} epochs, batch {args.batch_size}, augment "
        f"{args.augment}, device {device}, torch threads {torch.get_num_threads()}",
        flush=True,
    )

    t0 = time.perf_counter()
    vec = train_teachers(data, shards, seeds, config, progress=False)
    t_vec = time.perf_counter() - t0
    seconds = {"vectorized": t_vec}
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {
        "teachers": args.teachers,
        "per_teacher": args.per_teacher,
        "model": args.model,
        "epochs": args.epochs,
        "augment": args.augment,
        "device": device,
        "threads": torch.get_num_threads(),
        "vectorized_seconds": round(t_vec, 1),
        "vectorized_chunk_size": vec.chunk_size,
        "vectorized_mean_accuracy": float(vec.teacher_accuracy.mean()),
        "vectorized_plurality_accuracy": vec.plurality_accuracy,
        "peak_rss_gb_after_vectorized": round(rss_gb, 2),
    }
    print(
        f"vectorized: {t_vec:.1f} s (chunks of {vec.chunk_size}), mean teacher accuracy "
        f"{100 * vec.teacher_accuracy.mean():.2f} %, plurality {100 * vec.plurality_accuracy:.2f} %, "
        f"peak RSS {rss_gb:.2f} GB",
        flush=True,
    )
    if not args.skip_sequential:
        t0 = time.perf_counter()
        seq = train_teachers(
            data, shards, seeds, dataclasses.replace(config, trainer="sequential"), progress=False
        )
        t_seq = time.perf_counter() - t0
        seconds["sequential"] = t_seq
        out.update(
            {
                "sequential_seconds": round(t_seq, 1),
                "speedup_sequential_over_vectorized": round(t_vec / t_seq, 2),
                "sequential_mean_accuracy": float(seq.teacher_accuracy.mean()),
                "sequential_plurality_accuracy": seq.plurality_accuracy,
                "sequential_prediction_agreement": float(
                    (seq.eval_predictions == vec.eval_predictions).mean()
                ),
            }
        )
        print(
            f"sequential (library): {t_seq:.1f} s, mean teacher accuracy "
            f"{100 * seq.teacher_accuracy.mean():.2f} %, plurality "
            f"{100 * seq.plurality_accuracy:.2f} %; vectorized / sequential time "
            f"{t_vec / t_seq:.2f}x; same prediction as vectorized on "
            f"{100 * out['sequential_prediction_agreement']:.1f} % of (teacher, item) pairs",
            flush=True,
        )
    if not args.skip_loop:
        t0 = time.perf_counter()
        loop_preds = plain_loop(data, shards, seeds, config, device)
        t_loop = time.perf_counter() - t0
        seconds["loop"] = t_loop
        loop_acc = (loop_preds == y_eval[None]).mean(axis=1)
        loop_plur = plurality_accuracy(loop_preds, y_eval, num_classes=data.num_classes)
        out.update(
            {
                "loop_seconds": round(t_loop, 1),
                "speedup": round(t_loop / t_vec, 2),
                "loop_mean_accuracy": float(loop_acc.mean()),
                "loop_plurality_accuracy": loop_plur,
                "prediction_agreement": float((loop_preds == vec.eval_predictions).mean()),
            }
        )
        print(
            f"plain loop: {t_loop:.1f} s, mean teacher accuracy {100 * loop_acc.mean():.2f} %, "
            f"plurality {100 * loop_plur:.2f} %"
        )
        print(
            f"speed-up (loop / vectorized): {t_loop / t_vec:.2f}x; accuracy difference "
            f"{100 * (vec.teacher_accuracy.mean() - loop_acc.mean()):+.2f} points; "
            f"same prediction on {100 * out['prediction_agreement']:.1f} % of (teacher, item) pairs"
        )
        if not args.skip_sequential:
            out["speedup_sequential_over_loop"] = round(t_loop / t_seq, 2)
            print(f"plain loop / sequential time: {t_loop / t_seq:.2f}x")
    if args.flops:
        flops = work_flops(
            args.model,
            data.input_shape,
            data.num_classes,
            [len(shard) for shard in shards],
            batch_size=args.batch_size,
            epochs=args.epochs,
            predicted_items=len(data.public) + len(data.evaluation),
        )
        peak = matmul_peak_gflops()
        rates = {name: flops["total"] / t / 1e9 for name, t in seconds.items()}
        out.update(
            {
                "flops_training": flops["training"],
                "flops_prediction": flops["prediction"],
                "flops_total": flops["total"],
                "matmul_peak_gflops": round(peak, 1),
                **{f"{name}_gflops": round(r, 2) for name, r in rates.items()},
                **{
                    f"{name}_percent_of_peak": round(100 * r / peak, 1) for name, r in rates.items()
                },
            }
        )
        print(
            f"work: {flops['total'] / 1e12:.3f} TFLOP counted ({flops['training'] / 1e12:.3f} "
            f"training, {flops['prediction'] / 1e12:.3f} prediction); fp32 matmul peak "
            f"(2048^3 torch.mm, {torch.get_num_threads()} threads): {peak:.1f} GFLOP/s"
        )
        for name, r in rates.items():
            print(f"  {name}: {r:.1f} GFLOP/s = {100 * r / peak:.1f} % of peak")
        if "loop" in rates:
            needed = 5 * rates["loop"]
            out["percent_of_peak_needed_for_5x"] = round(100 * needed / peak, 1)
            print(
                f"  a 5x speed-up over the plain loop would need {needed:.1f} GFLOP/s "
                f"= {100 * needed / peak:.1f} % of peak"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
