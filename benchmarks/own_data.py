"""pate.fit with defaults only, on data nobody tuned for: tables and images, 500 to 40 000 rows.

For each dataset (nothing is downloaded: scikit-learn's bundled sets, synthetic tables with our
own seeds and awkward feature scales, digits written as a PNG image folder) and each target
epsilon (delta 1e-5), one call with DEFAULTS ONLY, as a new user would write it::

    pate.fit((x_private, y_private), x_public, evaluation=(x_eval, y_eval),
             records=len(y_private), target_eps=eps, ledger=False)

(``records`` is the declaration every call on one's own data needs: here the private split's
size; an ``imagefolder:`` source is given by name: ``pate.fit("imagefolder:DIR", records=...,
target_eps=eps, ledger=False)``, the source's own split). Per run: the student's accuracy, the
teachers' mean and plurality accuracy (on the evaluation split, from the report), queries asked /
answered, the
released labels' accuracy and their agreement with the noiseless plurality vote (public split;
true labels known only because this is a benchmark), the guarantee epsilon, the seconds, and
whether pate refused before training (the exception's type and message) or warned (the logged
warnings and the report's, if it has any). Per dataset, once: a non-private model trained on the
same private rows (HistGradientBoosting for tables, logistic regression on the pixels for
images) and the majority class's rate on the evaluation split; per run the share of that gap the
student closes, ``gap_closed = (student - majority) / (non_private - majority)``.

PROVISIONAL: while ``pate.fit`` still requires ``num_teachers=`` (or ``queries=`` with a named
source), the harness first calls it without them and, only when that raises the TypeError naming
the argument (before any work), calls again with :func:`provisional_num_teachers` (about 100
private records per teacher, 10 to 250 teachers) / all public items; the row then says
``"provisional": ["num_teachers", ...]``. Once the planner picks them, rows have no provisional
settings.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/own_data.py            # everything, eps 1 2 4
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/own_data.py --eps 2 --datasets digits moons-1k
    .venv/bin/python benchmarks/own_data.py --docs docs/own_data.md     # rewrite the docs tables

Resumable: rows already in ``--out`` (same dataset and epsilon) are kept and skipped unless
``--force``; the file is rewritten atomically after every run, so an interrupted benchmark
continues where it stopped. ``--max-minutes`` stops starting new runs after that long (the rest
on the next call). Run on demand, never as a test; docs/own_data.md quotes the results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

if str(pathlib.Path(__file__).resolve().parent) not in sys.path:  # the sibling module below
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import docs_blocks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "own_data.json"
DEFAULT_EPS = (1.0, 2.0, 4.0)
DELTA = 1e-5
#: share of the gap between the majority class and the non-private model the student must close
#: (issue #31's acceptance bar, at eps = 2)
GAP_TARGET = 0.8

# ------------------------------------------------------------------------------ datasets


class Dataset:
    """One benchmark dataset: in-memory splits, or a named source (``imagefolder:``) whose split
    pate makes itself (``splits`` then holds that same split, read with pate's loader, for the
    reference models). ``splits``: x_/y_ private, public, evaluation; ``kind``: "table" or
    "image folder"; ``cleanup``: folders to delete after the runs. (A plain class: this file is
    loaded outside ``sys.modules`` by the tests, where dataclasses cannot resolve annotations.)"""

    def __init__(
        self,
        name: str,
        kind: str,
        description: str,
        splits: dict,
        source: str | None = None,
        cleanup: list | None = None,
    ):
        self.name, self.kind, self.description, self.splits = name, kind, description, splits
        self.source, self.cleanup = source, list(cleanup or [])

    @property
    def rows(self) -> int:
        return sum(len(self.splits[f"y_{s}"]) for s in ("private", "public", "evaluation"))

    @property
    def classes(self) -> int:
        return (
            int(
                max(int(np.max(self.splits[f"y_{s}"])) for s in ("private", "public", "evaluation"))
            )
            + 1
        )


def split_sizes(n: int) -> tuple[int, int, int]:
    """(private, public, evaluation) rows of a pool of ``n``: public 20 %, evaluation 5 % but at
    least min(300, 20 %) so that small sets still measure accuracy to a few points."""
    evaluation = max(int(round(0.05 * n)), min(300, int(round(0.2 * n))))
    public = int(round(0.2 * n))
    return n - public - evaluation, public, evaluation


def split_pool(x: np.ndarray, y: np.ndarray, *, seed: int) -> dict:
    """A private / public / evaluation split of a random permutation (fixed seed)."""
    order = np.random.default_rng(seed).permutation(len(y))
    n_priv, n_pub, _ = split_sizes(len(y))
    parts = np.split(order, [n_priv, n_priv + n_pub])
    out = {}
    for name, idx in zip(("private", "public", "evaluation"), parts):
        out[f"x_{name}"] = np.ascontiguousarray(x[idx], dtype=np.float32)
        out[f"y_{name}"] = y[idx].astype(np.int64)
    return out


def _scaled(x: np.ndarray, *, seed: int, low: float = -2.0, high: float = 3.0) -> np.ndarray:
    """Columns rescaled by factors spread log-uniformly over 10^low .. 10^high (shuffled), plus
    per-column offsets: what raw business tables look like (cents and millions side by side)."""
    rng = np.random.default_rng(seed)
    factors = rng.permutation(np.logspace(low, high, x.shape[1]))
    offsets = rng.normal(0, 3, x.shape[1]) * factors
    return x * factors + offsets


def _breast_cancer(seed: int, work: pathlib.Path) -> Dataset:
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return Dataset(
        "breast-cancer",
        "table",
        "scikit-learn's breast_cancer: 30 raw features (scales 1e-3 .. 1e3), 2 classes",
        split_pool(x, y, seed=seed),
    )


def _digits(seed: int, work: pathlib.Path) -> Dataset:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return Dataset(
        "digits",
        "table",
        "scikit-learn's digits as 64 raw pixel columns (0..16), 10 classes",
        split_pool(x, y, seed=seed),
    )


def _digits_images(seed: int, work: pathlib.Path) -> Dataset:
    """scikit-learn's digits upscaled to 28x28 grey PNGs in one folder per class, read back
    through pate's own ``imagefolder:`` loader: 70 % in ``train/`` (private), 30 % in ``test/``
    (public, and its last 10 % for evaluation)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    from pate.teachers.data import load_pate_data

    digits = load_digits()
    folder = work / "digits-png"
    if folder.exists():
        shutil.rmtree(folder)
    for i, (image, label) in enumerate(zip(digits.images, digits.target)):
        pixels = np.clip(image / 16.0 * 255.0, 0, 255).astype(np.uint8)
        part = "train" if i % 10 < 7 else "test"
        path = folder / part / f"digit{label}" / f"{i:04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode="L").resize((28, 28), Image.BILINEAR).save(path)
    source = f"imagefolder:{folder}"
    data = load_pate_data(source)
    splits = {}
    for name in ("private", "public", "evaluation"):
        part = getattr(data, name)
        splits[f"x_{name}"] = np.asarray(part.x, dtype=np.float32)
        splits[f"y_{name}"] = np.asarray(part.y, dtype=np.int64)
    return Dataset(
        "digits-png-28",
        "image folder",
        "digits upscaled to 28x28 grey PNGs, one folder per class (imagefolder:)",
        splits,
        source=source,
        cleanup=[folder],
    )


