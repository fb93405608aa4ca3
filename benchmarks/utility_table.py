"""The one utility table of Fashion-MNIST (issue #34): every measured run of every mechanism,
grouped into one row per method x eps x evaluation set, with mean, standard deviation, number
of runs and the provenance (source file, command, commit, device, config) of the runs.

Nothing here runs a mechanism: the runs are the rows of the measured results files listed in
:data:`SOURCES` (``benchmarks/results/``), each file with the command that made it. A row is
carried over only from such a file; prose numbers without a results file are not rows.

Evaluation sets (the ``evaluation`` column):

* ``evaluation-1000``: the last 1000 Fashion-MNIST test images (the pipeline's protocol; about
  +-1.1 points of binomial noise per run at 87 %).
* ``holdout-10000``: 10000 images held out of the private training set (then private = the first
  50000): +-0.33 points per run. Only runs made with ``--holdout`` have it; their protocol is
  ``pate-holdout``, and their score on the 1000 evaluation images is a row of that protocol too
  (trained on 50000, not mixed with the rows of the 60000).
* ``test-10000``: the 10000 test images of Tramer & Boneh's protocol (60000 training images; no
  public split).

``python benchmarks/utility.py --table`` rewrites ``benchmarks/results/utility_fmnist.json``;
``--docs FILE.md`` rewrites the generated blocks of a docs page (``<!-- utility table: NAME -->``
... ``<!-- /utility table -->``, NAME one of :data:`BLOCKS`).
tests/benchmarks/test_utility_table.py fails when the JSON or a block of README.md or docs/*.md
differs from what the sources give.
"""

import json
import math
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLE = RESULTS / "utility_fmnist.json"
TARGETS = (0.5, 1.0, 2.0, 4.0)

#: The measured runs: file (in benchmarks/results/) -> what it is. Commands and commits are
#: read from each file (its ``meta`` for the whole file, or each run's own fields).
SOURCES = {
    "utility_fmnist_runs.json": "benchmarks/utility.py, 26-27 Nov 2026: the first run of every "
    "method (five parts of one protocol merged with --merge; meta.note and meta.parts say "
    "which part ran which rows); one run each, DP-SGD with seed 0",
    "utility_fmnist_repeats.json": "benchmarks/utility.py, 27 Nov 2026: repeats of DP-SGD "
    "ScatterNet + linear (Opacus, seeds 1, 2) and of the soft-target class-means rows (fresh "
    "releases), merged with --merge",
    "utility_fmnist_dpsgd.json": "benchmarks/dpsgd_linear.py: DP-SGD ScatterNet + linear with "
    "Tramer & Boneh's recipe (group normalisation, lr 16), closed-form per-example "
    "gradients; their protocol and the pipeline's, with and without --holdout",
    "utility_fmnist_class_means.json": "benchmarks/utility.py --methods class-means, 27 Nov "
    "2026: configs/fashion_mnist_class_means.toml as shipped (count weight 0.3, soft "
    "targets, the student times its rule); eps 0.5 only (meta.note)",
    "utility_fmnist_class_means_holdout.json": "benchmarks/utility.py --methods class-means "
    "--holdout, 27 Nov 2026 evening: the config as shipped on the held-out protocol (private = "
    "the first 50000 training images; scored on the last 10000 and on the 1000 evaluation "
    "images; benchmarks/utility_holdout.py): its released model, one run at eps 0.5 (the "
    "student took 50 minutes on the loaded 2 cores), and with --rule-alone 3 three fresh "
    "releases per eps scored by the labelling rule alone; merged with --merge (meta.note)",
    "utility_fmnist_class_means_rule.json": "benchmarks/utility.py --methods class-means "
    "--rule-alone 3, 27 Nov 2026 evening: the config as shipped on the pipeline's protocol, "
    "three fresh releases per eps scored by the labelling rule alone (no student; meta.note)",
    "utility_fmnist_class_means_released.json": "benchmarks/utility.py --methods class-means "
    "--holdout --run-seeds S --targets EPS, 27 Nov 2026 night: the config as shipped, its "
    "released model, fresh releases: with the eps 0.5 run above, three per eps on the held-out "
    "protocol (both evaluation sets), and one more at eps 1 on the pipeline's (meta.note)",
    "utility_fmnist_class_means_patches_rule.json": "benchmarks/utility.py --methods "
    "class-means --holdout --rule-alone 3 --class-means-features scatternet+patches, 29 Nov "
    '2026: the class-means config with [knn] features = "scatternet+patches" (ScatterNet '
    "plus k-means patch features fitted on the public images) on the held-out protocol, three "
    "fresh releases per eps scored by the labelling rule alone (no student)",
    "utility_fmnist_heldout_methods.json": "benchmarks/utility.py --holdout, 28 Nov 2026: "
    "classic PATE (250 and 1000 teachers), Private-kNN and DP-SGD CNN on the held-out "
    "protocol, three runs each (--run-seeds / --dpsgd-seed 0, 1, 2; fresh noise), parts merged "
    "with --merge (meta.note)",
}

