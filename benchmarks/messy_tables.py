"""Messy tables as they come out of a hospital or a bank (issue #50), and ``pate.fit`` on them
with nothing but the table's names.

The generator (seeded, 1 000 to 50 000 rows): an id column with several rows per person for
some people, numeric columns on scales 0.25 .. 20 000 (shifted normal, lognormal, heavy-tailed
lognormal, scaled counts), categorical text columns with skewed category frequencies, about
2 % gaps (written to CSV as an empty cell or ``NA``, half each), imbalanced classes named by
text labels, the label column fourth (not last). Each table is split BY PERSON
(no person in two splits) into private (labelled), public (no label column: unlabelled) and
evaluation (labelled) pandas DataFrames; the public rows' true labels are kept aside, for the
benchmark's label accuracy only. :func:`hospital` is issue #50's scenario: ``patient_id``, 14
numeric columns, ``sex`` / ``region`` / ``smoker``, the label ``outcome`` in home / readmitted /
died, and a separate public file of 3 000 unlabelled rows at full size.

The harness, per table: the majority class (the private rows' most frequent label) and a
non-private ``HistGradientBoostingClassifier`` (NaN and categories handled natively) trained on
the same private rows, both scored on the evaluation rows; then, as a new user writes it::

    pate.fit(private, public, evaluation=evaluation, label=..., id=..., classes=[...],
             target_eps=2)

with the harness's plumbing only (a temporary ``run_dir`` and ``ledger``). Before it,
``pate.plan`` with the same arguments: whether pate said before training that the run would be
weak (a refusal or a plan warning). Per table: rows, classes, majority / non-private / student
accuracy, gap closed = (student - majority) / (non-private - majority), seconds, and issue
#50's bar (gap closed >= 0.8 at eps 2, or said before training). PROVISIONAL
like benchmarks/own_data.py: while ``records=`` is still required, the harness declares the
private row count only after pate refused without it (before any work); the row says so.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/messy_tables.py               # every table
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/messy_tables.py --quick       # CI: small tables
    .venv/bin/python benchmarks/messy_tables.py --tables clinic-1k --references-only --json
    .venv/bin/python benchmarks/messy_tables.py --out benchmarks/results/messy_tables.json
    .venv/bin/python benchmarks/messy_tables.py --docs docs/benchmarks.md   # its table from --out

The non-private accuracy is fitted on private rows: it is the benchmark's own measurement on
synthetic tables, never something pate publishes.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time
from typing import NamedTuple

import numpy as np

if str(pathlib.Path(__file__).resolve().parent) not in sys.path:  # the sibling module below
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import docs_blocks  # noqa: E402
import own_data  # noqa: E402  (its split sizes, gap formula, warning capture, commit stamp)

DEFAULT_EPS = 2.0
#: share of people with several rows; their rows share the person's categories and half the
#: variance of the numeric columns
REPEAT_SHARE = 0.3
PERSON_CORRELATION = 0.5
#: the numeric columns' scales: log-spread over this range
SCALES = (0.25, 20_000.0)
HOSPITAL_CLASSES = ("home", "readmitted", "died")
HOSPITAL_NUMERIC = (
    "creatinine", "lactate", "potassium", "crp", "hemoglobin", "bmi", "age", "heart_rate",
    "systolic_bp", "platelets", "cholesterol", "prior_days", "ldh", "charges",
)  # fmt: skip
SPLITS = ("private", "public", "evaluation")
#: evaluation rows of every benchmark table (new people, drawn with the table): on 300 rows one row
#: was 0.1 of a 5-point gap; on these the gap closed's standard error is about 0.05 or less
EVALUATION_ROWS = 10_000
#: bootstrap draws of the evaluation rows behind the gap closed's standard error
BOOTSTRAP_DRAWS = 1_000
#: how a run names a weak result after training (its internal warning, pate.run.stages.report)
WEAK_RESULT = "a weak result"


class TableSpec(NamedTuple):
    """One table's shape. ``rows``: every split together, split like own_data (public 20 %,
    evaluation 5 % but at least min(300, 20 %)); with ``public_rows``, ``rows`` is the labelled
    export (evaluation 20 % of it) and the public file has ``public_rows`` rows of its own.
    ``evaluation_rows`` (None: as just said) replaces the evaluation split's size."""

    name: str
    description: str
    rows: int
    classes: tuple[str, ...]
    priors: tuple[float, ...]
    numeric: tuple[str, ...]
    informative: int
    categorical: tuple[tuple[str, tuple[str, ...]], ...]
    label: str = "status"
    id: str = "person_id"
    public_rows: int | None = None
    gap_rate: float = 0.02
    separation: float = 3.0
    evaluation_rows: int | None = EVALUATION_ROWS


