"""The run configuration of ``pate run``: a TOML file validated up front.

Tables and keys (unknown tables and keys are errors, never ignored)::

    [run]        name*, seed, secure, device, run_dir, smoke_test (true: the run only checks that
                 the pipeline works; its report says so at the top), threads (CPU threads, an
                 integer >= 1; left out: $OMP_NUM_THREADS, else the CPUs this process may use --
                 pate.threads, docs/threads.md), feature_cache (the folder of the on-disk
                 front-end feature cache, relative to the config file, or false; default
                 $PATE_FEATURE_CACHE, else <runs root>/.feature-cache:
                 :func:`feature_cache_root`, docs/feature_cache.md)
    [data]       name*, root, download, public_size, eval_size, image_size (imagefolder: the
                 size images are resized to, N or [height, width]; default the first image's)
    [partition]  num_teachers (not with private-knn: no teachers; left out or "auto": the
                 planner chooses, pate.planner), mode ("random": a keyed
                 hash of each record | "unit": of its privacy unit), unit_ids (.npy, mode unit)
    [teachers]   any field of pate.teachers.ensemble.TeacherConfig except device (see `pate train-teachers`)
    [aggregator] mechanism* (a name of the registry pate.mechanisms, or "auto": the planner's
                 rule), its noise parameters (threshold, sigma1, sigma2, sigma, scale, ...; a
                 Confident GNMax threshold left out is 0.8 x teachers), queries (first-k public
                 items asked; default all with fixed noise, the planner's choice with "auto"
                 noise, or "auto"), budget_basis, noise_seed
    [privacy]    delta*, budget_eps (the dataset's lifetime budget: registered in the ledger the
                 first time the dataset is charged -- default [aggregator] target_eps then --,
                 afterwards the ledger's counts; :func:`pate.stages.authorize`),
                 orders ("default" | "reference" | [list]), conversion,
                 release_order*, release_beta*, release_sigma_ss*  (the sanitized release's
                 parameters, fixed here before any data is seen; required unless release =
                 false), release (false: no sanitized release, only the data-independent
                 epsilon), ledger (path, or false), dataset,
                 private (false: the run is explicitly marked NOT private)
    [student]    any setting of pate.student.train.Student (see `pate train-student`); and
                 targets ("hard" | "soft"), temperature, combine_with_rule (class-means runs:
                 release the student times its labelling rule; pate.student.rule_product)
    [cluster]    where the teachers train: backend ("local" | "ray"), address, num_cpus,
                 cpus_per_task, gpus_per_task, teachers_per_task, max_retries
                 (pate.teachers.cluster.ClusterConfig; docs/cluster.md)
    [knn]        mechanism = "private-knn" or "class-means" only: the embedding of the
                 nearest-neighbour search, or of the class means,
                 features ("none": raw inputs | "scatternet" | "kernel": a table's random
                 Fourier features; default "scatternet" for images whose sides are multiples
                 of 4 and >= 8, "kernel" for a class-means table, else "none") and dims
                 (default 64; a kernel's from the noise and the sizes,
                 pate.class_means.kernel_dims): principal axes fitted on the public split
                 only (:func:`knn_settings`); or
                 features = "student" with student_run = an earlier run's directory: that run's
                 released student embeds (a next round; its privacy cost is composed into this
                 run's guarantee, see pate.stages)

(* = required.) Everything is checked before any data is read, any file is written, any noise
is drawn or any budget is spent; errors name the table, the key and the value.

Noise. The aggregator's and the sanitized release's noise come from OS entropy
(:class:`pate.rng.SecureGenerator`) unless ``[aggregator] noise_seed`` is set: then the noise is
replayable by anyone who knows the seed, and the report says in its first line that the run is
reproducible and NOT private. ``[run] seed`` seeds only the partition, the teachers'
initialisation and the student (``[run] secure = true`` draws those from OS entropy too).

Ledger. ``[privacy] ledger`` is true (the default ledger, :func:`pate.ledger.default_ledger_path`:
``$PATE_LEDGER``, else ``$XDG_DATA_HOME/pate/ledger.sqlite3``, else
``~/.local/share/pate/ledger.sqlite3``), a path (a relative path is resolved against the folder
of the config file, never the working directory) or false (no budget is enforced; the report says
so in its first paragraph). ``budget_basis = "data-dependent"`` is refused unless the ledger is
off and ``[privacy] private = false`` marks the run as not private.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import shlex
import tomllib
from typing import Any

from pate import mechanisms
from pate.analysis.errors import ConfigError

REQUIRED = object()
#: The entry of a saved config that records what the planner filled in (:mod:`pate.planner`).
PLANNED = "planned"
#: What a config without a sanitized release (``[privacy] release = false``) may leave out: the
#: release parameters, filled with these placeholders (validated like any others, never used).
UNUSED_RELEASE = {"release_order": 10.0, "release_beta": 0.04, "release_sigma_ss": 6.0}


# key -> (type, default). float accepts ints; bool is never an int.
SCHEMA: dict[str, dict[str, tuple[Any, Any]]] = {
    "run": {"name": (str, REQUIRED), "seed": (int, 0), "secure": (bool, False),
            "device": (str, "auto"), "run_dir": (str, None), "smoke_test": (bool, False),
            "threads": (int, None), "feature_cache": ((str, bool), None)},
    "data": {"name": (str, REQUIRED), "root": (str, None), "download": (bool, False),
             "public_size": (int, None), "eval_size": (int, None),
             "image_size": ((int, list), None)},
    "partition": {"num_teachers": ((int, str), None), "mode": (str, "random"), "unit_ids": (str, None)},
    "teachers": {"model": (str, "auto"), "model_params": (dict, None), "epochs": (int, None),
                 "batch_size": (int, None), "lr": (float, None), "optimizer": (str, None),
                 "weight_decay": (float, None), "momentum": (float, None), "augment": (str, None),
                 "label_smoothing": (float, None), "trainer": (str, None),
                 "chunk_size": (int, None), "memory_budget_mb": (float, None),
                 "checkpoint": (str, None), "checkpoint_every_s": (float, None),
                 "amp": (bool, None), "n_jobs": (int, None), "features": (str, None),
                 "standardize": (str, None)},
    "aggregator": {"mechanism": (str, REQUIRED),
                   **{name: ((float, str), None) for name in mechanisms.all_param_names()},
                   "queries": ((int, str), None), "budget_basis": (str, "data-independent"),
                   "noise_seed": (int, None), "target_eps": (float, None)},
    "privacy": {"delta": (float, REQUIRED), "budget_eps": (float, None),
                "orders": ((str, list), "default"), "conversion": (str, "classic"),
                "release_order": (float, REQUIRED), "release_beta": (float, REQUIRED),
                "release_sigma_ss": (float, REQUIRED), "release": (bool, True),
                "ledger": ((str, bool), True),
                "dataset": (str, None), "private": (bool, True)},
    "student": {"method": (str, None), "model": (str, None), "epochs": (int, None),
                "steps_per_epoch": (int, None), "batch_size": (int, None),
                "unlabeled_ratio": (int, None), "threshold": (float, None),
                "unlabeled_weight": (float, None), "learning_rate": (float, None),
                "momentum": (float, None), "weight_decay": (float, None),
                "ema_decay": (float, None), "flip": (bool, None), "pad": (int, None),
                "strong_ops": (int, None), "cutout": (float, None),
                "distribution_alignment": (bool, None),
                # not Student settings: what the student is trained to (student_targets), and
                # whether the released model is the student times its labelling rule
                "targets": (str, None), "temperature": (float, None),
                "combine_with_rule": (bool, None)},
    # where the teachers are trained (pate.teachers.cluster.ClusterConfig); not what they compute
    "cluster": {"backend": (str, "local"), "address": (str, None), "num_cpus": (int, None),
                "cpus_per_task": (int, None), "gpus_per_task": (float, None),
                "teachers_per_task": (int, None), "max_retries": (int, None)},
    # the embedding of the mechanisms that read the private records (public statistics only; see
    # knn_settings), and how class-means labels from its release (rule; see class_means_rule)
    "knn": {"features": (str, None), "dims": (int, None), "student_run": (str, None),
            "rule": (str, None)},
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
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a table"}
    return " or ".join(names[w] for w in wants)


#: The ``source`` of a config built by :func:`pate.fit` (:func:`from_dict`): its messages name
#: keyword arguments, not TOML keys (:func:`setting`).
PYTHON_SOURCE = "pate.fit"
#: The sources whose messages name keyword arguments (``"python"``: the planner's wording).
_PYTHON_SOURCES = frozenset({PYTHON_SOURCE, "python"})

#: How :func:`pate.fit` spells a config key, where it is not ``key=`` itself.
PYTHON_NAMES = {("partition", "mode"): "partition=", ("privacy", "ledger"): "ledger=",
                ("privacy", "release"): "release=", ("run", "run_dir"): "run_dir=",
                ("data", "name"): "private=", ("teachers", "model"): "teacher=",
                ("student", "model"): "student="}


def setting(table: str, key: str, *, source: str | None) -> str:
    """A config key as the caller wrote it: ``budget_eps=`` (a keyword argument) for a config
    from :func:`pate.fit` (``source == PYTHON_SOURCE``), else the TOML key ``[privacy]
    budget_eps``. Messages build their names with this, never by rewriting text."""
    if source in _PYTHON_SOURCES:
        if (table, key) in PYTHON_NAMES:
            return PYTHON_NAMES[table, key]
        if table in ("teachers", "student"):
            return f"{table.removesuffix('s')}_params={{{key!r}: ...}}"
        return f"{key}="
    return f"[{table}] {key}"


def assignment(table: str, key: str, value: Any, *, source: str | None) -> str:
    """A setting with a value as the caller writes it: ``budget_eps=120`` from :func:`pate.fit`,
    ``[privacy] budget_eps = 120`` in a TOML config."""
    text = f"{value:g}" if isinstance(value, float) else json.dumps(value)
    if source in _PYTHON_SOURCES:
        return setting(table, key, source=source) + (text if not isinstance(value, str)
                                                     else repr(value))
    return f"{setting(table, key, source=source)} = {text}"


def budget_command(source: str | None, *, ledger, digest: str, eps: float, delta: float,
                   conversion: str) -> str:
    """How the caller changes a dataset's lifetime budget in the ledger: a Python call for
    :func:`pate.fit`, the ``pate budget set`` command line for the CLI (both pasteable)."""
    if source in _PYTHON_SOURCES:
        return (f"pate.ledger.Ledger({str(ledger)!r}).set_budget({digest!r}, eps={eps:.10g}, "
                f"delta={delta:g}, conversion={conversion!r})")
    return (f"pate budget set --dataset {digest} --eps {eps:.10g} --delta {delta:g} --conversion "
            f"{conversion} --ledger {shlex.quote(str(ledger))}")


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def normalize(raw: dict, *, source: str = "config") -> dict:
    """Check tables, keys and types; fill defaults. Returns a new nested dict."""
    if not isinstance(raw, dict):
        raise _fail(source, "the configuration must be a TOML table")
    unknown = sorted(set(raw) - set(SCHEMA) - {PLANNED})
    if unknown:
        raise _fail(source, f"unknown table(s) {', '.join(f'[{u}]' for u in unknown)}; "
                            f"valid tables: {', '.join(f'[{t}]' for t in SCHEMA)}")
    out: dict = {}
    for table, keys in SCHEMA.items():
        given = raw.get(table, {})
        if not isinstance(given, dict):
            raise _fail(source, f"[{table}] must be a table, got {given!r}")
        bad = sorted(set(given) - set(keys))
        if bad:
            raise _fail(source, f"unknown key(s) {', '.join(bad)} in [{table}]; valid keys: "
                                f"{', '.join(keys)}")
        section = {}
        for key, (want, default) in keys.items():
            if key in given:
                value = given[key]
                if not _type_ok(value, want):
                    raise _fail(source, f"[{table}] {key} must be {_type_name(want)}, got {value!r}")
                if isinstance(value, float) and not math.isfinite(value):
                    raise _fail(source, f"[{table}] {key} must be finite, got {value!r}")
                section[key] = float(value) if want is float else copy.deepcopy(value)
            elif default is REQUIRED and table == "privacy" and key in UNUSED_RELEASE and (
                    given.get("release", True) is False):
                section[key] = UNUSED_RELEASE[key]  # no release is drawn: never used
            elif default is REQUIRED:
                raise _fail(source, f"[{table}] {key} is required"
                            + (" (unless [privacy] release = false)" if key in UNUSED_RELEASE else ""))
            elif default is not None:
                section[key] = default
        out[table] = section
    if PLANNED in raw:  # what the planner filled in (pate.planner), kept with a saved config
        if not isinstance(raw[PLANNED], dict):
            raise _fail(source, f"{PLANNED!r} must be a table written by the planner")
        out[PLANNED] = copy.deepcopy(raw[PLANNED])
    return out


def _check(where: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_run_table(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    run = config["run"]
    _check(f"{source}: [run] seed", v.check_int, run["seed"], "seed", minimum=0)
    if run["secure"] and "seed" in config.get("_explicit_seed", ()):
        raise _fail(source, "[run] secure = true draws noise from OS entropy and refuses a seed; "
                            "remove [run] seed (or --seed), or set secure = false")
    if "threads" in run:
        from pate.threads import check_threads

        _check(source, check_threads, run["threads"], setting("run", "threads", source=source))
    if not run["name"] or "/" in run["name"]:
        raise _fail(source, f"[run] name must be a non-empty name without '/', got {run['name']!r}")
    if run.get("feature_cache") == "":
        raise _fail(source, "[run] feature_cache must be a folder path, true (the default folder) "
                            "or false (no cache), got an empty string")


def _check_data_table(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    data = config["data"]
    for key in ("public_size", "eval_size"):
        if key in data:
            _check(f"{source}: [data] {key}", v.check_int, data[key], key, minimum=1)
    if "image_size" in data:
        size = data["image_size"]
        if not data["name"].startswith("imagefolder:"):
            raise _fail(source, "[data] image_size applies to imagefolder:PATH datasets only "
                                f"(the size their images are resized to), not {data['name']!r}")
        sizes = size if isinstance(size, list) else [size]
        if len(sizes) not in (1, 2) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
            raise _fail(source, f"[data] image_size must be a positive integer or [height, width], "
                                f"got {size!r}")


def _check_teacher_count(config: dict, source: str, knn_run: bool) -> None:
    """``[partition] num_teachers``: a positive integer, or the whole table left out by a
    mechanism that trains no teachers."""
    from pate.analysis import validation as v

    part = config["partition"]
    if knn_run:
        # no teachers: the private records vote through their nearest neighbours, record-level
        if "num_teachers" in part or "unit_ids" in part or part["mode"] != "random":
            raise _fail(source, f"[partition] does not apply to mechanism = "
                                f"{config['aggregator']['mechanism']!r}: it trains no teachers (the "
                                "private records vote through their nearest neighbours, with "
                                "record-level protection); remove the [partition] table")
    elif "num_teachers" not in part or part["num_teachers"] == "auto":
        raise _fail(source, "[partition] num_teachers was left to the planner but no plan was "
                            "made (pate.planner.plan_config); give a number of teachers")
    elif isinstance(part["num_teachers"], str):
        raise _fail(source, f"[partition] num_teachers must be an integer or \"auto\" (the "
                            f"planner chooses), got {part['num_teachers']!r}")
    else:
        _check(f"{source}: [partition] num_teachers", v.check_int, part["num_teachers"],
               "num_teachers", minimum=1)


def _check_partition_mode(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    part = config["partition"]
    if part["mode"] == "stratified":
        raise _fail(source, "[partition] mode = \"stratified\" is no longer offered: dealing the "
                            "records class by class moves most records to another teacher when "
                            "one record is added, so the guarantee would hold for replacing a "
                            "record only. Use mode = \"random\" (each record's teacher is a keyed "
                            "hash of the record: adding or removing one changes one teacher)")
    _check(f"{source}: [partition] mode", v.check_choice, part["mode"], "mode",
           ("random", "unit"))
    if (part["mode"] == "unit") != ("unit_ids" in part):
        raise _fail(source, "[partition] unit_ids (a .npy file of one privacy-unit id per private "
                            "record) is required with mode = \"unit\" and only then")
    if "unit_ids" in part and not pathlib.Path(part["unit_ids"]).is_file():
        raise _fail(source, f"[partition] unit_ids file not found: {part['unit_ids']}")


def _check_mechanism(config: dict, source: str) -> tuple[Any, list[str]]:
    """The ``[aggregator]`` mechanism and which of its noise parameters are given: returns its
    spec and the parameters set to \"auto\"."""
    from pate.analysis import validation as v

    agg = config["aggregator"]
    mech = _check(f"{source}: [aggregator] mechanism", v.check_choice, agg["mechanism"],
                  "mechanism", tuple(mechanisms.REGISTRY))
    spec = mechanisms.get(mech)
    if spec.needs_student:
        raise _fail(source, f"[aggregator] mechanism = {mech!r} needs the student's predictions on "
                            "every query, which a pipeline run does not have; use it from Python "
                            "(pate.student.select)")
    needed = spec.param_names
    required = [p.name for p in spec.params if p.required]
    for key in required:
        if key not in agg:
            optional = [f"{p.name} (default {p.default:g})" for p in spec.params
                        if not p.required]
            raise _fail(source, f"[aggregator] mechanism = {mech!r} needs {', '.join(required)}"
                                + (f" (optional: {', '.join(optional)})" if optional else "")
                                + f"; {key} is missing")
    extra = [k for k in mechanisms.all_param_names() if k in agg and k not in needed]
    if extra:
        raise _fail(source, f"[aggregator] {', '.join(extra)} do(es) not apply to {mech!r}")
    for key in needed:
        if isinstance(agg.get(key), str) and agg[key] != "auto":
            raise _fail(source, f"[aggregator] {key} must be a number or \"auto\", got {agg[key]!r}")
    return spec, [k for k in needed if agg.get(k) == "auto"]


