"""The config's tables: one frozen dataclass per TOML table, each key declared once
(:func:`pate.run.config.keys.key`), what the table says beyond its keys as methods;
:func:`parsed_table` checks a table and fills in its defaults."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import types
from collections.abc import Mapping
from typing import Any

from pate import mechanisms
from pate.run.config.errors import RECORDS_NEEDED, SettingError
from pate.run.config.keys import (
    AT_LEAST_ONE,
    NOT_NEGATIVE,
    POSITIVE,
    REQUIRED,
    TYPE_NAMES,
    Interval,
    Options,
    accepts,
    describe,
    frozen,
    key,
    thawed,
    type_ok,
)

#: The entry of a saved config that records what the planner filled in (:mod:`pate.run.planner`).
PLANNED = "planned"
#: The sanitized release's parameters where they may be left out: by ``pate.fit`` (the
#: Fashion-MNIST config's: order 10 < 1 / (2 beta) = 12.5), and by a config without a release
#: (``[privacy] release = false``: validated like any others, never used).
RELEASE_DEFAULTS = {"release_order": 10.0, "release_beta": 0.04, "release_sigma_ss": 6.0}
#: ``[student] temperature`` when ``targets = "soft"`` leaves it out (chosen in a development
#: run that looked at private labels: docs/benchmarks.md lists it).
SOFT_TARGET_TEMPERATURE = 10.0
#: What ``[knn] dims`` left out means (besides the data-dependent defaults of ``RunConfig.knn_settings``).
KNN_DIMS = 64


# ------------------------------------------------------------------------------ tables


class _Table:
    """What every table can do: be built from keyword values (:meth:`of`)."""

    @classmethod
    def of(cls, **values: Any):
        """The table of ``values`` (None: left out), each checked as a TOML key would be."""
        table = next(name for name, kind in TABLE_TYPES.items() if kind is cls)
        return parsed_table(table, {k: v for k, v in values.items() if v is not None})


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunTable(_Table):
    """``[run]``: what the run is called, its seed and where it runs."""

    name: str = key(str, REQUIRED)
    seed: int | None = key(int, None, NOT_NEGATIVE)  # None: keys and streams from OS entropy
    secure: bool = key(bool, False)
    device: str = key(str, "auto")
    run_dir: str | None = key(str, None)
    smoke_test: bool = key(bool, False)
    threads: int | None = key(
        int, None, Interval(1, integer=True, meaning="the number of CPU threads")
    )
    feature_cache: str | bool | None = key((str, bool), None)

    def directory(self) -> pathlib.Path:
        """The run directory: ``run_dir``, else ``runs/<name>``."""
        return pathlib.Path(self.run_dir or pathlib.Path("runs") / self.name)

    def feature_cache_root(self, *, run_dir) -> pathlib.Path | None:
        """The folder of the front-end feature cache of a run in ``run_dir``: ``feature_cache``
        (false: none), else ``$PATE_FEATURE_CACHE``, else ``.feature-cache`` beside the run
        directory (:func:`pate.teachers.feature_cache.resolve_root`)."""
        from pate.teachers.feature_cache import resolve_root

        return resolve_root(self.feature_cache, runs_root=pathlib.Path(run_dir).absolute().parent)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataTable(_Table):
    """``[data]``: the data source, its public and evaluation sizes, and the public facts the
    user declares: the label set (``classes``), the column marking a pool's rows
    (``split_column``), whether its evaluation rows are public (``evaluation_public``) and the
    approximate number of private records (``records``, :meth:`declared_records`). A table with
    named columns (``name`` a CSV / Parquet file) names its own ``public`` and ``evaluation``
    files, its ``label`` and privacy-unit ``id`` columns, the columns to ``drop`` and how it is
    encoded (``preprocess``: docs/own_data.md)."""

    name: str = key(str, REQUIRED, keyword="private=")
    root: str | None = key(str, None)
    download: bool = key(bool, False)
    public_size: int | None = key(int, None, AT_LEAST_ONE)
    eval_size: int | None = key(int, None, AT_LEAST_ONE)
    image_size: int | tuple[int, ...] | None = key((int, list), None)
    records: int | None = key(int, None, AT_LEAST_ONE)
    classes: tuple[str, ...] | None = key(list, None)
    split_column: str = key(str, "split")
    evaluation_public: bool = key(bool, False)
    public: str | None = key(str, None, keyword="public=")
    evaluation: str | None = key(str, None, keyword="evaluation=")
    label: str | None = key(str, None)
    id: str | None = key(str, None)
    drop: tuple[str, ...] | None = key(list, None)
    preprocess: str = key(str, "auto")

    def loader_settings(self) -> dict:
        """Keyword arguments of :func:`pate.teachers.data.load_pate_data` (besides the name);
        ``table``: the :class:`pate.teachers.tables.TableSpec` of a table with its own public
        file (None: a dataset name, or one pool marked by ``split_column``)."""
        table = None
        if self.public is not None:
            from pate.teachers.tables import TableSpec

            table = TableSpec(
                public=self.public,
                evaluation=self.evaluation,
                label=self.label,
                id=self.id,
                drop=tuple(self.drop or ()),
                preprocess=self.preprocess,
            )
        return {
            "root": self.root,
            "download": self.download,
            "public_size": self.public_size,
            "eval_size": self.eval_size,
            "classes": None if self.classes is None else list(self.classes),
            "split_column": self.split_column,
            "evaluation_public": self.evaluation_public,
            "table": table,
            "image_size": self.image_size,
        }

    def declared_records(self, data) -> tuple[int, str]:
        """``(records, basis)``: the number of private records every plan and published figure
        works from -- ``"declared"``: ``records``, the approximate number the user states as
        public; ``"builtin"``: a built-in dataset's private split (a published fact). Never the
        count of the user's own loaded records (that is internal)."""
        from pate.teachers.builtin_datasets import DATASET_NAMES

        if self.records is not None:
            return int(self.records), "declared"
        if self.name in DATASET_NAMES:
            return len(data.private), "builtin"
        raise SettingError("data", "records", None, RECORDS_NEEDED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionTable(_Table):
    """``[partition]``: how many teachers (None: a mechanism without teachers; "auto": left to
    the planner) and how records are dealt to them (``mode`` None: by person when the data has
    an id column, else record by record: :func:`pate.run.stages.partition.unit_ids_of`)."""

    num_teachers: int | str | None = key((int, str), None, AT_LEAST_ONE, "auto")
    mode: str | None = key(str, None, keyword="partition=")
    unit_ids: str | None = key(str, None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeachersTable(_Table):
    """``[teachers]``: the teachers' recipe (None: the recipe's default;
    :class:`pate.teachers.ensemble.TeacherConfig` checks it)."""

    model: str = key(str, "auto", keyword="teacher=")
    model_params: Mapping[str, Any] | None = key(dict, None)
    epochs: int | None = key(int, None)
    batch_size: int | None = key(int, None)
    lr: float | None = key(float, None)
    optimizer: str | None = key(str, None)
    weight_decay: float | None = key(float, None)
    momentum: float | None = key(float, None)
    augment: str | None = key(str, None)
    label_smoothing: float | None = key(float, None)
    trainer: str | None = key(str, None)
    chunk_size: int | None = key(int, None)
    memory_budget_mb: float | None = key(float, None)
    checkpoint: str | None = key(str, None)
    checkpoint_every_s: float | None = key(float, None)
    amp: bool | None = key(bool, None)
    n_jobs: int | None = key(int, None)
    features: str | None = key(str, None)
    standardize: str | None = key(str, None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregatorTable(_Table):
    """``[aggregator]``: the mechanism, the noise parameters given (``noise``: name -> value;
    ``"auto"`` ones are calibrated: :meth:`RunConfig.aggregator_params`), the queries and the
    budget basis."""

    mechanism: str = key(str, REQUIRED)
    noise: Mapping[str, float | str] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    queries: int | str | None = key((int, str), None, AT_LEAST_ONE, "auto")
    budget_basis: str = key(
        str, "data-independent", Options(("data-independent", "data-dependent"))
    )
    noise_seed: int | None = key(int, None, NOT_NEGATIVE)
    target_eps: float | None = key(float, None, POSITIVE)

    @property
    def spec(self) -> mechanisms.MechanismSpec:
        """The mechanism's registry entry (its kind, parameters and analysis)."""
        return mechanisms.get(self.mechanism)

    @property
    def given(self) -> dict:
        """The noise parameters of the configured mechanism that are given, as given."""
        return {k: self.noise[k] for k in self.spec.param_names if k in self.noise}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacyTable(_Table):
    """``[privacy]``: delta, the budget, the conversion and orders, the sanitized release and
    the ledger."""

    delta: float = key(float, REQUIRED, Interval(0, 1, closed="neither"))
    budget_eps: float | None = key(float, None, POSITIVE)
    orders: str | tuple[float, ...] = key((str, list), "default", "default", "reference", list)
    conversion: str = key(str, "classic", Options(("classic", "tight")))
    release_order: float = key(float, REQUIRED, Interval(1, closed="neither"))
    release_beta: float = key(float, REQUIRED, POSITIVE)
    release_sigma_ss: float = key(float, REQUIRED, POSITIVE)
    release: bool = key(bool, True, keyword="release=")
    ledger: str | bool = key((str, bool), True, keyword="ledger=")
    dataset: str | None = key(str, None)
    private: bool = key(bool, True)

    def ledger_path(self) -> pathlib.Path | None:
        """The ledger this config charges: None when ``ledger = false``."""
        if self.ledger is False:
            return None
        if self.ledger is True:
            from pate.ledger import default_ledger_path

            return default_ledger_path().resolve()
        return pathlib.Path(self.ledger).expanduser().resolve()

    def order_grid(self):
        """The Renyi orders of the analysis (``orders``: "default", "reference" or a list)."""
        from pate import analysis

        if self.orders == "default":
            return analysis.DEFAULT_ORDERS
        if self.orders == "reference":
            return analysis.REFERENCE_ORDERS
        try:
            return analysis.validation.check_orders(list(self.orders), "orders")
        except (ValueError, TypeError) as exc:
            raise SettingError("privacy", "orders", self.orders, f"[privacy] {exc}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudentTable(_Table):
    """``[student]``: the student's recipe (None: its default; :class:`pate.student.train.Student`
    checks it), what it is trained to (``targets``, ``temperature``) and whether it is released
    times its labelling rule (``combine_with_rule``; :mod:`pate.student.rule_product`)."""

    method: str | None = key(str, None)
    model: str | None = key(str, None, keyword="student=")
    epochs: int | None = key(int, None)
    steps_per_epoch: int | None = key(int, None)
    batch_size: int | None = key(int, None)
    unlabeled_ratio: int | None = key(int, None)
    threshold: float | None = key(float, None)
    unlabeled_weight: float | None = key(float, None)
    learning_rate: float | None = key(float, None)
    momentum: float | None = key(float, None)
    weight_decay: float | None = key(float, None)
    ema_decay: float | None = key(float, None)
    flip: bool | None = key(bool, None)
    pad: int | None = key(int, None)
    strong_ops: int | None = key(int, None)
    cutout: float | None = key(float, None)
    distribution_alignment: bool | None = key(bool, None)
    amp: bool | None = key(bool, None)
    targets: str | None = key(str, None, Options(("hard", "soft")))
    temperature: float | None = key(float, None, POSITIVE)
    combine_with_rule: bool | None = key(bool, None)

    def soft_temperature(self) -> float | None:
        """The temperature T of a student trained on soft targets softmax(T * scores) of the
        labelling rule's class scores (``targets = "soft"``), or None for hard labels."""
        if self.targets != "soft":
            return None
        return float(SOFT_TARGET_TEMPERATURE if self.temperature is None else self.temperature)


#: The ``[student]`` keys that say what the student is trained to, not how.
TARGET_KEYS = ("targets", "temperature", "combine_with_rule")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterTable(_Table):
    """``[cluster]``: where the teachers train (:class:`pate.teachers.cluster.ClusterConfig`)."""

    backend: str = key(str, "local")
    address: str | None = key(str, None)
    num_cpus: int | None = key(int, None)
    cpus_per_task: int | None = key(int, None)
    gpus_per_task: float | None = key(float, None)
    teachers_per_task: int | None = key(int, None)
    max_retries: int | None = key(int, None)

    def settings(self) -> dict:
        """Keyword arguments of :class:`pate.teachers.cluster.ClusterConfig`."""
        return given_keys(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KnnTable(_Table):
    """``[knn]``: the embedding of the mechanisms that read the private records, as given
    (:meth:`RunConfig.knn_settings` fills in the defaults), and how class-means labels from its
    release (``rule``)."""

    features: str | None = key(
        str,
        None,
        Options(("none", "scatternet", "scatternet+patches", "kernel", "quadratic", "student")),
    )
    dims: int | None = key(int, None, AT_LEAST_ONE)
    student_run: str | None = key(str, None)
    rule: str | None = key(str, None)

    @property
    def labelling_rule(self) -> str:
        """``rule``; when left out, "qda" over the quadratic front-end and "lda" otherwise."""
        return self.rule or ("qda" if self.features == "quadratic" else "lda")


#: The dataclass of each table, in the order of a config.
TABLE_TYPES: dict[str, type] = {
    "run": RunTable,
    "data": DataTable,
    "partition": PartitionTable,
    "teachers": TeachersTable,
    "aggregator": AggregatorTable,
    "privacy": PrivacyTable,
    "student": StudentTable,
    "cluster": ClusterTable,
    "knn": KnnTable,
}


def keys_of(table: str) -> dict[str, dataclasses.Field]:
    """The declared keys of ``table`` (its fields, the noise mapping aside)."""
    return {f.name: f for f in dataclasses.fields(TABLE_TYPES[table]) if "kind" in f.metadata}


def keyword(table: str, name: str) -> str:
    """How :func:`pate.fit` spells a config key: its declared keyword, ``teacher_params={...}``
    / ``student_params={...}`` for a recipe's keys, else ``key=``."""
    field = keys_of(table).get(name)
    if field is not None and field.metadata["keyword"]:
        return field.metadata["keyword"]
    if table in ("teachers", "student"):
        return f"{table.removesuffix('s')}_params={{{name!r}: ...}}"
    return f"{name}="


def given_keys(table: Any) -> dict:
    """The keys of a table that are set (None: left out), as plain values."""
    return {
        f.name: thawed(getattr(table, f.name))
        for f in dataclasses.fields(table)
        if "kind" in f.metadata and getattr(table, f.name) is not None
    }


def _parsed_value(table: str, name: str, field: dataclasses.Field, value: Any) -> Any:
    kind, constraints = field.metadata["kind"], field.metadata["constraints"]
    if not type_ok(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        problem = (
            f"[{table}] {name} must be {' or '.join(TYPE_NAMES[k] for k in kinds)}, got {value!r}"
        )
        raise SettingError(table, name, value, problem)
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingError(table, name, value, f"[{table}] {name} must be finite, got {value!r}")
    if constraints and not any(accepts(c, value) for c in constraints):
        wanted = " or ".join(map(describe, constraints))
        raise SettingError(table, name, value, f"[{table}] {name} must be {wanted}, got {value!r}")
    return float(value) if kind is float else frozen(value)


def parsed_table(table: str, given: Any) -> Any:
    if not isinstance(given, dict):
        raise SettingError(table, None, given, f"[{table}] must be a table, got {given!r}")
    declared = keys_of(table)
    noise_names = mechanisms.all_param_names() if table == "aggregator" else ()
    unknown = sorted(set(given) - set(declared) - set(noise_names))
    if unknown:
        problem = (
            f"unknown key(s) {', '.join(unknown)} in [{table}]; valid keys: "
            f"{', '.join([*declared, *noise_names])}"
        )
        raise SettingError(table, unknown[0], given[unknown[0]], problem)
    values: dict[str, Any] = {}
    for name, field in declared.items():
        if name in given:
            values[name] = _parsed_value(table, name, field, given[name])
        elif (
            table == "privacy" and name in RELEASE_DEFAULTS and given.get("release", True) is False
        ):
            values[name] = RELEASE_DEFAULTS[name]  # no release is drawn: never used
        elif field.metadata["required"]:
            unless = " (unless [privacy] release = false)" if name in RELEASE_DEFAULTS else ""
            raise SettingError(table, name, None, f"[{table}] {name} is required{unless}")
    if noise_names:
        noise = {}
        for name in noise_names:
            if name in given:
                value = given[name]
                if not (value == "auto" or type_ok(value, float)) or (
                    isinstance(value, float) and not math.isfinite(value)
                ):
                    problem = f'[{table}] {name} must be a number or "auto", got {value!r}'
                    raise SettingError(table, name, value, problem)
                noise[name] = value if isinstance(value, str) else float(value)
        values["noise"] = types.MappingProxyType(noise)
    return TABLE_TYPES[table](**values)
