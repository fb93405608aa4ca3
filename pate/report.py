"""The auditor-ready privacy report of a PATE run: ``report.json``, ``report.md``, ``report.html``
and six PNG plots, generated from the run's ``analysis.json``.

The report never recomputes a privacy number, never loads the votes and never imports torch:
every figure comes from ``<run_dir>/analysis.json`` (written by the pipeline's analysis stage;
schema ``format`` 1, see :data:`ANALYSIS_SCHEMA`). What it adds is the wording an auditor needs:

* the **neighbouring relation** -- record-level (one sensitive record added or removed) or
  unit-level (all records of one privacy unit, e.g. one patient, added or removed);
* the **guarantee** ``eps_guarantee``: the (eps, delta) that provably holds for everything the
  run releases (the data-independent cost of the answers composed with the release of the
  sanitized epsilon);
* the **sanitized** data-dependent epsilon ``eps_sanitized``: the data-dependent privacy cost
  of [P18] released through the smooth-sensitivity (GNSS) mechanism with order, beta and
  sigma_ss fixed in the config before the votes were seen, its release cost included;
* the raw **data-dependent** epsilon, computed from the private votes: marked
  ``NOT PRIVATE -- for internal use only, do not publish`` (as is everything else derived from
  the votes: the vote-margin histogram, the data-dependent curves);
* basic and advanced composition figures beside the RDP one ([M17], [DRV10]), the utility of the
  student and teachers, and the cumulative spend recorded by the privacy ledger;
* when ``privacy.noise_seeded`` is true (the noise came from a user-given seed), a statement
  that opens with: reproducible, NOT differentially private, do not publish; when
  ``privacy.ledger_enforced`` is false, that no budget was enforced across runs; and the
  ledger's ``privacy.budget_changes``. These keys are optional: an older analysis.json without
  them gets none of these sentences;
* when ``run.smoke_test`` is true (optional, false when absent), a banner on the first line
  under the title, the first paragraph of the statement and the first warning (each after the
  seeded-noise one, if any): the run only checks that the pipeline works and its privacy
  figures are not a meaningful guarantee;
* when the guarantee's epsilon is above :data:`WEAK_EPSILON` (10), a warning right after the
  guarantee sentence (and in ``warnings``) that it protects individuals very weakly, with the
  factor e^eps by which it lets an attacker's odds about one record (or person) change.

Plots (:data:`PLOT_NAMES`, written to ``plots/<name>.png``): ``epsilon_vs_answered`` and
``rdp_per_order`` are INTERNAL (they draw the data-dependent curves, computed from the private
votes), as is ``vote_margins``; ``epsilon_vs_answered_public`` and ``rdp_per_order_public`` are
their publishable versions, drawn only from the data-independent figures and the released
epsilons (:func:`publishable_plot_data`, the only input of their plotting functions);
``confusion_matrix`` is publishable.

The mechanism's name, description and parameter symbols come from its spec in
:mod:`pate.mechanisms`.

Symbols: eps / delta the (epsilon, delta) of differential privacy; lambda (``order``) a Renyi
order; beta the smoothness parameter and sigma_ss the noise multiplier of the GNSS release.

References: [P17] Papernot et al., "Semi-supervised knowledge transfer for deep learning from
private training data", ICLR 2017. [P18] Papernot et al., "Scalable private learning with PATE",
ICLR 2018. [M17] Mironov, "Renyi differential privacy", CSF 2017. [DRV10] Dwork, Rothblum,
Vadhan, "Boosting and differential privacy", FOCS 2010.

Public API: :func:`write_report`, :func:`load_analysis`, :func:`validate_analysis`,
:func:`build_report`, :func:`plain_language_statement`, :func:`render_markdown`,
:func:`render_html`, :func:`render_plots`, :func:`publishable_plot_data`; constants
:data:`ANALYSIS_FILE`, :data:`REPORT_FILES`, :data:`PLOT_NAMES`, :data:`PUBLIC_PLOT_NAMES`,
:data:`INTERNAL_PLOT_NAMES`, :data:`NOT_PRIVATE`, :data:`WEAK_EPSILON`.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from pate import config as C
from pate import mechanisms
from pate.io import naming_write_errors

__all__ = [
    "ANALYSIS_FILE",
    "ANALYSIS_SCHEMA",
    "INTERNAL_PLOT_NAMES",
    "NOT_PRIVATE",
    "PLOT_NAMES",
    "PUBLIC_PLOT_NAMES",
    "REPORT_FILES",
    "WEAK_EPSILON",
    "build_report",
    "load_analysis",
    "plain_language_statement",
    "publishable_plot_data",
    "render_html",
    "render_markdown",
    "render_plots",
    "validate_analysis",
    "write_report",
]

ANALYSIS_FILE = "analysis.json"
REPORT_FILES = ("report.json", "report.md", "report.html")
PLOT_NAMES = ("epsilon_vs_answered", "vote_margins", "rdp_per_order", "confusion_matrix",
              "epsilon_vs_answered_public", "rdp_per_order_public")
#: The plots drawn from the private votes (data-dependent curves, vote margins): never publish.
INTERNAL_PLOT_NAMES = ("epsilon_vs_answered", "vote_margins", "rdp_per_order")
#: The plots that may be published (no figure computed from the private votes).
PUBLIC_PLOT_NAMES = ("epsilon_vs_answered_public", "rdp_per_order_public", "confusion_matrix")
#: A guarantee epsilon above this gets the "protects individuals very weakly" warning.
WEAK_EPSILON = 10.0
PLOTS_DIR = "plots"
NOT_PRIVATE = "NOT PRIVATE \u2014 for internal use only, do not publish"

# ------------------------------------------------------------------------------ input schema
# Leaf specs: "int", "float", "str", "bool", "dict" (any JSON object), "[int]", "[float]",
# "[str]", "[[int]]"; a trailing "?" allows null; a tuple is a choice among strings; a nested
# dict is a sub-object (wrapped in ("?", {...}) when the whole object may be null).
ANALYSIS_SCHEMA: dict[str, Any] = {
    "format": "int",
    "run": {"name": "str", "run_dir": "str", "created": "str", "pate_learn_version": "str"},
    "config": "dict",
    "privacy": {
        "neighbouring_relation": ("record", "unit"),
        "relation": ("add-remove",),
        "relation_text": "str",
        "mechanism": "str",  # a registered mechanism (pate.mechanisms), checked below
        "params": "dict",
        "num_teachers": "int",
        "delta": "float",
        "conversion": ("classic", "tight"),
        "orders": "[float]",
        "rdp_data_dependent": "[float]",
        "rdp_data_independent": "[float]",
        "eps_data_independent": "float",
        "order_data_independent": "float",
        "eps_data_dependent": "float",
        "order": "float",
        "data_dependent_is_private": "bool",
        "eps_sanitized": "float",
        "sanitized": {"order": "float", "beta": "float", "sigma_ss": "float", "noise_std": "float",
                      "rdp_gnss": "float", "smooth_sensitivity": "float",
                      "eps_sanitized_upper_2std": "float", "eps_data_independent": "float",
                      "fallback": "str?"},
        "eps_guarantee": "float",
        "composition": {"per_query_eps": "float", "per_query_delta": "float", "basic_eps": "float",
                        "advanced_eps": "float", "delta": "float", "queries_composed": "int"},
        "budget": {"eps": "float", "delta": "float", "basis": ("data-independent", "data-dependent"),
                   "stop_reason": "str?"},
        "ledger": ("?", {"path": "str", "dataset": "str", "budget_eps": "float?",
                         "budget_delta": "float?", "spent_eps": "float", "remaining_eps": "float?",
                         "events": "int", "runs": "int"}),
    },
    "queries": {"public_size": "int", "asked": "int", "answered": "int",
                "labelled_by_student": "int", "stop_reason": "str?"},
    "utility": {"student_accuracy": "float", "student_per_class_accuracy": "[float?]",
                "confusion_matrix": "[[int]]", "class_names": "[str]?",
                # null for a run without teachers (Private-kNN)
                "teacher_mean_accuracy": "float?", "teacher_accuracy_std": "float?",
                "plurality_vote_accuracy": "float?", "label_accuracy_answered": "float?",
                "label_accuracy_note": "str", "evaluation_size": "int"},
    "curves": {"answered_count": "[int]", "eps_data_independent": "[float]",
               "eps_data_dependent": "[float]"},
    "vote_margins": {"bin_edges": "[float]", "counts": "[int]", "note": "str"},
}

# Optional keys of "privacy" (absent from older analysis.json files: the report then says
# nothing about them). noise_seeded: the aggregator's and the release's noise came from a seed the
# user gave (replayable, hence not private); ledger_enforced: false when the privacy ledger was
# turned off; budget_changes: the dataset budget's changes recorded by the ledger; calibration:
# what "auto" noise parameters were calibrated to for a target epsilon, and how (null: none);
# prior_rounds: the earlier runs whose released student embeds this Private-kNN run ({"runs":
# [{"run_dir", "run_id", "eps"}], "eps"}: their composed cost, included in eps_guarantee).
_OPTIONAL_PRIVACY: dict[str, Any] = {
    "noise_seeded": "bool",
    "ledger_enforced": "bool",
    "budget_changes": "[change]",
    "calibration": "dict?",
    "prior_rounds": "dict?",
}
# Optional keys of "run": smoke_test (the run only checks that the pipeline works; false when
# absent, as in files written before the key existed).
_OPTIONAL_RUN: dict[str, Any] = {"smoke_test": "bool"}
# Optional keys of "utility": student_alone_accuracy (the released model is the student times its
# labelling rule, ``[student] combine_with_rule``: the student's own accuracy, for comparison).
# What the run is worth in plain words (the report's first section; absent from files written
# before these keys existed): answered_labels, answered_plurality_agreement (INTERNAL: from the
# private votes; null without teachers), majority_class_rate and chance_rate (evaluation split),
# student_steps (optimiser steps of the torch student; null for an estimator), scale_warnings and
# warnings (pate.run_analysis.utility_warnings: each says what to change).
_OPTIONAL_UTILITY: dict[str, Any] = {"student_alone_accuracy": "float", "answered_labels": "int",
                                     "answered_plurality_agreement": "float?",
                                     "answered_plurality_agreement_note": "str",
                                     "majority_class_rate": "float", "chance_rate": "float",
                                     "student_steps": "int?", "scale_warnings": "[str]",
                                     "warnings": "[str]"}
_BUDGET_CHANGE = {"time_utc": "str", "old_eps": "float?", "old_delta": "float?",
                  "new_eps": "float?", "new_delta": "float?"}

_REGENERATE = "regenerate it with the pipeline's analysis stage (`pate run --resume`)"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    # inf is allowed (an infinite epsilon overstates, never understates); NaN is not.
    return (_is_int(value) or isinstance(value, float)) and not (
        isinstance(value, float) and math.isnan(value))


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> None:
        raise ValueError(f"{self.source}: key '{key}' {message}; {_REGENERATE}")

    def check(self, data: Any, spec: Any, key: str) -> None:
        if isinstance(spec, dict):
            if not isinstance(data, dict):
                self.fail(key, f"must be a JSON object, got {_short(data)}")
            for name, sub in spec.items():
                path = f"{key}.{name}" if key else name
                if name not in data:
                    self.fail(path, "is missing")
                self.check(data[name], sub, path)
        elif isinstance(spec, tuple) and spec and spec[0] == "?":
            if data is not None:
                self.check(data, spec[1], key)
        elif isinstance(spec, tuple):
            if data not in spec:
                self.fail(key, f"must be one of {', '.join(map(repr, spec))}, got {_short(data)}")
        else:
            self.leaf(data, spec, key)

    def leaf(self, data: Any, spec: str, key: str) -> None:
        if spec.endswith("?"):
            if data is None:
                return
            spec = spec[:-1]
        ok = {"int": _is_int, "float": _is_real, "str": lambda v: isinstance(v, str),
              "bool": lambda v: isinstance(v, bool), "dict": lambda v: isinstance(v, dict)}
        if spec in ok:
            if not ok[spec](data):
                kind = {"int": "an integer", "float": "a number (not NaN)", "str": "a string",
                        "bool": "true or false", "dict": "a JSON object"}[spec]
                self.fail(key, f"must be {kind}, got {_short(data)}")
            return
        if spec == "[change]":
            if not isinstance(data, list):
                self.fail(key, f"must be a list of budget changes, got {_short(data)}")
            for i, change in enumerate(data):
                self.check(change, _BUDGET_CHANGE, f"{key}[{i}]")
            return
        if spec == "[[int]]":
            if not (isinstance(data, list) and all(
                    isinstance(row, list) and all(_is_int(v) for v in row) for row in data)):
                self.fail(key, f"must be a list of lists of integers, got {_short(data)}")
            return
        item = {"[int]": _is_int, "[float]": _is_real, "[float?]": lambda v: v is None or _is_real(v),
                "[str]": lambda v: isinstance(v, str)}[spec]
        if not (isinstance(data, list) and all(item(v) for v in data)):
            kind = {"[int]": "integers", "[float]": "numbers (not NaN)",
                    "[float?]": "numbers (not NaN) or nulls", "[str]": "strings"}[spec]
            self.fail(key, f"must be a list of {kind}, got {_short(data)}")


def validate_analysis(analysis: Any, *, source: str = ANALYSIS_FILE) -> dict:
    """Check ``analysis`` (the parsed ``analysis.json``) against :data:`ANALYSIS_SCHEMA`.

    Also checks the consistency the report relies on (array lengths, a square confusion matrix,
    non-negative counts, delta in (0, 1), answered <= asked, and that the data-dependent epsilon
    is declared not private). Raises ``ValueError`` naming ``source`` and the offending key;
    returns ``analysis`` unchanged.
    """
    checker = _Checker(source)
    checker.check(analysis, ANALYSIS_SCHEMA, "")
    if analysis["format"] != 1:
        checker.fail("format", f"must be 1 (the format this pate-learn reads), got "
                               f"{analysis['format']!r}")
    p, q, u = analysis["privacy"], analysis["queries"], analysis["utility"]
    if p["mechanism"] not in mechanisms.REGISTRY:
        checker.fail("privacy.mechanism", f"must be one of "
                                          f"{', '.join(map(repr, mechanisms.REGISTRY))}, got "
                                          f"{_short(p['mechanism'])}")
    for name, spec in _OPTIONAL_PRIVACY.items():
        if name in p:
            checker.check(p[name], spec, f"privacy.{name}")
    for name, spec in _OPTIONAL_RUN.items():
        if name in analysis["run"]:
            checker.check(analysis["run"][name], spec, f"run.{name}")
    for name, spec in _OPTIONAL_UTILITY.items():
        if name in u:
            checker.check(u[name], spec, f"utility.{name}")
    if p["data_dependent_is_private"] is not False:
        checker.fail("privacy.data_dependent_is_private",
                     "must be false: the data-dependent epsilon is computed from the private votes")
    if not 0.0 < p["delta"] < 1.0:
        checker.fail("privacy.delta", f"must lie in (0, 1), got {p['delta']!r}")
    if p["num_teachers"] < 1:
        checker.fail("privacy.num_teachers", f"must be >= 1, got {p['num_teachers']!r}")
    k = len(p["orders"])
    if k == 0:
        checker.fail("privacy.orders", "must not be empty")
    for name in ("rdp_data_dependent", "rdp_data_independent"):
        if len(p[name]) != k:
            checker.fail(f"privacy.{name}", f"must have one value per order ({k}), got {len(p[name])}")
    for name in ("eps_data_independent", "eps_data_dependent", "eps_sanitized", "eps_guarantee"):
        if p[name] < 0:
            checker.fail(f"privacy.{name}", f"must be >= 0, got {p[name]!r}")
    for name in ("public_size", "asked", "answered", "labelled_by_student"):
        if q[name] < 0:
            checker.fail(f"queries.{name}", f"must be >= 0, got {q[name]!r}")
    if q["answered"] > q["asked"]:
        checker.fail("queries.answered", f"({q['answered']}) must not exceed queries.asked "
                                         f"({q['asked']})")
    c = analysis["curves"]
    if not len(c["answered_count"]) == len(c["eps_data_independent"]) == len(c["eps_data_dependent"]):
        checker.fail("curves", "answered_count, eps_data_independent and eps_data_dependent must "
                               "have the same length")
    vm = analysis["vote_margins"]
    if len(vm["bin_edges"]) != len(vm["counts"]) + 1:
        checker.fail("vote_margins.bin_edges", f"must have len(counts) + 1 = {len(vm['counts']) + 1} "
                                               f"values, got {len(vm['bin_edges'])}")
    if any(v < 0 for v in vm["counts"]):
        checker.fail("vote_margins.counts", "must be non-negative")
    cm = u["confusion_matrix"]
    m = len(cm)
    if m == 0 or any(len(row) != m for row in cm):
        checker.fail("utility.confusion_matrix",
                     "must be a non-empty square matrix (classes x classes)")
    if any(v < 0 for row in cm for v in row):
        checker.fail("utility.confusion_matrix", "must hold non-negative counts")
    if len(u["student_per_class_accuracy"]) != m:
        checker.fail("utility.student_per_class_accuracy",
                     f"must have one value per class ({m}), got {len(u['student_per_class_accuracy'])}")
    if u["class_names"] is not None and len(u["class_names"]) != m:
        checker.fail("utility.class_names",
                     f"must have one name per class ({m}), got {len(u['class_names'])}")
    for name in ("student_accuracy", "teacher_mean_accuracy", "plurality_vote_accuracy",
                 "label_accuracy_answered", "answered_plurality_agreement",
                 "majority_class_rate", "chance_rate"):
        value = u.get(name)
        if value is not None and not 0.0 <= value <= 1.0:
            checker.fail(f"utility.{name}", f"must be a fraction in [0, 1], got {value!r}")
    config = analysis["config"]
    partition = config.get("partition")
    if (p["neighbouring_relation"] == "unit" and isinstance(partition, dict)
            and partition.get("mode", "unit") != "unit"):
        checker.fail("privacy.neighbouring_relation",
                     f"is 'unit' but config.partition.mode is {partition.get('mode')!r}: a "
                     f"unit-level guarantee needs the data split among teachers by unit")
    fixed = config.get("privacy")
    if isinstance(fixed, dict) and p["sanitized"]["fallback"] is None:
        # Noise was added with these parameters: they must be the ones fixed in advance.
        for key, name in (("order", "release_order"), ("beta", "release_beta"),
                          ("sigma_ss", "release_sigma_ss")):
            if name in fixed and _is_real(fixed[name]) and not math.isclose(
                    p["sanitized"][key], fixed[name], rel_tol=1e-12, abs_tol=0.0):
                checker.fail(f"privacy.sanitized.{key}",
                             f"({p['sanitized'][key]!r}) differs from config.privacy.{name} "
                             f"({fixed[name]!r}): the release parameters must be the ones fixed in "
                             f"the config before the votes were seen")
    return analysis


def load_analysis(run_dir: str | os.PathLike) -> dict:
    """Read and validate ``<run_dir>/analysis.json``.

    Raises ``FileNotFoundError`` if the run directory or the file is missing and ``ValueError``
    (naming the file and the key) if it is not valid JSON or does not follow the schema.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir} (give the directory of a "
                                f"run made by `pate run`)")
    path = run_dir / ANALYSIS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run the pipeline's analysis stage first "
                                f"(`pate run --resume`)")
    try:
        analysis = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); {_REGENERATE}") from None
    return validate_analysis(analysis, source=str(path))