def _check_queries_and_target(config: dict, source: str, auto: list[str]) -> None:
    """``[aggregator] queries`` and ``target_eps`` (the latter only with calibrated noise)."""
    from pate.analysis import validation as v

    agg, priv = config["aggregator"], config["privacy"]
    if isinstance(agg.get("queries"), str):
        raise _fail(source, f"[aggregator] queries must be an integer or \"auto\" (the planner "
                            f"chooses), got {agg['queries']!r}" if agg["queries"] != "auto" else
                    "[aggregator] queries = \"auto\" was left to the planner but no plan was made")
    if "queries" in agg:
        _check(f"{source}: [aggregator] queries", v.check_int, agg["queries"], "queries", minimum=1)
    if auto:
        if "target_eps" not in agg or "queries" not in agg:
            raise _fail(source, f"[aggregator] {', '.join(auto)} = \"auto\" calibrates the noise "
                                "for a target: set target_eps (the epsilon of this run's answers "
                                "and release) and queries (how many public items are asked)")
        _check(f"{source}: [aggregator] target_eps", v.check_positive, agg["target_eps"],
               "target_eps")
        if priv.get("budget_eps") is not None and agg["target_eps"] > priv["budget_eps"]:
            raise _fail(source, f"{setting('aggregator', 'target_eps', source=source)} "
                                f"({agg['target_eps']:g}, this run's spend) exceeds "
                                f"{setting('privacy', 'budget_eps', source=source)} "
                                f"({priv['budget_eps']:g}), the dataset's lifetime budget")
    elif "target_eps" in agg:
        raise _fail(source, "[aggregator] target_eps only applies with a noise parameter = \"auto\" "
                            "(e.g. sigma2 = \"auto\"); remove it or calibrate a parameter")