#: Methods of the PATE family (label-based: a released student) vs the DP-SGD baselines.
DPSGD_PREFIX = "DP-SGD"
BLOCKS = ("full", "budget", "comparison", "rule", "reproduction", "heldout")
#: The (evaluation set, protocol) pairs of the comparisons, and how a block names them.
COMPARED = (
    ("evaluation-1000", "pate"),
    ("evaluation-1000", "pate-holdout"),
    ("holdout-10000", "pate-holdout"),
)
COMPARED_NAMES = {
    ("evaluation-1000", "pate"): "evaluation-1000",
    ("evaluation-1000", "pate-holdout"): "evaluation-1000, private 50000",
    ("holdout-10000", "pate-holdout"): "holdout-10000",
}
#: Tramer & Boneh 2021, Table 1: ScatterNet + linear, Fashion-MNIST, eps 3, delta 1e-5.
PUBLISHED_DPSGD_SCATTER = 0.897


def _label(run: dict) -> str:
    method = run["method"]
    if method.startswith("PATE") and run.get("teachers"):
        method = method.replace("PATE", f"PATE {run['teachers']} teachers", 1)
    if run.get("recipe", {}).get("groups") and method.startswith("DP-SGD ScatterNet"):
        method += " (T&B recipe)"
    elif method == "DP-SGD ScatterNet+linear":
        method += " (Opacus, public standardisation, lr 4)"
    return method


def _config(run: dict) -> dict:
    keys = (
        "aggregator",
        "recipe",
        "noise_multiplier",
        "batch_size",
        "lr",
        "clip",
        "epochs",
        "dims",
        "rule",
        "student_model",
        "student_targets",
        "student_temperature",
    )
    return {k: run[k] for k in keys if run.get(k) is not None}


#: The factors of a released product (a class-means student times its labelling rule): the
#: run field prefix and the row name's suffix. Neither factor alone is what the run releases.
FACTORS = (
    ("student_alone", ", student alone (not released)"),
    ("rule_alone", ", its labelling rule alone (not released)"),
)
#: The rule alone does not depend on the student: one name for it, however the run trained its
#: student (and as ``benchmarks/utility.py --rule-alone`` names its rows).
RULE_ALONE = "Noisy class means, its labelling rule alone (not released)"


def load_runs(sources=None) -> list[dict]:
    """Every run of the source files as a flat dict with ``label``, ``evaluation``, ``accuracy``,
    ``released_model`` and its provenance; a run scored on two sets gives two entries, and a
    released product (student times its rule) gives further, unreleased entries for each factor
    scored alone (:data:`FACTORS`)."""
    out = []
    for name in SOURCES if sources is None else sources:
        doc = json.loads((RESULTS / name).read_text())
        for run in doc.get("runs", doc.get("rows", [])):
            out.extend(_entries(run, _provenance(run, name, doc.get("meta", {}))))
    return out


def _provenance(run: dict, source: str, meta: dict) -> dict:
    """The fields every entry of a run shares: what ran, its eps, where and how."""
    return {
        "label": _label(run),
        "kind": run["kind"],
        "target_eps": run["target_eps"],
        "eps": run["eps"],
        "delta": run["delta"],
        "source": source,
        "protocol": run.get("protocol", "pate") + ("-holdout" if run.get("holdout") else ""),
        "command": run.get("command") or "benchmarks/utility.py " + " ".join(meta.get("argv", [])),
        "commit": run.get("commit") or meta.get("commit", "unknown"),
        "device": run.get("device") or meta.get("device", "unknown"),
        "config": _config(run),
        "seed": run.get("seed"),
    }


