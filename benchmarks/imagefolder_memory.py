"""Benchmark: peak memory of reading an ``imagefolder:`` dataset, one checkout against another.

Writes ``--images`` random RGB PNGs (``--side`` x ``--side`` pixels, 10 class folders) to a
temporary folder once, then for each ``--root`` (a checkout: its ``pate`` is imported) runs two
children under GNU time (``/usr/bin/time -f %M``, the largest resident set): one that only
imports what loading needs (``imports``), one that calls ``load_pate_data("imagefolder:DIR")``
with the default split (``load``). The difference is what reading the images costs; the images
themselves take ``images x 3 x side x side x 4`` bytes as float32. With ``--cache`` each root
also loads the folder twice through a fresh feature cache (``cache_miss``: decoded into the
cache; ``cache_hit``: memory-mapped from it, nothing decoded), as a run does (issue #33). Wall
seconds of each child are recorded beside its peak.

    git worktree add /tmp/pate-old <commit>
    .venv/bin/python benchmarks/imagefolder_memory.py --root /tmp/pate-old --root . \\
        --json benchmarks/results/imagefolder_memory.json

Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

TIME = "/usr/bin/time"
IMPORTS = (
    "from pate.teachers.data import load_pate_data\n"
    "from torchvision.datasets import ImageFolder\n"
    "from torchvision import transforms\n"
    "from PIL import Image\n"
)
#: What a child does after ``IMPORTS``: load the dataset named by its first argument, without
#: a cache (``LOADING``) or through the feature cache in the folder of its second (``CACHED``).
LOADING = (
    "import sys\n"
    "d = load_pate_data(sys.argv[1])\n"
    "print(len(d.private), len(d.public), len(d.evaluation))\n"
)
CACHED = (
    "import sys\n"
    "from pate.teachers.feature_cache import FeatureCache\n"
    "d = load_pate_data(sys.argv[1], cache=FeatureCache(sys.argv[2]))\n"
    "print(len(d.private), len(d.public), len(d.evaluation))\n"
)


def write_images(folder: pathlib.Path, images: int, side: int) -> None:
    """``images`` random RGB PNGs in 10 class folders (seed 0) of ``train/`` (the first 80 %:
    private) and ``test/`` (public and evaluation; a single folder is refused, issue #48)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(10):  # every class folder in test/, which declares the classes
        (folder / "test" / f"c{c}").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        cls = folder / ("train" if i < images * 4 // 5 else "test") / f"c{i % 10}"
        cls.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(cls / f"{i}.png")


def peak_mib(root: pathlib.Path, code: str, folder: pathlib.Path, *extra: str) -> float:
    """Peak resident MiB of a child running ``code`` with ``root``'s pate (:func:`measure`)."""
    return measure(root, code, folder, *extra)[0]


def measure(root: pathlib.Path, code: str, folder: pathlib.Path, *extra: str):
    """``(peak resident MiB, wall seconds)`` of a child running ``code`` with ``root``'s pate
    (arguments: the folder, then ``extra``)."""
    if not os.access(TIME, os.X_OK):
        raise SystemExit(f"{TIME} (GNU time) is needed: install the 'time' package")
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.NamedTemporaryFile("r", suffix=".maxrss") as out:
        done = subprocess.run(
            [TIME, "-f", "%M %e", "-o", out.name, sys.executable, "-c", code, str(folder), *extra],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{root} failed:\n{done.stderr[-2000:]}")
        peak, seconds = out.read().split()[-2:]
        return round(int(peak) / 1024, 1), float(seconds)


def measure_root(root: pathlib.Path, data, codes: tuple[str, str, str], cache) -> dict:
    """One row of ``root``: the peak of the ``imports`` child and the peak and seconds of the
    ``load`` child (``codes``: imports, load, load through a cache, each given ``data``), and
    with ``cache`` (a folder, None: not measured) those of two loads through a fresh feature
    cache there (``cache_miss``, ``cache_hit``)."""
    imports_code, load_code, cached_code = codes
    imports = peak_mib(root.resolve(), imports_code, data)
    load, seconds = measure(root.resolve(), load_code, data)
    row = {
        "root": str(root),
        "imports_mib": imports,
        "load_mib": load,
        "reading_mib": round(load - imports, 1),
        "load_seconds": seconds,
    }
    if cache is not None:
        for what in ("cache_miss", "cache_hit"):
            peak, took = measure(root.resolve(), cached_code, data, str(cache))
            row[f"{what}_mib"], row[f"{what}_seconds"] = peak, took
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", action="append", type=pathlib.Path, required=True)
    ap.add_argument("--images", type=int, default=6000)
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--cache", action="store_true", help="also load through a feature cache")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pate-imagefolder-") as tmp:
        folder = pathlib.Path(tmp) / "pool"
        write_images(folder, args.images, args.side)
        rows = []
        for root in args.root:
            cache = pathlib.Path(tmp) / f"cache-{len(rows)}" if args.cache else None
            codes = (IMPORTS, IMPORTS + LOADING, IMPORTS + CACHED)
            rows.append(measure_root(root, f"imagefolder:{folder}", codes, cache))
            print(json.dumps(rows[-1]), flush=True)
    result = {
        "benchmark": "benchmarks/imagefolder_memory.py",
        "command": "python benchmarks/imagefolder_memory.py " + " ".join(argv or sys.argv[1:]),
        "images": args.images,
        "side": args.side,
        "images_mib_float32": round(args.images * 3 * args.side**2 * 4 / 2**20, 1),
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