def _check_noise_and_basis(config: dict, source: str, spec) -> None:
    """The noise parameters' values (\"auto\" ones as placeholders), the noise seed, the budget
    basis and the ledger setting."""
    from pate.analysis import validation as v

    run, agg, priv = config["run"], config["aggregator"], config["privacy"]
    _check(source, spec.validate,
           {k: (1.0 if agg[k] == "auto" else agg[k]) for k in spec.param_names if k in agg},
           prefix="[aggregator] ")
    if "noise_seed" in agg:
        _check(f"{source}: [aggregator] noise_seed", v.check_int, agg["noise_seed"], "noise_seed",
               minimum=0)
        if run["secure"]:
            raise _fail(source, "[run] secure = true refuses [aggregator] noise_seed (seeded noise "
                                "is replayable); remove one of them")
    _check(f"{source}: [aggregator] budget_basis", v.check_choice, agg["budget_basis"],
           "budget_basis", ("data-independent", "data-dependent"))
    if agg["budget_basis"] == "data-dependent" and (priv["ledger"] is not False or priv["private"]):
        raise _fail(source, "[aggregator] budget_basis = \"data-dependent\" stops on a cost that "
                            "depends on the private votes: WHEN it stops leaks information no "
                            "epsilon accounts for. It is refused unless [privacy] ledger = false "
                            "and [privacy] private = false mark the run as an exploration that is "
                            "NOT private; use budget_basis = \"data-independent\"")
    if priv["ledger"] == "":
        raise _fail(source, "[privacy] ledger must be a path, true (the default ledger) or false, "
                            "got an empty string")