def _entries(run: dict, base: dict) -> list[dict]:
    """A run's scores, one entry per (model, evaluation set)."""
    evaluation = run.get("evaluation") or "evaluation-1000"
    sets = ((evaluation, ""), ("holdout-10000", "_holdout"))
    released = run.get("released_model", True)
    out = [
        dict(base, evaluation=where, accuracy=run[f"accuracy{field}"], released_model=released)
        for where, field in sets
        if run.get(f"accuracy{field}") is not None
    ]
    for key, suffix in FACTORS:
        label = base["label"].replace(", times its rule", "") + suffix
        label = RULE_ALONE if key == "rule_alone" else label
        out.extend(
            dict(
                base,
                label=label,
                evaluation=where,
                accuracy=run[f"{key}_accuracy{field}"],
                released_model=False,
            )
            for where, field in sets
            if run.get(f"{key}_accuracy{field}") is not None
        )
    return out


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _unique(values) -> list:
    return sorted({v for v in values if v is not None}, key=str)


def build_table(runs: list[dict]) -> list[dict]:
    """One row per (protocol, method, kind, target eps, evaluation): mean and sample std of
    the runs' accuracies; ``eps`` is the largest eps any of them reached (never understated)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        key = (r["protocol"], r["label"], r["kind"], r["target_eps"], r["evaluation"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (protocol, label, kind, target, evaluation), rs in groups.items():
        mean, std = _mean_std([r["accuracy"] for r in rs])
        rows.append(
            {
                "method": label,
                "kind": kind,
                "target_eps": target,
                "eps": max(r["eps"] for r in rs),
                "delta": rs[0]["delta"],
                "accuracy_mean": round(mean, 6),
                "accuracy_std": None if std is None else round(std, 6),
                "runs": len(rs),
                "evaluation": evaluation,
                "protocol": protocol,
                "released_model": rs[0]["released_model"],
                "family": "DP-SGD" if label.startswith(DPSGD_PREFIX) else "PATE family",
                "device": _unique(r["device"] for r in rs),
                "commit": _unique(r["commit"] for r in rs),
                "command": _unique(r["command"] for r in rs),
                "source": _unique(r["source"] for r in rs),
                "seeds": _unique(r["seed"] for r in rs),
                "config": rs[0]["config"],
            }
        )
    order = {"pate": 0, "pate-holdout": 1}
    rows.sort(
        key=lambda r: (
            order.get(r["protocol"], 2),
            r["evaluation"],
            r["target_eps"],
            r["kind"] != "guarantee",
            r["family"],
            r["method"],
        )
    )
    return rows


def _released_pate(row: dict) -> bool:
    return row["family"] == "PATE family" and row["released_model"]


def _rule_alone(row: dict) -> bool:
    """A class-means labelling rule scored alone (any front-end: ``--class-means-features``
    names its own)."""
    return row["method"].endswith(FACTORS[1][1])


def comparisons(rows: list[dict], *, pate_side=_released_pate) -> list[dict]:
    """Per target eps and evaluation set of a protocol (the 1000 evaluation images of the
    pipeline's protocol; the 1000 evaluation images and the 10000 held-out images of its
    ``pate-holdout`` variant, private = the first 50000; guarantees): the best PATE-side row (``pate_side``: by default the PATE family's released
    models) against DP-SGD's best released model, the difference and its standard error from
    the run-to-run spread (sqrt(s1^2 / n1 + s2^2 / n2); None when a side has one run)."""
    out = []
    for evaluation, protocol in COMPARED:
        for target in TARGETS:
            pick = [
                r
                for r in rows
                if r["protocol"] == protocol
                and r["kind"] == "guarantee"
                and r["evaluation"] == evaluation
                and r["target_eps"] == target
            ]
            pate = max(
                (r for r in pick if pate_side(r)),
                key=lambda r: r["accuracy_mean"],
                default=None,
            )
            dp = max(
                (r for r in pick if r["family"] == "DP-SGD" and r["released_model"]),
                key=lambda r: r["accuracy_mean"],
                default=None,
            )
            if pate is None or dp is None:
                continue
            se = None
            if pate["runs"] > 1 and dp["runs"] > 1:
                se = math.sqrt(
                    pate["accuracy_std"] ** 2 / pate["runs"] + dp["accuracy_std"] ** 2 / dp["runs"]
                )
            out.append(
                {
                    "target_eps": target,
                    "evaluation": evaluation,
                    "protocol": protocol,
                    "pate_family_best": pate["method"],
                    "pate_mean": pate["accuracy_mean"],
                    "pate_runs": pate["runs"],
                    "dpsgd_best": dp["method"],
                    "dpsgd_mean": dp["accuracy_mean"],
                    "dpsgd_runs": dp["runs"],
                    "difference": round(pate["accuracy_mean"] - dp["accuracy_mean"], 6),
                    "standard_error": None if se is None else round(se, 6),
                }
            )
    return out


def make(sources=None) -> dict:
    """The table document (what ``benchmarks/results/utility_fmnist.json`` holds)."""
    rows = build_table(load_runs(sources))
    return {
        "rows": rows,
        "comparisons": comparisons(rows),
        "rule_alone_comparisons": comparisons(rows, pate_side=_rule_alone),
        "meta": {
            "generated_by": "python benchmarks/utility.py --table",
            "sources": dict(SOURCES)
            if sources is None
            else {s: SOURCES.get(s, "") for s in sources},
            "evaluation_sets": {
                "evaluation-1000": "the last 1000 Fashion-MNIST test images (pipeline "
                "protocol; private = 60000 training images)",
                "holdout-10000": "10000 images held out of the private training set "
                "(private = the first 50000)",
                "test-10000": "the 10000 test images (Tramer & Boneh's protocol)",
            },
            "accuracy_std": "sample standard deviation over the runs (None for one run)",
            "eps": "the largest guarantee eps of the row's runs (kind 'data-dependent': "
            "looked at the votes, not a guarantee)",
        },
    }


def write_table(path: pathlib.Path = TABLE) -> dict:
    doc = make()
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# ------------------------------------------------------------------------------- docs blocks


def _pct(row: dict) -> str:
    if row is None:
        return "–"
    std = row["accuracy_std"]
    return (
        f"{100 * row['accuracy_mean']:.1f} ± {100 * std:.1f} % ({row['runs']})"
        if std is not None
        else f"{100 * row['accuracy_mean']:.1f} % (1)"
    )


def render(doc: dict, name: str) -> str:
    """The markdown of a generated block, from the table document alone."""
    rows = doc["rows"]
    if name == "full":
        lines = [
            "| method | protocol | evaluation | target ε | ε | accuracy (runs) | released |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r["kind"] != "guarantee":
                continue
            lines.append(
                f"| {r['method']} | {r['protocol']} | {r['evaluation']} | "
                f"{r['target_eps']:g} | {r['eps']:.3f} | {_pct(r)} | "
                f"{'yes' if r['released_model'] else 'no'} |"
            )
        return "\n".join(lines)
    if name in ("comparison", "rule"):
        if name == "comparison":
            return _comparison(doc["comparisons"], "PATE family's best")
        return _comparison(doc["rule_alone_comparisons"], "the class means' labelling rule alone")
    if name == "budget":
        return _budget(rows)
    if name == "heldout":
        return _heldout(doc["comparisons"])
    if name == "reproduction":
        lines = [
            "| protocol | target ε | ε (tight conversion) | accuracy, 10000 test images (runs) "
            "| published | difference |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r["protocol"].startswith("tramer-boneh") and r["kind"] == "guarantee":
                lines.append(
                    f"| {r['protocol']} | {r['target_eps']:g} | {r['eps']:.2f} | "
                    f"{_pct(r)} | {100 * PUBLISHED_DPSGD_SCATTER:.1f} % | "
                    f"{100 * (r['accuracy_mean'] - PUBLISHED_DPSGD_SCATTER):+.2f} points |"
                )
        return "\n".join(lines)
    raise ValueError(f"unknown block name {name!r}; use one of {', '.join(BLOCKS)}")


def _compared_name(entry: dict) -> str:
    key = (entry["evaluation"], entry.get("protocol", "pate"))
    return COMPARED_NAMES.get(key, entry["evaluation"])


def _difference(entry: dict) -> str:
    """A comparison's difference in points, with its standard error where it has one."""
    se = entry["standard_error"]
    return f"{100 * entry['difference']:+.1f}{'' if se is None else f' ± {100 * se:.1f}'} points"