class MessyTable(NamedTuple):
    """A generated table's three splits (pandas DataFrames; ``public`` has no label column) and
    the public rows' true labels (the benchmark's, for label accuracy; never given to pate)."""

    name: str
    private: object
    public: object
    evaluation: object
    public_labels: np.ndarray
    label: str
    id: str
    classes: tuple[str, ...]


def _named(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}_{i:02d}" for i in range(1, count + 1))


def _coded(column: str, count: int) -> tuple[str, tuple[str, ...]]:
    """A categorical column of ``count`` text codes."""
    return column, tuple(f"{column[:3].upper()}{i:03d}" for i in range(count))


_DECISIONS = (
    "approved", "declined", "referred", "pending", "withdrawn",
    "escalated", "deferred", "closed", "reopened", "transferred",
)  # fmt: skip


def hospital_spec(
    rows: int = 8_000, public_rows: int = 3_000, evaluation_rows: int | None = None
) -> TableSpec:
    """Issue #50's hospital export: ``rows`` labelled rows and a public file of its own."""
    return TableSpec(
        name=f"hospital-{rows // 1000}k" if rows >= 1000 else f"hospital-{rows}",
        description="issue #50: patient_id, 14 numeric, sex/region/smoker, outcome of 3",
        rows=rows,
        classes=HOSPITAL_CLASSES,
        priors=(0.68, 0.24, 0.08),
        numeric=HOSPITAL_NUMERIC,
        informative=8,
        categorical=(
            ("sex", ("F", "M")),
            ("region", ("North", "South", "East", "West", "Central")),
            ("smoker", ("no", "yes", "former")),
        ),
        label="outcome",
        id="patient_id",
        public_rows=public_rows,
        evaluation_rows=evaluation_rows,
    )


#: the benchmark's tables: 1k / 5k / 8k+3k / 20k / 50k rows, 2 to 10 classes, heavy imbalance,
#: many categories
TABLES = {
    spec.name: spec
    for spec in (
        TableSpec(
            "clinic-1k", "2 classes, 6 numeric, 2 categorical", 1_000, _DECISIONS[:2],
            (0.6, 0.4), _named("value", 6), 4, (_coded("ward", 4), _coded("unit", 7)),
        ),
        hospital_spec(evaluation_rows=EVALUATION_ROWS),
        TableSpec(
            "claims-5k-imbalanced", "3 classes at 90 / 7 / 3 %", 5_000, _DECISIONS[:3],
            (0.90, 0.07, 0.03), _named("amount", 10), 6,
            (_coded("provider", 12), _coded("plan", 4)), separation=8.0,
        ),
        TableSpec(
            "retail-20k-categories", "4 classes, 4 categorical of 8 to 200 categories", 20_000,
            _DECISIONS[:4], (0.4, 0.3, 0.2, 0.1), _named("spend", 6), 3,
            (_coded("store", 200), _coded("product", 120), _coded("brand", 50), _coded("tier", 8)),
        ),
        TableSpec(
            "survey-20k-10-classes", "10 classes, Zipf shares", 20_000, _DECISIONS,
            tuple(float(v) for v in (1 / np.arange(1, 11)) / np.sum(1 / np.arange(1, 11))),
            _named("answer", 12), 8, (_coded("district", 20), _coded("group", 6)),
        ),
        TableSpec(
            "registry-50k", "5 classes, 20 numeric", 50_000, _DECISIONS[:5],
            (0.35, 0.25, 0.2, 0.12, 0.08), _named("reading", 20), 10,
            (_coded("site", 30), _coded("kind", 3)),
        ),
    )
}  # fmt: skip
#: --quick: every table at this many rows (the hospital's public file 400), for CI
QUICK_ROWS = 1_000


def quick(spec: TableSpec) -> TableSpec:
    """The same shape at :data:`QUICK_ROWS` rows (the evaluation split sized as own_data's)."""
    public = None if spec.public_rows is None else 400
    return spec._replace(
        name=f"{spec.name}@quick",
        rows=min(spec.rows, QUICK_ROWS),
        public_rows=public,
        evaluation_rows=None,
    )