def _check_privacy_table(config: dict, source: str) -> None:
    """Delta, the budget, the conversion, the orders and the sanitized release's parameters."""
    from pate.analysis import validation as v

    agg, priv = config["aggregator"], config["privacy"]
    _check(f"{source}: {setting('privacy', 'delta', source=source)}", v.check_delta, priv["delta"])
    if priv.get("budget_eps") is not None:
        _check(f"{source}: {setting('privacy', 'budget_eps', source=source)}", v.check_positive,
               priv["budget_eps"], "budget_eps")
    elif priv["ledger"] is False and agg.get("target_eps") is None:
        raise _fail(source, f"without a ledger ({setting('privacy', 'ledger', source=source)} = "
                            f"false) the budget is the config's: set "
                            f"{setting('privacy', 'budget_eps', source=source)} (or "
                            f"{setting('aggregator', 'target_eps', source=source)} with calibrated "
                            "noise)")
    _check(f"{source}: [privacy] conversion", v.check_choice, priv["conversion"], "conversion",
           ("classic", "tight"))
    orders(config)  # validates
    order = _check(f"{source}: [privacy] release_order", v.check_order, priv["release_order"],
                   "release_order")
    beta = _check(f"{source}: [privacy] release_beta", v.check_positive, priv["release_beta"],
                  "release_beta")
    _check(f"{source}: [privacy] release_sigma_ss", v.check_positive, priv["release_sigma_ss"],
           "release_sigma_ss")
    if not order < 1.0 / (2.0 * beta):
        raise _fail(source, f"[privacy] release_order ({order}) must be < 1/(2 release_beta) = "
                            f"{1.0 / (2.0 * beta):.6g}; lower release_beta (e.g. 0.4/release_order)")