# ------------------------------------------------------------------------------ formatting

def _eps(x: float) -> str:
    """An epsilon with 4 significant digits."""
    if math.isinf(x):
        return "infinity"
    return f"{x:.4g}"


def _sig(x: float, digits: int = 3) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "infinity"
    return f"{x:.{digits}g}"


def _delta(x: float) -> str:
    """delta as 1e-5 / 2.5e-6, never 1e-05."""
    text = f"{x:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}%"


def _count(n: int) -> str:
    return f"{n:,}"


def _param(value: Any) -> str:
    if _is_real(value) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


_RELATION_TEXT = {
    "record": (
        "record",
        "adding or removing any one record",
        "Record-level: two training sets are neighbours when they differ by one sensitive record "
        "(added or removed), so the guarantee bounds what anyone can learn about any single record.",
        "Unit-level protection (all records of one person added or removed at once) is NOT claimed; "
        "a person who contributed several records is protected only by group privacy, with a "
        "correspondingly larger epsilon."),
    "unit": (
        "unit",
        "adding or removing all records of any one privacy unit (person)",
        "Unit-level: two training sets are neighbours when they differ by all records of one "
        "privacy unit, e.g. one patient or customer (added or removed), so the guarantee bounds "
        "what anyone can learn about any one person, however many records they contributed.",
        "This is stronger than record-level protection (one sensitive record added or removed), "
        "which it implies; it holds because the sensitive data was split among the teachers by "
        "unit, so all records of one person reached the same teacher."),
}


