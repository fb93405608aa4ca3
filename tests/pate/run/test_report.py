"""The privacy report (`pate.run.report`, `pate report`): files, numbers, wording, plots, errors.

``make_analysis(...)`` builds a synthetic but realistic ``analysis.json`` (schema format 1) and is
meant to be reused by other tests (e.g. the pipeline's).
"""

from __future__ import annotations

import base64
import copy
import html
import json
import math
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from pate.cli import main
from pate.run import report as rep
from pate.run import rundir
from pate.run.report.templating import inline_html

FMNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def _eps_from_rdp(rdp: np.ndarray, orders: np.ndarray, delta: float) -> tuple[float, float]:
    eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
    i = int(np.argmin(eps))
    return float(eps[i]), float(orders[i])


def make_analysis(
    run_dir: str | os.PathLike | None = None,
    *,
    name: str = "fmnist-test",
    relation: str = "record",
    mechanism: str = "confident-gnmax",
    num_teachers: int = 250,
    asked: int = 1000,
    answered: int = 320,
    delta: float = 1e-5,
    ledger: bool = True,
    fallback: str | None = None,
    num_classes: int = 10,
    class_names: list[str] | None | bool = True,
    label_accuracy: float | None = 0.912,
    seed: int = 0,
    evaluation_public: bool | None = None,
) -> dict:
    """A synthetic but internally consistent analysis.json (format 1) of a Confident-GNMax run
    (T = 200, sigma1 = 150, sigma2 = 40 by default). With ``run_dir`` it is also written to
    ``<run_dir>/analysis.json`` (the directory is created). ``class_names=True`` uses the
    Fashion-MNIST names when ``num_classes`` is 10, ``None`` leaves them out.
    ``evaluation_public`` sets ``utility.evaluation_public`` (left out when None: not public)."""
    rng = np.random.default_rng(seed)
    orders = np.concatenate([np.linspace(1.1, 10.9, 99), np.arange(11.0, 101.0), [128.0, 256.0]])
    if mechanism in ("confident-gnmax", "interactive-gnmax"):
        params = {"threshold": 200.0, "sigma1": 150.0, "sigma2": 40.0}
        per_asked, per_answered = 1.0 / (2 * 150.0**2), 1.0 / 40.0**2
    elif mechanism == "gnmax":
        params = {"sigma": 40.0}
        per_asked, per_answered, answered = 0.0, 1.0 / 40.0**2, asked
    else:
        params = {"scale": 50.0}
        per_asked, per_answered, answered = 0.0, 1.0 / 50.0**2, asked
    rdp_ind = orders * (asked * per_asked + answered * per_answered)
    rdp_dep = np.minimum(rdp_ind, 0.22 * rdp_ind + 0.004 * orders**1.5)
    eps_ind, order_ind = _eps_from_rdp(rdp_ind, orders, delta)
    eps_dep, order_dep = _eps_from_rdp(rdp_dep, orders, delta)

    release_order, beta, sigma_ss = 20.0, 0.0185, 30.0
    delta_term = math.log(1.0 / delta) / (release_order - 1.0)
    rdp_gnss = release_order * math.exp(2 * beta) / sigma_ss**2 + (
        -0.5 * math.log(1 - 2 * release_order * beta) + beta * release_order
    ) / (release_order - 1.0)
    k = int(np.flatnonzero(orders == release_order)[0])
    eps_ind_at_release = float(rdp_ind[k]) + delta_term
    if fallback is None:
        smooth_sensitivity = 0.0079
        noise_std = smooth_sensitivity * sigma_ss
        eps_sanitized = float(rdp_dep[k]) + 0.31 * noise_std + rdp_gnss + delta_term
        upper = eps_sanitized + 2 * noise_std
    else:
        smooth_sensitivity = noise_std = rdp_gnss = 0.0
        eps_sanitized = upper = eps_ind_at_release
    eps_guarantee, _ = _eps_from_rdp(
        rdp_ind + (rdp_gnss if fallback is None else 0.0) * orders / release_order, orders, delta
    )

    per_query_delta = delta / (2 * asked)
    sens = math.sqrt(2.0)
    per_query_eps = sens * math.sqrt(2 * math.log(1.25 / per_query_delta)) / 40.0
    queries_composed = asked + answered if per_asked else asked
    advanced = math.sqrt(
        2 * queries_composed * math.log(2.0 / delta)
    ) * per_query_eps + queries_composed * per_query_eps * math.expm1(per_query_eps)

    curve_x = np.linspace(0, answered, 21).round().astype(int)
    scale = curve_x / max(answered, 1)
    curve_ind = [_eps_from_rdp(rdp_ind * s, orders, delta)[0] for s in scale]
    curve_dep = [_eps_from_rdp(rdp_dep * s, orders, delta)[0] for s in scale]

    m = num_classes
    truth = np.full(m, 100)
    cm = np.zeros((m, m), dtype=int)
    for i in range(m):
        right = int(rng.integers(60, 98))
        cm[i, i] = right
        wrong = rng.multinomial(truth[i] - right, np.full(m - 1, 1.0 / (m - 1)))
        cm[i, np.arange(m) != i] = wrong
    per_class = (np.diag(cm) / cm.sum(axis=1)).tolist()
    student_accuracy = float(np.trace(cm) / cm.sum())
    if class_names is True:
        class_names = FMNIST_CLASSES if m == 10 else [f"class {i}" for i in range(m)]
    elif class_names is False:
        class_names = None

    split = max(num_teachers // 4, 1)
    margins = np.concatenate(
        [
            rng.integers(0, split, asked // 3),
            rng.integers(split, num_teachers + 1, asked - asked // 3),
        ]
    )
    counts, edges = np.histogram(margins, bins=25, range=(0, num_teachers))

    analysis = {
        "format": 1,
        "run": {
            "name": name,
            "run_dir": str(run_dir) if run_dir is not None else f"runs/{name}",
            "created": "2025-01-15T10:42:07+00:00",
            "pate_learn_version": "0.1.0",
        },
        "config": {
            "run": {"name": name, "seed": 0, "secure": False, "device": "cpu"},
            "data": {"name": "fashion-mnist"},
            "partition": {
                "num_teachers": num_teachers,
                "mode": "unit" if relation == "unit" else "random",
            },
            "aggregator": {"mechanism": mechanism, **params, "budget_basis": "data-independent"},
            "privacy": {
                "delta": delta,
                "budget_eps": 8.0,
                "orders": "default",
                "conversion": "classic",
                "release_order": release_order,
                "release_beta": beta,
                "release_sigma_ss": sigma_ss,
                "ledger": True,
            },
            "student": {"method": "fixmatch", "epochs": 10},
        },
        "privacy": {
            "neighbouring_relation": relation,
            "relation": "add-remove",
            "relation_text": "two datasets are neighbours when one is the other with one record "
            "added or removed",
            "mechanism": mechanism,
            "params": params,
            "num_teachers": num_teachers,
            "delta": delta,
            "conversion": "classic",
            "orders": orders.tolist(),
            "rdp_data_dependent": rdp_dep.tolist(),
            "rdp_data_independent": rdp_ind.tolist(),
            "eps_data_independent": eps_ind,
            "order_data_independent": order_ind,
            "eps_data_dependent": eps_dep,
            "order": order_dep,
            "data_dependent_is_private": False,
            "eps_sanitized": eps_sanitized,
            "sanitized": {
                "order": release_order,
                "beta": beta,
                "sigma_ss": sigma_ss,
                "noise_std": noise_std,
                "rdp_gnss": rdp_gnss,
                "smooth_sensitivity": smooth_sensitivity,
                "eps_sanitized_upper_2std": upper,
                "eps_data_independent": eps_ind_at_release,
                "fallback": fallback,
                "charged": fallback is None,
            },
            "eps_guarantee": eps_guarantee,
            "composition": {
                "per_query_eps": per_query_eps,
                "per_query_delta": per_query_delta,
                "basic_eps": queries_composed * per_query_eps,
                "advanced_eps": advanced,
                "delta": delta,
                "queries_composed": queries_composed,
            },
            "budget": {
                "eps": 8.0,
                "delta": delta,
                "basis": "data-independent",
                "stop_reason": None,
            },
            "ledger": (
                {
                    "path": "runs/ledger.sqlite",
                    "dataset": "fashion-mnist@3f2a9c1e",
                    "budget_eps": 10.0,
                    "budget_delta": 1e-5,
                    "spent_eps": 7.25,
                    "remaining_eps": 2.75,
                    "events": 3,
                    "runs": 2,
                }
                if ledger
                else None
            ),
        },
        "queries": {
            "public_size": 9000,
            "asked": asked,
            "answered": answered,
            "labelled_by_student": 5100,
            "stop_reason": None,
        },
        "utility": {
            "student_accuracy": student_accuracy,
            "student_per_class_accuracy": per_class,
            "confusion_matrix": cm.tolist(),
            "class_names": class_names,
            "teacher_mean_accuracy": 0.7834,
            "teacher_accuracy_std": 0.0121,
            "plurality_vote_accuracy": 0.8612,
            "label_accuracy_answered": label_accuracy,
            "label_accuracy_note": (
                "computed from the public set's true labels, which "
                "are known only in benchmarks, never in deployment"
            ),
            "evaluation_size": int(cm.sum()),
        },
        "curves": {
            "answered_count": curve_x.tolist(),
            "eps_data_independent": curve_ind,
            "eps_data_dependent": curve_dep,
        },
        "vote_margins": {
            "bin_edges": edges.tolist(),
            "counts": counts.tolist(),
            "note": "internal: derived from the private votes",
        },
    }
    if evaluation_public is not None:
        analysis["utility"]["evaluation_public"] = evaluation_public
    if run_dir is not None:
        run_dir = Path(run_dir)
        analysis_file(run_dir).write_text(json.dumps(analysis, indent=2), encoding="utf-8")
    return analysis


def analysis_file(run_dir) -> Path:
    """Where a run keeps its analysis (``private/analysis.json``), its folder created."""
    path = Path(run_dir) / rundir.ANALYSIS
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


REQUIRED = [
    ("privacy", "delta"),
    ("privacy", "eps_data_independent"),
    ("privacy", "eps_data_dependent"),
    ("privacy", "eps_sanitized"),
    ("queries", "asked"),
    ("queries", "answered"),
    ("utility", "student_accuracy"),
    ("utility", "teacher_mean_accuracy"),
    ("utility", "plurality_vote_accuracy"),
]


def internal_json(run_dir) -> dict:
    """The internal report of a run directory (private/report_internal.json)."""
    return json.loads((Path(run_dir) / "private" / "report_internal.json").read_text())


def internal_md(run_dir) -> str:
    return (Path(run_dir) / "private" / "report_internal.md").read_text()


#: The plots of a report whose evaluation data is not declared public: the confusion matrix is
#: internal too.
PUBLIC_NOW = ("epsilon_vs_answered_public", "rdp_per_order_public")
INTERNAL_NOW = (*rep.INTERNAL_PLOT_NAMES, "confusion_matrix")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One report written once for the read-only checks (plots take ~1 s)."""
    run_dir = tmp_path_factory.mktemp("run")
    analysis = make_analysis(run_dir)
    result = rep.write_report(run_dir)
    return run_dir, analysis, result


def test_every_file_is_written_and_nothing_else(written):
    run_dir, _, result = written
    names = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")}
    expected = {
        rundir.PRIVATE_DIR,
        rundir.ANALYSIS,
        "report.json",
        "report.md",
        "report.html",
        "plots",
        *(f"plots/{n}.png" for n in PUBLIC_NOW),
        "private",
        "private/report_internal.json",
        "private/report_internal.md",
        "private/plots",
        *(f"private/plots/{n}.png" for n in INTERNAL_NOW),
    }
    assert names == expected  # no temporary files left behind
    assert result == json.loads((run_dir / "report.json").read_text())
    assert result["plots"] == {n: f"plots/{n}.png" for n in PUBLIC_NOW}
    assert internal_json(run_dir)["plots"] == {
        n: f"{'plots' if n in PUBLIC_NOW else 'private/plots'}/{n}.png" for n in rep.PLOT_NAMES
    }
    umask = os.umask(0o022)
    os.umask(umask)
    assert (run_dir / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (run_dir / "private").stat().st_mode & 0o777 == 0o700
    assert (run_dir / "private" / "report_internal.md").stat().st_mode & 0o777 == 0o600


def test_internal_json_carries_the_analysis_unchanged(written):
    run_dir, analysis, _ = written
    internal = internal_json(run_dir)
    for table, key in REQUIRED:
        assert internal[table][key] == analysis[table][key]
    extra = {"statement", "plots", "warnings", "publication"}
    assert {k: v for k, v in internal.items() if k not in extra} == analysis
    assert isinstance(internal["statement"], str) and isinstance(internal["warnings"], list)


def test_report_json_is_the_public_part_only(written):
    run_dir, analysis, result = written
    assert "internal" not in result
    worded = {"statement", "plots", "warnings", "publication"}
    assert {k: v for k, v in result.items() if k not in worded} == rep.public_part(analysis)
    p = result["privacy"]
    for key in ("eps_data_dependent", "rdp_data_dependent", "order", "vote_margins"):
        assert key not in p and key not in result
    assert "smooth_sensitivity" not in p["sanitized"] and "noise_std" not in p["sanitized"]
    assert "eps_sanitized_upper_2std" not in p["sanitized"]
    assert p["eps_sanitized"] == analysis["privacy"]["eps_sanitized"]  # charged: public
    assert "path" not in p["ledger"] and "dataset" not in p["ledger"]
    assert result["run"] == {"name": "fmnist-test", "pate_learn_version": "0.1.0"}
    u = result["utility"]
    for key in ("teacher_mean_accuracy", "plurality_vote_accuracy", "student_accuracy"):
        assert key not in u
    config = copy.deepcopy(analysis["config"])
    del config["privacy"]["ledger"]  # a path on the operator's machine, or whether it was on
    assert result["config"] == config


def test_statement_has_the_numbers_and_the_not_private_marking(written):
    run_dir, a, result = written
    text = internal_json(run_dir)["statement"]
    public = result["statement"]
    p, s = a["privacy"], a["privacy"]["sanitized"]
    for statement in (text, public):
        assert (
            f"(\u03b5 = {p['eps_guarantee']:.4g}, \u03b4 = 1e-5)-differential privacy" in statement
        )
        assert "The released student satisfies" in statement
        assert "adding or removing any one record of the sensitive training data" in statement
        assert "at the record level" in statement and "Unit-level protection" in statement
        assert "\u03b2 = 0.0185" in statement and "\u03c3_ss = 30" in statement
        assert "fixed in the configuration before the votes were seen" in statement
        assert "1,000" in statement and "320 (32.0%)" in statement and "9,000" in statement
        assert "T = 200, \u03c3\u2081 = 150, \u03c3\u2082 = 40" in statement
        assert "250 teachers" in statement
        assert "7.25" in statement and "2.75" in statement  # ledger spend and remaining
        assert f"{p['eps_sanitized']:.4g}" in statement and f"{s['rdp_gnss']:.3g}" in statement
    for value in (
        p["eps_data_dependent"],
        p["eps_data_independent"],
        s["eps_sanitized_upper_2std"],
    ):
        assert f"{value:.4g}" in text
    assert f"{s['noise_std']:.3g}" in text
    # the data-dependent epsilon sits in the NOT PRIVATE paragraph, and the histogram too
    dep = next(par for par in text.split("\n\n") if par.startswith("Data-dependent epsilon"))
    assert f"{p['eps_data_dependent']:.4g}" in dep and rep.NOT_PRIVATE in dep
    assert "vote-margin histogram" in dep
    assert "NOT PRIVATE \u2014 for internal use only, do not publish" == rep.NOT_PRIVATE
    # the guarantee is not marked as internal; the publishable statement holds no internal figure
    par = next(par for par in text.split("\n\n") if par.startswith("Guarantee"))
    assert rep.NOT_PRIVATE not in par
    assert rep.NOT_PRIVATE not in public and "Data-dependent epsilon" not in public
    for value in (p["eps_data_dependent"], s["eps_sanitized_upper_2std"], s["noise_std"]):
        assert f"{value:.4g}" not in public and f"{value:.3g}" not in public
    assert f"{a['utility']['student_accuracy'] * 100:.1f}%" in text
    assert f"{a['utility']['student_accuracy'] * 100:.1f}%" not in public
    assert "not declared public" in public
    assert result["warnings"] == []


def test_markdown_sections_numbers_and_links(written):
    run_dir, a, _ = written
    md, internal = (run_dir / "report.md").read_text(), internal_md(run_dir)
    assert md.startswith("# Privacy report: fmnist-test")
    assert internal.startswith("# INTERNAL privacy report: fmnist-test")
    for section in (
        "## Privacy statement",
        "## Privacy numbers",
        "## Queries and budget",
        "## Privacy ledger",
        "## Utility",
        "## Plots: publishable",
        "## Effective configuration",
    ):
        assert section in md and section in internal
    assert "## Plots: INTERNAL (do not publish)" in internal
    assert "INTERNAL" not in md and rep.NOT_PRIVATE not in md
    assert f"**{rep.NOT_PRIVATE}**" in internal and "**NO \u2014 INTERNAL**" in internal
    for n in PUBLIC_NOW:
        assert f"](plots/{n}.png)" in md and f"](../plots/{n}.png)" in internal
    for n in INTERNAL_NOW:
        assert f"{n}.png" not in md and f"](plots/{n}.png)" in internal
    for doc in (md, internal):  # classic composition beside RDP added nothing (issue #51)
        assert "Advanced composition" not in doc and "tighter" not in doc
        assert "91.2%" in doc and "known only in benchmarks" in doc
        assert '"release_sigma_ss": 30.0' in doc  # the effective config
    assert "78.3% \u00b1 1.2%" in internal and "86.1%" in internal
    assert "78.3%" not in md and "86.1%" not in md
    assert "Ankle boot" in internal
    assert "What this report publishes" in md and "What to share" in md


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources, self.links = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.sources.append(attrs.get("src", ""))
        for key in ("href", "src"):
            if key in attrs:
                self.links.append(attrs[key])


def test_html_is_self_contained_with_statement_and_images(written):
    run_dir, _, result = written
    page = (run_dir / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    parser = _Images()
    parser.feed(page)
    assert len(parser.sources) == len(PUBLIC_NOW) == 2
    anchors = [link for link in parser.links if link.startswith("#")]
    assert all(link.startswith("data:image/png;base64,") for link in parser.links if link[0] != "#")
    assert anchors and all(f'id="{link[1:]}"' in page for link in anchors)  # links resolve
    embedded = sorted(base64.b64decode(src.split(",", 1)[1]) for src in parser.sources)
    assert embedded == sorted((run_dir / f"plots/{n}.png").read_bytes() for n in PUBLIC_NOW)
    for par in result["statement"].split("\n\n"):
        head, _, body = par.partition(": ")
        assert html.escape(body, quote=False) in page, head
    assert page.count('class="internal"') == 0  # the internal plots are in private/ only
    assert page.count('class="public"') == 2  # the two data-independent plots


def test_documents_come_from_the_packaged_templates(written):
    from pate.run.report.templating import template_source

    run_dir, _, _ = written
    page = (run_dir / "report.html").read_text()
    assert f"<style>\n{template_source('report.css')}</style>" in page
    assert "{%" not in page and "{{" not in page and "{%" not in (run_dir / "report.md").read_text()


def test_pngs_are_valid_nontrivial_images(written):
    from PIL import Image

    run_dir, _, _ = written
    for n in rep.PLOT_NAMES:
        path = run_dir / ("plots" if n in PUBLIC_NOW else "private/plots") / f"{n}.png"
        assert path.stat().st_size > 10_000
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width > 400 and image.height > 300
            pixels = np.asarray(image.convert("L"), dtype=float)
        assert pixels.std() > 10  # not blank


def test_regenerating_is_deterministic(tmp_path):
    make_analysis(tmp_path)
    first = rep.write_report(tmp_path)
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert rep.write_report(tmp_path) == first
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files


def test_unit_level_gnmax_without_ledger(tmp_path):
    make_analysis(
        tmp_path,
        relation="unit",
        mechanism="gnmax",
        ledger=False,
        class_names=None,
        num_classes=4,
        label_accuracy=None,
    )
    result = rep.write_report(tmp_path)
    text = result["statement"]
    assert "all records of any one privacy unit (person)" in text and "at the unit level" in text
    assert "GNMax" in text and "\u03c3 = 40" in text
    assert "Cumulative spend" not in text
    md = (tmp_path / "report.md").read_text()
    assert "Privacy ledger" not in md and "not available" in md
    assert "Privacy ledger" not in internal_md(tmp_path)


def test_fallback_and_edge_cases_give_warnings(tmp_path):
    a = make_analysis(
        fallback="conditions C5/C6 do not hold at this order and sigma2",
        num_teachers=50,
        delta=0.05,
    )
    a["privacy"]["sanitized"]["order"] = 19.0  # unused when falling back: not checked
    a["utility"]["student_per_class_accuracy"][3] = None  # a class absent from the evaluation
    a["privacy"]["order"] = a["privacy"]["orders"][-1]
    a["privacy"]["budget"].update(basis="data-dependent", stop_reason="budget of eps 8 reached")
    analysis_file(tmp_path).write_text(json.dumps(a))
    result = rep.write_report(tmp_path)
    warnings = "\n".join(result["warnings"])
    assert "fell back to the data-independent" in warnings
    assert "1/50" in warnings
    assert "data-dependent epsilon, which is not private" in warnings
    assert "fell back to the data-independent cost" in result["statement"]
    assert a["privacy"]["eps_sanitized"] >= a["privacy"]["eps_guarantee"]
    assert result["privacy"]["eps_sanitized"] == a["privacy"]["eps_sanitized"]  # no noise: public
    assert "which remains the figure to quote" in result["statement"]
    assert "Querying stopped early: budget of eps 8 reached" in result["statement"]
    # the data-dependent order at the grid's edge: a bit about the votes, internal only
    assert "edge of the order grid" not in warnings
    internal = internal_json(tmp_path)
    edge = [w for w in internal["warnings"] if "privacy.order =" in w]
    assert len(edge) == 1 and edge[0].startswith("INTERNAL (do not publish):")
    md = (tmp_path / "report.md").read_text()
    assert "## Warnings" in md and "Dress" not in md  # per-class figures on private evaluation
    assert "| Dress | n/a (no evaluation items) |" in internal_md(tmp_path)


def _break(path: list, value=KeyError):
    def edit(a):
        node = a
        for key in path[:-1]:
            node = node[key]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_break(["privacy", "eps_sanitized"]), "key 'privacy.eps_sanitized' is missing"),
        (_break(["queries"]), "key 'queries' is missing"),
        (_break(["privacy", "sanitized", "beta"]), "key 'privacy.sanitized.beta' is missing"),
        (_break(["privacy", "delta"], "1e-5"), "key 'privacy.delta' must be a number"),
        (_break(["privacy", "delta"], 2.0), "key 'privacy.delta' must lie in (0, 1)"),
        (
            _break(["utility", "student_accuracy"], 91.0),
            "'utility.student_accuracy' must be a fraction",
        ),
        (_break(["queries", "answered"], 2000), "'queries.answered' (2000) must not exceed"),
        (_break(["format"], 2), "key 'format' must be 1"),
        (_break(["privacy", "mechanism"], "pate-magic"), "key 'privacy.mechanism' must be one of"),
        (
            _break(["privacy", "data_dependent_is_private"], True),
            "data_dependent_is_private' must be false",
        ),
        (_break(["privacy", "rdp_data_dependent"], [1.0, 2.0]), "one value per order"),
        (_break(["utility", "confusion_matrix"], [[1, 2], [3]]), "square matrix"),
        (
            _break(["privacy", "sanitized", "beta"], 0.02),
            "differs from config.privacy.release_beta",
        ),
        (_break(["privacy", "neighbouring_relation"], "unit"), "config.partition.mode is 'random'"),
        (_break(["privacy", "ledger"], {"path": "x"}), "key 'privacy.ledger.dataset' is missing"),
        (
            lambda a: a["privacy"]["orders"].__setitem__(0, float("nan")),
            "'privacy.orders' must be a list",
        ),
    ],
)
def test_malformed_analysis_names_file_and_key_and_writes_nothing(tmp_path, edit, message):
    a = make_analysis()
    edit(a)
    analysis_file(tmp_path).write_text(json.dumps(a))
    with pytest.raises(ValueError) as info:
        rep.write_report(tmp_path)
    assert message in str(info.value) and str(analysis_file(tmp_path)) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.PRIVATE_DIR]


def test_missing_or_unreadable_input_writes_nothing(tmp_path):
    with pytest.raises(FileNotFoundError, match="analysis.json not found"):
        rep.write_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        rep.write_report(tmp_path / "nope")
    analysis_file(tmp_path).write_text("{not json")
    with pytest.raises(ValueError, match="analysis.json is not valid JSON"):
        rep.write_report(tmp_path)
    analysis_file(tmp_path).write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        rep.write_report(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.PRIVATE_DIR]


def test_validate_and_build_are_pure(tmp_path):
    a = make_analysis()
    before = copy.deepcopy(a)
    report = rep.build_report(rep.validate_analysis(a))
    assert a == before
    assert set(report) == set(a) | {"statement", "plots", "warnings", "publication"}
    assert rep.render_statement(a) == report["statement"]
    full = copy.deepcopy(report)
    public = rep.public_report(report)
    assert report == full and set(public) <= set(report)
    assert rep.render_statement(public) == public["statement"]


def test_cli_json_equals_report_json(tmp_path, capsys):
    make_analysis(tmp_path)
    assert main(["report", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads((tmp_path / "report.json").read_text())
    assert main(["report", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(tmp_path / n) for n in rep.REPORT_FILES] + [
        str(tmp_path / f"plots/{n}.png") for n in PUBLIC_NOW
    ] + [f"{tmp_path / n} (internal: do not publish)" for n in rep.INTERNAL_REPORT_FILES]


def test_cli_bad_input_one_clean_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pate report: error:" in err and "analysis.json not found" in err
    assert "Traceback" not in err
    a = make_analysis()
    del a["utility"]["plurality_vote_accuracy"]
    analysis_file(tmp_path).write_text(json.dumps(a))
    assert main(["report", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert "utility.plurality_vote_accuracy" in captured.err and captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.PRIVATE_DIR]


def test_cli_does_not_import_torch(tmp_path):
    make_analysis(tmp_path)
    code = (
        "import sys; import pate.run.report; assert 'matplotlib' not in sys.modules; "
        "from pate.cli import main; rc = main(['report', sys.argv[1], '--json']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["privacy"]["eps_guarantee"] == pytest.approx(
        json.loads(analysis_file(tmp_path).read_text())["privacy"]["eps_guarantee"], abs=0
    )


def test_warns_when_the_sanitized_epsilon_is_no_saving(tmp_path):
    from pate.run.report import build_report

    analysis = make_analysis(tmp_path)
    analysis["privacy"]["eps_sanitized"] = analysis["privacy"]["eps_data_independent"] + 0.5
    warnings = build_report(analysis)["warnings"]
    assert any("Publishing only the data-independent figure" in w for w in warnings)
    analysis["privacy"]["eps_sanitized"] = analysis["privacy"]["eps_data_independent"] * 0.5
    assert not any("Publishing only" in w for w in build_report(analysis)["warnings"])


# ------------------------------------------------------------------------------ seeded noise, ledger off,
# budget changes (optional keys of analysis.json["privacy"])

CHANGES = [
    {
        "time_utc": "2025-01-02T09:00:00Z",
        "old_eps": None,
        "old_delta": None,
        "new_eps": 4.0,
        "new_delta": 1e-5,
    },
    {
        "time_utc": "2025-01-09T17:30:00Z",
        "old_eps": 4.0,
        "old_delta": 1e-5,
        "new_eps": 10.0,
        "new_delta": 1e-5,
    },
]


def _first_paragraph(statement: str) -> str:
    return statement.split("\n\n")[0]


def test_seeded_noise_opens_every_statement_with_not_private(tmp_path):
    a = make_analysis(tmp_path)
    a["privacy"]["noise_seeded"] = True
    analysis_file(tmp_path).write_text(json.dumps(a))
    result = rep.write_report(tmp_path)
    first = _first_paragraph(result["statement"])
    assert "NOT differentially private" in first and "do not publish its outputs" in first
    assert "anyone with the seed can remove it" in first and "reproducible" in first
    assert "seeded" in result["warnings"][0]
    md = (tmp_path / "report.md").read_text()
    # The first paragraph after the title, and the first one of the statement section.
    assert md.split("\n\n")[1].startswith("**This run is NOT differentially private")
    statement_md = md.split("## Privacy statement\n\n")[1]
    assert statement_md.startswith("**NOT DIFFERENTIALLY PRIVATE (seeded noise):**")
    page = (tmp_path / "report.html").read_text()
    body = page[page.index("<body>") :]
    assert body.index("NOT differentially private") < body.index("What this report publishes")
    statement_html = body.split('<h2 id="privacy-statement">Privacy statement</h2>\n')[1]
    assert statement_html.startswith("<p><strong>NOT DIFFERENTIALLY PRIVATE (seeded noise):")


def test_unseeded_or_old_analysis_says_nothing_about_seeds():
    a = make_analysis()
    assert "noise_seeded" not in a["privacy"]  # an analysis.json from before the key existed
    old = rep.build_report(a)
    a["privacy"]["noise_seeded"] = False
    new = rep.build_report(a)
    for report in (old, new):
        assert "seed" not in report["statement"].lower()
        assert _first_paragraph(report["statement"]).startswith("What is protected")
        assert not any("seed" in w for w in report["warnings"])
        assert "NOT differentially private" not in rep.render_markdown(report)
    assert old["statement"] == new["statement"]


def test_ledger_off_says_no_budget_was_enforced():
    a = make_analysis(ledger=False)
    a["privacy"]["ledger_enforced"] = False
    report = rep.build_report(a)
    assert "no budget was enforced" in _first_paragraph(report["statement"])
    assert any("ledger was off" in w for w in report["warnings"])
    # With seeded noise too, both caveats lead.
    a["privacy"]["noise_seeded"] = True
    first = _first_paragraph(rep.build_report(a)["statement"])
    assert "NOT differentially private" in first and "no budget was enforced" in first
    # Ledger on, or an old file without the key: nothing said.
    for value in (True, None):
        b = make_analysis()
        if value is not None:
            b["privacy"]["ledger_enforced"] = value
        report = rep.build_report(b)
        assert "no budget was enforced" not in report["statement"]
        assert not any("ledger was off" in w for w in report["warnings"])


def test_budget_changes_are_listed(tmp_path):
    a = make_analysis(tmp_path)
    a["privacy"]["budget_changes"] = CHANGES
    analysis_file(tmp_path).write_text(json.dumps(a))
    result = rep.write_report(tmp_path)
    assert "changed 2 time(s)" in result["statement"]
    assert "from no budget to \u03b5 = 4, \u03b4 = 1e-5" in result["statement"]
    assert "from \u03b5 = 4, \u03b4 = 1e-5 to \u03b5 = 10, \u03b4 = 1e-5" in result["statement"]
    assert [w for w in result["warnings"] if "raised 1 time(s)" in w]  # the first one only set it
    md = (tmp_path / "report.md").read_text()
    assert "## Budget changes (privacy ledger)" in md
    assert "| 2025-01-09T17:30:00Z | 4 | 1e-5 | 10 | 1e-5 |" in md
    assert "2025-01-02T09:00:00Z" in (tmp_path / "report.html").read_text()
    # Missing or empty: no section, no sentence.
    for changes in (None, []):
        b = make_analysis()
        if changes is not None:
            b["privacy"]["budget_changes"] = changes
        report = rep.build_report(b)
        assert "Budget changes" not in report["statement"]
        assert "Budget changes" not in rep.render_markdown(report)


def test_lowering_the_budget_is_not_a_warning():
    a = make_analysis()
    a["privacy"]["budget_changes"] = [dict(CHANGES[1], old_eps=10.0, new_eps=4.0)]
    assert not any("raised" in w for w in rep.build_report(a)["warnings"])


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("noise_seeded", "yes", "privacy.noise_seeded' must be true or false"),
        ("ledger_enforced", 0, "privacy.ledger_enforced' must be true or false"),
        ("budget_changes", {"time_utc": "x"}, "must be a list of budget changes"),
        (
            "budget_changes",
            [{"time_utc": "x", "old_eps": 1.0, "old_delta": 1e-5, "new_eps": 2.0}],
            r"privacy.budget_changes\[0\].new_delta' is missing",
        ),
        (
            "budget_changes",
            [dict(CHANGES[0], new_eps="4")],
            r"budget_changes\[0\].new_eps' must be a number",
        ),
    ],
)
def test_optional_privacy_keys_are_validated(key, value, message):
    a = make_analysis()
    a["privacy"][key] = value
    with pytest.raises(ValueError, match=message):
        rep.validate_analysis(a)


def test_mechanism_wording_comes_from_the_registry():
    from pate import mechanisms

    for name in ("confident-gnmax", "gnmax", "lnmax", "interactive-gnmax"):
        spec = mechanisms.get(name)
        report = rep.build_report(make_analysis(mechanism=name))
        assert f"{spec.title} [{spec.reference}]: {spec.description}" in report["statement"]
    a = make_analysis()
    a["privacy"]["mechanism"] = "rappor"
    with pytest.raises(ValueError, match="privacy.mechanism' must be one of 'lnmax'"):
        rep.validate_analysis(a)


# ------------------------------------------------------------------------------ weak guarantees (eps > 10)


def _with_guarantee(eps: float, **kwargs) -> dict:
    a = make_analysis(**kwargs)
    a["privacy"]["eps_guarantee"] = eps
    a["privacy"]["eps_data_independent"] = min(a["privacy"]["eps_data_independent"], eps)
    return a


def _paragraph(statement: str, head: str) -> str:
    return next(par for par in statement.split("\n\n") if par.startswith(f"{head}: "))


@pytest.mark.parametrize(
    "eps, factor",
    [
        (10.5, "e^10.5 \u2248 36,000"),
        (12.0, "e^12 \u2248 160,000"),
        (20.0, "e^20 \u2248 4.9 \u00d7 10^8"),
        (1000.0, "e^1000, more than 10^434, which is no meaningful protection"),
    ],
)
def test_guarantee_above_ten_is_flagged_right_after_the_guarantee(tmp_path, eps, factor):
    a = _with_guarantee(eps)
    analysis_file(tmp_path).write_text(json.dumps(a))
    result = rep.write_report(tmp_path)
    guarantee = _paragraph(result["statement"], "Guarantee")
    first, second = guarantee.split("-differential privacy with respect to ")[1].split(". ")[:2]
    assert first == "adding or removing any one record of the sensitive training data"
    assert second == (
        "This bound protects individuals very weakly: an epsilon above 10 allows an "
        f"attacker's odds about any one record to change by a factor of {factor}"
    )
    flagged = [w for w in result["warnings"] if "protects individuals very weakly" in w]
    assert len(flagged) == 1 and factor in flagged[0] and f"\u03b5 = {eps:.4g}" in flagged[0]
    assert json.loads((tmp_path / "report.json").read_text())["warnings"] == result["warnings"]
    md = (tmp_path / "report.md").read_text()
    md_guarantee = next(line for line in md.splitlines() if line.startswith("**Guarantee:**"))
    assert (
        "**This bound protects individuals very weakly" in md_guarantee and factor in md_guarantee
    )
    assert md.index("## Warnings") < md.index(
        "protects individuals very weakly", md.index("## Warnings")
    )
    page = (tmp_path / "report.html").read_text()
    assert "<strong>This bound protects individuals very weakly" in page
    assert html.escape(factor, quote=False) in page


def test_unit_level_and_infinite_guarantees_are_flagged():
    unit = rep.build_report(_with_guarantee(11.0, relation="unit"))
    assert (
        "odds about any one person (privacy unit) to change by a factor of e^11 \u2248 60,000"
        in _paragraph(unit["statement"], "Guarantee")
    )
    infinite = rep.build_report(_with_guarantee(float("inf")))
    assert "protects individuals not at all" in _paragraph(infinite["statement"], "Guarantee")
    assert any("not at all" in w for w in infinite["warnings"])


@pytest.mark.parametrize("eps", [10.0, 9.99, 3.0])
def test_guarantee_at_or_below_ten_is_not_flagged(eps):
    report = rep.build_report(_with_guarantee(eps))
    assert "weakly" not in report["statement"] and "not at all" not in report["statement"]
    assert not any("weakly" in w for w in report["warnings"])
    assert "weakly" not in rep.render_markdown(report)


# ------------------------------------------------------------------------------ smoke tests

SMOKE_BANNER = (
    "**SMOKE TEST: this run only checks that the pipeline works; its privacy figures "
    "are not a meaningful guarantee. Do not quote or publish them.**"
)


def test_smoke_test_is_said_at_the_very_top(tmp_path):
    a = make_analysis(tmp_path)
    a["run"]["smoke_test"] = True
    analysis_file(tmp_path).write_text(json.dumps(a))
    result = rep.write_report(tmp_path)
    assert result["run"]["smoke_test"] is True
    first = _first_paragraph(result["statement"])
    assert first.startswith(
        "SMOKE TEST: This run is a smoke test: it only checks that the pipeline"
    )
    assert "not a meaningful guarantee" in first
    assert result["warnings"][0].startswith("This run is a smoke test")
    assert "not a meaningful guarantee" in result["warnings"][0]
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["statement"] == result["statement"] and saved["warnings"] == result["warnings"]
    md = (tmp_path / "report.md").read_text()
    assert md.split("\n\n")[:2] == ["# Privacy report: fmnist-test", SMOKE_BANNER]
    page = (tmp_path / "report.html").read_text()
    body = page[page.index("<body>\n") + len("<body>\n") :].splitlines()
    assert body[0] == '<h1 id="privacy-report-fmnist-test">Privacy report: fmnist-test</h1>'
    assert body[1] == f"<p>{inline_html(SMOKE_BANNER)}</p>"
    assert body[1].startswith("<p><strong>SMOKE TEST: this run only checks")


def test_smoke_test_with_seeded_noise():
    """The smoke-test banner is the line under the title; the statement still opens with the
    seeded noise (a non-private run says so first), then the smoke test."""
    a = make_analysis()
    a["run"]["smoke_test"] = True
    a["privacy"]["noise_seeded"] = True
    report = rep.build_report(a)
    heads = [par.split(":")[0] for par in report["statement"].split("\n\n")[:3]]
    assert heads == ["NOT DIFFERENTIALLY PRIVATE (seeded noise)", "SMOKE TEST", "What is protected"]
    assert "seeded" in report["warnings"][0] and "smoke test" in report["warnings"][1]
    blocks = rep.render_markdown(report).split("\n\n")
    assert blocks[1] == SMOKE_BANNER and blocks[2].startswith("**This run is NOT differentially")


@pytest.mark.parametrize("value", [None, False])
def test_no_smoke_test_no_banner(value):
    a = make_analysis()
    if value is not None:  # None: an analysis.json from before the key existed
        a["run"]["smoke_test"] = value
    report = rep.build_report(a)
    assert "smoke" not in report["statement"].lower()
    assert not any("smoke" in w.lower() for w in report["warnings"])
    md = rep.render_markdown(report)
    assert "SMOKE" not in md and md.split("\n\n")[1] == "## Summary in plain words"


def test_smoke_test_must_be_a_boolean():
    a = make_analysis()
    a["run"]["smoke_test"] = "yes"
    with pytest.raises(ValueError, match="key 'run.smoke_test' must be true or false"):
        rep.validate_analysis(a)


# ------------------------------------------------------------------------------ publishable plots

DATA_DEPENDENT_KEYS = {
    "eps_data_dependent",
    "rdp_data_dependent",
    "order",
    "vote_margins",
    "counts",
    "bin_edges",
}


def _sentinel(a: dict) -> dict:
    """``a`` with every figure computed from the private votes (and not sanitized) changed."""
    b = copy.deepcopy(a)
    p = b["privacy"]
    p["rdp_data_dependent"] = [v * 0.5 + 0.123 for v in p["rdp_data_dependent"]]
    p["eps_data_dependent"] = p["eps_data_dependent"] * 0.5 + 0.123
    p["order"] = p["orders"][7]
    b["curves"]["eps_data_dependent"] = [v * 0.5 + 0.123 for v in b["curves"]["eps_data_dependent"]]
    b["vote_margins"]["counts"] = b["vote_margins"]["counts"][::-1]
    return rep.validate_analysis(b)


def test_publishable_plots_exist_and_are_marked(written):
    from PIL import Image

    run_dir, _, result = written
    assert set(rep.PUBLIC_PLOT_NAMES) | set(rep.INTERNAL_PLOT_NAMES) == set(rep.PLOT_NAMES)
    assert not set(rep.PUBLIC_PLOT_NAMES) & set(rep.INTERNAL_PLOT_NAMES)
    for name in ("epsilon_vs_answered_public", "rdp_per_order_public"):
        assert name in rep.PUBLIC_PLOT_NAMES and result["plots"][name] == f"plots/{name}.png"
        with Image.open(run_dir / result["plots"][name]) as image:
            image.verify()
        with Image.open(run_dir / result["plots"][name]) as image:
            assert image.format == "PNG" and image.width > 400
    md = (run_dir / "report.md").read_text()
    assert "## Plots: INTERNAL" not in md
    public = md.split("## Plots: publishable")[1].split("## Effective")[0]
    assert "may be published" in public
    for name in PUBLIC_NOW:
        assert f"![{name}](plots/{name}.png)\nPublishable. " in public
    for name in INTERNAL_NOW:
        assert f"{name}.png" not in md
    full = internal_md(run_dir)
    internal = full.split("## Plots: INTERNAL (do not publish)")[1].split("## Effective")[0]
    for name in INTERNAL_NOW:
        marked = f"![{name}](plots/{name}.png)\n**INTERNAL \u2014 {rep.NOT_PRIVATE}.**"
        assert marked in internal, name
    for name in PUBLIC_NOW:
        assert f"![{name}](../plots/{name}.png)\nPublishable. " in full
    page = (run_dir / "report.html").read_text()
    for name in rep.PLOT_NAMES:
        if name in PUBLIC_NOW:
            figure = page.split(f'<figure id="{name}">')[1].split("</figure>")[0]
            assert '<span class="public">Publishable</span>' in figure, name
        else:
            assert f'<figure id="{name}">' not in page, name


def test_the_confusion_matrix_is_public_only_on_public_evaluation_data(tmp_path):
    make_analysis(tmp_path, evaluation_public=True)
    result = rep.write_report(tmp_path)
    assert result["plots"]["confusion_matrix"] == "plots/confusion_matrix.png"
    assert (tmp_path / "plots" / "confusion_matrix.png").is_file()
    assert not (tmp_path / "private" / "plots" / "confusion_matrix.png").exists()
    u = result["utility"]
    assert u["evaluation_public"] is True and "confusion_matrix" in u
    assert "student_accuracy" in u and "evaluation_size" in u
    assert "teacher_mean_accuracy" not in u  # never public
    md = (tmp_path / "report.md").read_text()
    assert f"{100 * u['student_accuracy']:.1f}%" in md and "Ankle boot" in md
    assert "INTERNAL" not in md
    # the evaluation data no longer declared public: the plot moves to private/plots/
    make_analysis(tmp_path, evaluation_public=False)
    result = rep.write_report(tmp_path)
    assert "confusion_matrix" not in result["plots"] and "confusion_matrix" not in result["utility"]
    assert not (tmp_path / "plots" / "confusion_matrix.png").exists()
    assert (tmp_path / "private" / "plots" / "confusion_matrix.png").is_file()


def test_publishable_plot_data_holds_nothing_data_dependent():
    a = make_analysis()
    view = rep.publishable_plot_data(a)
    assert not DATA_DEPENDENT_KEYS & set(view)
    assert view["eps_data_independent"] == a["curves"]["eps_data_independent"]
    assert view["rdp_data_independent"] == a["privacy"]["rdp_data_independent"]
    assert rep.publishable_plot_data(_sentinel(a)) == view


def test_publishable_plots_do_not_depend_on_the_private_figures():
    a = make_analysis()
    before, after = rep.render_plots(a), rep.render_plots(_sentinel(a))
    # The internal plots draw the data-dependent figures (so the sentinel shows in them) ...
    for name in rep.INTERNAL_PLOT_NAMES:
        assert before[name] != after[name], name
    # ... the publishable ones are byte for byte the same whatever those figures are.
    for name in rep.PUBLIC_PLOT_NAMES:
        assert before[name] == after[name], name
    # and they do follow the data-independent figures they show.
    b = copy.deepcopy(a)
    b["privacy"]["rdp_data_independent"] = [v * 1.5 for v in b["privacy"]["rdp_data_independent"]]
    b["curves"]["eps_data_independent"] = [v * 1.5 for v in b["curves"]["eps_data_independent"]]
    changed = rep.render_plots(b)
    for name in ("epsilon_vs_answered_public", "rdp_per_order_public"):
        assert changed[name] != before[name], name


def test_every_plot_has_a_caption_and_is_either_publishable_or_internal():
    from pate.run import report
    from pate.run.report.wording import CAPTIONS

    assert set(CAPTIONS) == set(report.PLOT_NAMES)
    assert set(report.PLOT_NAMES) == set(report.PUBLIC_PLOT_NAMES) | set(report.INTERNAL_PLOT_NAMES)
    assert not set(report.PUBLIC_PLOT_NAMES) & set(report.INTERNAL_PLOT_NAMES)


# ------------------------------------------------------------------------------ utility (#31)


def _utility(**change) -> dict:
    """A run's utility object with the keys of pate.run.run_analysis (a healthy run by default)."""
    u = {
        "student_accuracy": 0.88,
        "teacher_mean_accuracy": 0.8,
        "teacher_accuracy_std": 0.02,
        "plurality_vote_accuracy": 0.93,
        "label_accuracy_answered": 0.9,
        "answered_labels": 320,
        "answered_plurality_agreement": 0.95,
        "answered_plurality_agreement_note": "internal: from the private votes; do not publish",
        "majority_class_rate": 0.12,
        "chance_rate": 0.1,
        "student_steps": 4000,
        "scale_warnings": [],
    }
    u.update(change)
    return u


def _utility_warnings(**change) -> list[str]:
    from pate.run.utility_warnings import utility_warnings

    u = _utility(**change)
    return utility_warnings(u, num_classes=10, answered=u["answered_labels"])


def test_a_healthy_run_gets_no_utility_warning():
    assert _utility_warnings() == []


@pytest.mark.parametrize(
    "change, says",
    [
        # near chance, with the teachers near chance too: the teachers learned too little
        (
            dict(student_accuracy=0.14, plurality_vote_accuracy=0.15, label_accuracy_answered=0.15),
            ["near chance", "plurality vote is near chance too", "fewer teachers"],
        ),
        # near chance while the teachers know: the noise decides the answers (drowning noise)
        (
            dict(
                student_accuracy=0.15, answered_plurality_agreement=0.2, label_accuracy_answered=0.2
            ),
            ["near chance", "disagree with the teachers' plurality vote", "fewer queries"],
        ),
        # near chance with good labels, trained long enough: the student's model
        (dict(student_accuracy=0.15), ["near chance", "Its labels are better", "student='auto'"]),
        # far below its own labels (issue #31: labels 53 %, student 14.5 % -> here 53 / 30)
        (
            dict(student_accuracy=0.3, label_accuracy_answered=0.53, student_steps=120),
            ["far below the accuracy of its own labels", "Train it longer"],
        ),
        # far below the plurality vote, labels unknown (breast cancer: 98.9 % vote, 54 % student)
        (
            dict(
                student_accuracy=0.54,
                plurality_vote_accuracy=0.989,
                label_accuracy_answered=None,
                majority_class_rate=0.37,
                answered_plurality_agreement=0.3,
            ),
            ["far below the teachers' noiseless plurality vote", "less noise"],
        ),
        # too few answers for the classes
        (dict(answered_labels=40), ["Only 40 labels were answered for 10 classes"]),
        # a too-short student
        (dict(student_steps=40), ["trained only 40 optimiser steps", "student_params"]),
        # unscaled inputs to a raw model
        (
            dict(
                scale_warnings=[
                    "the teacher model LogisticRegression gets the tabular inputs unscaled"
                ]
            ),
            ["The teacher model LogisticRegression gets the tabular inputs unscaled."],
        ),
    ],
)
def test_each_failure_cause_gets_a_warning_that_says_what_to_change(change, says):
    warnings = _utility_warnings(**change)
    assert warnings, change
    text = " ".join(warnings)
    for phrase in says:
        assert phrase in text, (phrase, warnings)


def test_the_majority_class_is_the_chance_level_when_it_beats_one_over_classes():
    # 6 classes, majority 40 %: a student at 43 % is near chance even though 1/6 = 16.7 %
    from pate.run.utility_warnings import utility_warnings

    u = _utility(student_accuracy=0.43, majority_class_rate=0.4, chance_rate=1 / 6)
    assert "near chance" in utility_warnings(u, num_classes=6, answered=320)[0]
    u = _utility(
        student_accuracy=0.6,
        majority_class_rate=0.4,
        chance_rate=1 / 6,
        label_accuracy_answered=0.65,
        plurality_vote_accuracy=0.7,
    )
    assert utility_warnings(u, num_classes=6, answered=320) == []


def test_the_first_section_says_what_the_run_is_worth_with_its_warnings():
    a = make_analysis()
    warnings = _utility_warnings(student_accuracy=0.3, label_accuracy_answered=0.53)
    a["utility"].update(
        _utility(student_accuracy=0.3, label_accuracy_answered=0.53, warnings=warnings)
    )
    a["utility"]["student_accuracy"] = 0.3
    report = rep.build_report(rep.validate_analysis(a))
    assert report["warnings"][: len(warnings)] == warnings  # utility first
    md = rep.render_markdown(report, internal=True)
    first = md.index("## What you get")  # the appendix's first section, after the first page
    appendix = md.index("## Technical appendix")
    assert (
        md.index("## Summary in plain words") < appendix < first < md.index("## Privacy statement")
    )
    assert md[appendix + 2 : first].count("## ") == 0
    glance = md[first : md.index("## Privacy statement")]
    assert "30.0%" in glance and "majority class gives 12.0%" in glance
    assert (
        "**Teachers** (**INTERNAL (do not publish):** computed from the private records): 80.0% "
        "each on average; their noiseless plurality vote 93.0%"
    ) in glance
    assert "320 of 1,000 queries answered, 53.0% of them right" in glance
    assert (
        "95.0% agree with the teachers' plurality vote (**INTERNAL (do not publish):** computed"
    ) in glance
    public = rep.render_markdown(rep.public_report(report))
    public_glance = public[public.index("## What you get") : public.index("## Privacy statement")]
    assert "30.0%" not in public_glance and "80.0%" not in public_glance
    assert "93.0%" not in public and "95.0%" not in public
    assert warnings[0] in glance
    assert md.count(warnings[0]) == 1  # not repeated under Warnings
    a["utility"].update(_utility(warnings=[]))
    healthy = rep.render_markdown(rep.build_report(rep.validate_analysis(a)), internal=True)
    assert "No utility warning" in healthy


def test_old_analysis_files_without_the_utility_keys_still_render():
    md = rep.render_markdown(rep.build_report(rep.validate_analysis(make_analysis())))
    assert "## What you get" in md and "Utility warnings" not in md


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("answered_plurality_agreement", 1.5, "must be a fraction in"),
        ("answered_plurality_agreement", "high", "must be a number"),
        ("warnings", "check it", "must be a list of strings"),
        ("student_steps", 2.5, "must be an integer"),
        ("majority_class_rate", -0.1, "must be a fraction in"),
    ],
)
def test_optional_utility_keys_are_validated(key, value, message):
    a = make_analysis()
    a["utility"][key] = value
    with pytest.raises(ValueError, match=message):
        rep.validate_analysis(a)


def test_the_cpu_threads_of_each_stage_are_reported(tmp_path):
    """Issue #33: the thread count each computing stage chose (pate.core.threads, recorded in
    stages/<stage>.json) and why appear in the report; a run without the record has no line."""
    make_analysis(tmp_path)
    rep.write_report(tmp_path)
    assert "CPU threads" not in internal_md(tmp_path)
    (tmp_path / rundir.STAGE_DIR).mkdir(parents=True)
    record = {
        "count": 2,
        "source": "affinity",
        "cpus": 2,
        "detail": "sched_getaffinity: 2 CPUs",
        "wait_policy": "passive",
        "load_average": 0.5,
    }
    (tmp_path / rundir.STAGE_DIR / "student.json").write_text(json.dumps({"threads": record}))
    (tmp_path / rundir.STAGE_DIR / "teachers.json").write_text(
        json.dumps({"threads": dict(record, count=1, source="flag", detail="--threads 1")})
    )
    rep.write_report(tmp_path)
    result = internal_json(tmp_path)
    assert result["threads"]["student"]["count"] == 2
    md = internal_md(tmp_path)
    assert (
        "**CPU threads:** teachers 1 (flag: --threads 1; OpenMP waiting passive), student 2 "
        "(affinity: sched_getaffinity: 2 CPUs; OpenMP waiting passive)"
    ) in md
    assert "CPU threads" not in (tmp_path / "report.md").read_text()  # internal only
    # a student trained in two processes (pate.student.parallel) says so
    (tmp_path / rundir.STAGE_DIR / "student.json").write_text(
        json.dumps({"threads": dict(record, count=1, source="busy", detail="d"), "processes": 2})
    )
    rep.write_report(tmp_path)
    assert (
        "student 1 (busy: d; OpenMP waiting passive) in 2 processes that share each step"
        in internal_md(tmp_path)
    )


def test_the_peak_gpu_memory_of_each_stage_is_reported(tmp_path):
    """Issue #33: the peak GPU memory a stage recorded (pate.core.gpu_memory, in
    stages/<stage>.json) is in report.json and in the documents; a CPU-only run has no line, and
    a malformed record is ignored rather than trusted."""
    make_analysis(tmp_path)
    (tmp_path / rundir.STAGE_DIR).mkdir(parents=True)
    (tmp_path / rundir.STAGE_DIR / "votes.json").write_text(json.dumps({"gpu_memory": "lots"}))
    rep.write_report(tmp_path)
    result = internal_json(tmp_path)
    assert "gpu_memory" not in result
    assert "Peak GPU memory" not in internal_md(tmp_path)
    peak = {
        "index": 0,
        "name": "NVIDIA H200",
        "peak_allocated_bytes": 3 * 2**29,
        "peak_reserved_bytes": 2**31,
    }
    (tmp_path / rundir.STAGE_DIR / "teachers.json").write_text(json.dumps({"gpu_memory": [peak]}))
    rep.write_report(tmp_path)
    result = internal_json(tmp_path)
    assert result["gpu_memory"] == {"teachers": [peak]}
    md = internal_md(tmp_path)
    assert (
        "**Peak GPU memory:** teachers 2.00 GiB reserved, 1.50 GiB in tensors (cuda:0, NVIDIA H200)"
    ) in md
    assert "Peak GPU memory" not in (tmp_path / "report.html").read_text()  # internal only


def test_a_student_trained_in_bfloat16_says_so(tmp_path):
    """Issue #33: the student stage records the precision its training passes ran in
    (``[student] amp``); the report states bfloat16 and stays silent on float32 or on a run
    without the record."""
    make_analysis(tmp_path)
    (tmp_path / rundir.STAGE_DIR).mkdir(parents=True)
    (tmp_path / rundir.STAGE_DIR / "student.json").write_text(json.dumps({"precision": "float32"}))
    rep.write_report(tmp_path)
    result = internal_json(tmp_path)
    assert result["student_precision"] == "float32"
    assert "Student precision" not in internal_md(tmp_path)
    (tmp_path / rundir.STAGE_DIR / "student.json").write_text(
        json.dumps({"precision": "bfloat16 autocast"})
    )
    rep.write_report(tmp_path)
    result = internal_json(tmp_path)
    assert result["student_precision"] == "bfloat16 autocast"
    md = internal_md(tmp_path)
    assert "**Student precision:** its training passes ran in bfloat16 autocast" in md
    assert "Student precision" not in (tmp_path / "report.html").read_text()  # internal only
    (tmp_path / rundir.STAGE_DIR / "student.json").write_text(json.dumps({"precision": 16}))
    rep.write_report(tmp_path)
    assert "student_precision" not in internal_json(tmp_path)


def test_public_rows_of_the_users_own_file_are_counted_as_unprotected(tmp_path):
    """Rows of the user's file marked public are declared public, not covered by the guarantee:
    the publishable report counts them and says so (issue #48); without them it says nothing."""
    a = make_analysis(tmp_path)
    rep.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "public items (declared public by the user)" in md
    assert "WITHOUT any privacy protection" not in md
    a["utility"]["public_from_pool"] = 30
    analysis_file(tmp_path).write_text(json.dumps(a))
    rep.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "30 of the public items are rows of the user's own file marked public" in md
    assert "WITHOUT any privacy protection" in md
    assert json.loads((tmp_path / "report.json").read_text())["utility"]["public_from_pool"] == 30