def split_rows(spec: TableSpec) -> dict[str, int]:
    """Rows per split (exact)."""
    if spec.public_rows is None:
        sizes = dict(zip(SPLITS, own_data.split_sizes(spec.rows), strict=True))
    else:
        evaluation = int(round(0.2 * spec.rows))
        sizes = dict(private=spec.rows - evaluation, public=spec.public_rows, evaluation=evaluation)
    if spec.evaluation_rows is not None:
        sizes["evaluation"] = spec.evaluation_rows
    return sizes


# ------------------------------------------------------------------------------ generator


def _people(sizes: dict[str, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(person index, split index) per row: each split's rows filled person by person, one row
    each or, for :data:`REPEAT_SHARE` of the people, 2 or more (the last person cut to fit), so
    no person is in two splits."""
    person, split, first = [], [], 0
    for index, name in enumerate(SPLITS):
        n = sizes[name]
        counts = np.where(rng.random(n) < REPEAT_SHARE, 1 + rng.geometric(0.5, n), 1)
        ends = np.cumsum(counts)
        people = int(np.searchsorted(ends, n)) + 1
        counts = counts[:people]
        counts[-1] -= int(ends[people - 1]) - n
        person.append(first + np.repeat(np.arange(people), counts))
        split.append(np.full(n, index))
        first += people
    return np.concatenate(person), np.concatenate(split)


def _labels(signal: np.ndarray, priors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Class indices drawn from softmax(signal + bias), the bias set so the classes' shares are
    about ``priors``."""
    bias = np.log(priors)
    for _ in range(50):
        logits = signal + bias
        proba = np.exp(logits - logits.max(axis=1, keepdims=True))
        proba /= proba.sum(axis=1, keepdims=True)
        bias += np.log(priors / proba.mean(axis=0))
    return np.argmax(signal + bias + rng.gumbel(size=signal.shape), axis=1)


def _numeric(latent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The latent columns made skewed and wildly scaled: normal, lognormal, heavy lognormal or
    whole counts in turn, times scales log-spread over :data:`SCALES` (in a random order)."""
    columns = latent.shape[1]
    scales = rng.permutation(np.geomspace(*SCALES, columns))
    out = np.empty_like(latent)
    for j in range(columns):
        z = latent[:, j]
        shape = (np.abs(z + 3.0), np.exp(0.8 * z), np.exp(1.6 * z), np.round(4 * np.exp(0.5 * z)))
        out[:, j] = shape[j % 4] * scales[j]
    return np.round(out, 3)


def _category_codes(values: tuple[str, ...], people: int, rng: np.random.Generator) -> np.ndarray:
    """One category per person, Zipf-like frequencies (a few common, many rare)."""
    weights = 1.0 / np.arange(1, len(values) + 1) ** 1.1
    return rng.choice(len(values), size=people, p=rng.permutation(weights / weights.sum()))


def generate(spec: TableSpec, seed: int) -> MessyTable:
    """The table of ``spec`` with ``seed``: the same frames for the same seed."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    person, split = _people(split_rows(spec), rng)
    people, rows, classes = int(person.max()) + 1, len(person), len(spec.classes)
    shared = rng.normal(size=(people, len(spec.numeric)))
    latent = np.sqrt(PERSON_CORRELATION) * shared[person] + np.sqrt(
        1 - PERSON_CORRELATION
    ) * rng.normal(size=(rows, len(spec.numeric)))
    weights = rng.normal(size=(spec.informative, classes)) / np.sqrt(spec.informative)
    signal = spec.separation * (latent[:, : spec.informative] @ weights)
    signal += np.outer(latent[:, 0] * latent[:, 1], rng.normal(size=classes))  # an interaction
    columns: dict[str, object] = {}
    for name, values in spec.categorical:
        codes = _category_codes(values, people, rng)[person]
        signal += rng.normal(scale=0.8, size=(len(values), classes))[codes]
        columns[name] = np.asarray(values, dtype=object)[codes]
    y = _labels(signal, np.asarray(spec.priors, dtype=float), rng)
    numeric = _numeric(latent, rng)
    for j in rng.permutation(len(spec.numeric)):  # informative columns anywhere
        columns[spec.numeric[j]] = numeric[:, j]
    frame = pd.DataFrame(columns)
    frame = frame[[frame.columns[i] for i in rng.permutation(frame.shape[1])]]
    gaps = rng.random(frame.shape) < spec.gap_rate
    frame = frame.mask(gaps)
    ids = rng.choice(900_000, size=people, replace=False) + 100_000
    frame.insert(0, spec.id, np.asarray([f"P{i}" for i in ids], dtype=object)[person])
    frame.insert(min(3, frame.shape[1]), spec.label, np.asarray(spec.classes, dtype=object)[y])
    parts = {name: frame[split == i].reset_index(drop=True) for i, name in enumerate(SPLITS)}
    public_labels = parts["public"].pop(spec.label).to_numpy(dtype=object)
    return MessyTable(
        spec.name, parts["private"], parts["public"], parts["evaluation"], public_labels,
        spec.label, spec.id, spec.classes,
    )  # fmt: skip


def hospital(rows: int = 8_000, seed: int = 0, *, public_rows: int = 3_000) -> MessyTable:
    """Issue #50's hospital scenario: ``rows`` labelled rows (80 % private, 20 % evaluation) and
    ``public_rows`` unlabelled public rows, split by patient."""
    return generate(hospital_spec(rows, public_rows), seed)


def write_csv(frame, path: pathlib.Path, *, seed: int) -> pathlib.Path:
    """``frame`` as a CSV file the way exports come: a gap is an empty cell or ``NA`` (half
    each, seeded)."""
    text = frame.astype(object)
    gaps = frame.isna().to_numpy()
    as_na = gaps & (np.random.default_rng(seed).random(gaps.shape) < 0.5)
    text = text.mask(as_na, "NA")
    text.to_csv(path, index=False, na_rep="")
    return path


# ------------------------------------------------------------------------------ references


def _model_frame(frame, table: MessyTable, categories: dict):
    """The features of ``frame`` for the non-private model: id and label dropped, text columns
    as pandas categories (those of the private rows; others become gaps)."""
    import pandas as pd

    features = frame.drop(columns=[c for c in (table.id, table.label) if c in frame.columns])
    for column, known in categories.items():
        values = features[column].where(features[column].isin(known))
        features[column] = pd.Categorical(values, categories=known)
    return features


def references(table: MessyTable, *, seed: int = 0) -> dict:
    """The majority class (the private rows' most frequent label) and a non-private
    HistGradientBoostingClassifier (defaults; NaN and categories native) trained on the same
    private rows, both scored on the evaluation rows; ``right``: which evaluation rows each got
    right (boolean arrays, for :func:`gap_standard_error`; not for the JSON)."""
    from pandas.api.types import is_numeric_dtype
    from sklearn.ensemble import HistGradientBoostingClassifier

    start = time.perf_counter()
    private, evaluation = table.private, table.evaluation
    y_private, y_evaluation = private[table.label].to_numpy(), evaluation[table.label].to_numpy()
    values, counts = np.unique(y_private, return_counts=True)
    majority = float(np.mean(y_evaluation == values[np.argmax(counts)]))
    text = [c for c in private.columns if c not in (table.id, table.label)]
    text = [c for c in text if not is_numeric_dtype(private[c])]
    categories = {c: sorted(private[c].dropna().unique()) for c in text}
    model = HistGradientBoostingClassifier(categorical_features="from_dtype", random_state=seed)
    model.fit(_model_frame(private, table, categories), y_private)
    predicted = model.predict(_model_frame(evaluation, table, categories))
    right = {
        "majority": y_evaluation == values[np.argmax(counts)],
        "non_private": predicted == y_evaluation,
    }
    return {
        "majority": round(majority, 4),
        "non_private": round(float(np.mean(right["non_private"])), 4),
        "right": right,
        "non_private_model": "HistGradientBoostingClassifier (defaults, native categories)",
        "reference_seconds": round(time.perf_counter() - start, 1),
    }


def gap_standard_error(student: np.ndarray, right: dict, *, seed: int = 0) -> float | None:
    """The bootstrap standard error of the gap closed (:data:`BOOTSTRAP_DRAWS` resamples of the
    evaluation rows; ``student``, ``right``: which rows the student and the references got right);
    None when a resample has no gap."""
    rows = np.random.default_rng(seed).integers(0, len(student), (BOOTSTRAP_DRAWS, len(student)))
    majority, non_private = right["majority"][rows].mean(1), right["non_private"][rows].mean(1)
    if np.any(non_private - majority <= 1e-9):
        return None
    return float(np.std((student[rows].mean(1) - majority) / (non_private - majority)))


# ------------------------------------------------------------------------------ pate


def _plan_and_fit(table: MessyTable, keywords: dict) -> tuple[dict, object]:
    """``pate.plan`` then ``pate.fit`` with ``keywords``: what pate said before training (its
    refusal or its plan warnings) and the result (None when it refused or failed)."""
    import pate
    from pate.run.config import SettingError

    said: dict = {"provisional": [], "plan_warnings": [], "refusal": None, "error": None}
    start = time.perf_counter()
    while True:
        try:
            said["plan_warnings"] = list(
                pate.plan(table.private, table.public, **keywords).warnings
            )
            break
        except SettingError as exc:  # PROVISIONAL: records= still required (before any work)
            if exc.key != "records" or "records" in keywords:
                said["refusal"] = f"{type(exc).__name__}: {exc}"
                break
            keywords["records"] = len(table.private)
            said["provisional"].append("records")
        except Exception as exc:  # a refusal before training: what the run said
            said["refusal"] = f"{type(exc).__name__}: {exc}"
            break
    said["plan_seconds"] = round(time.perf_counter() - start, 1)
    if said["refusal"] is not None:
        return said, None
    start = time.perf_counter()
    with own_data._captured() as (logged, caught):
        try:
            result = pate.fit(table.private, table.public, **keywords)
        except Exception as exc:  # a failure (or a late refusal): recorded, the benchmark goes on
            result, said["error"] = None, f"{type(exc).__name__}: {exc}"[:2000]
    said["seconds"] = round(time.perf_counter() - start, 1)
    said["warnings"] = list(dict.fromkeys(logged + [str(w.message) for w in caught]))
    return said, result


def predicted_names(predictions, classes: tuple[str, ...]) -> np.ndarray:
    """The student's predictions as class names (it may answer with indices or names)."""
    predictions = np.asarray(predictions)
    if np.issubdtype(predictions.dtype, np.integer):
        return np.asarray(classes, dtype=object)[predictions]
    return predictions.astype(object)


def _closes(gap: float | None, student: float, ref: dict) -> bool | None:
    """Whether a student meets #50's bar by its gap closed; None where there is no gap to close
    (the non-private model is no better than the majority class) and the student keeps to the
    majority's accuracy or better."""
    if gap is not None:
        return gap >= own_data.GAP_TARGET
    return None if round(student, 4) >= ref["majority"] else False  # the majority is rounded


def pate_row(table: MessyTable, ref: dict, right: dict, *, eps: float, work: pathlib.Path) -> dict:
    """One ``pate.fit`` with the table's names and ``target_eps`` only, as a result row
    (``right``: the references' right rows, :func:`references`)."""
    keywords = dict(
        evaluation=table.evaluation, label=table.label, id=table.id, classes=list(table.classes),
        target_eps=eps, run_dir=work / f"run-{table.name}", ledger=work / f"ledger-{table.name}.sqlite3",  # the tables share person ids
    )  # fmt: skip
    said, result = _plan_and_fit(table, keywords)
    from pate.core.release_check import CANNOT_PLACE  # logged by the aggregate stage

    warned = bool(said["refusal"] or said["plan_warnings"])
    # after the release (spent), before the student trains: classes the noise hides
    named = [w for w in said.get("warnings", []) if w.startswith(CANNOT_PLACE)]
    row = dict(said, eps=eps, warned_before_training=warned)
    warned = warned or bool(named)
    row.update(named_before_training=named[0] if named else None, meets_bar=warned)
    if result is None:
        return dict(row, status="refused" if said["refusal"] else "failed", student=None)
    truth = table.evaluation[table.label].to_numpy(dtype=object)
    raw_rows = result.student.predict(table.evaluation.drop(columns=[table.label]))
    student_right = predicted_names(raw_rows, table.classes) == truth
    labels, answered = np.asarray(result.labels), np.asarray(result.answered_mask, dtype=bool)
    named = np.asarray(table.classes, dtype=object)[labels[answered]]
    label_right = named == table.public_labels[answered]
    student = float(result.utility["student_accuracy"])
    gap = own_data.gap_closed(student, ref["majority"], ref["non_private"])
    se = gap_standard_error(student_right, right)
    row.update(  # the raw rows' accuracy: the released student on the evaluation frame as given
        status="ok",
        student=round(student, 4),
        student_on_raw_rows=round(float(np.mean(student_right)), 4),
        label_accuracy=round(float(label_right.mean()), 4) if answered.any() else None,
        answered=int(answered.sum()),
        eps_guarantee=round(float(result.epsilon), 4),
        mechanism=result.privacy.get("mechanism"),
        gap_closed=None if gap is None else round(gap, 4),
        gap_closed_se=None if se is None else round(se, 4),
        meets_bar=warned or _closes(gap, student, ref),
        named_weak_after_training=any(WEAK_RESULT in w for w in said["warnings"]),
    )  # fmt: skip
    return row


# ------------------------------------------------------------------------------ harness


def run(specs: list[TableSpec], *, seed: int, eps: float, with_pate: bool, out=None) -> dict:
    """Every table: its references and, ``with_pate``, one ``pate.fit``; the results (written
    to ``out`` after every table when given)."""
    results = {
        "meta": {"commit": own_data._commit(), "seed": seed, "eps": eps},
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            start = time.perf_counter()
            table = generate(spec, seed)
            reference = references(table, seed=seed)
            right = reference.pop("right")
            row = {
                "table": spec.name,
                "description": spec.description,
                "rows": {name: len(getattr(table, name)) for name in SPLITS},
                "people": {name: int(getattr(table, name)[spec.id].nunique()) for name in SPLITS},
                "classes": len(spec.classes),
                **reference,
            }
            if with_pate:
                row.update(pate_row(table, row, right, eps=eps, work=pathlib.Path(tmp)))
            row["wall_seconds"] = round(time.perf_counter() - start, 1)
            results["rows"].append(row)
            if out is not None:
                own_data.save_results(pathlib.Path(out), results)
            print(f"{spec.name}: {_said(row)} ({row['wall_seconds']:.0f} s)", file=sys.stderr)
    return results


def _said(row: dict) -> str:
    """What pate said before training, in a few words."""
    if row.get("refusal"):
        return "refused: " + row["refusal"][:120]
    if row.get("plan_warnings"):
        return "warned: " + "; ".join(row["plan_warnings"])[:120]
    if row.get("named_before_training"):
        return "after the release: " + row["named_before_training"][:120]
    return "nothing" if "status" in row else "(references only)"


def markdown_table(results: dict) -> str:
    """One line per table."""
    head = (
        "| table | rows (private / public / evaluation) | classes | majority % | non-private % "
        "| student % | gap closed | pate s | said before training | #50's bar |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in results["rows"]:
        sizes = " / ".join(str(r["rows"][name]) for name in SPLITS)
        gap = "–" if r.get("gap_closed") is None else f"{r['gap_closed'] + 0.0:.2f}"
        if r.get("gap_closed_se") is not None:
            gap += f" ± {r['gap_closed_se']:.2f}"
        student = own_data._pct(r.get("student")) if r.get("status", "ok") == "ok" else r["status"]
        cells = [r["table"], sizes, str(r["classes"]), own_data._pct(r["majority"])]
        spent = r.get("plan_seconds", 0) + (r.get("seconds") or 0) if "status" in r else None
        seconds = "–" if spent is None else f"{spent:.0f}"
        cells += [own_data._pct(r["non_private"]), student, gap, seconds]
        bar = {True: "met", False: "**missed**", None: "–"}[r.get("meets_bar")]
        if r.get("meets_bar") is None and r.get("status") == "ok":
            bar = "no gap to close"
        if r.get("meets_bar") is False and r.get("named_weak_after_training"):
            bar += " (named weak after training)"
        lines.append("| " + " | ".join(cells + [_said(r).replace("|", "\\|"), bar]) + " |")
    return "\n".join(lines)


DOCS_TAG = "messy_tables table"


def write_docs(doc: pathlib.Path) -> int:
    """Rewrite every ``<!-- messy_tables table: RESULTS -->`` block of ``doc`` from its file."""
    return docs_blocks.write_docs(
        doc, DOCS_TAG, lambda path: markdown_table(json.loads(path.read_text()))
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="+", choices=tuple(TABLES), default=list(TABLES))
    parser.add_argument("--quick", action="store_true", help=f"every table at {QUICK_ROWS} rows")
    parser.add_argument("--seed", type=int, default=0, help="the tables' seed")
    parser.add_argument("--eps", type=float, default=DEFAULT_EPS)
    parser.add_argument("--references-only", action="store_true", help="no pate.fit")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", default=None, metavar="FILE.json", help="also write them here")
    parser.add_argument("--docs", default=None, metavar="FILE.md", help="rewrite its tables")
    args = parser.parse_args(argv)
    if args.docs:
        print(f"rewrote {write_docs(pathlib.Path(args.docs))} table(s) in {args.docs}")
        return 0
    specs = [quick(TABLES[name]) if args.quick else TABLES[name] for name in args.tables]
    results = run(
        specs, seed=args.seed, eps=args.eps, with_pate=not args.references_only, out=args.out
    )
    print(json.dumps(results, indent=1) if args.json else markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
