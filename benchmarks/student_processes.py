"""Benchmark: make demo's student step in one process (one or two threads) against two processes
of one thread each, idle and beside two 2-thread torch loops (issue #33, the 3x bar).

The step is make demo's FixMatch step on 28x28 images without the trainer's bookkeeping:
``cnn28`` as :func:`pate.student.trainer.build_network` makes it (channels-last, bfloat16
autocast where the CPU has AMX), the rows and augmented views drawn from a public pool of 9000
random images by :class:`pate.student.draws.Batches` (32 labelled rows, 96 unlabelled ones with
their weak and strong views; the views of a chunk of steps drawn at once, as the trainer draws
them), a no-gradient forward of the weak views, a forward and backward of
the labelled views and 80 of the strong ones (about make demo's mask rate), Nesterov SGD and the
EMA. Variants (``VARIANTS``):

* ``threads1``, ``threads2``: one process, torch on one or two threads (idle threads sleep);
* ``processes2``: two processes of one thread each; each draws and trains on half of every batch
  with its own generator, and the two gradients are summed in shared memory (two barriers a
  step) before both take the same update: data parallelism, with no barrier inside a step's
  operations.
* ``student_threads1``, ``student_threads2``, ``student_processes2``: the trainer itself,
  :class:`pate.student.train.Student` as make demo's config sets it (FixMatch, ``cnn28``, 32 + 96
  rows, EMA; threshold 0, so all 96 strong views train) with ``processes=1`` on one or two
  threads, or ``processes=2`` (:mod:`pate.student.parallel`: one wait a step); two epochs of
  ``--steps`` steps, the second timed.
* ``student_cuda``, ``student_cuda_shards2`` (only when named, on a machine with a CUDA GPU):
  the same trainer on ``cuda`` in one process, its batch drawn whole as shipped
  (:func:`pate.student.draws.step_shards` is 1 on a GPU) or, in the child, as the
  :data:`pate.student.draws.STEP_SHARDS` shards a CPU draws: what drawing in shards would
  cost where no second process shares the step.

Each (condition, variant) runs in a fresh child process (``--steps`` steps after 5 untimed
ones); the variants take turns ``--rounds`` times and the median is kept. Conditions as in
``benchmarks/threads.py`` (``idle``, ``torch2``). Writes milliseconds per step, each variant's
slowdown (``torch2`` over its own ``idle``) and its ``torch2`` time over the idle ``threads2``
time (what the issue's bar compares: make demo's idle run uses two threads).

    .venv/bin/python benchmarks/student_processes.py --json benchmarks/results/student_processes.json

``--memory`` measures instead the proportional set size (``/proc/PID/smaps_rollup``: shared
pages counted once) of the trainer's processes at the end of each of three epochs of ``--steps``
steps, with ``processes=1`` and ``processes=2`` (``--memory --steps 100`` for the result file).

Run on demand, never as a test (the tests run a few steps of each variant).
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
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

VARIANTS = (
    "threads1",
    "threads2",
    "processes2",
    "student_threads1",
    "student_threads2",
    "student_processes2",
)
#: Named on demand: they need a CUDA GPU.
GPU_VARIANTS = ("student_cuda", "student_cuda_shards2")
CONDITIONS = ("idle", "torch2")
BATCH, UNLABELLED, KEPT = 32, 96, 80  # labelled rows, unlabelled rows, strong views trained on
SETTINGS = {"flip": False, "pad": 4, "strong_ops": 2, "cutout": 0.5}


def _training(seed: int = 0):
    import numpy as np
    import torch

    from pate.student.trainer import Training, build_network

    x = np.random.default_rng(0).random((512, 1, 28, 28), dtype=np.float32)
    cpu = torch.device("cpu")
    net, _ = build_network(
        "cnn28", seed=seed, x=x, input_shape=(1, 28, 28), num_classes=10, device=cpu
    )
    opt = {"ema_decay": 0.99, "learning_rate": 0.03, "momentum": 0.9, "weight_decay": 5e-4}
    return Training.start(net, {**opt, "amp": True}, seed=seed, num_classes=10, device=cpu)


def _batches(seed: int):
    import numpy as np
    import torch

    from pate.student.draws import Batches

    rng = np.random.default_rng(1)
    x = rng.random((9000, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 9000)
    generator = torch.Generator().manual_seed(seed)
    labelled, std = np.arange(400), np.ones(1, np.float32)
    cpu = torch.device("cpu")
    return Batches(x, y, None, labelled, std, SETTINGS, generator=generator, device=cpu)


def _draws(batches, share: int):
    """The steps' inputs, drawn as the trainer draws them: the views of a chunk of steps at a
    time (:func:`pate.student.draws.draw_steps`), ``1 / share`` of each batch."""
    from pate.student.draws import draw_steps, steps_per_draw

    settings = {**SETTINGS, "method": "fixmatch", "batch_size": BATCH // share}
    settings["unlabeled_ratio"] = UNLABELLED // BATCH
    chunk = steps_per_draw(batches, settings)
    while True:
        yield from draw_steps(batches, settings, chunk)


def _gradients(training, batches, draw, share: int) -> None:
    """Forward and backward of one step's ``draw`` (the gradients left in the weights)."""
    import torch
    from torch.nn import functional

    kept = KEPT // share
    with torch.no_grad():
        pseudo = torch.softmax(training.forward(draw.unlabelled_weak), dim=1).argmax(dim=1)
    strong = draw.unlabelled_strong[:kept]
    logits = training.forward(torch.cat([draw.labelled, strong]))
    n = draw.rows.numel()
    loss = functional.cross_entropy(logits[:n], batches.y[draw.rows]) + functional.cross_entropy(
        logits[n:], pseudo[:kept]
    )
    training.optimizer.zero_grad(set_to_none=True)
    loss.backward()


