"""Benchmark: peak memory and time of reading a ``csv:`` table, one checkout against another.

Writes a random table of ``--rows`` x ``--columns`` features and a label column (header row,
``%.6g`` values) to a temporary file once, then for each ``--root`` (a checkout: its ``pate``
is imported) runs, under GNU time, a child that only imports ``pate.teachers.data``
(``imports``) and one that calls ``load_pate_data("csv:FILE")`` with the default split
(``load``). The features take ``rows x columns x 4`` bytes as float32.

    git worktree add /tmp/pate-old <commit>
    .venv/bin/python benchmarks/csv_memory.py --root /tmp/pate-old --root . \\
        --json benchmarks/results/csv_memory.json

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
from imagefolder_memory import measure  # noqa: E402  (the same GNU time children)

IMPORTS = "from pate.teachers.data import load_pate_data\n"
LOAD = IMPORTS + (
    "import sys\n"
    "d = load_pate_data('csv:' + sys.argv[1])\n"
    "print(len(d.private), len(d.public), len(d.evaluation))\n"
)


def write_table(path: pathlib.Path, rows: int, columns: int) -> None:
    """``rows`` random records (seed 0): ``columns`` normal features and a label in 0..4."""
    rng = np.random.default_rng(0)
    names = ",".join([f"f{j}" for j in range(columns)] + ["label"])
    table = np.column_stack([rng.normal(size=(rows, columns)), rng.integers(0, 5, rows)])
    np.savetxt(path, table, delimiter=",", fmt="%.6g", header=names, comments="")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", action="append", type=pathlib.Path, required=True)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--columns", type=int, default=50)
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pate-csv-") as tmp:
        table = pathlib.Path(tmp) / "table.csv"
        write_table(table, args.rows, args.columns)
        for root in args.root:
            imports, _ = measure(root.resolve(), IMPORTS, table)
            load, seconds = measure(root.resolve(), LOAD, table)
            rows.append(
                {
                    "root": str(root),
                    "imports_mib": imports,
                    "load_mib": load,
                    "reading_mib": round(load - imports, 1),
                    "load_seconds": seconds,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        file_mib = round(table.stat().st_size / 2**20, 1)
    result = {
        "benchmark": "benchmarks/csv_memory.py",
        "command": "python benchmarks/csv_memory.py " + " ".join(argv or sys.argv[1:]),
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