def validate(config: dict, *, source: str = "config") -> dict:
    """Semantic checks across keys (noise parameters, release parameters, student and teacher
    recipes). Imports torch (through the teacher and student recipes); call it once, up front."""
    _check_run_table(config, source)
    _check_data_table(config, source)
    knn_run = mechanisms.REGISTRY.get(config["aggregator"]["mechanism"]) is not None and \
        mechanisms.get(config["aggregator"]["mechanism"]).kind.reads_private_records
    _check_teacher_count(config, source, knn_run)
    _check_knn(config, source, knn_run)
    _check_partition_mode(config, source)

    spec, auto = _check_mechanism(config, source)
    _check_queries_and_target(config, source, auto)
    _check_noise_and_basis(config, source, spec)
    _check_privacy_table(config, source)
    if auto:  # the privacy table is valid now: calibrate (public quantities only)
        _check(f"{source}: [aggregator]", spec.validate, aggregator_params(config))

    from pate.teachers.ensemble import TeacherConfig

    _check(f"{source}: [teachers]", TeacherConfig, **teacher_settings(config))
    _check_cluster(config, source)
    from pate.student.train import Student

    _check(f"{source}: [student]", Student(**student_settings(config))._validated)
    _check_student_targets(config, source, spec)
    return config


#: ``[student] temperature`` when ``targets = "soft"`` leaves it out (chosen in a development
#: run that looked at private labels: docs/benchmarks.md lists it).
SOFT_TARGET_TEMPERATURE = 10.0


def _check_student_targets(config: dict, source: str, spec) -> None:
    from pate.analysis import validation as v

    student = config["student"]
    kind = _check(f"{source}: [student] targets", v.check_choice, student.get("targets", "hard"),
                  "targets", ("hard", "soft"))
    if "temperature" in student:
        if kind != "soft":
            raise _fail(source, "[student] temperature applies to targets = \"soft\" only (it "
                                "scales the labelling rule's class scores); remove it or set "
                                "targets = \"soft\"")
        _check(f"{source}: [student] temperature", v.check_positive, student["temperature"],
               "temperature")
    if student.get("combine_with_rule", False):
        features = (config.get("knn") or {}).get("features")
        if kind != "soft":
            raise _fail(source, "[student] combine_with_rule = true multiplies the student with "
                                "its labelling rule at the soft targets' temperature: set "
                                "targets = \"soft\" (and temperature), or remove combine_with_rule")
        if class_means_rule(config) == "qda":
            raise _fail(source, "[student] combine_with_rule = true multiplies the student with "
                                "a rule affine in its embedding (rule = \"lda\" or \"logistic\"); "
                                "the \"qda\" rule is quadratic: remove combine_with_rule")
        if features == "student":
            raise _fail(source, "[student] combine_with_rule = true needs a PCA front-end "
                                "([knn] features = \"scatternet\" or \"none\"), not "
                                "features = \"student\"; remove combine_with_rule")
    if kind == "soft" and not spec.kind.gives_label_scores:
        raise _fail(source, f"[student] targets = \"soft\" needs class scores for every query, "
                            f"which mechanism {spec.name!r} does not publish (it releases a noisy "
                            "argmax only); use targets = \"hard\", or mechanism = \"class-means\"")


def combine_with_rule(config: dict) -> bool:
    """Whether the released model is the student times its labelling rule
    (``[student] combine_with_rule``; :mod:`pate.student.rule_product`)."""
    return bool(config["student"].get("combine_with_rule", False))


def student_targets(config: dict) -> float | None:
    """The temperature T of a student trained on soft targets softmax(T * scores) of the
    labelling rule's published class scores (``[student] targets = "soft"``), or None for hard
    labels."""
    student = config["student"]
    if student.get("targets", "hard") != "soft":
        return None
    return float(student.get("temperature", SOFT_TARGET_TEMPERATURE))


def aggregator_params(config: dict) -> dict:
    """The noise parameters of the configured mechanism (and only those), with every ``"auto"``
    value calibrated (:func:`calibration`)."""
    agg = config["aggregator"]
    params = {k: agg[k] for k in mechanisms.get(agg["mechanism"]).param_names if k in agg}
    cal = calibration(config)
    return params if cal is None else dict(params, **cal["calibrated"])


def calibration(config: dict) -> dict | None:
    """What ``"auto"`` noise parameters were calibrated to, and how (None without ``"auto"``).

    The smallest noise such that asking ``[aggregator] queries`` queries, all answered (the worst
    case), composed with the planned sanitized release's cost (when ``[privacy] release`` is on
    and the mechanism has one), costs at most ``target_eps`` at ``delta`` with the config's
    conversion and orders: public quantities only, fixed before any data is seen
    (:meth:`pate.mechanisms.MechanismSpec.calibrate`, which uses ``pate.analysis.calibrate_*``).
    """
    from pate import analysis

    agg, priv = config["aggregator"], config["privacy"]
    spec = mechanisms.get(agg["mechanism"])
    params = {k: agg[k] for k in spec.param_names if k in agg}
    auto = sorted(k for k, v in params.items() if v == "auto")
    if not auto:
        return None
    grid = orders(config)
    release = bool(priv.get("release", True)) and spec.release_params(
        {k: (1.0 if v == "auto" else v) for k, v in params.items()}) is not None
    extra = (analysis.gnss_rdp_curve(beta=priv["release_beta"], sigma_ss=priv["release_sigma_ss"],
                                     orders=grid) if release else None)
    try:
        full = spec.calibrate(params, target_eps=agg["target_eps"], delta=priv["delta"],
                              num_queries=agg["queries"], orders=grid,
                              conversion=priv["conversion"], extra_rdp=extra)
    except (ValueError, ArithmeticError) as exc:
        raise ConfigError(f"[aggregator] {', '.join(auto)} = \"auto\": {exc}") from None
    return {"parameters": auto, "calibrated": {k: full[k] for k in auto},
            "target_eps": agg["target_eps"], "queries": agg["queries"], "delta": priv["delta"],
            "conversion": priv["conversion"], "release_included": release,
            "method": (f"the smallest noise whose data-independent cost of {agg['queries']} "
                       f"queries, all answered{', with the planned sanitized release' if release else ''}, "
                       f"is at most eps={agg['target_eps']:g} at delta={priv['delta']:g} "
                       f"({priv['conversion']} conversion): {spec.title} calibration of "
                       "pate.mechanisms with pate.analysis.calibrate_*")}