def _comparison(entries: list[dict], side: str) -> str:
    lines = [
        f"| target ε | evaluation | {side} | DP-SGD's best | difference ± s.e. |",
        "|---|---|---|---|---|",
    ]
    for c in entries:
        lines.append(
            f"| {c['target_eps']:g} | {_compared_name(c)} | {c['pate_family_best']}: "
            f"{100 * c['pate_mean']:.1f} % ({c['pate_runs']}) | {c['dpsgd_best']}: "
            f"{100 * c['dpsgd_mean']:.1f} % ({c['dpsgd_runs']}) | {_difference(c)} |"
        )
    return "\n".join(lines)


def _heldout(entries: list[dict]) -> str:
    """The comparison on the 10000 held-out images alone, compact (for the README)."""
    lines = [
        "| target ε | PATE family's best (runs) | DP-SGD's best (runs) | difference ± s.e. |",
        "|---|---|---|---|",
    ]
    for c in entries:
        if c["evaluation"] != "holdout-10000":
            continue
        lines.append(
            f"| {c['target_eps']:g} | {100 * c['pate_mean']:.1f} % ({c['pate_runs']}) | "
            f"{100 * c['dpsgd_mean']:.1f} % ({c['dpsgd_runs']}) | {_difference(c)} |"
        )
    return "\n".join(lines)