def _params_text(mechanism: str, params: dict) -> str:
    if not params:
        return "no parameters"
    symbols = {p.name: p.display for p in mechanisms.get(mechanism).params}
    return ", ".join(f"{symbols.get(k, k)} = {_param(v)}" for k, v in params.items())


def _samples_records(a: dict) -> bool:
    """The run's mechanism samples the private records itself (Private-kNN): no teachers, no
    data-dependent analysis, no sanitized release; its wording comes from its spec."""
    return mechanisms.get(a["privacy"]["mechanism"]).samples_private_records


def _rule_text(a: dict) -> str:
    """How a run whose one release labels every query (class-means) labelled from it ("" for
    any other mechanism)."""
    if not mechanisms.get(a["privacy"]["mechanism"]).releases_once:
        return ""
    from pate.class_means import RULE_TEXT

    rule = C.class_means_rule(a["config"])
    return f"Labelling rule ([knn] rule = \"{rule}\", post-processing): {RULE_TEXT[rule]}. "


def _mechanism_text(mechanism: str) -> str:
    """"Title [reference]: description" of a registered mechanism."""
    spec = mechanisms.get(mechanism)
    return f"{spec.title} [{spec.reference}]: {spec.description}"


# ------------------------------------------------------------------------------ statement

_SEEDED_HEAD = "NOT DIFFERENTIALLY PRIVATE (seeded noise)"
_SEEDED_TEXT = (
    "The aggregator's noise was seeded: it came from a seed given by the user, so this run is "
    "reproducible and its noise can be replayed exactly \u2014 and anyone with the seed can remove "
    "it: this run is NOT differentially private; do not publish its outputs (the student, its "
    "labels or the figures below). The epsilons below describe what the same run would guarantee "
    "with secret noise; rerun with secure noise ([run] secure = true, or --secure) for a private "
    "release.")
_SAME_RELATION = (
    " Every bound in this report, the partition and the ledger's budget are stated for this one "
    "relation (adding or removing), the one DP-SGD (Opacus, dp_accounting) states its epsilon for.")
_LEDGER_OFF = (
    " The privacy ledger was turned off for this run: no budget was enforced across runs on this "
    "data, so the figures below cover this run alone and nothing stopped earlier or later runs "
    "from spending more on the same records.")


_SMOKE_HEAD = "SMOKE TEST"
_SMOKE_TEXT = (
    "This run is a smoke test: it only checks that the pipeline works end to end ([run] "
    "smoke_test = true in its configuration). Its privacy figures are not a meaningful guarantee "
    "and its student is not fit for use: do not quote or publish them.")
_SMOKE_BANNER = ("**SMOKE TEST: this run only checks that the pipeline works; its privacy figures "
                 "are not a meaningful guarantee. Do not quote or publish them.**")


def _is_smoke_test(a: dict) -> bool:
    """``run.smoke_test`` (false when absent, as in older analysis.json files)."""
    return a["run"].get("smoke_test") is True


def _odds_factor(eps: float) -> str:
    """e^eps in words: "22,000" (2 significant digits) up to a million, "4.9 × 10^8" up to
    e^50, then "more than 10^k" (the figure is meaningless by then; only its size matters)."""
    log10 = eps / math.log(10.0)
    if log10 < 6.0:
        return f"{float(f'{math.exp(eps):.2g}'):,.0f}"
    exponent = math.floor(log10)
    if eps >= 50.0:
        return f"more than 10^{exponent:,}"
    mantissa = round(10.0 ** (log10 - exponent), 1)
    if mantissa >= 10.0:
        mantissa, exponent = mantissa / 10.0, exponent + 1
    return f"\u2248 {mantissa:g} \u00d7 10^{exponent}"


def _prior_rounds(p: dict) -> str:
    """The clause naming the earlier rounds composed into the guarantee ("" when none)."""
    prior = p.get("prior_rounds")
    if not prior:
        return ""
    runs = ", ".join(f"{r['run_dir']} (\u03b5 = {_eps(r['eps'])})" for r in prior["runs"])
    return (f", composed with the cost of the earlier rounds whose released student embeds "
            f"this run's neighbour search: {runs}. On their own, the earlier rounds cost "
            f"\u03b5 = {_eps(prior['eps'])} and this run's queries \u03b5 = "
            f"{_eps(p['eps_data_independent'])}")


def _weak_guarantee(a: dict) -> str | None:
    """The warning sentence for a guarantee epsilon above :data:`WEAK_EPSILON`, else None."""
    p = a["privacy"]
    eps = p["eps_guarantee"]
    if not eps > WEAK_EPSILON:
        return None
    who = "record" if p["neighbouring_relation"] == "record" else "person (privacy unit)"
    if math.isinf(eps):
        return (f"This bound protects individuals not at all: an infinite epsilon puts no limit on "
                f"how much an attacker's odds about any one {who} can change.")
    factor = _odds_factor(eps)
    if factor.startswith("more"):
        factor = f", {factor}"
    elif not factor.startswith("\u2248"):
        factor = f" \u2248 {factor}"
    else:
        factor = f" {factor}"
    text = (f"This bound protects individuals very weakly: an epsilon above "
            f"{_param(WEAK_EPSILON)} allows an attacker's odds about any one {who} to change by "
            f"a factor of e^{_eps(eps)}{factor}")
    if eps >= 50.0:
        text += ", which is no meaningful protection"
    return text + "."


