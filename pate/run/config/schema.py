"""The config's tables and keys: each key's type and default (:data:`SCHEMA`), and
:func:`normalize`, which checks tables, keys and types and fills in the defaults (the module
docstring of :mod:`pate.run.config` describes every table)."""

from __future__ import annotations

import copy
import math
from typing import Any

from pate import mechanisms
from pate.run.config.messages import error_at

REQUIRED = object()
#: The entry of a saved config that records what the planner filled in (:mod:`pate.run.planner`).
PLANNED = "planned"
#: What a config without a sanitized release (``[privacy] release = false``) may leave out: the
#: release parameters, filled with these placeholders (validated like any others, never used).
UNUSED_RELEASE = {"release_order": 10.0, "release_beta": 0.04, "release_sigma_ss": 6.0}


# key -> (type, default). float accepts ints; bool is never an int.
SCHEMA: dict[str, dict[str, tuple[Any, Any]]] = {
    "run": {
        "name": (str, REQUIRED),
        "seed": (int, None),  # None: keys and streams from OS entropy (pate.core.keys)
        "secure": (bool, False),
        "device": (str, "auto"),
        "run_dir": (str, None),
        "smoke_test": (bool, False),
        "threads": (int, None),
        "feature_cache": ((str, bool), None),
    },
    "data": {
        "name": (str, REQUIRED),
        "root": (str, None),
        "download": (bool, False),
        "public_size": (int, None),
        "eval_size": (int, None),
        "image_size": ((int, list), None),
        # the declared (public) approximate number of private records the plan works from
        # (pate.run.config.declared_records); required for the user's own data
        "records": (int, None),
        # declared public facts (issue #48): the label set, the pool's split marks
        "classes": (list, None),
        "split_column": (str, "split"),
        "evaluation_public": (bool, False),
    },
    "partition": {
        "num_teachers": ((int, str), None),
        "mode": (str, "random"),
        "unit_ids": (str, None),
    },
    "teachers": {
        "model": (str, "auto"),
        "model_params": (dict, None),
        "epochs": (int, None),
        "batch_size": (int, None),
        "lr": (float, None),
        "optimizer": (str, None),
        "weight_decay": (float, None),
        "momentum": (float, None),
        "augment": (str, None),
        "label_smoothing": (float, None),
        "trainer": (str, None),
        "chunk_size": (int, None),
        "memory_budget_mb": (float, None),
        "checkpoint": (str, None),
        "checkpoint_every_s": (float, None),
        "amp": (bool, None),
        "n_jobs": (int, None),
        "features": (str, None),
        "standardize": (str, None),
    },
    "aggregator": {
        "mechanism": (str, REQUIRED),
        **{name: ((float, str), None) for name in mechanisms.all_param_names()},
        "queries": ((int, str), None),
        "budget_basis": (str, "data-independent"),
        "noise_seed": (int, None),
        "target_eps": (float, None),
    },
    "privacy": {
        "delta": (float, REQUIRED),
        "budget_eps": (float, None),
        "orders": ((str, list), "default"),
        "conversion": (str, "classic"),
        "release_order": (float, REQUIRED),
        "release_beta": (float, REQUIRED),
        "release_sigma_ss": (float, REQUIRED),
        "release": (bool, True),
        "ledger": ((str, bool), True),
        "dataset": (str, None),
        "private": (bool, True),
    },
    "student": {
        "method": (str, None),
        "model": (str, None),
        "epochs": (int, None),
        "steps_per_epoch": (int, None),
        "batch_size": (int, None),
        "unlabeled_ratio": (int, None),
        "threshold": (float, None),
        "unlabeled_weight": (float, None),
        "learning_rate": (float, None),
        "momentum": (float, None),
        "weight_decay": (float, None),
        "ema_decay": (float, None),
        "flip": (bool, None),
        "pad": (int, None),
        "strong_ops": (int, None),
        "cutout": (float, None),
        "distribution_alignment": (bool, None),
        "amp": (bool, None),
        # not Student settings: what the student is trained to (student_targets), and
        # whether the released model is the student times its labelling rule
        "targets": (str, None),
        "temperature": (float, None),
        "combine_with_rule": (bool, None),
    },
    # where the teachers are trained (pate.teachers.cluster.ClusterConfig); not what they compute
    "cluster": {
        "backend": (str, "local"),
        "address": (str, None),
        "num_cpus": (int, None),
        "cpus_per_task": (int, None),
        "gpus_per_task": (float, None),
        "teachers_per_task": (int, None),
        "max_retries": (int, None),
    },
    # the embedding of the mechanisms that read the private records (public statistics only; see
    # knn_settings), and how class-means labels from its release (rule; see class_means_rule)
    "knn": {
        "features": (str, None),
        "dims": (int, None),
        "student_run": (str, None),
        "rule": (str, None),
    },
}

#: What a ``[knn]`` setting left out means (the features default depends on the data: images
#: that ScatterNet takes get "scatternet", anything else "none").
KNN_DEFAULTS = {"dims": 64}


def _type_ok(value: Any, want: Any) -> bool:
    wants = want if isinstance(want, tuple) else (want,)
    for w in wants:
        if w is bool and isinstance(value, bool):
            return True
        if w is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if w is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if w in (str, list, dict) and isinstance(value, w):
            return True
    return False


def _type_name(want: Any) -> str:
    wants = want if isinstance(want, tuple) else (want,)
    names = {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }
    return " or ".join(names[w] for w in wants)


def normalize(raw: dict, *, source: str = "config") -> dict:
    """Check tables, keys and types; fill defaults. Returns a new nested dict."""
    if not isinstance(raw, dict):
        raise error_at(source, "the configuration must be a TOML table")
    unknown = sorted(set(raw) - set(SCHEMA) - {PLANNED})
    if unknown:
        raise error_at(
            source,
            f"unknown table(s) {', '.join(f'[{u}]' for u in unknown)}; "
            f"valid tables: {', '.join(f'[{t}]' for t in SCHEMA)}",
        )
    out: dict = {}
    for table, keys in SCHEMA.items():
        given = raw.get(table, {})
        if not isinstance(given, dict):
            raise error_at(source, f"[{table}] must be a table, got {given!r}")
        bad = sorted(set(given) - set(keys))
        if bad:
            raise error_at(
                source,
                f"unknown key(s) {', '.join(bad)} in [{table}]; valid keys: {', '.join(keys)}",
            )
        section = {}
        for key, (want, default) in keys.items():
            if key in given:
                value = given[key]
                if not _type_ok(value, want):
                    raise error_at(
                        source, f"[{table}] {key} must be {_type_name(want)}, got {value!r}"
                    )
                if isinstance(value, float) and not math.isfinite(value):
                    raise error_at(source, f"[{table}] {key} must be finite, got {value!r}")
                section[key] = float(value) if want is float else copy.deepcopy(value)
            elif (
                default is REQUIRED
                and table == "privacy"
                and key in UNUSED_RELEASE
                and (given.get("release", True) is False)
            ):
                section[key] = UNUSED_RELEASE[key]  # no release is drawn: never used
            elif default is REQUIRED:
                raise error_at(
                    source,
                    f"[{table}] {key} is required"
                    + (" (unless [privacy] release = false)" if key in UNUSED_RELEASE else ""),
                )
            elif default is not None:
                section[key] = default
        out[table] = section
    if PLANNED in raw:  # what the planner filled in (pate.run.planner), kept with a saved config
        if not isinstance(raw[PLANNED], dict):
            raise error_at(source, f"{PLANNED!r} must be a table written by the planner")
        out[PLANNED] = copy.deepcopy(raw[PLANNED])
    return out
