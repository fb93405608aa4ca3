"""The checks across keys of a parsed config (:func:`validate`): each a
:class:`pate.run.config.errors.SettingError` naming the table, the key and the value, and
saying what to do."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

from pate import mechanisms
from pate.run.config.errors import RECORDS_NEEDED, SettingError

#: A parsed :class:`pate.run.config.tables.RunConfig` (that module calls this one: the type is
#: not imported here, so that the modules do not import each other).
RunConfig = Any


def _checked(table: str, key: str | None, value: Any, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, its ``ValueError`` / ``TypeError`` turned into a
    :class:`SettingError` of ``table`` and ``key``."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        where = f"[{table}] {key}" if key else f"[{table}]"
        raise SettingError(table, key, value, f"{where}: {exc}") from None


def _check_run_table(config: RunConfig) -> None:
    run = config.run
    if run.secure and run.seed is not None:
        problem = (
            "[run] secure = true draws noise from OS entropy and refuses a seed; "
            "remove [run] seed (or --seed), or set secure = false"
        )
        raise SettingError("run", "seed", run.seed, problem)
    if not run.name or "/" in run.name:
        problem = f"[run] name must be a non-empty name without '/', got {run.name!r}"
        raise SettingError("run", "name", run.name, problem)
    if run.feature_cache == "":
        problem = (
            "[run] feature_cache must be a folder path, true (the default folder) "
            "or false (no cache), got an empty string"
        )
        raise SettingError("run", "feature_cache", "", problem)


def _check_data_table(config: RunConfig) -> None:
    from pate.teachers.builtin_datasets import DATASET_NAMES
    from pate.teachers.data import check_class_names

    data = config.data
    if data.classes is not None:
        _checked("data", "classes", data.classes, check_class_names, list(data.classes))
    if not data.split_column.strip():
        problem = "[data] split_column must name a column, got an empty string"
        raise SettingError("data", "split_column", "", problem)
    if data.records is None and data.name not in DATASET_NAMES:
        raise SettingError("data", "records", None, RECORDS_NEEDED)
    _check_table_keys(data)
    size = data.image_size
    if size is not None:
        if not data.name.startswith("imagefolder:"):
            problem = (
                "[data] image_size applies to imagefolder:PATH datasets only "
                f"(the size their images are resized to), not {data.name!r}"
            )
            raise SettingError("data", "image_size", size, problem)
        sizes = size if isinstance(size, tuple) else (size,)
        if len(sizes) not in (1, 2) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes
        ):
            problem = (
                "[data] image_size must be a positive integer or [height, width], got "
                f"{list(size) if isinstance(size, tuple) else size!r}"
            )
            raise SettingError("data", "image_size", size, problem)


def _check_table_keys(data) -> None:
    """The keys of a table with named columns: ``public`` (and ``evaluation``) with a CSV or
    Parquet ``name`` and a ``label``; ``label``, ``id``, ``drop`` and ``preprocess`` only there
    (or for tables given to ``pate.fit``, recorded as ``memory:`` data)."""
    declared = {"label": data.label, "id": data.id, "drop": data.drop}
    declared["preprocess"] = None if data.preprocess == "auto" else data.preprocess
    if (
        data.public is None
        and data.evaluation is None
        and all(value is None for value in declared.values())
    ):
        return  # no table: pandas is not imported
    from pate.teachers.tables import PREPROCESS, is_table

    in_memory = data.name.startswith("memory:")
    if data.public is not None and not is_table(data.name):
        problem = (
            f"[data] public names the public table of a table with named columns; [data] name "
            f"must then be a CSV or Parquet file (csv:PATH, parquet:PATH), not {data.name!r}"
        )
        raise SettingError("data", "public", data.public, problem)
    for name in ("public", "evaluation"):
        value = getattr(data, name)
        if value is not None and not is_table(value):
            problem = f"[data] {name} must be a CSV or Parquet file (csv:PATH, parquet:PATH)"
            raise SettingError("data", name, value, problem)
    if data.evaluation is not None and data.public is None:
        problem = "[data] evaluation needs [data] public (the public table beside it)"
        raise SettingError("data", "evaluation", data.evaluation, problem)
    if data.public is not None and data.label is None:
        problem = '[data] label must name the label column of the tables (e.g. "outcome")'
        raise SettingError("data", "label", None, problem)
    for name, value in declared.items():
        if value is not None and data.public is None and not in_memory:
            problem = (
                f"[data] {name} applies to a table with named columns and its own public "
                f'file: give [data] public = "csv:PATH" (or leave {name} out)'
            )
            raise SettingError("data", name, value, problem)
    if data.drop is not None and not all(isinstance(c, str) and c for c in data.drop):
        problem = "[data] drop must be a list of column names"
        raise SettingError("data", "drop", list(data.drop), problem)
    objects = in_memory and data.preprocess.startswith("python:")  # a transformer given to fit
    if data.preprocess not in PREPROCESS and not objects:
        problem = f"[data] preprocess must be one of {', '.join(PREPROCESS)}"
        raise SettingError("data", "preprocess", data.preprocess, problem)
    if data.public is not None and (data.public_size or data.eval_size):
        problem = "[data] public_size / eval_size do not apply: the tables give their own rows"
        raise SettingError("data", "public_size", data.public_size, problem)


def _check_partition_table(config: RunConfig, knn_run: bool) -> None:
    """``[partition]``: a number of teachers, or the whole table left out by a mechanism that
    trains no teachers; the mode and its unit ids."""
    part = config.partition
    if knn_run:
        # no teachers: the private records vote through their nearest neighbours, record-level
        if (
            part.num_teachers is not None
            or part.unit_ids is not None
            or part.mode not in (None, "random")
        ):
            problem = (
                f"[partition] does not apply to mechanism = {config.aggregator.mechanism!r}: it "
                "trains no teachers (the private records vote through their nearest "
                "neighbours, with record-level protection); remove the [partition] table"
            )
            raise SettingError("partition", "num_teachers", part.num_teachers, problem)
    if part.mode not in (None, "random", "unit"):
        problem = f'[partition] mode must be one of "random", "unit", got {part.mode!r}'
        raise SettingError("partition", "mode", part.mode, problem)
    if config.data.id is not None and (part.mode is not None or part.unit_ids is not None):
        problem = (
            f"[data] id = {config.data.id!r} names each row's person, and the teachers are "
            "dealt by person; remove [partition] mode and unit_ids (a record-by-record deal "
            "would split a person among teachers)"
        )
        raise SettingError("partition", "mode", part.mode, problem)
    if (part.mode == "unit") != (part.unit_ids is not None):
        problem = (
            "[partition] unit_ids (a .npy file of one privacy-unit id per private "
            'record) is required with mode = "unit" and only then'
        )
        raise SettingError("partition", "unit_ids", part.unit_ids, problem)
    if part.unit_ids is not None and not pathlib.Path(part.unit_ids).is_file():
        problem = f"[partition] unit_ids file not found: {part.unit_ids}"
        raise SettingError("partition", "unit_ids", part.unit_ids, problem)


def _check_mechanism(config: RunConfig) -> tuple[Any, list[str]]:
    """The ``[aggregator]`` mechanism and which of its noise parameters are given: returns its
    spec and the parameters set to \"auto\"."""
    agg = config.aggregator
    mech = agg.mechanism
    if mech not in mechanisms.REGISTRY:
        problem = (
            f"[aggregator] mechanism must be one of {', '.join(mechanisms.REGISTRY)}, got {mech!r}"
        )
        raise SettingError("aggregator", "mechanism", mech, problem)
    spec = mechanisms.get(mech)
    if spec.needs_student:
        problem = (
            f"[aggregator] mechanism = {mech!r} needs the student's predictions on "
            "every query, which a pipeline run does not have; use it from Python "
            "(pate.student.select)"
        )
        raise SettingError("aggregator", "mechanism", mech, problem)
    required = [p.name for p in spec.params if p.required]
    for name in required:
        if name not in agg.noise:
            optional = [f"{p.name} (default {p.default:g})" for p in spec.params if not p.required]
            problem = (
                f"[aggregator] mechanism = {mech!r} needs {', '.join(required)}"
                + (f" (optional: {', '.join(optional)})" if optional else "")
                + f"; {name} is missing"
            )
            raise SettingError("aggregator", name, None, problem)
    extra = [k for k in agg.noise if k not in spec.param_names]
    if extra:
        problem = f"[aggregator] {', '.join(extra)} do(es) not apply to {mech!r}"
        raise SettingError("aggregator", extra[0], agg.noise[extra[0]], problem)
    return spec, [k for k, v in agg.given.items() if v == "auto"]