def _statement_paragraphs(a: dict) -> list[tuple[str, str]]:
    """(heading, text) pairs of the plain-language statement."""
    p, q, u = a["privacy"], a["queries"], a["utility"]
    s = p["sanitized"]
    knn = _samples_records(a)
    short, phrase, relation, other = _RELATION_TEXT[p["neighbouring_relation"]]
    delta = _delta(p["delta"])
    ledger_off = _LEDGER_OFF if p.get("ledger_enforced") is False else ""
    paras = []
    # Seeded noise leads (the statement of a non-private run opens by saying so), then a smoke
    # test; the report's banners put the smoke test first, on the line under the title.
    if p.get("noise_seeded") is True:
        paras.append((_SEEDED_HEAD, _SEEDED_TEXT + ledger_off))
        ledger_off = ""
    if _is_smoke_test(a):
        paras.append((_SMOKE_HEAD, _SMOKE_TEXT))
    split = ("" if knn else
             f" The teachers' split decides each {short}'s teacher from the {short} alone (a keyed "
             f"hash), so adding or removing one changes one teacher's vote.")
    paras.append(("What is protected", (
        f"This run protects the sensitive training data at the {short} level. {relation} {other}"
        f"{split}{_SAME_RELATION}" + ledger_off)))

    paras.append(("Mechanism", (
        f"{_mechanism_text(p['mechanism'])} Parameters: "
        f"{_params_text(p['mechanism'], p['params'])}; "
        + (f"no teachers: {mechanisms.get(p['mechanism']).voters_text}. {_rule_text(a)}"
           if knn else
           f"{_count(p['num_teachers'])} teachers, each trained on a disjoint part of the "
           f"sensitive data. ")
        + f"Privacy is accounted with Renyi differential privacy over {len(p['orders'])} "
        f"orders and converted to (\u03b5, \u03b4) with the {p['conversion']} conversion at "
        f"\u03b4 = {delta}.")))

    cal = p.get("calibration")
    if cal:
        chosen = _params_text(p["mechanism"], cal["calibrated"])
        paras.append(("Calibration", (
            f"The noise was calibrated for a target before any data was seen: {chosen}, "
            f"{cal['method']}. The realised guarantee below is at most the target "
            f"(ε = {_eps(cal['target_eps'])}); it is lower when fewer queries were answered "
            "than the calibration assumed.")))

    answered_frac = q["answered"] / q["asked"] if q["asked"] else 0.0
    queries = (
        f"The student asked {'the private records' if knn else 'the teachers'} about "
        f"{_count(q['asked'])} of "
        f"{_count(q['public_size'])} public (non-sensitive) items; {_count(q['answered'])} "
        f"({_pct(answered_frac)}) were answered and used as training labels.")
    if q["labelled_by_student"]:
        queries += (f" A further {_count(q['labelled_by_student'])} public items were labelled by "
                    f"the student itself (semi-supervised training), at no privacy cost.")
    stop = q["stop_reason"] or p["budget"]["stop_reason"]
    if stop:
        queries += f" Querying stopped early: {stop}."
    paras.append(("Queries", queries))

    weak = _weak_guarantee(a)
    if knn:
        title = mechanisms.get(p["mechanism"]).title
        paras.append(("Guarantee", (
            f"The released student satisfies (\u03b5 = {_eps(p['eps_guarantee'])}, \u03b4 = "
            f"{delta})-differential privacy with respect to {phrase} of the sensitive training "
            "data. " + (f"{weak} " if weak else "")
            + f"This bound holds for everything the run releases \u2014 the student model"
            + (", the labels it was trained on and the labelling rule's class scores of every "
               "item (label_scores.npy, post-processing of the same release)"
               if mechanisms.get(p["mechanism"]).gives_label_scores
               else " and the labels it was trained on")
            + " \u2014 whatever the data: it is "
            + mechanisms.get(p["mechanism"]).cost_text.format(asked=_count(q["asked"]))
            + f" (order \u03bb = {_param(p['order_data_independent'])})" + _prior_rounds(p)
            + ".")))
        paras.append(("No sanitized release", (
            f"{title} has no data-dependent or smooth-sensitivity analysis: its cost does not "
            f"depend on the data, so there is no sanitized epsilon and no "
            f"data-dependent epsilon to release; the guarantee above is the figure to quote.")))
    else:  # the teachers' data-dependent analysis and its sanitized release
        paras.append(("Guarantee", (
            f"The released student satisfies (\u03b5 = {_eps(p['eps_guarantee'])}, \u03b4 = {delta})"
            f"-differential privacy with respect to {phrase} of the sensitive training data. "
            + (f"{weak} " if weak else "")
            + f"This bound holds for everything the run releases \u2014 the student model, the labels "
            f"it was trained on and the sanitized epsilon below \u2014 whatever the data: it is the "
            f"data-independent cost of the {_count(q['answered'])} answers "
            f"(\u03b5 = {_eps(p['eps_data_independent'])} on its own, at order "
            f"\u03bb = {_param(p['order_data_independent'])}) composed with the cost of releasing the "
            f"sanitized epsilon.")))

        fixed = (f"The order \u03bb = {_param(s['order'])}, smoothness \u03b2 = {_param(s['beta'])} "
                 f"and noise multiplier \u03c3_ss = {_param(s['sigma_ss'])} were fixed in the "
                 f"configuration before the votes were seen")
        if s["fallback"] is None:
            sanitized = (
                f"\u03b5 = {_eps(p['eps_sanitized'])} (\u03b4 = {delta}). When the teachers agree "
                f"strongly, the data-dependent analysis of Papernot et al. (2018) charges much less "
                f"than the worst case, but it is computed from the private votes, so it is published "
                f"only after sanitization with the smooth-sensitivity (GNSS) mechanism: Gaussian noise "
                f"of standard deviation {_sig(s['noise_std'])} (smooth sensitivity "
                f"{_sig(s['smooth_sensitivity'])} \u00d7 \u03c3_ss) was added to the Renyi divergence "
                f"at order \u03bb = {_param(s['order'])}. {fixed}, and the cost of this release (Renyi "
                f"divergence {_sig(s['rdp_gnss'])} at order \u03bb) is included in the figure. It is a "
                f"private measurement of the privacy loss actually incurred on this data, not a "
                f"worst-case bound; because of the noise, a conservative reading adds two standard "
                f"deviations: \u03b5 \u2264 {_eps(s['eps_sanitized_upper_2std'])}.")
        else:
            sanitized = (
                f"\u03b5 = {_eps(p['eps_sanitized'])} (\u03b4 = {delta}). The smooth-sensitivity "
                f"release fell back to the data-independent cost at order "
                f"\u03bb = {_param(s['order'])} because {s['fallback']}; no noise was added and "
                f"nothing data-dependent is released. The release parameters (smoothness "
                f"\u03b2 = {_param(s['beta'])}, noise multiplier \u03c3_ss = {_param(s['sigma_ss'])}) "
                f"were fixed in the configuration before the votes were seen.")
        if p["eps_sanitized"] >= p["eps_guarantee"]:
            sanitized += (" Here it is not smaller than the guarantee above, which remains the figure "
                          "to quote.")
        paras.append(("Sanitized data-dependent epsilon", sanitized))

        paras.append(("Data-dependent epsilon", (
            f"\u03b5 = {_eps(p['eps_data_dependent'])} (order \u03bb = {_param(p['order'])}) "
            f"\u2014 {NOT_PRIVATE}. It is computed directly from the private teacher votes, so "
            f"publishing it would itself leak information about the sensitive data; it is shown for "
            f"tuning and for checking the sanitized figure only. The vote-margin histogram and the "
            f"data-dependent curves in the plots are likewise internal ({NOT_PRIVATE}): they are "
            f"derived from the private votes.")))

    paras.append(("Utility", (
        f"The student's accuracy is {_pct(u['student_accuracy'])} on "
        f"{_count(u['evaluation_size'])} held-out evaluation items "
        + ("(no teachers)." if u["teacher_mean_accuracy"] is None else
           f"(teachers: {_pct(u['teacher_mean_accuracy'])} on average; the noiseless plurality "
           f"vote of all teachers: {_pct(u['plurality_vote_accuracy'])}).")
        + ("" if "student_alone_accuracy" not in u else
           f" The released model is the student times its labelling rule (their class "
           f"probabilities multiplied: post-processing of the one release and of public data, no "
           f"further privacy cost); the student alone: {_pct(u['student_alone_accuracy'])}."))))

    ledger = p["ledger"]
    if ledger is not None:
        text = (f"The privacy ledger ({ledger['path']}) records "
                f"\u03b5 = {_eps(ledger['spent_eps'])} spent on dataset {ledger['dataset']} over "
                f"{_count(ledger['runs'])} run(s) ({_count(ledger['events'])} events), this run "
                f"included.")
        if ledger["budget_eps"] is not None:
            text += f" The dataset's budget is \u03b5 = {_eps(ledger['budget_eps'])}"
            if ledger["budget_delta"] is not None:
                text += f" at \u03b4 = {_delta(ledger['budget_delta'])}"
            if ledger["remaining_eps"] is not None:
                text += f"; \u03b5 = {_eps(ledger['remaining_eps'])} remains"
            text += "."
        paras.append(("Cumulative spend", text))
    changes = p.get("budget_changes") or []
    if changes:
        listed = "; ".join(
            f"at {c['time_utc']}, from {_budget_text(c['old_eps'], c['old_delta'])} to "
            f"{_budget_text(c['new_eps'], c['new_delta'])}" for c in changes)
        paras.append(("Budget changes", (
            f"The dataset's privacy budget was changed {_count(len(changes))} time(s) in the "
            f"ledger: {listed}. A budget raised after spending no longer bounds the total "
            f"privacy loss of the dataset by the original figure.")))
    return paras


def _budget_text(eps: float | None, delta: float | None) -> str:
    if eps is None:
        return "no budget"
    text = f"\u03b5 = {_eps(eps)}"
    return text if delta is None else f"{text}, \u03b4 = {_delta(delta)}"


