"""pate.fit with defaults only on synthetic tables that no default was chosen on, before and after
the class-means rule check (``pate.core.release_check``), side by side in one run.

Nine generators that are NOT in ``benchmarks/own_data.py`` (own seeds 9101..9109; 600 to 40 000
rows; columns rescaled over up to five decades; nested shells, XOR, rings, heavy tails, many
classes, few columns, a regression cut into classes). Each is split like own_data (public 20 %,
evaluation 5 % but at least min(300, 20 %), private the rest; split seed 7) and run through
``own_data.run_one`` -- the call a new user writes::

    pate.fit((x_private, y_private), x_public, evaluation=(x_eval, y_eval),
             records=len(y_private), target_eps=eps, ledger=False)

-- once per arm and repeat:

* ``after``: the code as it is: a quadratic release's "qda" rule chooses between the class
  moments as released and shrunk by their noise level, from the release alone, and warns when
  no candidate reproduces the release's class statistics.
* ``before``: the same code with the choice switched off (``release_check.CANDIDATES["qda"]``
  restricted to the moments as released: the rule of the previous commit), for the datasets
  whose planned front-end is quadratic. Where the planner picks the kernel front-end the two arms
  run the same code, so only ``after`` runs.

References per dataset, once (on the same private rows): scikit-learn's
HistGradientBoostingClassifier and the majority class; gap closed = (student - majority) /
(non-private - majority). Results: ``--out`` (default
benchmarks/results/unseen_tables.json, resumable, rewritten after every run); ``--docs FILE``
rewrites the table between ``<!-- unseen_tables table -->`` markers.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/unseen_tables.py              # eps 2, 1 repeat
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/unseen_tables.py --datasets xor-8k --repeats 2
    .venv/bin/python benchmarks/unseen_tables.py --docs docs/own_data.md
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import pathlib
import re
import sys
import tempfile
import time

import numpy as np

if str(pathlib.Path(__file__).resolve().parent) not in sys.path:  # the sibling module below
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import docs_blocks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "unseen_tables.json"
SPLIT_SEED = 7


def _own_data():
    """benchmarks/own_data.py (not a package: loaded from its file), for its harness."""
    spec = importlib.util.spec_from_file_location(
        "_unseen_own_data", ROOT / "benchmarks" / "own_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OWN = _own_data()


def _rescaled(x: np.ndarray, seed: int, low: float = -2.0, high: float = 3.0) -> np.ndarray:
    """Columns times factors log-spread over 10^low .. 10^high, plus offsets (own_data's idea,
    other seeds)."""
    rng = np.random.default_rng(seed)
    factors = rng.permutation(np.logspace(low, high, x.shape[1]))
    return x * factors + rng.normal(0, 3, x.shape[1]) * factors


def _classification_8():
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=20_000,
        n_features=20,
        n_informative=10,
        n_redundant=4,
        n_classes=8,
        n_clusters_per_class=1,
        class_sep=1.2,
        random_state=9101,
    )
    return _rescaled(x, 9101), y


def _quantiles_12k():
    from sklearn.datasets import make_gaussian_quantiles

    x, y = make_gaussian_quantiles(n_samples=12_000, n_features=8, n_classes=4, random_state=9102)
    noise = np.random.default_rng(9102).normal(size=(len(y), 4))
    return _rescaled(np.hstack([x, noise]), 9102, -1.0, 2.0), y


def _xor_8k():
    rng = np.random.default_rng(9103)
    x = rng.uniform(-1, 1, size=(8_000, 10))
    return _rescaled(x, 9103), ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int64)


def _heavy_15k():
    rng = np.random.default_rng(9104)
    n = 15_000
    y = rng.integers(0, 3, n)
    shift = np.array([[0, 0, 0, 0], [1, 0.5, 0, 0], [0, 1, 1, 0]], dtype=float)[y]
    t = shift + rng.standard_t(2, size=(n, 4))
    lognormal = rng.lognormal(0, 2, size=(n, 6)) * (1 + 0.5 * y[:, None])
    return np.hstack([t, lognormal]), y


def _hastie_12k():
    from sklearn.datasets import make_hastie_10_2

    x, y = make_hastie_10_2(n_samples=12_000, random_state=9105)
    return _rescaled(x, 9105, -1.0, 3.0), (y > 0).astype(np.int64)


def _circles_3k():
    from sklearn.datasets import make_circles

    x, y = make_circles(n_samples=3_000, noise=0.1, factor=0.5, random_state=9106)
    noise = np.random.default_rng(9106).normal(size=(len(y), 8))
    return np.hstack([x * [50.0, 0.02], noise]), y


def _many_classes_40k():
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=40_000,
        n_features=16,
        n_informative=12,
        n_redundant=0,
        n_classes=15,
        n_clusters_per_class=1,
        class_sep=1.5,
        random_state=9107,
    )
    return _rescaled(x, 9107), y


def _small_600():
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=600, n_features=6, n_informative=4, n_redundant=0, n_classes=3, random_state=9108
    )
    return _rescaled(x, 9108), y


def _friedman_10k():
    from sklearn.datasets import make_friedman1

    x, target = make_friedman1(n_samples=10_000, n_features=10, noise=1.0, random_state=9109)
    return _rescaled(x, 9109), np.digitize(target, np.quantile(target, [1 / 3, 2 / 3]))


#: name -> (builder, what it is)
GENERATORS = {
    "classification-20k-8": (_classification_8, "make_classification, 20 columns, 8 classes"),
    "quantiles-12k": (_quantiles_12k, "4 nested Gaussian shells in 8 dims + 4 noise columns"),
    "xor-8k": (_xor_8k, "XOR of the signs of 2 of 10 uniform columns"),
    "heavy-15k": (_heavy_15k, "t(2) location shifts + lognormal scales, 3 classes"),
    "hastie-12k": (_hastie_12k, "make_hastie_10_2: sum of squares of 10 Gaussians cut at 9.34"),
    "circles-3k": (_circles_3k, "make_circles on scales 50 / 0.02 + 8 noise columns"),
    "many-classes-40k": (_many_classes_40k, "make_classification, 16 columns, 15 classes"),
    "small-600": (_small_600, "make_classification, 600 rows, 6 columns, 3 classes"),
    "friedman-10k": (_friedman_10k, "make_friedman1 cut into 3 equal classes"),
}


def dataset(name: str):
    """One generator's own_data Dataset (a fixed split)."""
    build, description = GENERATORS[name]
    x, y = build()
    return OWN.Dataset(name, "table", description, OWN.split_pool(x, y, seed=SPLIT_SEED))