def _check_queries_and_target(config: RunConfig, auto: list[str]) -> None:
    """``[aggregator] queries`` and ``target_eps`` (the latter only with calibrated noise)."""
    agg, priv = config.aggregator, config.privacy
    if auto:
        if agg.target_eps is None or agg.queries is None:
            problem = (
                f'[aggregator] {", ".join(auto)} = "auto" calibrates the noise '
                "for a target: set target_eps (the epsilon of this run's answers "
                "and release) and queries (how many public items are asked)"
            )
            raise SettingError("aggregator", "target_eps", agg.target_eps, problem)
        if priv.budget_eps is not None and agg.target_eps > priv.budget_eps:
            problem = (
                f"[aggregator] target_eps ({agg.target_eps:g}, this run's spend) exceeds "
                f"[privacy] budget_eps ({priv.budget_eps:g}), the dataset's lifetime budget"
            )
            raise SettingError("aggregator", "target_eps", agg.target_eps, problem)
    elif agg.target_eps is not None:
        problem = (
            '[aggregator] target_eps only applies with a noise parameter = "auto" '
            '(e.g. sigma2 = "auto"); remove it or calibrate a parameter'
        )
        raise SettingError("aggregator", "target_eps", agg.target_eps, problem)


def _check_noise_and_basis(config: RunConfig, spec) -> None:
    """The noise parameters' values (\"auto\" ones as placeholders), the noise seed, the budget
    basis and the ledger setting."""
    agg, priv = config.aggregator, config.privacy
    params = {k: (1.0 if v == "auto" else v) for k, v in agg.given.items()}
    _checked("aggregator", None, params, spec.validate, params, prefix="[aggregator] ")
    if agg.noise_seed is not None and config.run.secure:
        problem = (
            "[run] secure = true refuses [aggregator] noise_seed (seeded noise "
            "is replayable); remove one of them"
        )
        raise SettingError("aggregator", "noise_seed", agg.noise_seed, problem)
    if agg.budget_basis == "data-dependent" and (priv.ledger is not False or priv.private):
        problem = (
            '[aggregator] budget_basis = "data-dependent" stops on a cost that '
            "depends on the private votes: WHEN it stops leaks information no "
            "epsilon accounts for. It is refused unless [privacy] ledger = false "
            "and [privacy] private = false mark the run as an exploration that is "
            'NOT private; use budget_basis = "data-independent"'
        )
        raise SettingError("aggregator", "budget_basis", agg.budget_basis, problem)
    if priv.ledger == "":
        problem = (
            "[privacy] ledger must be a path, true (the default ledger) or false, "
            "got an empty string"
        )
        raise SettingError("privacy", "ledger", "", problem)


