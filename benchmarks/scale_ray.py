"""Benchmark: the teachers stage on Ray (1 and 2 workers) against the local backend.

Trains the same Fashion-MNIST teachers three times in one run with
``pate.teachers.ensemble.train_teachers``, the stage's own function, each into a fresh output
folder (checkpoints as the shipped config writes them):

1. ``local``: the local backend, one torch thread (what ``pate run`` does with one core);
2. ``ray-1``: ``[cluster] backend = "ray"``, a local Ray that pate-learn starts with 1 CPU, tasks of
   1 CPU (1 torch thread): one worker;
3. ``ray-2``: the same with 2 CPUs: two workers at once.

The recipe is cnn28 on pixels (Adam 2e-3, batch 32, 20 epochs, no augmentation, checkpoints at
most every 30 s: ``configs/fashion_mnist.toml``'s teachers before it moved to linear teachers on
ScatterNet features, which train in about a minute in all; the heavy case Ray is for) on the
first ``--teachers`` shards of its
250-teacher random partition (240 images each), predicting the 9000 public and 1000 evaluation
images. A Ray stage time includes starting and stopping Ray (``ray.init``/``ray.shutdown``), as a
user pays it. Reported: each stage time, Ray's overhead at one worker (``ray-1`` vs ``local``, as
a share of the local stage time), the speed-up of two workers over one and over ``local``, whether
all three give the same predictions (they must), and ``os.getloadavg()`` before and after each
run (other jobs on the machine slow every number down).

    .venv/bin/python benchmarks/scale_ray.py                     # 48 teachers, ~3 min on 2 cores
    .venv/bin/python benchmarks/scale_ray.py --teachers 24 --json benchmarks/results/scale_ray.json

Run on demand (minutes on a CPU), never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

import numpy as np


def _load(teachers: int, data_name: str, per_teacher: int | None):
    from pate.core.partition import partition_random
    from pate.core.rng import make_streams
    from pate.ledger import record_keys
    from pate.teachers.data import load_pate_data

    data = load_pate_data(data_name)
    streams = make_streams(0)
    total = 250 if per_teacher is None else max(len(data.private) // per_teacher, teachers)
    part = partition_random(
        record_keys(data.private.x, data.private.y), num_teachers=total, rng=streams.partition
    )
    return data, part.shards[:teachers], streams.teacher_seeds(total)[:teachers]


def run(args) -> dict:
    import torch

    from pate.teachers.cluster import ClusterConfig
    from pate.teachers.ensemble import TeacherConfig, train_teachers

    torch.set_num_threads(1)
    data, shards, seeds = _load(args.teachers, args.data, args.per_teacher)
    config = TeacherConfig(
        model=args.model,
        epochs=args.epochs,
        batch_size=32,
        lr=2e-3,
        augment="none",
        checkpoint_every_s=30.0,
        device="cpu",
    )
    runs = [
        ("local", None),
        ("ray-1", ClusterConfig(backend="ray", num_cpus=1, cpus_per_task=1)),
        ("ray-2", ClusterConfig(backend="ray", num_cpus=2, cpus_per_task=1)),
    ]
    results, predictions = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cluster in runs:
            if name not in args.runs:
                continue
            load_before = os.getloadavg()
            started = time.perf_counter()
            result = train_teachers(
                data,
                shards,
                seeds,
                config,
                out_dir=pathlib.Path(tmp) / name,
                progress=not args.no_progress,
                cluster=cluster,
            )
            seconds = time.perf_counter() - started
            execution = {k: v for k, v in result.execution.items() if k != "workers"}
            results[name] = {
                "stage_seconds": round(seconds, 2),
                "training_seconds": round(result.train_seconds, 2),
                "chunks": execution.get("num_chunks", 1),
                "teachers_per_chunk": result.chunk_size,
                "teacher_accuracy_mean": round(float(result.teacher_accuracy.mean()), 4),
                "plurality_accuracy": round(float(result.plurality_accuracy), 4),
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "execution": execution,
            }
            predictions[name] = (result.public_predictions, result.eval_predictions)
            print(
                f"{name:6s} {seconds:7.1f} s  (training {result.train_seconds:6.1f} s, "
                f"{results[name]['chunks']} chunk(s), mean teacher accuracy "
                f"{results[name]['teacher_accuracy_mean']:.2%}, load {load_before[0]:.2f})",
                flush=True,
            )
    out = {
        "benchmark": "scale_ray",
        "data": data.name,
        "model": config.model,
        "teachers": len(shards),
        "images_per_teacher": int(np.mean([len(s) for s in shards])),
        "epochs": config.epochs,
        "public_items": len(data.public),
        "eval_items": len(data.evaluation),
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "runs": results,
    }
    try:
        import ray

        out["ray"] = ray.__version__
    except ImportError:
        pass
    names = list(predictions)
    out["identical_predictions"] = all(
        np.array_equal(predictions[n][0], predictions[names[0]][0])
        and np.array_equal(predictions[n][1], predictions[names[0]][1])
        for n in names
    )
    t = {n: r["stage_seconds"] for n, r in results.items()}
    if "local" in t and "ray-1" in t:
        out["ray_overhead_1_worker"] = round((t["ray-1"] - t["local"]) / t["local"], 4)
    if "ray-1" in t and "ray-2" in t:
        out["speedup_2_vs_1_workers"] = round(t["ray-1"] / t["ray-2"], 3)
    if "local" in t and "ray-2" in t:
        out["speedup_2_workers_vs_local"] = round(t["local"] / t["ray-2"], 3)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teachers", type=int, default=48, help="teachers (shards of 240 images)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument(
        "--data",
        default="fashion-mnist",
        help="dataset (default fashion-mnist; digits for a smoke test)",
    )
    p.add_argument("--model", default="auto", help="teacher model (default: cnn28 for 28x28)")
    p.add_argument(
        "--per-teacher",
        type=int,
        default=None,
        help="images per teacher (default: a 250-teacher partition's)",
    )
    p.add_argument(
        "--runs",
        nargs="+",
        default=["local", "ray-1", "ray-2"],
        choices=["local", "ray-1", "ray-2"],
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} CPUs{'; other jobs are running' if os.getloadavg()[0] > 0.5 else ''})",
        flush=True,
    )
    out = run(args)
    for key in ("ray_overhead_1_worker", "speedup_2_vs_1_workers", "speedup_2_workers_vs_local"):
        if key in out:
            value = out[key]
            print(
                f"{key:28s} {value:+.1%}"
                if key.startswith("ray_overhead")
                else f"{key:28s} {value:.2f}x"
            )
    print(f"identical predictions: {out['identical_predictions']}")
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out["identical_predictions"] else 1


if __name__ == "__main__":
    sys.exit(main())