def noise_seeded(config: dict) -> bool:
    """Whether the user seeded the aggregator's noise (the run is then NOT private)."""
    return config["aggregator"].get("noise_seed") is not None


def is_private(config: dict) -> bool:
    """False when the run is not differentially private: seeded noise or ``private = false``."""
    return bool(config["privacy"]["private"]) and not noise_seeded(config)


def teacher_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.teachers.ensemble.TeacherConfig`."""
    return dict(config["teachers"], device=config["run"]["device"])


def knn_settings(config: dict, input_shape=None, *, sizes: tuple[int, int, int] | None = None) -> dict:
    """The ``[knn]`` settings of a Private-kNN or class-means run with their defaults:
    ``{"features", "dims"}``. ``features`` defaults to "scatternet" when ``input_shape`` is an
    image ScatterNet takes ((C, H, W), H and W multiples of 4 and >= 8), to "kernel" for a
    class-means run on a table (its rule is then nonlinear in the inputs), else "none" (None
    when ``input_shape`` is unknown and the config does not say). A kernel's ``dims``, when left
    out, come from ``sizes`` = (private records, classes, public items) and the noise sigma
    (:func:`pate.class_means.kernel_dims`; 64 until both are known)."""
    given = config.get("knn") or {}
    out = dict(KNN_DEFAULTS, **given)
    if "features" not in out and input_shape is not None:
        shape = tuple(int(s) for s in input_shape)
        image = len(shape) == 3 and shape[1] % 4 == 0 and shape[2] % 4 == 0 and min(shape[1:]) >= 8
        spec = mechanisms.REGISTRY.get((config.get("aggregator") or {}).get("mechanism"))
        table_release = len(shape) == 1 and spec is not None and spec.kind.releases_once
        out["features"] = "scatternet" if image else "kernel" if table_release else "none"
    if "dims" not in given and out.get("features") == "none" and input_shape is not None:
        # the default PCA keeps at most the raw inputs' dimensions (a 30-column table: 30)
        out["dims"] = min(out["dims"], math.prod(int(s) for s in input_shape))
    sigma = (config.get("aggregator") or {}).get("sigma")
    if "dims" not in given and out.get("features") == "kernel" and sizes is not None and \
            isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and sigma > 0:
        from pate.class_means import kernel_dims

        records, classes, public = sizes
        out["dims"] = kernel_dims(private_records=records, num_classes=classes,
                                  sigma=float(sigma), public_items=public)
    if out.get("features") == "quadratic" and input_shape is not None:
        from pate.class_means import quadratic_width

        out["dims"] = quadratic_width(math.prod(int(s) for s in input_shape))  # no reduction
    return out


def class_means_rule(config: dict) -> str:
    """How a class-means run labels from its release: ``[knn] rule``; when left out, "qda" over
    the quadratic front-end and "lda" otherwise."""
    knn = config.get("knn") or {}
    return knn.get("rule", "qda" if knn.get("features") == "quadratic" else "lda")


def _check_knn(config: dict, source: str, knn_run: bool) -> None:
    from pate.analysis import validation as v

    knn = config.get("knn") or {}
    if knn and not knn_run:
        raise _fail(source, f"[knn] applies to the mechanisms that read the private records "
                            f"(\"private-knn\", \"class-means\") only, not "
                            f"{config['aggregator']['mechanism']!r}; remove the [knn] table")
    if "features" in knn:
        _check(f"{source}: [knn] features", v.check_choice, knn["features"], "features",
               ("none", "scatternet", "kernel", "quadratic", "student"))
        if knn["features"] in ("kernel", "quadratic") and not mechanisms.get(
                config["aggregator"]["mechanism"]).kind.releases_once:
            raise _fail(source, f"[knn] features = \"{knn['features']}\" is the class-means "
                                "release's front-end (its rule becomes nonlinear); a neighbour "
                                "search measures distances in the inputs: set features = \"none\"")
    if knn.get("features") == "quadratic" and "dims" in knn:
        raise _fail(source, "[knn] features = \"quadratic\" keeps every column and product of "
                            "two (the \"qda\" rule reads each class's covariance back): remove dims")
    if knn.get("rule") == "qda" and knn.get("features") != "quadratic":
        raise _fail(source, "[knn] rule = \"qda\" reads each class's covariance from a release "
                            "over a table's quadratic features: set [knn] features = "
                            f"\"quadratic\" (got features = {knn.get('features')!r}), or rule = "
                            "\"lda\" or \"logistic\"")
    if (knn.get("features") == "student") != ("student_run" in knn):
        raise _fail(source, "[knn] features = \"student\" and [knn] student_run go together: "
                            "student_run names the earlier run whose released student embeds "
                            f"(got features={knn.get('features')!r}, "
                            f"student_run={knn.get('student_run')!r})")
    if "student_run" in knn and "dims" in knn:
        raise _fail(source, "[knn] dims applies to the PCA front-ends (features = \"none\", "
                            "\"scatternet\" or \"kernel\"); a student embeds into its class probabilities: "
                            "remove dims")
    if "dims" in knn:
        _check(f"{source}: [knn] dims", v.check_int, knn["dims"], "dims", minimum=1)
    if "rule" in knn:
        from pate.class_means import RULES

        mechanism = config["aggregator"]["mechanism"]
        if not mechanisms.get(mechanism).kind.releases_once:
            labellers = " or ".join(f'"{n}"' for n, spec in mechanisms.REGISTRY.items()
                                    if spec.kind.releases_once)
            raise _fail(source, f"[knn] rule is how {labellers} labels from its release; "
                                f"{mechanism!r} has none: remove it")
        _check(f"{source}: [knn] rule", v.check_choice, knn["rule"], "rule", RULES)
    if knn.get("features") == "scatternet":
        import importlib.util

        if importlib.util.find_spec("kymatio") is None:
            raise _fail(source, "[knn] features = \"scatternet\" needs kymatio, which is not "
                                "installed (pip install kymatio), or set features = \"none\"")


def cluster_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.teachers.cluster.ClusterConfig` (a config saved before
    the ``[cluster]`` table existed runs locally)."""
    return dict(config.get("cluster") or {})


def _check_cluster(config: dict, source: str) -> None:
    from pate.teachers.cluster import ClusterConfig

    cluster = _check(f"{source}: [cluster]", ClusterConfig, **cluster_settings(config))
    if cluster.is_ray:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise _fail(source, "[cluster] backend = \"ray\" needs Ray, which is not installed: "
                                "pip install 'pate-learn[ray]' (or backend = \"local\")")
        _check(f"{source}: [cluster]", cluster.task_device, config["run"]["device"])


#: The ``[student]`` keys that say what the student is trained to, not how (student_targets),
#: and what is released with it (combine_with_rule).
_TARGET_KEYS = ("targets", "temperature", "combine_with_rule")


def student_settings(config: dict) -> dict:
    """Keyword arguments of :class:`pate.student.train.Student` (without data-dependent ones)."""
    return dict({k: v for k, v in config["student"].items() if k not in _TARGET_KEYS},
                device=config["run"]["device"])


def orders(config: dict):
    from pate import analysis

    spec = config["privacy"]["orders"]
    if spec == "default":
        return analysis.DEFAULT_ORDERS
    if spec == "reference":
        return analysis.REFERENCE_ORDERS
    if isinstance(spec, str):
        raise ConfigError(f"[privacy] orders must be \"default\", \"reference\" or a list of "
                          f"orders > 1, got {spec!r}")
    return _check("[privacy] orders", analysis.validation.check_orders, spec, "orders")


def packaged_configs() -> dict[str, Any]:
    """The configs that ship with pate-learn (the folder ``pate/configs`` of the installed
    package): ``{name: file}``, sorted, the name being the file's stem with ``_`` written ``-``
    (``fashion_mnist.toml`` is ``fashion-mnist``); a file is a :class:`pathlib.Path` or, for a
    zipped install, an :class:`importlib.resources.abc.Traversable`."""
    from importlib import resources

    folder = resources.files("pate").joinpath("configs")
    if not folder.is_dir():
        return {}
    found = {entry.name[:-len(".toml")].replace("_", "-"): entry for entry in folder.iterdir()
             if entry.name.endswith(".toml") and entry.is_file()}
    return dict(sorted(found.items()))


def resolve_config(name_or_path) -> Any:
    """The file a ``--config`` value names: an existing file path is that file; otherwise the
    packaged config of that name (:func:`packaged_configs`; ``-`` and ``_`` are the same, case
    and a ``.toml`` suffix are ignored: ``fashion-mnist``, ``fashion_mnist.toml``); otherwise
    ``FileNotFoundError`` naming the value and listing the packaged names. Returns a
    :class:`pathlib.Path` (or a Traversable for a packaged config of a zipped install)."""
    path = pathlib.Path(name_or_path).expanduser()
    if path.is_file():
        return path
    text = str(name_or_path).strip()
    key = text[:-len(".toml")] if text.lower().endswith(".toml") else text
    key = key.lower().replace("_", "-")
    shipped = packaged_configs()
    if "/" not in text and "\\" not in text and key in shipped:
        return shipped[key]
    if path.is_dir():
        return path  # read_toml says that it is a directory
    names = ", ".join(shipped) or "(none found: is pate-learn installed?)"
    raise FileNotFoundError(
        f"--config {text}: no such file (relative paths are taken from the working directory "
        f"{pathlib.Path.cwd()}), and not the name of a config that ships with pate-learn: "
        f"{names}. Pass a path to a TOML file, or a packaged name (`pate init-config NAME` "
        f"writes an editable copy)")


def read_toml(path) -> dict:
    """A TOML file as a dict; a missing file or bad TOML is one clear error (shared by every
    command that takes ``--config``). ``path`` is a file path or the name of a packaged config
    (:func:`resolve_config`)."""
    path = resolve_config(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(f"--config file not found: {path}") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"--config {path} is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None


def load(path, *, seed: int | None = None, device: str | None = None,
         run_dir: str | None = None, ledger: str | bool | None = None,
         overrides: dict[str, dict[str, Any]] | None = None) -> dict:
    """Read, apply the command-line overrides to, normalize and validate a TOML config.

    ``overrides`` maps a table to the keys a command's flags set (``{"aggregator": {"sigma1":
    100.0}}``); ``ledger`` overrides ``[privacy] ledger`` (a path, or False). A relative
    ``[privacy] ledger`` path in the file is resolved against the file's folder.
    """
    path = resolve_config(path)
    raw = read_toml(path)
    path = pathlib.Path(str(path))
    privacy = raw.get("privacy")
    if isinstance(privacy, dict) and isinstance(privacy.get("ledger"), str) and privacy["ledger"]:
        privacy["ledger"] = str((path.parent / pathlib.Path(privacy["ledger"]).expanduser()).resolve())
    run = raw.get("run")
    if isinstance(run, dict) and isinstance(run.get("feature_cache"), str) and run["feature_cache"]:
        run["feature_cache"] = str((path.parent / pathlib.Path(run["feature_cache"]).expanduser()).resolve())
    return from_dict(raw, source=str(path), seed=seed, device=device, run_dir=run_dir,
                     ledger=ledger, overrides=overrides,
                     seed_in_file=isinstance(raw.get("run"), dict) and "seed" in raw["run"])


def from_dict(raw: dict, *, source: str = "config", seed: int | None = None,
              device: str | None = None, run_dir: str | None = None,
              ledger: str | bool | None = None,
              overrides: dict[str, dict[str, Any]] | None = None,
              seed_in_file: bool = False, facts=None, wording: str = "config") -> dict:
    """:func:`load` for a config already in memory (a TOML table as a dict, or a saved
    ``config.json``): overrides, normalisation and validation. ``raw`` is not modified.

    ``seed_in_file``: the user wrote ``[run] seed`` (``load`` sets it from the TOML); a saved,
    normalised config always holds a seed, which is then not the user's choice.

    Settings left to the planner (``[partition] num_teachers`` missing or "auto", ``[aggregator]
    queries = "auto"``, ``mechanism = "auto"``, ...: :func:`pate.planner.needs_plan`) are filled in
    by :func:`pate.planner.plan_config` from ``facts`` (:class:`pate.planner.Facts`; counted from the
    ``[data]`` source when None), after every other setting is validated; a plan that cannot give
    a useful student raises :class:`pate.planner.PlanError` naming the setting in ``wording``
    ("config": TOML keys; "python": keyword arguments)."""
    raw = copy.deepcopy(raw)
    if not isinstance(raw, dict):
        raise _fail(source, "the configuration must be a TOML table")
    explicit_seed = seed_in_file or seed is not None
    for table, values in (overrides or {}).items():
        section = raw.setdefault(table, {})
        if isinstance(section, dict):
            section.update({k: v for k, v in values.items() if v is not None})
    run = raw.setdefault("run", {})
    if isinstance(run, dict):
        if seed is not None:
            run["seed"] = seed
        if device is not None:
            run["device"] = device
        if run_dir is not None:
            run["run_dir"] = str(run_dir)
    if ledger is not None:
        privacy = raw.setdefault("privacy", {})
        if isinstance(privacy, dict):
            privacy["ledger"] = (str(pathlib.Path(ledger).expanduser().resolve())
                                 if ledger is not False else False)
    config = normalize(raw, source=source)
    from pate import planner as P

    if P.needs_plan(config):
        _validated(P.probe(config), source, explicit_seed)  # every other setting, as usual
        if facts is None:
            facts = P.facts_of(_load_data(config))
        config, _ = plan_config(config, facts, wording=wording)
    return _validated(config, source, explicit_seed)


def plan_config(config: dict, facts, *, wording: str = "config",
                remaining_eps: float | None = None):
    """:func:`pate.planner.plan_config` with this module's calibration and orders: ``(filled
    config, plan)``, or :class:`pate.planner.PlanError`."""
    from pate import planner as P

    return P.plan_config(config, facts, calibration=calibration, orders=orders, wording=wording,
                         remaining_eps=remaining_eps)


def plan_for(config: dict, facts, *, wording: str = "config", remaining_eps: float | None = None):
    """:func:`pate.planner.plan_for` (the plan of a filled config) with this module's
    calibration and orders."""
    from pate import planner as P

    return P.plan_for(config, facts, calibration=calibration, orders=orders, wording=wording,
                      remaining_eps=remaining_eps)


def _validated(config: dict, source: str, explicit_seed: bool) -> dict:
    if explicit_seed:
        config["_explicit_seed"] = ["seed"]
    try:
        validate(config, source=source)
    finally:
        config.pop("_explicit_seed", None)
    return config


def _load_data(config: dict):
    """The ``[data]`` source, loaded to count its records for the planner."""
    from pate.teachers.data import load_pate_data

    return load_pate_data(config["data"]["name"], **data_settings(config))


def data_settings(config: dict) -> dict:
    """Keyword arguments of :func:`pate.teachers.data.load_pate_data` (besides the name)."""
    d = config["data"]
    size = d.get("image_size")
    out = {"root": d.get("root"), "download": d["download"], "public_size": d.get("public_size"),
           "eval_size": d.get("eval_size")}
    if size is not None:
        out["image_size"] = tuple(size) if isinstance(size, list) else size
    return out


def ledger_path(config: dict) -> pathlib.Path | None:
    """The ledger this config charges: None when ``[privacy] ledger = false``."""
    setting = config["privacy"]["ledger"]
    if setting is False:
        return None
    if setting is True:
        from pate.ledger import default_ledger_path

        return default_ledger_path().resolve()
    return pathlib.Path(setting).expanduser().resolve()


def run_directory(config: dict) -> pathlib.Path:
    """The run directory: [run] run_dir, else runs/<name>."""
    run = config["run"]
    return pathlib.Path(run.get("run_dir") or pathlib.Path("runs") / run["name"])


def feature_cache_root(config: dict, *, run_dir) -> pathlib.Path | None:
    """The folder of the front-end feature cache of a run in ``run_dir``: ``[run]
    feature_cache`` (false: none), else ``$PATE_FEATURE_CACHE``, else ``.feature-cache`` beside
    the run directory (:func:`pate.teachers.feature_cache.resolve_root`)."""
    from pate.teachers.feature_cache import resolve_root

    return resolve_root(config["run"].get("feature_cache"),
                        runs_root=pathlib.Path(run_dir).absolute().parent)