def _budget_raised(change: dict) -> bool:
    """The change loosened an existing budget (a larger epsilon or delta, or none at all)."""
    if change["old_eps"] is None:
        return False  # a first budget: nothing was promised before
    looser_eps = change["new_eps"] is None or change["new_eps"] > change["old_eps"]
    old_delta, new_delta = change["old_delta"], change["new_delta"]
    looser_delta = old_delta is not None and (new_delta is None or new_delta > old_delta)
    return looser_eps or looser_delta


def plain_language_statement(analysis: dict) -> str:
    """The plain-language privacy statement of a (validated) analysis, as plain text paragraphs
    separated by blank lines. The data-dependent epsilon is marked :data:`NOT_PRIVATE`."""
    return "\n\n".join(f"{head}: {text}" for head, text in _statement_paragraphs(analysis))


def _utility_warnings(a: dict) -> list[str]:
    """The utility warnings of ``analysis.json`` (:func:`pate.run_analysis.utility_warnings`)."""
    return list(a["utility"].get("warnings") or [])


def _warnings(a: dict) -> list[str]:
    p, q = a["privacy"], a["queries"]
    out = _utility_warnings(a)
    if p.get("noise_seeded") is True:
        out.append("The aggregator's noise was seeded by the user: the run is reproducible and NOT "
                   "differentially private (anyone with the seed can remove the noise). Do not "
                   "publish its outputs; rerun with secure noise.")
    if _is_smoke_test(a):
        out.append("This run is a smoke test ([run] smoke_test = true): it only checks that the "
                   "pipeline works, and its privacy figures are not a meaningful guarantee. Do not "
                   "quote or publish them.")
    weak = _weak_guarantee(a)
    if weak:
        out.append(f"The guarantee \u03b5 = {_eps(p['eps_guarantee'])} is above "
                   f"{_param(WEAK_EPSILON)}. {weak} Quote it only with this caveat; answer fewer "
                   f"queries or add more noise for a stronger guarantee.")
    if p.get("ledger_enforced") is False:
        out.append("The privacy ledger was off: no budget was enforced across runs on this data, "
                   "and this run's spend was not recorded for later runs.")
    raised = [c for c in p.get("budget_changes") or [] if _budget_raised(c)]
    if raised:
        out.append(f"The dataset's budget was raised {_count(len(raised))} time(s) (see Budget "
                   f"changes): the original budget no longer bounds the total privacy loss.")
    orders = p["orders"]
    lo, hi = min(orders), max(orders)
    for key in ("order", "order_data_independent"):
        if p[key] in (lo, hi) and len(orders) > 1:
            out.append(f"privacy.{key} = {_param(p[key])} is at the edge of the order grid "
                       f"[{_param(lo)}, {_param(hi)}]: the best order may lie outside it; widen "
                       f"the orders in the config for a tighter (never looser) epsilon.")
    if p["eps_guarantee"] < p["eps_data_independent"] * (1 - 1e-9):
        out.append(f"privacy.eps_guarantee ({_eps(p['eps_guarantee'])}) is smaller than the "
                   f"data-independent epsilon of the answers alone "
                   f"({_eps(p['eps_data_independent'])}), which composition cannot give: check "
                   f"the analysis before quoting it.")
    if _samples_records(a):
        pass  # no sanitized release at all (the statement says so); no teachers
    elif p["sanitized"]["fallback"] is not None:
        out.append(f"The sanitized epsilon fell back to the data-independent one: "
                   f"{p['sanitized']['fallback']}.")
    elif p["eps_sanitized"] >= p["eps_data_independent"]:
        out.append(f"The sanitized epsilon ({_eps(p['eps_sanitized'])}) is not smaller than the "
                   f"data-independent epsilon of the answers ({_eps(p['eps_data_independent'])}): "
                   f"on this run the data-dependent analysis saves less than its release costs. "
                   f"Publishing only the data-independent figure, without the sanitized one, gives "
                   f"the stronger guarantee (\u03b5 = {_eps(p['eps_data_independent'])}).")
    if not _samples_records(a) and p["delta"] >= 1.0 / p["num_teachers"]:
        out.append(f"\u03b4 = {_delta(p['delta'])} is at least 1/{p['num_teachers']} (one over the "
                   f"number of teachers, a lower bound on the number of sensitive records): a "
                   f"\u03b4 this large allows leaking whole records; choose \u03b4 well below "
                   f"1/(number of sensitive records).")
    if q["answered"] == 0:
        out.append("No query was answered: the student learned nothing from the teachers.")
    if p["budget"]["basis"] == "data-dependent" and (p["budget"]["stop_reason"] or q["stop_reason"]):
        out.append("Querying stopped on a budget checked against the data-dependent epsilon, "
                   "which is not private: when to stop then depends on the private votes in a way "
                   "the guarantee above does not account for. Use a data-independent budget for "
                   "runs whose numbers will be published.")
    ledger = p["ledger"]
    if ledger is not None and ledger["remaining_eps"] is not None and ledger["remaining_eps"] < 0:
        out.append(f"The ledger's budget for dataset {ledger['dataset']} is overspent "
                   f"(remaining \u03b5 = {_eps(ledger['remaining_eps'])}).")
    return out


def _execution_text(report: dict) -> str | None:
    """Where the teachers trained: the backend and its resources (``execution``, from the teachers
    stage's summary; else the config's ``[cluster]`` table; None when neither is known)."""
    ex = report.get("execution")
    cluster = (report.get("config") or {}).get("cluster") or {}
    if not isinstance(ex, dict):
        if not cluster:
            return None
        ex = {"backend": cluster.get("backend", "local")}
    same = ("The backend does not change what the teachers predict, hence neither the votes nor "
            "any privacy figure.")
    if ex.get("backend") == "ray":
        total = ex.get("cluster") or {}
        return (f"**Where the teachers trained:** on Ray (address {ex.get('address', '?')}; a "
                f"cluster of {total.get('CPU', 0):g} CPUs and {total.get('GPU', 0):g} GPUs on "
                f"{total.get('nodes', '?')} node(s); {ex.get('cpus_per_task', '?')} CPU(s) and "
                f"{ex.get('gpus_per_task', 0):g} GPU(s) per task, {ex.get('teachers_per_task', '?')} "
                f"teachers per task, {ex.get('num_chunks', '?')} chunks, up to "
                f"{ex.get('max_retries', '?')} retries of a chunk whose worker was lost). {same}")
    threads = ex.get("torch_threads")
    detail = f" with {threads} torch thread(s)" if threads is not None else ""
    return f"**Where the teachers trained:** locally (backend \"local\"){detail}. {same}"


def _stage_execution(run_dir: Path) -> dict | None:
    """``execution`` of ``stages/teachers.json`` (where the teachers trained), if recorded."""
    try:
        info = json.loads((run_dir / "stages" / "teachers.json").read_text())
    except (OSError, ValueError):
        return None
    ex = info.get("execution") if isinstance(info, dict) else None
    return ex if isinstance(ex, dict) else None


def build_report(analysis: dict) -> dict:
    """The content of ``report.json``: the (validated) analysis plus ``statement`` (the
    plain-language text), ``plots`` (name -> path relative to the run directory) and
    ``warnings`` (a list of strings). Pure: writes nothing."""
    report = json.loads(json.dumps(analysis))  # a deep copy, JSON types only
    report["statement"] = plain_language_statement(analysis)
    report["plots"] = {name: f"{PLOTS_DIR}/{name}.png" for name in PLOT_NAMES}
    report["warnings"] = _warnings(analysis)
    return report


# ------------------------------------------------------------------------------ documents
# A report is a list of blocks rendered to Markdown and to HTML by the same code:
# ("h1"|"h2"|"p"|"note", text), ("ul", [text]), ("table", header, rows), ("code", text),
# ("img", name, caption, internal). Text may use **bold** only.

_CAPTIONS = {
    "epsilon_vs_answered": (
        "Epsilon (at the run's \u03b4) against the number of answered queries: data-independent "
        "(publishable) and data-dependent (internal).", True),
    "vote_margins": (
        "Histogram of vote margins (top-1 minus top-2 vote count) over the queries asked.", True),
    "rdp_per_order": (
        "Renyi-DP of the whole run at each order (log scale), data-independent and "
        "data-dependent (internal), with the orders chosen for the conversion marked.", True),
    "confusion_matrix": (
        "Confusion matrix of the student on the evaluation split (rows: true class, "
        "columns: predicted class).", False),
    "epsilon_vs_answered_public": (
        "Data-independent epsilon (at the run's \u03b4) against the number of answered queries, "
        "with the guarantee and the sanitized epsilon that the run releases; no data-dependent "
        "curve.", False),
    "rdp_per_order_public": (
        "Data-independent Renyi-DP of the run's queries at each order (log scale), with the "
        "order chosen for the conversion marked; no data-dependent curve.", False),
}


def _class_names(u: dict) -> list[str]:
    names = u["class_names"]
    return list(names) if names is not None else [str(i) for i in range(len(u["confusion_matrix"]))]


