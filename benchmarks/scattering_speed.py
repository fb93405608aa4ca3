"""Benchmark: the ScatterNet front-end, pate's layer-at-a-time transform vs kymatio's path by path.

Both compute kymatio's ``Scattering2D(J=2, L=8)`` (``tests/teachers/test_scattering.py`` checks
that they agree); this times them side by side in one process on the same images: Fashion-MNIST
test images when the dataset is installed (else uniform noise of the same shape; the time does
not depend on the pixel values), in batches of ``--batch`` (the feature cache's chunk), taking
turns (kymatio, pate, pate, kymatio, ...) ``--rounds`` times, at each torch thread count of
``--threads``. Reported: milliseconds per image of each (median over the rounds), their ratio,
the load average before and after (the machine may be shared: compare within a run only).

    .venv/bin/python benchmarks/scattering_speed.py                 # ~1 minute on 2 cores
    .venv/bin/python benchmarks/scattering_speed.py --images 4000 --threads 1 2 \
        --out benchmarks/results/scattering_speed.json

Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's pate, also where another one is installed
    sys.path.insert(0, str(ROOT))


def _images(count: int):
    import numpy as np

    try:
        from pate.teachers.data import load_pate_data

        data = load_pate_data("fashion-mnist")
        x = np.asarray(data.public.x[:count], dtype=np.float32)
        source = "fashion-mnist public split"
    except Exception as exc:  # noqa: BLE001 -- any failure to find the data: noise instead
        x = np.random.default_rng(0).random((count, 1, 28, 28), dtype=np.float32)
        source = f"uniform noise ({type(exc).__name__}: no Fashion-MNIST)"
    return x, source


def _time(fn, x, batch: int) -> float:
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            fn(x[i : i + batch])
    return (time.perf_counter() - start) / len(x) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)

    import torch
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    from pate.teachers.scattering import Scattering2D

    x_np, source = _images(args.images)
    x = torch.from_numpy(x_np)
    h, w = x.shape[-2:]
    kymatio_net = ScatteringTorch2D(J=2, shape=(h, w), L=8)
    ours = Scattering2D(h, w)
    methods = {
        "kymatio": lambda b: kymatio_net(b.contiguous()),
        "pate": ours,
    }
    load_before = [round(v, 2) for v in os.getloadavg()]
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        _time(ours, x[:64], 64), _time(methods["kymatio"], x[:64], 64)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in methods}
        for r in range(args.rounds):
            order = list(methods) if r % 2 == 0 else list(reversed(methods))
            for name in order:
                times[name].append(_time(methods[name], x, args.batch))
        row = {name: round(statistics.median(t), 4) for name, t in times.items()}
        row = {"threads": threads, **{f"{k}_ms_per_image": v for k, v in row.items()}}
        row["speedup"] = round(row["kymatio_ms_per_image"] / row["pate_ms_per_image"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {
        "benchmark": "scattering_speed",
        "command": "python benchmarks/scattering_speed.py " + " ".join(argv or sys.argv[1:]),
        "images": len(x),
        "image_source": source,
        "batch": args.batch,
        "rounds": args.rounds,
        "rows": rows,
        "machine": {
            "cpus": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)),
            "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__,
        },
        "load_average_before": load_before,
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
    }
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