def planned_front_end(ds) -> str:
    """What the planner will choose for this table at any eps (sizes only)."""
    from pate.core.tuned_defaults import table_front_end

    s = ds.splits
    return table_front_end(
        private_records=len(s["y_private"]),
        num_classes=ds.classes,
        columns=s["x_private"].shape[1],
    )


@contextlib.contextmanager
def arm(name: str):
    """``after``: the code as it is; ``before``: the qda rule's choice switched off."""
    from pate.core import release_check

    saved = dict(release_check.CANDIDATES["qda"])
    if name == "before":
        release_check.CANDIDATES["qda"] = {"qda": saved["qda"]}
    try:
        yield
    finally:
        release_check.CANDIDATES["qda"] = saved


_RATIO = re.compile(r"rule \((?P<chosen>[\w-]+)\): .*? (?P<ratio>[\d.]+) times as much")


def _rule_check(row: dict) -> dict | None:
    """The rule check of an ``after`` row: the reading chosen and its mismatch ratio, from the
    run's aggregate summary (``row["rule_check"]``, own_data.run_one) or, for rows run before
    the harness kept it, from the warning's text (only rows that warned)."""
    if isinstance(row.get("rule_check"), dict):
        check = row["rule_check"]
        ratio = check["mismatch_ratios"][check["chosen"]]
        return {
            "chosen": check["chosen"],
            "ratio": ratio,
            "warned": ratio > check["mismatch_warning_above"],
        }
    for text in row.get("warnings") or []:
        found = _RATIO.search(text)
        if found:
            return {"chosen": found["chosen"], "ratio": float(found["ratio"]), "warned": True}
    return None


def _check_cell(rows: list) -> str:
    """What the rule check said over the ``after`` rows of one (dataset, eps)."""
    checks = [c for c in (_rule_check(r) for r in rows) if c is not None]
    if not checks:
        return "–"
    chosen = "/".join(sorted({c["chosen"] for c in checks}))
    ratios = sorted(c["ratio"] for c in checks)
    low, high = f"{ratios[0]:.1f}", f"{ratios[-1]:.1f}"
    span = low if low == high else f"{low}–{high}"
    warned = " (warned)" if any(c["warned"] for c in checks) else ""
    return f"{chosen} {span}{warned}"