def _at_a_glance(report: dict) -> list[tuple]:
    """The report's first section: what the run is worth, in plain words, with its utility
    warnings (each saying what to change)."""
    q, u = report["queries"], report["utility"]
    lines = [f"**Student** (the released model): {_pct(u['student_accuracy'])} on "
             f"{_count(u['evaluation_size'])} evaluation items"
             + ("" if "majority_class_rate" not in u else
                f"; always answering the majority class gives {_pct(u['majority_class_rate'])}, "
                f"guessing {_pct(u['chance_rate'])}") + "."]
    if u["teacher_mean_accuracy"] is not None:
        lines.append(f"**Teachers:** {_pct(u['teacher_mean_accuracy'])} each on average; their "
                     f"noiseless plurality vote {_pct(u['plurality_vote_accuracy'])}.")
    answered = u.get("answered_labels", q["answered"])
    text = f"**Labels:** {_count(answered)} of {_count(q['asked'])} queries answered"
    if u["label_accuracy_answered"] is not None:
        text += f", {_pct(u['label_accuracy_answered'])} of them right (benchmark-only figure)"
    agreement = u.get("answered_plurality_agreement")
    if agreement is not None:
        text += (f"; {_pct(agreement)} agree with the teachers' plurality vote "
                 f"(**{NOT_PRIVATE}**: computed from the private votes)")
    lines.append(text + ".")
    if u.get("student_steps") is not None:
        lines.append(f"**Student training:** {_count(u['student_steps'])} optimiser steps.")
    blocks: list[tuple] = [("h2", "What you get"), ("ul", lines)]
    warnings = _utility_warnings(report)
    if warnings:
        blocks.append(("p", "**Utility warnings** (what to change):"))
        blocks.append(("ul", warnings))
    elif "warnings" in u:
        blocks.append(("p", "No utility warning: the student is well above chance and close to "
                            "its labels and the teachers' vote."))
    return blocks


def _blocks(report: dict) -> list[tuple]:
    p, q, u = report["privacy"], report["queries"], report["utility"]
    s, comp = p["sanitized"], p["composition"]
    run = report["run"]
    delta = _delta(p["delta"])
    internal = f"**{NOT_PRIVATE}**"
    b: list[tuple] = [
        ("h1", f"Privacy report: {run['name']}"),
        *([("p", _SMOKE_BANNER)] if _is_smoke_test(report) else []),
        *([("p", "**This run is NOT differentially private: its noise was seeded by the user. Do "
                 "not publish its outputs (see the privacy statement).**")]
          if p.get("noise_seeded") is True else []),
        ("note", f"Run directory {run['run_dir']}, created {run['created']}, pate-learn "
                 f"{run['pate_learn_version']}. Generated from {ANALYSIS_FILE}; regenerate with "
                 f"`pate report RUN_DIR`. Figures marked INTERNAL are computed from the private "
                 f"teacher votes: share this report with auditors under confidentiality and "
                 f"publish only the figures marked publishable."),
    ]
    b.extend(_at_a_glance(report))
    b.append(("h2", "Privacy statement"))
    weak = _weak_guarantee(report)
    for head, text in _statement_paragraphs(report):
        text = text.replace(NOT_PRIVATE, internal)
        if weak:
            text = text.replace(weak, f"**{weak}**")
        b.append(("p", f"**{head}:** {text}"))
    utility_warnings = _utility_warnings(report)
    others = [w for w in report["warnings"] if w not in utility_warnings]
    if others:
        b.append(("h2", "Warnings"))
        b.append(("ul", others))

    b.append(("h2", "Privacy numbers"))
    knn = _samples_records(report)
    rows = [
        ["Guarantee \u03b5 (answers + release, data-independent)", _eps(p["eps_guarantee"]), "yes"],
        ["Sanitized data-dependent \u03b5 (release cost included)", _eps(p["eps_sanitized"]), "yes"],
        ["Sanitized \u03b5 + 2 noise std (conservative)", _eps(s["eps_sanitized_upper_2std"]), "yes"],
        [f"Data-independent \u03b5 of the answers (order {_param(p['order_data_independent'])})",
         _eps(p["eps_data_independent"]), "yes"],
        [f"Data-dependent \u03b5 (order {_param(p['order'])})", _eps(p["eps_data_dependent"]),
         "**NO \u2014 INTERNAL**"],
        ["\u03b4", delta, "yes"],
        ["Neighbouring relation",
         f"{_RELATION_TEXT[p['neighbouring_relation']][0]}-level, added or removed", "yes"],
        ["Mechanism", f"{mechanisms.get(p['mechanism']).title} "
                      f"({_params_text(p['mechanism'], p['params'])})", "yes"],
        ["Teachers", _count(p["num_teachers"]), "yes"],
        ["Sanitization (fixed in advance)",
         f"\u03bb = {_param(s['order'])}, \u03b2 = {_param(s['beta'])}, "
         f"\u03c3_ss = {_param(s['sigma_ss'])}; noise std {_sig(s['noise_std'])}, "
         f"release RDP {_sig(s['rdp_gnss'])}", "yes"],
        ["Conversion, orders", f"{p['conversion']}, {len(p['orders'])} orders in "
                               f"[{_param(min(p['orders']))}, {_param(max(p['orders']))}]", "yes"],
    ]
    if knn:  # no teachers, no sanitized release, no data-dependent analysis
        dropped = ("Sanitized", "Data-dependent", "Teachers")
        rows = [r for r in rows if not r[0].startswith(dropped)]
        rows[0][0] = "Guarantee \u03b5 (everything released, data-independent)"
        rows.append(["Sanitized release", "none: no data-dependent analysis for "
                     f"{mechanisms.get(p['mechanism']).title}", "yes"])
    b.append(("table", ["Quantity", "Value", "Publishable"], rows))

    b.append(("h2", "Why Renyi differential privacy"))
    rdp_eps = p["eps_data_independent"]
    best_classic = min(comp["basic_eps"], comp["advanced_eps"])
    if best_classic > rdp_eps > 0:
        verdict = (f"Renyi-DP accounting is {best_classic / rdp_eps:.1f}\u00d7 tighter than the "
                   f"better of the two, for the same mechanism and the same noise.")
    else:
        verdict = ("Here classic composition is not looser than Renyi-DP accounting (few queries); "
                   "the report quotes the Renyi-DP figure, which is never an understatement.")
    once = mechanisms.get(p["mechanism"]).releases_once
    b.append(("p", (
        f"One release labels all {_count(q['asked'])} queries asked, so nothing is composed "
        f"across queries: the release on its own is (\u03b5\u2080 = "
        f"{_eps(comp['per_query_eps'])}, \u03b4\u2080 = {_delta(comp['per_query_delta'])})-"
        f"differentially private, and the classic bounds below are for that one mechanism. "
        f"Renyi-DP accounting (Mironov 2017), used for this report, gives \u03b5 = "
        f"{_eps(rdp_eps)} at \u03b4 = {delta}. {verdict}") if once else (
        f"Each query on its own is (\u03b5\u2080 = {_eps(comp['per_query_eps'])}, "
        f"\u03b4\u2080 = {_delta(comp['per_query_delta'])})-differentially private. Composing "
        f"{_count(comp['queries_composed'])} such queries with basic composition (the epsilons add "
        f"up) gives \u03b5 = {_eps(comp['basic_eps'])}; advanced composition (Dwork, Rothblum and "
        f"Vadhan 2010) gives \u03b5 = {_eps(comp['advanced_eps'])} at \u03b4 = "
        f"{_delta(comp['delta'])}. Renyi-DP accounting (Mironov 2017), used for this report, tracks "
        f"the Gaussian noise exactly across queries and gives \u03b5 = {_eps(rdp_eps)} at "
        f"\u03b4 = {delta} (data-independent, before any data-dependent saving). {verdict}")))
    b.append(("table", ["Accounting", "\u03b5", "\u03b4"], [
        ["Basic composition", _eps(comp["basic_eps"]),
         f"{_count(comp['queries_composed'])} \u00d7 \u03b4\u2080"],
        ["Advanced composition", _eps(comp["advanced_eps"]), _delta(comp["delta"])],
        ["Renyi DP (data-independent)", _eps(rdp_eps), delta],
    ]))

    b.append(("h2", "Queries and budget"))
    budget = p["budget"]
    b.append(("table", ["Item", "Value"], [
        ["Public items available", _count(q["public_size"])],
        ["Queries asked", _count(q["asked"])],
        ["Queries answered", f"{_count(q['answered'])} "
                             f"({_pct(q['answered'] / q['asked'] if q['asked'] else 0.0)})"],
        ["Labelled by the student (no privacy cost)", _count(q["labelled_by_student"])],
        ["Run budget", f"\u03b5 = {_eps(budget['eps'])}, \u03b4 = {_delta(budget['delta'])} "
                       f"({budget['basis']})"],
        ["Stop reason", q["stop_reason"] or budget["stop_reason"] or "all queries asked"],
    ]))
    ledger = p["ledger"]
    if ledger is not None:
        b.append(("h2", "Privacy ledger (cumulative spend on this dataset)"))
        b.append(("table", ["Item", "Value"], [
            ["Ledger", ledger["path"]], ["Dataset", ledger["dataset"]],
            ["Spent \u03b5", _eps(ledger["spent_eps"])],
            ["Budget \u03b5", "none" if ledger["budget_eps"] is None else _eps(ledger["budget_eps"])],
            ["Budget \u03b4",
             "none" if ledger["budget_delta"] is None else _delta(ledger["budget_delta"])],
            ["Remaining \u03b5",
             "n/a" if ledger["remaining_eps"] is None else _eps(ledger["remaining_eps"])],
            ["Runs / events", f"{_count(ledger['runs'])} / {_count(ledger['events'])}"],
        ]))

    changes = p.get("budget_changes") or []
    if changes:
        b.append(("h2", "Budget changes (privacy ledger)"))
        b.append(("table", ["Time (UTC)", "Old \u03b5", "Old \u03b4", "New \u03b5", "New \u03b4"], [
            [c["time_utc"],
             *("none" if c[k] is None else (_eps(c[k]) if k.endswith("eps") else _delta(c[k]))
               for k in ("old_eps", "old_delta", "new_eps", "new_delta"))]
            for c in changes]))

    b.append(("h2", "Utility"))
    utility_rows = [
        [f"Student (evaluation split, {_count(u['evaluation_size'])} items)"
         + ("" if "student_alone_accuracy" not in u else ", times its labelling rule"),
         _pct(u["student_accuracy"])],
        ["Teachers, mean \u00b1 std", f"{_pct(u['teacher_mean_accuracy'])} \u00b1 "
                                      f"{_pct(u['teacher_accuracy_std'])}"],
        ["Plurality vote of all teachers (no noise)", _pct(u["plurality_vote_accuracy"])],
        ["Labels of the answered queries", _pct(u["label_accuracy_answered"])],
    ]
    if u["teacher_mean_accuracy"] is None:  # no teachers (Private-kNN)
        utility_rows = [utility_rows[0], utility_rows[-1]]
    if "student_alone_accuracy" in u:
        utility_rows.insert(1, ["Student alone", _pct(u["student_alone_accuracy"])])
    b.append(("table", ["Model", "Accuracy"], utility_rows))
    note = u["label_accuracy_note"]
    if u["label_accuracy_answered"] is None:
        b.append(("p", f"Label accuracy of the answered queries is not available: {note}"))
    else:
        b.append(("p", f"**Label accuracy is a benchmark-only figure:** {note}"))
    where = None if _samples_records(report) else _execution_text(report)
    if where:
        b.append(("p", where))
    names = _class_names(u)
    b.append(("table", ["Class", "Student accuracy"],
              [[n, "n/a (no evaluation items)" if acc is None else _pct(acc)]
               for n, acc in zip(names, u["student_per_class_accuracy"])]))

    b.append(("h2", "Plots: publishable"))
    b.append(("p", "These plots show only data-independent figures and released values (no "
                   "figure computed from the private votes): they **may be published**."))
    for name in PUBLIC_PLOT_NAMES:
        b.append(("img", name, _CAPTIONS[name][0], False))
    b.append(("h2", "Plots: INTERNAL (do not publish)"))
    b.append(("p", f"These plots draw data-dependent curves or vote margins computed from the "
                   f"private teacher votes: {internal}. Publish the versions above instead."))
    for name in INTERNAL_PLOT_NAMES:
        caption = _CAPTIONS[name][0]
        if name == "vote_margins":
            note = report["vote_margins"]["note"].strip().rstrip(".")
            if note:
                caption += f" Note: {note}."
        b.append(("img", name, caption, True))

    b.append(("h2", "Effective configuration"))
    b.append(("code", json.dumps(report["config"], indent=2, sort_keys=True)))
    return b


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict) -> str:
    """``report.md``: the report (from :func:`build_report`) as Markdown; plots are linked
    relative to the run directory."""
    out: list[str] = []
    for block in _blocks(report):
        kind = block[0]
        if kind == "h1":
            out.append(f"# {block[1]}")
        elif kind == "h2":
            out.append(f"## {block[1]}")
        elif kind == "p":
            out.append(block[1])
        elif kind == "note":
            out.append(f"*{block[1]}*")
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            header, rows = block[1], block[2]
            lines = ["| " + " | ".join(map(_md_cell, header)) + " |",
                     "|" + "|".join("---" for _ in header) + "|"]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "code":
            out.append(f"```json\n{block[1]}\n```")
        elif kind == "img":
            _, name, caption, is_internal = block
            tag = f"**INTERNAL \u2014 {NOT_PRIVATE}.** " if is_internal else "Publishable. "
            out.append(f"![{name}]({report['plots'][name]})\n\n{tag}{caption}")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    escaped = html.escape(str(text), quote=False)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:60rem;margin:2rem auto;