#: The rows of the "which mechanism for my budget" block: the held-out protocol's 10000 images,
#: where every kind of mechanism has three or more runs (+-0.33 points of evaluation noise each).
BUDGET_SET = ("holdout-10000", "pate-holdout")


def _budget(rows: list[dict]) -> str:
    """Which mechanism for which budget: per target eps (:data:`BUDGET_SET`, guarantees,
    released models) the best of each kind of mechanism."""
    kinds = (
        ("class means", lambda m: m.startswith("Noisy class means")),
        ("classic PATE (teachers vote)", lambda m: m.startswith("PATE")),
        ("Private-kNN", lambda m: m.startswith("Private-kNN")),
        ("DP-SGD", lambda m: m.startswith(DPSGD_PREFIX)),
    )
    lines = [
        "| target ε | " + " | ".join(k for k, _ in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for target in TARGETS:
        pick = [
            r
            for r in rows
            if (r["evaluation"], r["protocol"]) == BUDGET_SET
            and r["kind"] == "guarantee"
            and r["released_model"]
            and r["target_eps"] == target
        ]
        cells = []
        for _, test in kinds:
            best = max(
                (r for r in pick if test(r["method"])),
                key=lambda r: r["accuracy_mean"],
                default=None,
            )
            cells.append("–" if best is None else f"{_pct(best)}: {best['method']}")
        lines.append(f"| {target:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: A generated block: its start line, one or more lines, its end line (never across blocks).
_BLOCK = re.compile(
    r"(<!-- utility table: (?P<name>[a-z]+) -->\n)"
    r"(?P<body>(?:(?!<!-- /?utility table)[\s\S])+?)(\n<!-- /utility table -->)"
)


def docs_blocks(text: str) -> list[tuple[str, str]]:
    """(block name, its text) of every generated block of a page."""
    return [(m.group("name"), m.group("body")) for m in _BLOCK.finditer(text)]


def write_docs(page: pathlib.Path, doc: dict | None = None) -> int:
    """Rewrite the generated blocks of ``page`` from the table; returns how many."""
    doc = json.loads(TABLE.read_text()) if doc is None else doc
    text = page.read_text(encoding="utf-8")
    new, n = _BLOCK.subn(lambda m: m.group(1) + render(doc, m.group("name")) + m.group(4), text)
    page.write_text(new, encoding="utf-8")
    return n