def _check_privacy_table(config: RunConfig) -> None:
    """The budget without a ledger, the orders and the sanitized release's parameters."""
    priv = config.privacy
    if priv.budget_eps is None and priv.ledger is False and config.aggregator.target_eps is None:
        problem = (
            "without a ledger ([privacy] ledger = false) the budget is the config's: set "
            "[privacy] budget_eps (or [aggregator] target_eps with calibrated noise)"
        )
        raise SettingError("privacy", "budget_eps", None, problem)
    priv.order_grid()  # validates
    if not priv.release_order < 1.0 / (2.0 * priv.release_beta):
        problem = (
            f"[privacy] release_order ({priv.release_order}) must be < 1/(2 release_beta) = "
            f"{1.0 / (2.0 * priv.release_beta):.6g}; lower release_beta (e.g. 0.4/release_order)"
        )
        raise SettingError("privacy", "release_order", priv.release_order, problem)


def validate(config: RunConfig) -> None:
    """The checks across keys (noise parameters, release parameters, student and teacher
    recipes); settings left to the planner hold its placeholders (:func:`pate.run.planner.probe`).
    Imports torch (through the teacher and student recipes)."""
    from pate.run.planner import needs_plan, probe

    config = probe(config) if needs_plan(config) else config
    _check_run_table(config)
    _check_data_table(config)
    spec = mechanisms.REGISTRY.get(config.aggregator.mechanism)
    knn_run = spec is not None and spec.kind.reads_private_records
    _check_partition_table(config, knn_run)
    _check_knn(config, knn_run)
    spec, auto = _check_mechanism(config)
    _check_queries_and_target(config, auto)
    _check_noise_and_basis(config, spec)
    _check_privacy_table(config)
    if auto:  # the privacy table is valid now: calibrate (public quantities only)
        params = config.aggregator_params()
        _checked("aggregator", None, params, spec.validate, params)

    from pate.teachers.ensemble import TeacherConfig

    _checked("teachers", None, None, TeacherConfig, **config.teacher_settings())
    _check_cluster(config)
    from pate.student.train import Student

    _checked("student", None, None, Student(**config.student_settings())._validated)
    _check_student_targets(config, spec)