def _update(training) -> None:
    training.optimizer.step()
    training.update_ema(0.99)


def _one_process(threads: int, steps: int) -> float:
    import torch

    torch.set_num_threads(threads)
    training, batches = _training(), _batches(0)
    draws = _draws(batches, 1)
    for i in range(5 + steps):
        if i == 5:
            start = time.perf_counter()
        _gradients(training, batches, next(draws), 1)
        _update(training)
    return (time.perf_counter() - start) / steps


def _worker(rank, steps, shared, barrier, seconds, weights) -> None:
    import torch

    torch.set_num_threads(1)
    training, batches = _training(), _batches(1 + rank)
    draws = _draws(batches, 2)
    params = list(training.model.parameters())
    for i in range(5 + steps):
        if i == 5:
            start = time.perf_counter()
        _gradients(training, batches, next(draws), 2)
        shared[rank].copy_(torch.cat([p.grad.reshape(-1) for p in params]))
        barrier.wait()
        total = shared.sum(dim=0)  # the same order in both processes: the same update
        offset = 0
        for p in params:
            p.grad.copy_(total[offset : offset + p.numel()].view_as(p.grad))
            offset += p.numel()
        barrier.wait()  # both have read the sums before either writes its next gradient
        _update(training)
    seconds[rank] = (time.perf_counter() - start) / steps
    weights[rank] = float(sum(p.detach().double().sum() for p in params))