def run(args) -> dict:
    out = pathlib.Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"rows": [], "datasets": {}}
    done = {(r["dataset"], r["eps"], r["arm"], r["repeat"]) for r in results["rows"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            ds = dataset(name)
            front = planned_front_end(ds)
            if name not in results["datasets"]:
                ref = OWN.references(ds, seed=0)
                results["datasets"][name] = dict(
                    ref, rows=ds.rows, classes=ds.classes, front_end=front,
                    description=GENERATORS[name][1],
                )  # fmt: skip
            ref = results["datasets"][name]
            arms = ("before", "after") if front == "quadratic" else ("after",)
            arms = tuple(a for a in arms if a in args.arms)
            for eps in args.eps:
                for repeat in range(args.repeats):
                    for which in arms:
                        if (name, eps, which, repeat) in done and not args.force:
                            continue
                        with arm(which):
                            row = OWN.run_one(ds, eps, ref, work=pathlib.Path(tmp))
                        row.update(arm=which, repeat=repeat, front_end=front, commit=OWN._commit())
                        results["rows"] = [
                            r
                            for r in results["rows"]
                            if (r["dataset"], r["eps"], r["arm"], r["repeat"])
                            != (name, eps, which, repeat)
                        ] + [row]
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_text(json.dumps(results, indent=1) + "\n")
                        print(
                            f"{name} eps {eps:g} {which} #{repeat}: student {row.get('student')} "
                            f"labels {row.get('label_accuracy')} gap {row.get('gap_closed')} "
                            f"({row['seconds']:.0f} s) {_rule_check(row)}",
                            flush=True,
                        )
    return results


def markdown_table(results: dict) -> str:
    """One line per (dataset, eps): the mean of the repeats per arm."""
    head = (
        "| dataset | rows | classes | front-end | ε | labels right % before → after | "
        "student % before → after | gap closed before → after | non-private % | majority % "
        "| runs | rule chosen, mismatch ratio |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    keys = list(dict.fromkeys((r["dataset"], r["eps"]) for r in results["rows"]))

    def mean(rows, key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return None if not values else float(np.mean(values))

    def pair(before, after, fmt):
        b = "=" if before is None else fmt(before)
        return f"{b} → {fmt(after) if after is not None else '–'}"

    for name, eps in keys:
        ref = results["datasets"][name]
        rows = [r for r in results["rows"] if (r["dataset"], r["eps"]) == (name, eps)]
        arms = {a: [r for r in rows if r["arm"] == a] for a in ("before", "after")}
        pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
        cells = [
            pair(mean(arms["before"], k), mean(arms["after"], k), f)
            for k, f in (
                ("label_accuracy", pct),
                ("student", pct),
                ("gap_closed", lambda v: f"{v + 0.0:.2f}"),
            )
        ]
        lines.append(
            f"| {name} | {ref['rows']} | {ref['classes']} | {ref['front_end']} | {eps:g} | "
            + " | ".join(cells)
            + f" | {pct(ref['non_private'])} | {pct(ref['majority'])} | "
            f"{len(arms['after'])} | {_check_cell(arms['after'])} |"
        )
    return "\n".join(lines)


DOCS_TAG = "unseen_tables table"


def docs_tables(text: str):
    """(results path, table in the docs) for every generated block of a docs file."""
    return docs_blocks.docs_tables(text, DOCS_TAG)


def write_docs(doc: pathlib.Path) -> int:
    return docs_blocks.write_docs(
        doc, DOCS_TAG, lambda path: markdown_table(json.loads(path.read_text()))
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--datasets", nargs="+", choices=tuple(GENERATORS), default=list(GENERATORS)
    )
    parser.add_argument("--eps", type=float, nargs="+", default=[2.0])
    parser.add_argument("--repeats", type=int, default=1, help="fresh releases per arm")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--force", action="store_true")
    parser.add_argument(
        "--arms", nargs="+", choices=("before", "after"), default=["before", "after"]
    )
    parser.add_argument("--docs", default=None, metavar="FILE.md")
    args = parser.parse_args(argv)
    if args.docs:
        print(f"rewrote {write_docs(pathlib.Path(args.docs))} table(s) in {args.docs}")
        return 0
    start = time.perf_counter()
    run(args)
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
