"""The input of the report: ``analysis.json`` (``format`` 1), its schema and its checks. A
malformed file raises ``InputError`` naming the file and the key before any report file is
written; the report never recomputes a privacy number."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path
from typing import Any

from pate import mechanisms
from pate.analysis.errors import InputError
from pate.run import rundir

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
        "sanitized": {
            "order": "float",
            "beta": "float",
            "sigma_ss": "float",
            "noise_std": "float",
            "rdp_gnss": "float",
            "smooth_sensitivity": "float",
            "eps_sanitized_upper_2std": "float",
            "eps_data_independent": "float",
            "fallback": "str?",
        },
        "eps_guarantee": "float",
        "composition": {
            "per_query_eps": "float",
            "per_query_delta": "float",
            "basic_eps": "float",
            "advanced_eps": "float",
            "delta": "float",
            "queries_composed": "int",
        },
        "budget": {
            "eps": "float",
            "delta": "float",
            "basis": ("data-independent", "data-dependent"),
            "stop_reason": "str?",
        },
        "ledger": (
            "?",
            {
                "path": "str",
                "dataset": "str",
                "budget_eps": "float?",
                "budget_delta": "float?",
                "spent_eps": "float",
                "remaining_eps": "float?",
                "events": "int",
                "runs": "int",
            },
        ),
    },
    "queries": {
        "public_size": "int",
        "asked": "int",
        "answered": "int",
        "labelled_by_student": "int",
        "stop_reason": "str?",
    },
    "utility": {
        "student_accuracy": "float",
        "student_per_class_accuracy": "[float?]",
        "confusion_matrix": "[[int]]",
        "class_names": "[str]?",
        # null for a run without teachers (its mechanism reads the private records)
        "teacher_mean_accuracy": "float?",
        "teacher_accuracy_std": "float?",
        "plurality_vote_accuracy": "float?",
        "label_accuracy_answered": "float?",
        "label_accuracy_note": "str",
        "evaluation_size": "int",
    },
    "curves": {
        "answered_count": "[int]",
        "eps_data_independent": "[float]",
        "eps_data_dependent": "[float]",
    },
    "vote_margins": {"bin_edges": "[float]", "counts": "[int]", "note": "str"},
}

# Optional keys of "privacy", "run" and "utility" (absent: the report says nothing about them;
# what each means: docs/publishing.md, "The keys of analysis.json").
_OPTIONAL_PRIVACY: dict[str, Any] = {
    "noise_seeded": "bool",
    "keys_seeded": "bool",
    "ledger_enforced": "bool",
    "budget_changes": "[change]",
    "calibration": "dict?",
    "prior_rounds": "dict?",
    "records": {"declared": "int", "basis": ("declared", "builtin")},
}
_OPTIONAL_RUN: dict[str, Any] = {"smoke_test": "bool"}
_OPTIONAL_UTILITY: dict[str, Any] = {
    "student_alone_accuracy": "float",
    "evaluation_public": "bool",
    "public_from_pool": "int",
    "answered_labels": "int",
    "answered_plurality_agreement": "float?",
    "answered_plurality_agreement_note": "str",
    "majority_class_rate": "float",
    "chance_rate": "float",
    "student_steps": "int?",
    "scale_warnings": "[str]",
    "preprocessing": "[str]",
    "warnings": "[str]",
    "internal_warnings": "[str]",
    # a non-private model trained on the same private rows: internal, never in PUBLIC_FIELDS
    "reference_accuracy": "float?",
}
_BUDGET_CHANGE = {
    "time_utc": "str",
    "old_eps": "float?",
    "old_delta": "float?",
    "new_eps": "float?",
    "new_delta": "float?",
}

_REGENERATE = (
    "it is not what the analysis stage wrote (edited or damaged): restore it, or "
    "start a new run directory (a finished stage is never silently rewritten)"
)


def is_int(value: Any) -> bool:
    """A JSON integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A JSON number that is not NaN (inf is allowed: an infinite epsilon overstates, never
    understates)."""
    return (is_int(value) or isinstance(value, float)) and not (
        isinstance(value, float) and math.isnan(value)
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> None:
        raise InputError(f"{self.source}: key '{key}' {message}; {_REGENERATE}")

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
        if spec == "[change]":
            if not isinstance(data, list):
                self.fail(key, f"must be a list of budget changes, got {_short(data)}")
            for i, change in enumerate(data):
                self.check(change, _BUDGET_CHANGE, f"{key}[{i}]")
        elif not _LEAVES[spec][0](data):
            self.fail(key, f"must be {_LEAVES[spec][1]}, got {_short(data)}")


def _list_of(item) -> Any:
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


# Each leaf spec: (check, what it must be).
_LEAVES: dict[str, tuple[Any, str]] = {
    "int": (is_int, "an integer"),
    "float": (is_real, "a number (not NaN)"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "dict": (lambda v: isinstance(v, dict), "a JSON object"),
    "[int]": (_list_of(is_int), "a list of integers"),
    "[[int]]": (_list_of(_list_of(is_int)), "a list of lists of integers"),
    "[float]": (_list_of(is_real), "a list of numbers (not NaN)"),
    "[float?]": (
        _list_of(lambda v: v is None or is_real(v)),
        "a list of numbers (not NaN) or nulls",
    ),
    "[str]": (_list_of(lambda v: isinstance(v, str)), "a list of strings"),
}


def validate_analysis(analysis: Any, *, source: str = rundir.ANALYSIS) -> dict:
    """``analysis`` (the parsed ``analysis.json``) unchanged, checked against
    :data:`ANALYSIS_SCHEMA` and for the consistency the report relies on (lengths, counts, delta,
    answered <= asked, the data-dependent epsilon declared not private); ``InputError`` naming
    ``source`` and the key otherwise."""
    checker = _Checker(source)
    checker.check(analysis, ANALYSIS_SCHEMA, "")
    if analysis["format"] != 1:
        checker.fail(
            "format", f"must be 1 (the format this pate-learn reads), got {analysis['format']!r}"
        )
    p = analysis["privacy"]
    if p["mechanism"] not in mechanisms.REGISTRY:
        checker.fail(
            "privacy.mechanism",
            f"must be one of "
            f"{', '.join(map(repr, mechanisms.REGISTRY))}, got "
            f"{_short(p['mechanism'])}",
        )
    for table, specs in (
        ("privacy", _OPTIONAL_PRIVACY),
        ("run", _OPTIONAL_RUN),
        ("utility", _OPTIONAL_UTILITY),
    ):
        for name, spec in specs.items():
            if name in analysis[table]:
                checker.check(analysis[table][name], spec, f"{table}.{name}")
    _check_privacy(checker, p)
    _check_queries_and_series(checker, analysis)
    _check_utility(checker, analysis["utility"])
    _check_against_config(checker, p, analysis["config"])
    return analysis


def _check_privacy(checker: _Checker, p: dict) -> None:
    """``privacy``: the data-dependent epsilon declared not private, delta, teachers, orders."""
    if p["data_dependent_is_private"] is not False:
        checker.fail(
            "privacy.data_dependent_is_private",
            "must be false: the data-dependent epsilon is computed from the private votes",
        )
    if not 0.0 < p["delta"] < 1.0:
        checker.fail("privacy.delta", f"must lie in (0, 1), got {p['delta']!r}")
    if p["num_teachers"] < 1:
        checker.fail("privacy.num_teachers", f"must be >= 1, got {p['num_teachers']!r}")
    k = len(p["orders"])
    if k == 0:
        checker.fail("privacy.orders", "must not be empty")
    for name in ("rdp_data_dependent", "rdp_data_independent"):
        if len(p[name]) != k:
            checker.fail(
                f"privacy.{name}", f"must have one value per order ({k}), got {len(p[name])}"
            )
    for name in ("eps_data_independent", "eps_data_dependent", "eps_sanitized", "eps_guarantee"):
        if p[name] < 0:
            checker.fail(f"privacy.{name}", f"must be >= 0, got {p[name]!r}")


def _check_queries_and_series(checker: _Checker, analysis: dict) -> None:
    """``queries`` (non-negative, answered <= asked), ``curves`` and ``vote_margins``."""
    q = analysis["queries"]
    for name in ("public_size", "asked", "answered", "labelled_by_student"):
        if q[name] < 0:
            checker.fail(f"queries.{name}", f"must be >= 0, got {q[name]!r}")
    if q["answered"] > q["asked"]:
        checker.fail(
            "queries.answered", f"({q['answered']}) must not exceed queries.asked ({q['asked']})"
        )
    c = analysis["curves"]
    if (
        not len(c["answered_count"])
        == len(c["eps_data_independent"])
        == len(c["eps_data_dependent"])
    ):
        checker.fail(
            "curves",
            "answered_count, eps_data_independent and eps_data_dependent must have the same length",
        )
    vm = analysis["vote_margins"]
    if len(vm["bin_edges"]) != len(vm["counts"]) + 1:
        checker.fail(
            "vote_margins.bin_edges",
            f"must have len(counts) + 1 = {len(vm['counts']) + 1} "
            f"values, got {len(vm['bin_edges'])}",
        )
    if any(v < 0 for v in vm["counts"]):
        checker.fail("vote_margins.counts", "must be non-negative")


def _check_utility(checker: _Checker, u: dict) -> None:
    """``utility``: a square confusion matrix, one value per class, fractions in [0, 1]."""
    cm = u["confusion_matrix"]
    m = len(cm)
    if m == 0 or any(len(row) != m for row in cm):
        checker.fail(
            "utility.confusion_matrix", "must be a non-empty square matrix (classes x classes)"
        )
    if any(v < 0 for row in cm for v in row):
        checker.fail("utility.confusion_matrix", "must hold non-negative counts")
    if len(u["student_per_class_accuracy"]) != m:
        checker.fail(
            "utility.student_per_class_accuracy",
            f"must have one value per class ({m}), got {len(u['student_per_class_accuracy'])}",
        )
    if u["class_names"] is not None and len(u["class_names"]) != m:
        checker.fail(
            "utility.class_names",
            f"must have one name per class ({m}), got {len(u['class_names'])}",
        )
    for name in (
        "student_accuracy",
        "teacher_mean_accuracy",
        "plurality_vote_accuracy",
        "label_accuracy_answered",
        "answered_plurality_agreement",
        "majority_class_rate",
        "chance_rate",
    ):
        value = u.get(name)
        if value is not None and not 0.0 <= value <= 1.0:
            checker.fail(f"utility.{name}", f"must be a fraction in [0, 1], got {value!r}")


def _check_against_config(checker: _Checker, p: dict, config: dict) -> None:
    """The relation and the release parameters agree with the effective configuration."""
    partition = config.get("partition")
    if (
        p["neighbouring_relation"] == "unit"
        and isinstance(partition, dict)
        and partition.get("mode", "unit") != "unit"
    ):
        checker.fail(
            "privacy.neighbouring_relation",
            f"is 'unit' but config.partition.mode is {partition.get('mode')!r}: a "
            f"unit-level guarantee needs the data split among teachers by unit",
        )
    fixed = config.get("privacy")
    if isinstance(fixed, dict) and p["sanitized"]["fallback"] is None:
        # Noise was added with these parameters: they must be the ones fixed in advance.
        for key, name in (
            ("order", "release_order"),
            ("beta", "release_beta"),
            ("sigma_ss", "release_sigma_ss"),
        ):
            if (
                name in fixed
                and is_real(fixed[name])
                and not math.isclose(p["sanitized"][key], fixed[name], rel_tol=1e-12, abs_tol=0.0)
            ):
                checker.fail(
                    f"privacy.sanitized.{key}",
                    f"({p['sanitized'][key]!r}) differs from config.privacy.{name} "
                    f"({fixed[name]!r}): the release parameters must be the ones fixed in "
                    f"the config before the votes were seen",
                )


def load_analysis(run_dir: str | os.PathLike) -> dict:
    """The validated ``analysis.json`` of ``run_dir``: ``FileNotFoundError`` if the directory or
    the file is missing, ``InputError`` (naming the file and the key) if it is not valid."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"run directory not found: {run_dir} (give the directory of a run made by `pate run`)"
        )
    path = run_dir / rundir.ANALYSIS
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run the pipeline's analysis stage first: "
            f"`pate run --run-dir {shlex.quote(str(run_dir))} --resume`"
        )
    try:
        analysis = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); {_REGENERATE}") from None
    return validate_analysis(analysis, source=str(path))