def _two_processes(steps: int) -> float:
    import multiprocessing

    import torch

    size = sum(p.numel() for p in _training().model.parameters())
    shared = torch.zeros((2, size)).share_memory_()
    context = multiprocessing.get_context("fork")
    barrier, seconds = context.Barrier(2, timeout=120), context.Array("d", 2)
    weights = context.Array("d", 2)
    workers = [
        context.Process(target=_worker, args=(r, steps, shared, barrier, seconds, weights))
        for r in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if any(w.exitcode != 0 for w in workers):
        raise RuntimeError(f"a worker failed: exit codes {[w.exitcode for w in workers]}")
    if weights[0] != weights[1]:  # one training, not two: the same updates in both processes
        raise RuntimeError(f"the two processes' weights differ: {weights[0]!r} {weights[1]!r}")
    return max(seconds[:])


def _demo_student(device: str = "cpu", **settings):
    """make demo's student (FixMatch, ``cnn28``, 32 + 96 rows, EMA) on ``device`` with
    ``settings``."""
    from pate.student.train import Student

    return Student(
        model="cnn28",
        batch_size=BATCH,
        unlabeled_ratio=UNLABELLED // BATCH,
        ema_decay=0.99,
        device=device,
        random_state=0,
        progress=False,
        **settings,
    )


def _student(variant: str, steps: int) -> float:
    """Seconds per step of the trainer's second epoch (``student_*`` variants)."""
    import numpy as np
    import torch

    torch.set_num_threads(1 if variant == "student_threads1" else 2)
    device = "cuda" if variant.startswith("student_cuda") else "cpu"
    if variant == "student_cuda_shards2":
        from pate.student import draws, train

        def as_on_a_cpu(network, batch_size, *, device, resumed=None):
            return draws.step_shards(network, batch_size, device=torch.device("cpu"))

        train.step_shards = as_on_a_cpu  # type: ignore[assignment]
    rng = np.random.default_rng(1)
    x = rng.random((9000, 1, 28, 28), dtype=np.float32)
    y = np.where(np.arange(9000) < 400, rng.integers(0, 10, 9000), -1)
    student = _demo_student(
        device,
        epochs=2,
        steps_per_epoch=steps,
        threshold=0.0,
        pad=4,
        processes=2 if variant == "student_processes2" else 1,
    ).fit(x, y)
    return student.history_[1]["seconds"] / steps


def _rollup(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
                out[parts[0][:-1]] = int(parts[1]) / 1024
    return out


def memory(processes: int, steps: int) -> list[dict]:
    """The trainer's processes' memory at the end of each epoch (``--memory``)."""
    import glob

    import numpy as np

    from pate.core import threads

    threads.prepare_environment()
    rng = np.random.default_rng(0)
    x = rng.random((9000, 1, 28, 28), dtype=np.float32)
    y = np.where(np.arange(9000) < 400, np.arange(9000) % 10, -1)
    samples: list[dict] = []

    def sample(epoch: int, record: dict) -> None:
        pids = [os.getpid()]
        for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            with open(path) as f:
                pids += [int(k) for k in f.read().split()]
        seen = []
        for pid in pids:
            try:
                seen.append(_rollup(pid))
            except (ProcessLookupError, FileNotFoundError):  # a helper that just finished
                pass
        samples.append(
            {
                "epoch": epoch,
                "processes": len(seen),
                "pss_mib": round(sum(r["Pss"] for r in seen), 1),
                "private_mib": [round(r["Private_Clean"] + r["Private_Dirty"], 1) for r in seen],
                "rss_mib": [round(r["Rss"], 1) for r in seen],
            }
        )

    _demo_student(
        epochs=3, steps_per_epoch=steps, threshold=0.5, processes=processes, on_epoch_end=sample
    ).fit(x, y)
    return samples


def measure(variant: str, steps: int) -> float:
    """Seconds per step of ``variant`` in this process (the child's work)."""
    from pate.core import threads

    threads.prepare_environment()  # idle OpenMP threads sleep (before torch loads)
    if variant.startswith("student_"):
        return _student(variant, steps)
    if variant == "processes2":
        return _two_processes(steps)
    return _one_process(int(variant[-1]), steps)


def _child(variant: str, steps: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def _write(result: dict, path: pathlib.Path | None) -> None:
    """``result`` printed, and written to ``path`` as JSON where given."""
    if path is not None:
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--variants", nargs="+", choices=VARIANTS + GPU_VARIANTS, default=list(VARIANTS)
    )
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    ap.add_argument("--child", choices=VARIANTS + GPU_VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--memory", action="store_true", help="measure memory, not time")
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(measure(args.child, args.steps))
        return 0
    if args.memory_child:
        print(json.dumps(memory(args.memory_child, args.steps)))
        return 0
    if args.memory:  # each count in a fresh process
        runs = {}
        for processes in (1, 2):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--memory-child",
                    str(processes),
                    "--steps",
                    str(args.steps),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[f"processes={processes}"] = json.loads(out.stdout.strip().splitlines()[-1])
        result = {
            "benchmark": "benchmarks/student_processes.py --memory",
            "command": "python benchmarks/student_processes.py " + " ".join(argv or sys.argv[1:]),
            "steps_per_epoch": args.steps,
            "machine": __import__("threads").machine_facts(),
            "at_each_epoch_end": runs,
        }
        _write(result, args.json)
        return 0
    import threads as neighbours  # benchmarks/threads.py: the same neighbours

    ms: dict[str, dict[str, float]] = {}
    load = {}
    for condition in args.conditions:
        load[condition] = list(os.getloadavg())
        procs = neighbours._neighbours(condition)
        try:
            times: dict[str, list[float]] = {v: [] for v in args.variants}
            for _ in range(args.rounds):
                for variant in args.variants:
                    times[variant].append(_child(variant, args.steps) * 1e3)
        finally:
            neighbours._stop(procs)
        ms[condition] = {v: round(statistics.median(t), 2) for v, t in times.items()}
        print(condition, json.dumps(ms[condition]), flush=True)
    result = {
        "benchmark": "benchmarks/student_processes.py",
        "command": "python benchmarks/student_processes.py " + " ".join(argv or sys.argv[1:]),
        "machine": neighbours.machine_facts(),
        "load_average_before": load,
        "steps": args.steps,
        "rounds": args.rounds,
        "ms_per_step": ms,
    }
    if "idle" in ms and "torch2" in ms:
        result["slowdown"] = {v: round(ms["torch2"][v] / ms["idle"][v], 2) for v in ms["idle"]}
        if "threads2" in ms["idle"]:
            base = ms["idle"]["threads2"]
            result["torch2_over_idle_threads2"] = {
                v: round(t / base, 2) for v, t in ms["torch2"].items()
            }
    _write(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