def _check_student_targets(config: RunConfig, spec) -> None:
    student = config.student
    soft = student.targets == "soft"
    if student.temperature is not None and not soft:
        problem = (
            '[student] temperature applies to targets = "soft" only (it '
            "scales the labelling rule's class scores); remove it or set "
            'targets = "soft"'
        )
        raise SettingError("student", "temperature", student.temperature, problem)
    if student.combine_with_rule:
        if not soft:
            problem = (
                "multiplies the student with its labelling rule at the soft targets' "
                'temperature: set targets = "soft" (and temperature), or remove combine_with_rule'
            )
        elif config.knn.labelling_rule == "qda":
            problem = (
                'multiplies the student with a rule affine in its embedding (rule = "lda" or '
                '"logistic"); the "qda" rule is quadratic: remove combine_with_rule'
            )
        elif config.knn.features == "student":
            problem = (
                'needs a PCA front-end ([knn] features = "scatternet", "scatternet+patches" '
                'or "none"), not '
                'features = "student"; remove combine_with_rule'
            )
        else:
            problem = ""
        if problem:
            problem = f"[student] combine_with_rule = true {problem}"
            raise SettingError("student", "combine_with_rule", True, problem)
    if soft and not spec.kind.gives_label_scores:
        problem = (
            f'[student] targets = "soft" needs class scores for every query, '
            f"which mechanism {spec.name!r} does not publish (it releases a noisy "
            'argmax only); use targets = "hard", or mechanism = "class-means"'
        )
        raise SettingError("student", "targets", "soft", problem)


def _check_knn(config: RunConfig, knn_run: bool) -> None:
    knn = config.knn
    if knn != type(knn)() and not knn_run:
        problem = (
            f"[knn] applies to the mechanisms that read the private records "
            f'("private-knn", "class-means") only, not '
            f"{config.aggregator.mechanism!r}; remove the [knn] table"
        )
        raise SettingError("knn", None, None, problem)
    releases_once = knn_run and mechanisms.get(config.aggregator.mechanism).kind.releases_once
    if knn.features in ("kernel", "quadratic") and not releases_once:
        problem = (
            f'[knn] features = "{knn.features}" is the class-means release\'s front-end (its '
            "rule becomes nonlinear); a neighbour search measures distances in the inputs: "
            'set features = "none"'
        )
    elif knn.features == "quadratic" and knn.dims is not None:
        problem = (
            '[knn] features = "quadratic" keeps every column and product of two (the "qda" '
            "rule reads each class's covariance back): remove dims"
        )
    elif (knn.features == "student") != (knn.student_run is not None):
        problem = (
            '[knn] features = "student" and [knn] student_run go together: student_run names '
            f"the earlier run whose released student embeds (got features={knn.features!r}, "
            f"student_run={knn.student_run!r})"
        )
    elif knn.student_run is not None and knn.dims is not None:
        problem = (
            '[knn] dims applies to the PCA front-ends (features = "none", "scatternet", '
            '"scatternet+patches" or "kernel"); a student embeds into its class probabilities: '
            "remove dims"
        )
    elif (
        knn.features in ("scatternet", "scatternet+patches")
        and importlib.util.find_spec("kymatio") is None
    ):
        problem = (
            f'[knn] features = "{knn.features}" needs kymatio, which is not installed (pip '
            'install kymatio), or set features = "none"'
        )
    else:
        problem = ""
    if problem:
        raise SettingError("knn", "features", knn.features, problem)
    if knn.rule is not None:
        _check_knn_rule(config, releases_once)


def _check_knn_rule(config: RunConfig, releases_once: bool) -> None:
    """[knn] rule: only for a mechanism that labels from one release, one of its rules."""
    from pate.core.labelling_rules import RULES

    rule = config.knn.rule
    if not releases_once:
        labellers = " or ".join(
            f'"{n}"' for n, spec in mechanisms.REGISTRY.items() if spec.kind.releases_once
        )
        problem = (
            f"[knn] rule is how {labellers} labels from its release; "
            f"{config.aggregator.mechanism!r} has none: remove it"
        )
        raise SettingError("knn", "rule", rule, problem)
    if rule not in RULES:
        problem = f"[knn] rule must be one of {', '.join(map(json.dumps, RULES))}, got {rule!r}"
        raise SettingError("knn", "rule", rule, problem)
    if rule == "qda" and config.knn.features != "quadratic":
        problem = (
            "[knn] rule = \"qda\" reads each class's covariance from a release over a table's "
            f'quadratic features: set [knn] features = "quadratic" (got features = '
            f'{config.knn.features!r}), or rule = "lda" or "logistic"'
        )
        raise SettingError("knn", "rule", rule, problem)


def _check_cluster(config: RunConfig) -> None:
    from pate.teachers.cluster import ClusterConfig

    cluster = _checked("cluster", None, None, ClusterConfig, **config.cluster.settings())
    if cluster.is_ray:
        if importlib.util.find_spec("ray") is None:
            problem = (
                '[cluster] backend = "ray" needs Ray, which is not installed: '
                "pip install 'pate-learn[ray]' (or backend = \"local\")"
            )
            raise SettingError("cluster", "backend", "ray", problem)
        _checked("cluster", None, None, cluster.task_device, config.run.device)
