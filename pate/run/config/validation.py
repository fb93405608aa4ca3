"""The semantic checks of a normalised config (:func:`validate`), one function per table or
concern; every error names the table, the key and the value, and says what to do."""

from __future__ import annotations

import pathlib
from typing import Any

from pate import mechanisms
from pate.run.config.messages import checked, error_at, setting
from pate.run.config.settings import (
    aggregator_params,
    class_means_rule,
    cluster_settings,
    orders,
    records_needed_text,
    student_settings,
    teacher_settings,
)


def _check_run_table(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    run = config["run"]
    if run.get("seed") is not None:
        checked(f"{source}: [run] seed", v.check_int, run["seed"], "seed", minimum=0)
    if run["secure"] and run.get("seed") is not None:
        raise error_at(
            source,
            "[run] secure = true draws noise from OS entropy and refuses a seed; "
            "remove [run] seed (or --seed), or set secure = false",
        )
    if "threads" in run:
        from pate.core.threads import check_threads

        checked(source, check_threads, run["threads"], setting("run", "threads", source=source))
    if not run["name"] or "/" in run["name"]:
        raise error_at(
            source, f"[run] name must be a non-empty name without '/', got {run['name']!r}"
        )
    if run.get("feature_cache") == "":
        raise error_at(
            source,
            "[run] feature_cache must be a folder path, true (the default folder) "
            "or false (no cache), got an empty string",
        )


def _check_data_table(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    data = config["data"]
    for key in ("public_size", "eval_size", "records"):
        if key in data:
            checked(f"{source}: [data] {key}", v.check_int, data[key], key, minimum=1)
    if data.get("classes") is not None:
        from pate.teachers.data import check_class_names

        checked(f"{source}: [data] classes", check_class_names, data["classes"])
    if not data.get("split_column", "split").strip():
        raise error_at(source, "[data] split_column must name a column, got an empty string")
    from pate.teachers.data import DATASET_NAMES

    if "records" not in data and data["name"] not in DATASET_NAMES:
        raise error_at(source, records_needed_text(setting("data", "records", source=source)))
    if "image_size" in data:
        size = data["image_size"]
        if not data["name"].startswith("imagefolder:"):
            raise error_at(
                source,
                "[data] image_size applies to imagefolder:PATH datasets only "
                f"(the size their images are resized to), not {data['name']!r}",
            )
        sizes = size if isinstance(size, list) else [size]
        if len(sizes) not in (1, 2) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes
        ):
            raise error_at(
                source,
                f"[data] image_size must be a positive integer or [height, width], got {size!r}",
            )


def _check_teacher_count(config: dict, source: str, knn_run: bool) -> None:
    """``[partition] num_teachers``: a positive integer, or the whole table left out by a
    mechanism that trains no teachers."""
    from pate.analysis import validation as v

    part = config["partition"]
    if knn_run:
        # no teachers: the private records vote through their nearest neighbours, record-level
        if "num_teachers" in part or "unit_ids" in part or part["mode"] != "random":
            raise error_at(
                source,
                f"[partition] does not apply to mechanism = "
                f"{config['aggregator']['mechanism']!r}: it trains no teachers (the "
                "private records vote through their nearest neighbours, with "
                "record-level protection); remove the [partition] table",
            )
    elif "num_teachers" not in part or part["num_teachers"] == "auto":
        raise error_at(
            source,
            "[partition] num_teachers was left to the planner but no plan was "
            "made (pate.run.planner.plan_config); give a number of teachers",
        )
    elif isinstance(part["num_teachers"], str):
        raise error_at(
            source,
            f'[partition] num_teachers must be an integer or "auto" (the '
            f"planner chooses), got {part['num_teachers']!r}",
        )
    else:
        checked(
            f"{source}: [partition] num_teachers",
            v.check_int,
            part["num_teachers"],
            "num_teachers",
            minimum=1,
        )


def _check_partition_mode(config: dict, source: str) -> None:
    from pate.analysis import validation as v

    part = config["partition"]
    if part["mode"] == "stratified":
        raise error_at(
            source,
            '[partition] mode = "stratified" is no longer offered: dealing the '
            "records class by class moves most records to another teacher when "
            "one record is added, so the guarantee would hold for replacing a "
            'record only. Use mode = "random" (each record\'s teacher is a keyed '
            "hash of the record: adding or removing one changes one teacher)",
        )
    checked(f"{source}: [partition] mode", v.check_choice, part["mode"], "mode", ("random", "unit"))
    if (part["mode"] == "unit") != ("unit_ids" in part):
        raise error_at(
            source,
            "[partition] unit_ids (a .npy file of one privacy-unit id per private "
            'record) is required with mode = "unit" and only then',
        )
    if "unit_ids" in part and not pathlib.Path(part["unit_ids"]).is_file():
        raise error_at(source, f"[partition] unit_ids file not found: {part['unit_ids']}")


def _check_mechanism(config: dict, source: str) -> tuple[Any, list[str]]:
    """The ``[aggregator]`` mechanism and which of its noise parameters are given: returns its
    spec and the parameters set to \"auto\"."""
    from pate.analysis import validation as v

    agg = config["aggregator"]
    mech = checked(
        f"{source}: [aggregator] mechanism",
        v.check_choice,
        agg["mechanism"],
        "mechanism",
        tuple(mechanisms.REGISTRY),
    )
    spec = mechanisms.get(mech)
    if spec.needs_student:
        raise error_at(
            source,
            f"[aggregator] mechanism = {mech!r} needs the student's predictions on "
            "every query, which a pipeline run does not have; use it from Python "
            "(pate.student.select)",
        )
    needed = spec.param_names
    required = [p.name for p in spec.params if p.required]
    for key in required:
        if key not in agg:
            optional = [f"{p.name} (default {p.default:g})" for p in spec.params if not p.required]
            raise error_at(
                source,
                f"[aggregator] mechanism = {mech!r} needs {', '.join(required)}"
                + (f" (optional: {', '.join(optional)})" if optional else "")
                + f"; {key} is missing",
            )
    extra = [k for k in mechanisms.all_param_names() if k in agg and k not in needed]
    if extra:
        raise error_at(source, f"[aggregator] {', '.join(extra)} do(es) not apply to {mech!r}")
    for key in needed:
        if isinstance(agg.get(key), str) and agg[key] != "auto":
            raise error_at(
                source, f'[aggregator] {key} must be a number or "auto", got {agg[key]!r}'
            )
    return spec, [k for k in needed if agg.get(k) == "auto"]


def _check_queries_and_target(config: dict, source: str, auto: list[str]) -> None:
    """``[aggregator] queries`` and ``target_eps`` (the latter only with calibrated noise)."""
    from pate.analysis import validation as v

    agg, priv = config["aggregator"], config["privacy"]
    if isinstance(agg.get("queries"), str):
        raise error_at(
            source,
            f'[aggregator] queries must be an integer or "auto" (the planner '
            f"chooses), got {agg['queries']!r}"
            if agg["queries"] != "auto"
            else '[aggregator] queries = "auto" was left to the planner but no plan was made',
        )
    if "queries" in agg:
        checked(
            f"{source}: [aggregator] queries", v.check_int, agg["queries"], "queries", minimum=1
        )
    if auto:
        if "target_eps" not in agg or "queries" not in agg:
            raise error_at(
                source,
                f'[aggregator] {", ".join(auto)} = "auto" calibrates the noise '
                "for a target: set target_eps (the epsilon of this run's answers "
                "and release) and queries (how many public items are asked)",
            )
        checked(
            f"{source}: [aggregator] target_eps", v.check_positive, agg["target_eps"], "target_eps"
        )
        if priv.get("budget_eps") is not None and agg["target_eps"] > priv["budget_eps"]:
            raise error_at(
                source,
                f"{setting('aggregator', 'target_eps', source=source)} "
                f"({agg['target_eps']:g}, this run's spend) exceeds "
                f"{setting('privacy', 'budget_eps', source=source)} "
                f"({priv['budget_eps']:g}), the dataset's lifetime budget",
            )
    elif "target_eps" in agg:
        raise error_at(
            source,
            '[aggregator] target_eps only applies with a noise parameter = "auto" '
            '(e.g. sigma2 = "auto"); remove it or calibrate a parameter',
        )


def _check_noise_and_basis(config: dict, source: str, spec) -> None:
    """The noise parameters' values (\"auto\" ones as placeholders), the noise seed, the budget
    basis and the ledger setting."""
    from pate.analysis import validation as v

    run, agg, priv = config["run"], config["aggregator"], config["privacy"]
    checked(
        source,
        spec.validate,
        {k: (1.0 if agg[k] == "auto" else agg[k]) for k in spec.param_names if k in agg},
        prefix="[aggregator] ",
    )
    if "noise_seed" in agg:
        checked(
            f"{source}: [aggregator] noise_seed",
            v.check_int,
            agg["noise_seed"],
            "noise_seed",
            minimum=0,
        )
        if run["secure"]:
            raise error_at(
                source,
                "[run] secure = true refuses [aggregator] noise_seed (seeded noise "
                "is replayable); remove one of them",
            )
    checked(
        f"{source}: [aggregator] budget_basis",
        v.check_choice,
        agg["budget_basis"],
        "budget_basis",
        ("data-independent", "data-dependent"),
    )
    if agg["budget_basis"] == "data-dependent" and (priv["ledger"] is not False or priv["private"]):
        raise error_at(
            source,
            '[aggregator] budget_basis = "data-dependent" stops on a cost that '
            "depends on the private votes: WHEN it stops leaks information no "
            "epsilon accounts for. It is refused unless [privacy] ledger = false "
            "and [privacy] private = false mark the run as an exploration that is "
            'NOT private; use budget_basis = "data-independent"',
        )
    if priv["ledger"] == "":
        raise error_at(
            source,
            "[privacy] ledger must be a path, true (the default ledger) or false, "
            "got an empty string",
        )


def _check_privacy_table(config: dict, source: str) -> None:
    """Delta, the budget, the conversion, the orders and the sanitized release's parameters."""
    from pate.analysis import validation as v

    agg, priv = config["aggregator"], config["privacy"]
    checked(f"{source}: {setting('privacy', 'delta', source=source)}", v.check_delta, priv["delta"])
    if priv.get("budget_eps") is not None:
        checked(
            f"{source}: {setting('privacy', 'budget_eps', source=source)}",
            v.check_positive,
            priv["budget_eps"],
            "budget_eps",
        )
    elif priv["ledger"] is False and agg.get("target_eps") is None:
        raise error_at(
            source,
            f"without a ledger ({setting('privacy', 'ledger', source=source)} = "
            f"false) the budget is the config's: set "
            f"{setting('privacy', 'budget_eps', source=source)} (or "
            f"{setting('aggregator', 'target_eps', source=source)} with calibrated "
            "noise)",
        )
    checked(
        f"{source}: [privacy] conversion",
        v.check_choice,
        priv["conversion"],
        "conversion",
        ("classic", "tight"),
    )
    orders(config)  # validates
    order = checked(
        f"{source}: [privacy] release_order", v.check_order, priv["release_order"], "release_order"
    )
    beta = checked(
        f"{source}: [privacy] release_beta", v.check_positive, priv["release_beta"], "release_beta"
    )
    checked(
        f"{source}: [privacy] release_sigma_ss",
        v.check_positive,
        priv["release_sigma_ss"],
        "release_sigma_ss",
    )
    if not order < 1.0 / (2.0 * beta):
        raise error_at(
            source,
            f"[privacy] release_order ({order}) must be < 1/(2 release_beta) = "
            f"{1.0 / (2.0 * beta):.6g}; lower release_beta (e.g. 0.4/release_order)",
        )


def validate(config: dict, *, source: str = "config") -> dict:
    """Semantic checks across keys (noise parameters, release parameters, student and teacher
    recipes). Imports torch (through the teacher and student recipes); call it once, up front."""
    _check_run_table(config, source)
    _check_data_table(config, source)
    knn_run = (
        mechanisms.REGISTRY.get(config["aggregator"]["mechanism"]) is not None
        and mechanisms.get(config["aggregator"]["mechanism"]).kind.reads_private_records
    )
    _check_teacher_count(config, source, knn_run)
    _check_knn(config, source, knn_run)
    _check_partition_mode(config, source)

    spec, auto = _check_mechanism(config, source)
    _check_queries_and_target(config, source, auto)
    _check_noise_and_basis(config, source, spec)
    _check_privacy_table(config, source)
    if auto:  # the privacy table is valid now: calibrate (public quantities only)
        checked(f"{source}: [aggregator]", spec.validate, aggregator_params(config))

    from pate.teachers.ensemble import TeacherConfig

    checked(f"{source}: [teachers]", TeacherConfig, **teacher_settings(config))
    _check_cluster(config, source)
    from pate.student.train import Student

    checked(f"{source}: [student]", Student(**student_settings(config))._validated)
    _check_student_targets(config, source, spec)
    return config


def _check_student_targets(config: dict, source: str, spec) -> None:
    from pate.analysis import validation as v

    student = config["student"]
    kind = checked(
        f"{source}: [student] targets",
        v.check_choice,
        student.get("targets", "hard"),
        "targets",
        ("hard", "soft"),
    )
    if "temperature" in student:
        if kind != "soft":
            raise error_at(
                source,
                '[student] temperature applies to targets = "soft" only (it '
                "scales the labelling rule's class scores); remove it or set "
                'targets = "soft"',
            )
        checked(
            f"{source}: [student] temperature",
            v.check_positive,
            student["temperature"],
            "temperature",
        )
    if student.get("combine_with_rule", False):
        features = (config.get("knn") or {}).get("features")
        if kind != "soft":
            raise error_at(
                source,
                "[student] combine_with_rule = true multiplies the student with "
                "its labelling rule at the soft targets' temperature: set "
                'targets = "soft" (and temperature), or remove combine_with_rule',
            )
        if class_means_rule(config) == "qda":
            raise error_at(
                source,
                "[student] combine_with_rule = true multiplies the student "
                'with a rule affine in its embedding (rule = "lda" or '
                '"logistic"); the "qda" rule is quadratic: remove '
                "combine_with_rule",
            )
        if features == "student":
            raise error_at(
                source,
                "[student] combine_with_rule = true needs a PCA front-end "
                '([knn] features = "scatternet" or "none"), not '
                'features = "student"; remove combine_with_rule',
            )
    if kind == "soft" and not spec.kind.gives_label_scores:
        raise error_at(
            source,
            f'[student] targets = "soft" needs class scores for every query, '
            f"which mechanism {spec.name!r} does not publish (it releases a noisy "
            'argmax only); use targets = "hard", or mechanism = "class-means"',
        )


def _check_knn(config: dict, source: str, knn_run: bool) -> None:
    from pate.analysis import validation as v

    knn = config.get("knn") or {}
    if knn and not knn_run:
        raise error_at(
            source,
            f"[knn] applies to the mechanisms that read the private records "
            f'("private-knn", "class-means") only, not '
            f"{config['aggregator']['mechanism']!r}; remove the [knn] table",
        )
    _check_knn_features(config, source, knn)
    if "dims" in knn:
        checked(f"{source}: [knn] dims", v.check_int, knn["dims"], "dims", minimum=1)
    if "rule" in knn:
        _check_knn_rule(config, source, knn)
    if knn.get("features") == "scatternet":
        import importlib.util

        if importlib.util.find_spec("kymatio") is None:
            raise error_at(
                source,
                '[knn] features = "scatternet" needs kymatio, which is not '
                'installed (pip install kymatio), or set features = "none"',
            )


def _check_knn_features(config: dict, source: str, knn: dict) -> None:
    """The [knn] front-end: features, and the settings that go (or never go) with it."""
    from pate.analysis import validation as v

    if "features" in knn:
        checked(
            f"{source}: [knn] features",
            v.check_choice,
            knn["features"],
            "features",
            ("none", "scatternet", "kernel", "quadratic", "student"),
        )
        if (
            knn["features"] in ("kernel", "quadratic")
            and not mechanisms.get(config["aggregator"]["mechanism"]).kind.releases_once
        ):
            raise error_at(
                source,
                f'[knn] features = "{knn["features"]}" is the class-means '
                "release's front-end (its rule becomes nonlinear); a neighbour "
                "search measures distances in the inputs: set features = "
                '"none"',
            )
    if knn.get("features") == "quadratic" and "dims" in knn:
        raise error_at(
            source,
            '[knn] features = "quadratic" keeps every column and product of '
            'two (the "qda" rule reads each class\'s covariance back): remove '
            "dims",
        )
    if knn.get("rule") == "qda" and knn.get("features") != "quadratic":
        raise error_at(
            source,
            '[knn] rule = "qda" reads each class\'s covariance from a release '
            "over a table's quadratic features: set [knn] features = "
            f'"quadratic" (got features = {knn.get("features")!r}), or rule = '
            '"lda" or "logistic"',
        )
    if (knn.get("features") == "student") != ("student_run" in knn):
        raise error_at(
            source,
            '[knn] features = "student" and [knn] student_run go together: '
            "student_run names the earlier run whose released student embeds "
            f"(got features={knn.get('features')!r}, "
            f"student_run={knn.get('student_run')!r})",
        )
    if "student_run" in knn and "dims" in knn:
        raise error_at(
            source,
            '[knn] dims applies to the PCA front-ends (features = "none", '
            '"scatternet" or "kernel"); a student embeds into its class probabilities: '
            "remove dims",
        )


def _check_knn_rule(config: dict, source: str, knn: dict) -> None:
    """[knn] rule: only for a mechanism that labels from one release, one of its rules."""
    from pate.analysis import validation as v
    from pate.core.labelling_rules import RULES

    mechanism = config["aggregator"]["mechanism"]
    if not mechanisms.get(mechanism).kind.releases_once:
        labellers = " or ".join(
            f'"{n}"' for n, spec in mechanisms.REGISTRY.items() if spec.kind.releases_once
        )
        raise error_at(
            source,
            f"[knn] rule is how {labellers} labels from its release; "
            f"{mechanism!r} has none: remove it",
        )
    checked(f"{source}: [knn] rule", v.check_choice, knn["rule"], "rule", RULES)


def _check_cluster(config: dict, source: str) -> None:
    from pate.teachers.cluster import ClusterConfig

    cluster = checked(f"{source}: [cluster]", ClusterConfig, **cluster_settings(config))
    if cluster.is_ray:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise error_at(
                source,
                '[cluster] backend = "ray" needs Ray, which is not installed: '
                "pip install 'pate-learn[ray]' (or backend = \"local\")",
            )
        checked(f"{source}: [cluster]", cluster.task_device, config["run"]["device"])
