"""Issue #50's protocol on tables of your own: each file split into private, public and
evaluation rows, the majority class and a non-private gradient-boosting model as references, and
``pate.fit`` with the table's names and ``target_eps`` only -- the messy-table harness
(``benchmarks/messy_tables.py``) on real exports instead of generated ones.

A table is ``PATH,label=COLUMN[,id=COLUMN]`` (CSV, or Parquet by its suffix). Its rows are
shuffled (``--seed``) and split by person when an ``id`` column is named (no person in two
splits; else by row): 60 % private (labelled), 20 % public (the label column dropped; its true
labels kept aside for the label accuracy only) and 20 % evaluation. The label's values become the
declared classes (as text, sorted): the harness declares them as a user would, from what they
know of the column, not from pate. Every row of the output says what pate said before training
(a refusal or the plan's warnings; or, after the release and before the student trains, the
classes the release cannot place) and whether the run named its result weak after training,
next to the gap closed = (student - majority) / (non-private - majority). Issue #50's bar: at
least 0.8 at eps 2, or a word.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/real_tables.py \\
        adult.csv,label=income heart.parquet,label=target,id=patient --out results.json
    .venv/bin/python benchmarks/real_tables.py adult.csv,label=income --references-only

Nothing is downloaded and no file is written but ``--out``. The non-private accuracy is the
benchmark's own measurement on the private rows, never something pate publishes.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import numpy as np

if str(pathlib.Path(__file__).resolve().parent) not in sys.path:  # the sibling modules below
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import messy_tables  # noqa: E402  (its references, pate.fit row and table)
import own_data  # noqa: E402  (its results writer and commit stamp)

#: The shares of a table's people (or rows) in the private and public splits; the evaluation
#: split gets the rest.
PRIVATE_SHARE, PUBLIC_SHARE = 0.6, 0.2


def parse_table(text: str) -> dict:
    """``PATH,label=COLUMN[,id=COLUMN]`` as {"path", "label", "id"}; a ValueError naming the
    part that is wrong."""
    path, *options = text.split(",")
    spec: dict = {"path": pathlib.Path(path), "label": None, "id": None}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("label", "id") or not value:
            raise ValueError(
                f"{text!r}: expected label=COLUMN or id=COLUMN after the path, got {option!r}"
            )
        spec[key] = value
    if spec["label"] is None:
        raise ValueError(f"{text!r}: name the label column (PATH,label=COLUMN)")
    return spec


def _read(path: pathlib.Path):
    import pandas as pd

    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    return pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path)


def split_table(spec: dict, *, seed: int) -> messy_tables.MessyTable:
    """The file of ``spec`` as a MessyTable: private, public (no label column) and evaluation
    rows, by person when an id column is named (module docstring)."""
    frame = _read(spec["path"])
    for role in ("label", "id"):
        if spec[role] is not None and spec[role] not in frame.columns:
            raise ValueError(
                f"{spec['path']}: no column {spec[role]!r} (the {role}); its columns: "
                f"{', '.join(map(str, frame.columns))}"
            )
    label = spec["label"]
    frame = frame[frame[label].notna()].reset_index(drop=True)
    frame[label] = frame[label].astype(str)
    units = frame[spec["id"]].to_numpy() if spec["id"] is not None else np.arange(len(frame))
    unique = np.unique(units)
    np.random.default_rng(seed).shuffle(unique)
    cut = np.round(np.array([PRIVATE_SHARE, PRIVATE_SHARE + PUBLIC_SHARE]) * len(unique))
    private_units, public_units, _ = np.split(unique, cut.astype(int))
    split = np.where(np.isin(units, private_units), 0, np.where(np.isin(units, public_units), 1, 2))
    private, public, evaluation = (frame[split == k].reset_index(drop=True) for k in range(3))
    return messy_tables.MessyTable(
        name=spec["path"].stem,
        private=private,
        public=public.drop(columns=[label]),
        evaluation=evaluation,
        public_labels=public[label].to_numpy(dtype=object),
        label=label,
        id=spec["id"],
        classes=tuple(sorted(frame[label].unique())),
    )


def run(specs: list[dict], *, seed: int, eps: float, with_pate: bool, out=None) -> dict:
    """Every table: its references and, ``with_pate``, one ``pate.fit`` (written to ``out``
    after every table when given)."""
    results = {"meta": {"commit": own_data._commit(), "seed": seed, "eps": eps}, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            start = time.perf_counter()
            table = split_table(spec, seed=seed)
            reference = messy_tables.references(table, seed=seed)
            right = reference.pop("right")
            row = {
                "table": table.name,
                "rows": {name: len(getattr(table, name)) for name in messy_tables.SPLITS},
                "classes": len(table.classes),
                **reference,
            }
            if with_pate:
                work = pathlib.Path(tmp)
                row.update(messy_tables.pate_row(table, row, right, eps=eps, work=work))
            row["wall_seconds"] = round(time.perf_counter() - start, 1)
            results["rows"].append(row)
            if out is not None:
                own_data.save_results(pathlib.Path(out), results)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="+", metavar="PATH,label=COLUMN[,id=COLUMN]")
    parser.add_argument("--seed", type=int, default=0, help="the splits' seed")
    parser.add_argument("--eps", type=float, default=messy_tables.DEFAULT_EPS)
    parser.add_argument("--references-only", action="store_true", help="no pate.fit")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", default=None, metavar="FILE.json", help="also write them here")
    args = parser.parse_args(argv)
    try:
        specs = [parse_table(text) for text in args.tables]
        for spec in specs:  # every file and column checked before any work
            split_table(spec, seed=args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    results = run(
        specs, seed=args.seed, eps=args.eps, with_pate=not args.references_only, out=args.out
    )
    print(json.dumps(results, indent=1) if args.json else messy_tables.markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