def _table_40k(seed: int, work: pathlib.Path) -> Dataset:
    """The issue's case: 40 000 rows, 30 features on scales 0.01 .. 1000, 6 classes."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=40_000,
        n_features=30,
        n_informative=12,
        n_redundant=6,
        n_classes=6,
        n_clusters_per_class=2,
        class_sep=1.0,
        flip_y=0.02,
        random_state=3101 + seed,
    )
    return Dataset(
        "table-40k-scaled",
        "table",
        "make_classification: 30 features (12 informative) rescaled 0.01 .. 1000, "
        "6 classes, 2 clusters per class",
        split_pool(_scaled(x, seed=seed), y, seed=seed),
    )


def _quantiles_5k(seed: int, work: pathlib.Path) -> Dataset:
    """Nonlinear: classes are nested shells of a 4-d Gaussian, plus 6 pure-noise columns."""
    from sklearn.datasets import make_gaussian_quantiles

    rng = np.random.default_rng(3102 + seed)
    x, y = make_gaussian_quantiles(
        n_samples=5_000, n_features=4, n_classes=3, random_state=3102 + seed
    )
    x = np.hstack([x, rng.normal(size=(len(y), 6))])
    return Dataset(
        "shells-5k-noise",
        "table",
        "make_gaussian_quantiles: 3 nested shells in 4 dims + 6 noise columns, scales 0.1 .. 100",
        split_pool(_scaled(x, seed=seed, low=-1, high=2), y, seed=seed),
    )


def _mixed_10k(seed: int, work: pathlib.Path) -> Dataset:
    """3 classes, 8 continuous columns on mixed scales and 6 integer (categorical-like) columns:
    4 binned informative features (3 to 12 levels) and 2 uninformative codes (0..999, 0..6)."""
    from sklearn.datasets import make_classification

    rng = np.random.default_rng(3103 + seed)
    x, y = make_classification(
        n_samples=10_000,
        n_features=12,
        n_informative=7,
        n_redundant=2,
        n_classes=3,
        n_clusters_per_class=1,
        class_sep=0.8,
        flip_y=0.03,
        random_state=3103 + seed,
    )
    continuous = _scaled(x[:, :8], seed=seed, low=-1, high=4)
    binned = [
        np.digitize(x[:, 8 + j], np.quantile(x[:, 8 + j], np.linspace(0, 1, levels + 1)[1:-1]))
        for j, levels in enumerate((3, 5, 7, 12))
    ]
    codes = [rng.integers(0, 1000, len(y)), rng.integers(0, 7, len(y))]
    x = np.column_stack([continuous, *binned, *codes]).astype(np.float64)
    return Dataset(
        "mixed-10k-categorical",
        "table",
        "make_classification: 8 continuous columns (scales 0.1 .. 1e4) + 4 binned "
        "integer columns + 2 noise codes, 3 classes",
        split_pool(x, y, seed=seed),
    )


def _moons_1k(seed: int, work: pathlib.Path) -> Dataset:
    from sklearn.datasets import make_moons

    rng = np.random.default_rng(3104 + seed)
    x, y = make_moons(n_samples=1_000, noise=0.25, random_state=3104 + seed)
    x = np.hstack([x * [1000.0, 0.01], rng.normal(size=(len(y), 2))])
    return Dataset(
        "moons-1k",
        "table",
        "make_moons (noise 0.25), scales 1000 and 0.01, + 2 noise columns, 2 classes",
        split_pool(x, y, seed=seed),
    )


def _blobs_tiny(seed: int, work: pathlib.Path) -> Dataset:
    """A quick check of the harness (not in the default set): 600 easy rows."""
    from sklearn.datasets import make_blobs

    x, y = make_blobs(
        n_samples=600, n_features=5, centers=3, cluster_std=1.0, random_state=3105 + seed
    )
    return Dataset(
        "blobs-600",
        "table",
        "make_blobs: 3 well-separated classes, 5 features",
        split_pool(x, y, seed=seed),
    )


#: name -> builder(seed, work folder); the default set is every name but the quick check
DATASETS = {
    "breast-cancer": _breast_cancer,
    "moons-1k": _moons_1k,
    "digits": _digits,
    "digits-png-28": _digits_images,
    "shells-5k-noise": _quantiles_5k,
    "mixed-10k-categorical": _mixed_10k,
    "table-40k-scaled": _table_40k,
    "blobs-600": _blobs_tiny,
}
QUICK = ("blobs-600",)
DEFAULT_DATASETS = tuple(n for n in DATASETS if n not in QUICK)

# ------------------------------------------------------------------------------ references


def references(ds: Dataset, *, seed: int) -> dict:
    """The non-private model on the same private rows and the majority class (the private
    split's most frequent label) on the evaluation split."""
    s = ds.splits
    start = time.perf_counter()
    majority_label = int(np.bincount(s["y_private"]).argmax())
    majority = float(np.mean(s["y_evaluation"] == majority_label))
    xp = s["x_private"].reshape(len(s["x_private"]), -1)
    xe = s["x_evaluation"].reshape(len(s["x_evaluation"]), -1)
    if ds.kind == "table":
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(random_state=seed)
        label = "HistGradientBoostingClassifier (defaults)"
    else:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1))
        label = "StandardScaler + LogisticRegression(C=0.1) on the pixels"
    model.fit(xp, s["y_private"])
    non_private = float(model.score(xe, s["y_evaluation"]))
    return {
        "non_private": round(non_private, 4),
        "non_private_model": label,
        "majority": round(majority, 4),
        "seconds": round(time.perf_counter() - start, 1),
    }


