"""Benchmark: peak memory and time of reading a user's data file, one checkout against another.

Writes a random table of ``--rows`` x ``--columns`` features, labels in 0..4 and each row's
split mark to a temporary file once, in ``--format``: ``csv`` (a header row, ``%.6g`` values, a
``split`` column), ``npz-pool`` (``x, y, split``, ``numpy.savez``), ``npz-pool-compressed`` (``numpy.savez_compressed``) or
``npz-splits-compressed`` (``x_private`` with the other splits, compressed). Then for each
``--root`` (a checkout: its ``pate`` is imported) runs, under GNU time, a child that only imports
``pate.teachers.data`` (``imports``) and one that calls ``load_pate_data`` on the file with the
default split (``load``); with ``--cache`` two more that load it through a fresh feature cache
(``cache_miss``: written into it; ``cache_hit``: mapped from it; issue #33). The features take
``rows x columns x 4`` bytes as float32.

    git worktree add /tmp/pate-old <commit>
    .venv/bin/python benchmarks/file_memory.py --root /tmp/pate-old --root . \\
        --json benchmarks/results/csv_memory.json
    .venv/bin/python benchmarks/file_memory.py --root . --format npz-pool-compressed --cache

Run on demand, never as a test.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import imagefolder_memory as CACHING  # noqa: E402  (the same GNU time children)

FORMATS = ("csv", "npz-pool", "npz-pool-compressed", "npz-splits-compressed")
IMPORTS = "from pate.teachers.data import load_pate_data\n"


def split_marks(rows: int) -> np.ndarray:
    """Each row's split (issue #48: a pool is marked, never split on pate-learn's own): blocks
    of 5 rows (labels 0..4 each) dealt 7 private, 2 public, 1 evaluation in every 10 blocks."""
    block = (np.arange(rows) // 5) % 10
    return np.where(block < 7, "private", np.where(block < 9, "public", "evaluation"))


def write_table(path: pathlib.Path, rows: int, columns: int) -> None:
    """``rows`` random records (seed 0): ``columns`` normal features, a label in 0..4 and the
    row's split."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(rows, columns))
    marks = split_marks(rows)
    with open(path, "w") as fh:
        fh.write(",".join([f"f{j}" for j in range(columns)] + ["label", "split"]) + "\n")
        for i in range(rows):
            fh.write(",".join([*(f"{v:.6g}" for v in features[i]), str(i % 5), marks[i]]) + "\n")


def write_file(folder: pathlib.Path, fmt: str, rows: int, columns: int) -> str:
    """The data file of ``fmt`` in ``folder`` (seed 0); returns its dataset name."""
    if fmt == "csv":
        write_table(folder / "table.csv", rows, columns)
        return f"csv:{folder / 'table.csv'}"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, columns)).astype(np.float32)
    y = np.arange(rows) % 5
    marks = split_marks(rows)
    path = folder / "table.npz"
    if fmt == "npz-pool":
        np.savez(path, x=x, y=y, split=marks)
    elif fmt == "npz-pool-compressed":
        np.savez_compressed(path, x=x, y=y, split=marks)
    else:
        parts = {m: marks == m for m in ("private", "public", "evaluation")}
        np.savez_compressed(
            path,
            x_private=x[parts["private"]],
            y_private=y[parts["private"]],
            x_public=x[parts["public"]],
            y_public=y[parts["public"]],
            x_evaluation=x[parts["evaluation"]],
            y_evaluation=y[parts["evaluation"]],
        )
    return f"npz:{path}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", action="append", type=pathlib.Path, required=True)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--columns", type=int, default=50)
    ap.add_argument("--format", choices=FORMATS, default="csv")
    ap.add_argument("--cache", action="store_true", help="also load through a feature cache")
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pate-file-") as tmp:
        name = write_file(pathlib.Path(tmp), args.format, args.rows, args.columns)
        for root in args.root:
            cache = pathlib.Path(tmp) / f"cache-{len(rows)}" if args.cache else None
            codes = (IMPORTS, IMPORTS + CACHING.LOADING, IMPORTS + CACHING.CACHED)
            rows.append(CACHING.measure_root(root, name, codes, cache))
            print(json.dumps(rows[-1]), flush=True)
        file_mib = round(pathlib.Path(name.split(":", 1)[1]).stat().st_size / 2**20, 1)
    result = {
        "benchmark": "benchmarks/file_memory.py",
        "command": "python benchmarks/file_memory.py " + " ".join(argv or sys.argv[1:]),
        "format": args.format,
        "rows": args.rows,
        "columns": args.columns,
        "file_mib": file_mib,
        "features_mib_float32": round(args.rows * args.columns * 4 / 2**20, 1),
        "runs": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