padding:0 1rem;line-height:1.5;color:#1b1f24}
h1{border-bottom:2px solid #1b1f24;padding-bottom:.3rem}
h2{margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #bbb;padding:.3rem .6rem;
text-align:left;vertical-align:top}th{background:#f0f2f4}
.note{color:#555;font-style:italic}.warnings{background:#fff4e5;border-left:4px solid #e08a00;
padding:.5rem 1rem .5rem 2rem}figure{margin:1.5rem 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.92rem;color:#333}.internal{color:#fff;background:#b00020;font-weight:bold;
padding:.05rem .4rem;border-radius:3px}.public{color:#fff;background:#2e7d32;padding:.05rem .4rem;
border-radius:3px}pre{background:#f6f8fa;padding:.8rem;overflow:auto;font-size:.85rem}
strong{color:#000}
@media print{figure{page-break-inside:avoid}}
""".strip()


def render_html(report: dict, images: dict[str, bytes]) -> str:
    """``report.html``: one self-contained page (inline CSS, plots embedded as base64 PNG, no
    external resource) that renders offline. ``images`` maps each plot name to its PNG bytes."""
    missing = [name for name in PLOT_NAMES if name not in images]
    if missing:
        raise ValueError(f"images is missing the plot(s) {', '.join(missing)}")
    body: list[str] = []
    title = f"Privacy report: {report['run']['name']}"
    for block in _blocks(report):
        kind = block[0]
        if kind == "h1":
            body.append(f"<h1>{_inline_html(block[1])}</h1>")
        elif kind == "h2":
            body.append(f"<h2>{_inline_html(block[1])}</h2>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "note":
            body.append(f'<p class="note">{_inline_html(block[1])}</p>')
        elif kind == "ul":
            items = "".join(f"<li>{_inline_html(item)}</li>" for item in block[1])
            body.append(f'<ul class="warnings">{items}</ul>')
        elif kind == "table":
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "code":
            body.append(f"<pre><code>{html.escape(block[1], quote=False)}</code></pre>")
        elif kind == "img":
            _, name, caption, is_internal = block
            data = base64.b64encode(images[name]).decode("ascii")
            badge = (f'<span class="internal">INTERNAL \u2014 {html.escape(NOT_PRIVATE)}</span> '
                     if is_internal else '<span class="public">Publishable</span> ')
            body.append(f'<figure id="{name}"><img alt="{name}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{badge}{_inline_html(caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# ------------------------------------------------------------------------------ plots

def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _internal_stamp(ax, title: str) -> None:
    """The title, with a red subtitle saying the plot holds non-private figures."""
    ax.set_title(title, pad=16)
    ax.text(0.5, 1.01, "contains NOT PRIVATE data-dependent figures \u2014 internal only",
            transform=ax.transAxes, ha="center", va="bottom", fontsize=8, color="#b00020")


def _rdp_axes(ax, plotted: list, ylabel: str) -> None:
    """Log-scaled order axis (and value axis where every plotted value is positive), labels,
    grid and legend of an RDP-per-order plot."""
    ax.set_xscale("log")
    values = [v for v in plotted if math.isfinite(v)]
    if values and min(values) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("Renyi order \u03bb (log scale)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")


def _plot_epsilon(a: dict):
    from matplotlib.figure import Figure

    p, c = a["privacy"], a["curves"]
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    curves = [(c["eps_data_independent"], "data-independent (publishable)", {"color": "#1f5fa8"}),
              (c["eps_data_dependent"], "data-dependent (NOT PRIVATE)",
               {"color": "#b00020", "ls": "--"})]
    _epsilon_axes(ax, c["answered_count"], curves, fallback_x=a["queries"]["answered"],
                  sanitized=(p["eps_sanitized"], "sanitized"), guarantee=p["eps_guarantee"],
                  delta=p["delta"])
    _internal_stamp(ax, "Privacy cost against answered queries")
    return fig


def _epsilon_axes(ax, answered_count, curves, *, fallback_x, sanitized, guarantee, delta) -> None:
    """epsilon against answered queries: ``curves`` ((values, label, style)), the sanitized and
    guarantee markers at the end. Shared by the INTERNAL and the publishable plot: each passes
    only what it may show."""
    if answered_count:
        for values, label, style in curves:
            ax.plot(answered_count, values, lw=2, label=label, **style)
        x_end = answered_count[-1]
    else:
        x_end = fallback_x
        ax.text(0.5, 0.5, "no curve recorded", transform=ax.transAxes, ha="center")
    value, label = sanitized
    ax.scatter([x_end], [value], marker="D", color="#2e7d32", zorder=3,
               label=f"{label} \u03b5 = {_eps(value)}")
    ax.scatter([x_end], [guarantee], marker="*", s=110, color="#1b1f24", zorder=3,
               label=f"guarantee \u03b5 = {_eps(guarantee)}")
    ax.set_xlabel("answered queries")
    ax.set_ylabel(f"\u03b5 at \u03b4 = {_delta(delta)}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def _plot_margins(a: dict):
    from matplotlib.figure import Figure

    vm = a["vote_margins"]
    edges, counts = vm["bin_edges"], vm["counts"]
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    if counts:
        widths = [hi - lo for lo, hi in zip(edges[:-1], edges[1:])]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color="#6d6875", edgecolor="white")
    ax.set_xlabel("vote margin (top-1 minus top-2 vote count)")
    ax.set_ylabel("queries")
    ax.set_title("INTERNAL \u2014 derived from private votes, do not publish", color="#b00020",
                 fontsize=11, fontweight="bold")
    ax.grid(alpha=0.3, axis="y")
    return fig


def _plot_rdp(a: dict):
    from matplotlib.figure import Figure

    p = a["privacy"]
    orders = p["orders"]
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    ax.plot(orders, p["rdp_data_independent"], color="#1f5fa8", lw=2, marker=".", ms=3,
            label="data-independent (publishable)")
    ax.plot(orders, p["rdp_data_dependent"], color="#b00020", lw=2, ls="--", marker=".", ms=3,
            label="data-dependent (NOT PRIVATE)")
    for order, series, color, label in (
            (p["order_data_independent"], p["rdp_data_independent"], "#1f5fa8", "data-independent"),
            (p["order"], p["rdp_data_dependent"], "#b00020", "data-dependent")):
        ax.axvline(order, color=color, lw=1, ls=":")
        if order in orders:
            ax.scatter([order], [series[orders.index(order)]], color=color, s=40, zorder=3,
                       edgecolor="black", label=f"chosen order {label}: \u03bb = {_param(order)}")
    _rdp_axes(ax, p["rdp_data_independent"] + p["rdp_data_dependent"],
              "RDP of the run at order \u03bb")
    _internal_stamp(ax, "Renyi-DP per order")
    return fig


def _plot_confusion(a: dict):
    from matplotlib.figure import Figure

    u = a["utility"]
    cm = u["confusion_matrix"]
    names = _class_names(u)
    m = len(cm)
    size = min(3.5 + 0.4 * m, 12.0)
    fig = Figure(figsize=(size + 1.2, size))
    ax = fig.add_subplot()
    image = ax.imshow(cm, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(m))
    ax.set_yticks(range(m))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"Student on the evaluation split (accuracy {_pct(u['student_accuracy'])})")
    peak = max((v for row in cm for v in row), default=0)
    if m <= 30:
        for i, row in enumerate(cm):
            for j, value in enumerate(row):
                ax.text(j, i, str(value), ha="center", va="center", fontsize=7 if m > 12 else 8,
                        color="white" if peak and value > peak / 2 else "black")
    return fig


def publishable_plot_data(analysis: dict) -> dict:
    """The only input of the publishable plots: the figures of a (validated) analysis that may
    be published, copied out of it. Keys: ``delta``; ``answered_count`` and
    ``eps_data_independent`` (the data-independent curve, from ``curves``); ``answered``;
    ``eps_guarantee`` and ``eps_sanitized`` (the released epsilons); ``orders``,
    ``rdp_data_independent`` and ``order_data_independent`` (from ``privacy``). Nothing computed
    from the private votes without sanitization (the data-dependent epsilon, order, RDP or
    curve, the vote margins) is in it."""
    p, c = analysis["privacy"], analysis["curves"]
    return {
        "delta": p["delta"],
        "answered_count": list(c["answered_count"]),
        "eps_data_independent": list(c["eps_data_independent"]),
        "answered": analysis["queries"]["answered"],
        "eps_guarantee": p["eps_guarantee"],
        "eps_sanitized": p["eps_sanitized"],
        "orders": list(p["orders"]),
        "rdp_data_independent": list(p["rdp_data_independent"]),
        "order_data_independent": p["order_data_independent"],
    }


def _public_stamp(ax, title: str, shows: str) -> None:
    """The title, with a green subtitle saying what the plot shows and that it may be published."""
    ax.set_title(f"{title} \u2014 publishable", pad=16)
    ax.text(0.5, 1.01, f"{shows} only \u2014 may be published", transform=ax.transAxes,
            ha="center", va="bottom", fontsize=8, color="#2e7d32")


def _plot_epsilon_public(view: dict):
    """The publishable epsilon plot, from :func:`publishable_plot_data` only."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    _epsilon_axes(ax, view["answered_count"],
                  [(view["eps_data_independent"], "data-independent \u03b5 of the answers",
                    {"color": "#1f5fa8"})],
                  fallback_x=view["answered"],
                  sanitized=(view["eps_sanitized"], "sanitized (released)"),
                  guarantee=view["eps_guarantee"], delta=view["delta"])
    _public_stamp(ax, "Privacy cost against answered queries",
                  "data-independent curve and released epsilons")
    return fig


def _plot_rdp_public(view: dict):
    """The publishable Renyi-DP plot, from :func:`publishable_plot_data` only."""
    from matplotlib.figure import Figure

    orders, series = view["orders"], view["rdp_data_independent"]
    order = view["order_data_independent"]
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    ax.plot(orders, series, color="#1f5fa8", lw=2, marker=".", ms=3,
            label="data-independent RDP of the queries")
    ax.axvline(order, color="#1f5fa8", lw=1, ls=":")
    if order in orders:
        ax.scatter([order], [series[orders.index(order)]], color="#1f5fa8", s=40, zorder=3,
                   edgecolor="black", label=f"chosen order: \u03bb = {_param(order)}")
    _rdp_axes(ax, series, "data-independent RDP at order \u03bb")
    _public_stamp(ax, "Renyi-DP per order", "data-independent figures")
    return fig


_PLOTTERS = {"epsilon_vs_answered": _plot_epsilon, "vote_margins": _plot_margins,
             "rdp_per_order": _plot_rdp, "confusion_matrix": _plot_confusion}
# The publishable plots see only publishable_plot_data(analysis), never the analysis itself.
_PUBLIC_PLOTTERS = {"epsilon_vs_answered_public": _plot_epsilon_public,
                    "rdp_per_order_public": _plot_rdp_public}


def render_plots(analysis: dict) -> dict[str, bytes]:
    """The plots of a (validated) analysis as PNG bytes, keyed by :data:`PLOT_NAMES`. The
    publishable versions of the epsilon and RDP plots are drawn from
    :func:`publishable_plot_data` alone. Uses matplotlib's Agg canvas directly (no pyplot, no
    global backend change)."""
    view = publishable_plot_data(analysis)
    images = {name: _png(plot(analysis)) for name, plot in _PLOTTERS.items()}
    images.update({name: _png(plot(view)) for name, plot in _PUBLIC_PLOTTERS.items()})
    return {name: images[name] for name in PLOT_NAMES}


# ------------------------------------------------------------------------------ writing

def _file_mode() -> int:
    """rw for whoever the umask allows (mkstemp's files are 0600, too tight for a report)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _stage(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a temporary file beside ``path``; the caller os.replace()s it. A full
    disk raises ``RunDirError`` naming ``path`` (:func:`pate.io.naming_write_errors`)."""
    with naming_write_errors(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return Path(tmp)


def write_report(run_dir: str | os.PathLike) -> dict:
    """Generate the privacy report of a run from ``<run_dir>/analysis.json``.

    Writes ``report.json`` (the analysis plus ``statement``, ``plots``, ``warnings`` and, when
    the teachers stage recorded it, ``execution``: the backend and resources it ran on),
    ``report.md``, ``report.html`` (self-contained, renders offline) and
    ``plots/<name>.png`` for each of :data:`PLOT_NAMES`, each
    atomically (temporary file + ``os.replace``); ``report.json`` is replaced last. The input is
    validated first: a missing run directory or file raises ``FileNotFoundError``, a malformed
    file or a missing key raises ``ValueError`` naming the file and the key, and nothing is
    written. Returns the content of ``report.json``.
    """
    run_dir = Path(run_dir)
    analysis = load_analysis(run_dir)
    report = build_report(analysis)
    execution = _stage_execution(run_dir)
    if execution is not None:
        report["execution"] = execution  # the backend and its resources (docs/cluster.md)
    images = render_plots(analysis)
    documents = {
        "report.md": render_markdown(report).encode("utf-8"),
        "report.html": render_html(report, images).encode("utf-8"),
        "report.json": (json.dumps(report, indent=2) + "\n").encode("utf-8"),
    }
    plots_dir = run_dir / PLOTS_DIR
    plots_dir.mkdir(exist_ok=True)
    targets = [(run_dir / rel, images[name]) for name, rel in report["plots"].items()]
    targets += [(run_dir / name, documents[name]) for name in ("report.md", "report.html",
                                                               "report.json")]
    mode = _file_mode()
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in targets:
            staged.append((_stage(target, data, mode), target))
        for tmp, target in staged:
            with naming_write_errors(target):
                os.replace(tmp, target)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return report