def gap_closed(student: float | None, majority: float, non_private: float) -> float | None:
    """(student - majority) / (non_private - majority); None without a student or a gap."""
    if student is None or non_private - majority <= 1e-9:
        return None
    return (student - majority) / (non_private - majority)


def provisional_num_teachers(private_records: int) -> int:
    """PROVISIONAL (the harness's, not pate's): about 100 private records per teacher, 10 to
    250 teachers. Used only while pate.fit still requires num_teachers=."""
    return int(min(250, max(10, private_records // 100)))


# ------------------------------------------------------------------------------ one run


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _captured():
    """Warnings pate logs (logger "pate" and below) or raises with :mod:`warnings`."""
    handler = _Collect()
    logger = logging.getLogger("pate")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.messages, caught
    finally:
        logger.removeHandler(handler)


#: the TypeError pate.fit raises, before any work, for a setting it still requires
_MISSING = re.compile(r"\b(num_teachers|queries)= \(")


def _fit(ds: Dataset, eps: float, run_dir: pathlib.Path):
    """pate.fit with defaults only; the provisional settings only when pate.fit requires them
    (its TypeError names the argument before anything is read or trained)."""
    import pate

    s = ds.splits
    extra: dict = {}
    while True:
        try:
            if ds.source is not None:
                result = pate.fit(
                    ds.source,
                    records=len(s["y_private"]),  # declared, as a user states their data's size
                    target_eps=eps,
                    delta=DELTA,
                    ledger=False,
                    run_dir=run_dir,
                    **extra,
                )
            else:
                result = pate.fit(
                    (s["x_private"], s["y_private"]),
                    s["x_public"],
                    evaluation=(s["x_evaluation"], s["y_evaluation"]),
                    records=len(s["y_private"]),  # declared, as a user states their data's size
                    classes=[str(c) for c in range(ds.classes)],  # the benchmark's own tables
                    target_eps=eps,
                    delta=DELTA,
                    ledger=False,
                    run_dir=run_dir,
                    **extra,
                )
            return result, sorted(extra)
        except TypeError as exc:
            missing = _MISSING.search(str(exc))
            if missing is None or missing.group(1) in extra:
                raise
            key = missing.group(1)
            extra[key] = (
                provisional_num_teachers(len(s["y_private"]))
                if key == "num_teachers"
                else len(s["y_public"])
            )


def _plan(ds: Dataset, eps: float) -> str | None:
    """What ``pate.plan`` says (once it exists), as text; None before it does."""
    import pate

    plan = getattr(pate, "plan", None)
    if plan is None:
        return None
    s = ds.splits
    try:
        if ds.source is not None:
            out = plan(ds.source, target_eps=eps, delta=DELTA, ledger=False)
        else:
            out = plan(
                (s["x_private"], s["y_private"]),
                s["x_public"],
                evaluation=(s["x_evaluation"], s["y_evaluation"]),
                target_eps=eps,
                delta=DELTA,
                ledger=False,
            )
    except Exception as exc:  # a refusal is recorded by the run itself
        return f"{type(exc).__name__}: {exc}"
    return str(out)


def run_one(ds: Dataset, eps: float, ref: dict, *, work: pathlib.Path) -> dict:
    """One pate.fit with defaults only, as a result row."""
    from pate.run import rundir  # the run directory's file names

    s = ds.splits
    row = {
        "dataset": ds.name,
        "kind": ds.kind,
        "rows": ds.rows,
        "classes": ds.classes,
        "input_shape": list(s["x_private"].shape[1:]),
        "private": len(s["y_private"]),
        "public": len(s["y_public"]),
        "evaluation": len(s["y_evaluation"]),
        "eps": eps,
        "delta": DELTA,
        "non_private": ref["non_private"],
        "majority": ref["majority"],
    }
    run_dir = work / f"run-{ds.name}-{eps:g}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    start = time.perf_counter()
    plan_text = _plan(ds, eps)
    with _captured() as (logged, caught):
        try:
            result, provisional = _fit(ds, eps, run_dir)
            error = None
        except Exception as exc:  # a refusal (or a failure): recorded, the benchmark goes on
            result, provisional, error = None, [], exc
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["plan"] = plan_text
    row["warnings"] = list(dict.fromkeys(logged + [str(w.message) for w in caught]))
    if error is not None:
        trained = (run_dir / rundir.TEACHERS).exists()
        row.update(
            status="refused" if not trained else "failed",
            refused=not trained,
            error_type=type(error).__name__,
            error=str(error)[:2000],
            provisional=provisional,
            student=None,
            gap_closed=None,
        )
        shutil.rmtree(run_dir, ignore_errors=True)
        return row
    # the operator's own measurement: the internal report (docs/publishing.md)
    report, u, q = result.internal_report, result.utility, result.report["queries"]
    row["warnings"] += [str(w) for w in result.warnings]
    labels, answered = np.asarray(result.labels), np.asarray(result.answered_mask, dtype=bool)
    y_pub = s["y_public"]
    label_acc = float(np.mean(labels[answered] == y_pub[answered])) if answered.any() else None
    agreement = plurality_public = None
    votes_path = run_dir / rundir.VOTES
    if votes_path.exists():
        votes = np.load(votes_path, allow_pickle=False)
        if votes.ndim == 2 and votes.shape[0] == len(labels):
            plurality = votes.argmax(axis=1)
            plurality_public = float(np.mean(plurality == y_pub))
            if answered.any():
                agreement = float(np.mean(labels[answered] == plurality[answered]))
    student = float(u["student_accuracy"])
    p = result.privacy
    gap = gap_closed(student, ref["majority"], ref["non_private"])
    row.update(
        status="ok",
        refused=False,
        error_type=None,
        error=None,
        provisional=provisional,
        num_teachers=p.get("num_teachers"),
        mechanism=p.get("mechanism"),
        params={
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in (p.get("params") or {}).items()
        },
        student=round(student, 4),
        teachers_mean=_r(u.get("teacher_mean_accuracy")),
        plurality=_r(u.get("plurality_vote_accuracy")),
        plurality_public=_r(plurality_public),
        asked=int(q["asked"]),
        answered=int(q["answered"]),
        label_accuracy=_r(label_acc),
        label_plurality_agreement=_r(agreement),
        eps_guarantee=round(float(result.epsilon), 4),
        gap_closed=None if gap is None else round(gap, 4),
        teacher_model=(report.get("config", {}).get("teachers", {}) or {}).get("model"),
        student_model=(report.get("config", {}).get("student", {}) or {}).get("model"),
        rule_check=_rule_check(run_dir),
    )
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


def _rule_check(run_dir: pathlib.Path) -> dict | None:
    """The class-means rule check of a run (``records.rule_check`` of its aggregate summary,
    ``rundir.AGGREGATE``: the reading chosen and each reading's mismatch ratio), None for other
    runs."""
    from pate.run import rundir  # the run directory's file names

    path = run_dir / rundir.AGGREGATE
    if not path.exists():
        return None
    return (json.loads(path.read_text()).get("records") or {}).get("rule_check")


def _r(value, digits: int = 4):
    return None if value is None else round(float(value), digits)


# ------------------------------------------------------------------------------ results


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def load_results(path: pathlib.Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"rows": [], "datasets": {}, "meta": {"invocations": []}}


def save_results(path: pathlib.Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, path)


#: warnings every ``ledger=False`` run without a sanitized release gets: kept in the JSON, left
#: out of the docs table (they say nothing about utility)
ROUTINE_WARNINGS = ("The privacy ledger was off", "The sanitized epsilon fell back")
#: Mechanisms without teachers: the privacy figure's "num_teachers" counts their voters (every
#: private record), not teachers, so the table says "none".
NO_TEACHERS = ("class-means", "private-knn")


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def markdown_table(results: dict) -> str:
    """The docs table of a results file: one line per (dataset, eps), in the file's order."""
    head = (
        "| dataset | kind | rows | classes | ε | teachers | student % | teachers mean / "
        "plurality % | answered / asked | labels right % | guarantee ε | non-private % | "
        "majority % | gap closed | s | what pate said |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in results["rows"]:
        if r["status"] == "ok":
            said = "; ".join(w for w in r["warnings"] if not w.startswith(ROUTINE_WARNINGS))
            said = said or "nothing"
            teachers = (
                f"none ({r['mechanism']})"
                if r.get("mechanism") in NO_TEACHERS
                else str(r.get("num_teachers"))
            )
            cells = [
                teachers + (" (provisional)" if "num_teachers" in r["provisional"] else ""),
                f"**{_pct(r['student'])}**",
                f"{_pct(r['teachers_mean'])} / {_pct(r['plurality'])}",
                f"{r['answered']} / {r['asked']}",
                _pct(r["label_accuracy"]),
                f"{r['eps_guarantee']:.2f}",
            ]
        else:
            said = f"{r['status']}: {r['error_type']}: {r['error']}"
            cells = ["–", f"**{r['status']}**", "–", "–", "–", "–"]
        gap = "–" if r.get("gap_closed") is None else f"{r['gap_closed'] + 0.0:.2f}"  # no -0.00
        said = said.replace("|", "\\|").replace("\n", " ")
        if len(said) > 160:
            said = said[:157] + "..."
        lines.append(
            "| "
            + " | ".join(
                [
                    r["dataset"],
                    r["kind"],
                    str(r["rows"]),
                    str(r["classes"]),
                    f"{r['eps']:g}",
                    *cells,
                    _pct(r["non_private"]),
                    _pct(r["majority"]),
                    gap,
                    f"{r['seconds']:.0f}",
                    said,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


DOCS_TAG = "own_data table"


def docs_tables(text: str):
    """(results path, table in the docs) for every generated table block of a docs file."""
    return docs_blocks.docs_tables(text, DOCS_TAG)


def write_docs(doc: pathlib.Path) -> int:
    """Rewrite every generated table of ``doc`` from the results file its marker names."""
    return docs_blocks.write_docs(doc, DOCS_TAG, lambda path: markdown_table(load_results(path)))


# ------------------------------------------------------------------------------ main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--datasets",
        nargs="+",
        choices=tuple(DATASETS),
        default=list(DEFAULT_DATASETS),
        metavar="NAME",
        help=f"default: {' '.join(DEFAULT_DATASETS)} (also: {' '.join(QUICK)})",
    )
    parser.add_argument(
        "--eps",
        type=float,
        nargs="+",
        default=list(DEFAULT_EPS),
        help="target epsilons (default 1 2 4), delta 1e-5",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--seed", type=int, default=0, help="the splits' and tables' seed")
    parser.add_argument(
        "--force", action="store_true", help="rerun (dataset, eps) rows already in --out"
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no new run after this many minutes (continue later)",
    )
    parser.add_argument(
        "--docs",
        default=None,
        metavar="FILE.md",
        help="only rewrite the generated tables of FILE.md from their results",
    )
    args = parser.parse_args(argv)
    bad = [e for e in args.eps if not (math.isfinite(e) and e > 0)]
    if bad:
        parser.error(f"--eps must be positive and finite, got {bad[0]:g}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        parser.error(f"--max-minutes must be positive, got {args.max_minutes:g}")
    if args.docs is not None:
        n = write_docs(pathlib.Path(args.docs))
        print(f"rewrote {n} table(s) in {args.docs}")
        return 0

    out = pathlib.Path(args.out)
    results = load_results(out)
    start = time.perf_counter()
    invocation = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "commit": _commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    results["meta"].setdefault("invocations", []).append(invocation)
    done = {(r["dataset"], float(r["eps"])) for r in results["rows"]}
    stopped = False
    with tempfile.TemporaryDirectory(prefix="own-data-") as tmp:
        work = pathlib.Path(tmp)
        for name in args.datasets:
            todo = [e for e in args.eps if args.force or (name, float(e)) not in done]
            if not todo:
                print(f"{name}: all of eps {args.eps} in {out}; skipped (--force reruns)")
                continue
            if args.max_minutes and time.perf_counter() - start > 60 * args.max_minutes:
                stopped = True
                break
            ds = DATASETS[name](args.seed, work)
            ref = results["datasets"].get(name)
            if ref is None or args.force or ref.get("rows") != ds.rows:
                ref = references(ds, seed=args.seed)
                ref.update(
                    kind=ds.kind,
                    rows=ds.rows,
                    classes=ds.classes,
                    description=ds.description,
                    private=len(ds.splits["y_private"]),
                    public=len(ds.splits["y_public"]),
                    evaluation=len(ds.splits["y_evaluation"]),
                )
                results["datasets"][name] = ref
            print(
                f"{name}: {ds.rows} rows, {ds.classes} classes; non-private "
                f"{ref['non_private']:.3f}, majority {ref['majority']:.3f}",
                flush=True,
            )
            for eps in todo:
                if args.max_minutes and time.perf_counter() - start > 60 * args.max_minutes:
                    stopped = True
                    break
                row = run_one(ds, float(eps), ref, work=work)
                row["commit"] = invocation["commit"]
                results["rows"] = [
                    r
                    for r in results["rows"]
                    if (r["dataset"], float(r["eps"])) != (name, float(eps))
                ]
                results["rows"].append(row)
                results["rows"].sort(
                    key=lambda r: (
                        list(DATASETS).index(r["dataset"]) if r["dataset"] in DATASETS else 99,
                        r["eps"],
                    )
                )
                invocation["seconds"] = round(time.perf_counter() - start, 1)
                invocation["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
                save_results(out, results)
                if row["status"] == "ok":
                    print(
                        f"  eps {eps:g}: student {row['student']:.3f} (gap closed "
                        f"{row['gap_closed'] if row['gap_closed'] is not None else '-'}), "
                        f"teachers {row['teachers_mean']} / plurality {row['plurality']}, "
                        f"{row['answered']}/{row['asked']} answered, guarantee "
                        f"{row['eps_guarantee']}, {row['seconds']:.0f} s"
                        + (f"; warned: {row['warnings']}" if row["warnings"] else ""),
                        flush=True,
                    )
                else:
                    print(
                        f"  eps {eps:g}: {row['status']}: {row['error_type']}: "
                        f"{row['error'][:300]} ({row['seconds']:.0f} s)",
                        flush=True,
                    )
            for folder in ds.cleanup:
                shutil.rmtree(folder, ignore_errors=True)
            if stopped:
                break
    invocation["seconds"] = round(time.perf_counter() - start, 1)
    invocation["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    invocation["stopped_by_max_minutes"] = stopped
    save_results(out, results)
    print(
        f"wrote {out} ({invocation['seconds']:.0f} s)"
        + ("; stopped by --max-minutes, run again to continue" if stopped else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
