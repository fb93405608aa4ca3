"""A validated config as typed sections: one frozen dataclass per TOML table, its fields the
keys :data:`pate.run.config.schema.SCHEMA` declares (a key left out without a default is
None), and :class:`Sections`, the whole config, built by :func:`sections`.

The dict stays the config's one source of truth and its on-disk format (``config.json``): the
sections are built from a dict that passed :func:`pate.run.config.validate` (no check runs
again, no message changes), and an in-memory change of the dict (the budget a ledger
authorizes: :func:`set_budget_eps`) is seen by the next :func:`sections`; :func:`with_ledger`
is a copy that charges another ledger. Modules outside this
package read ``C.sections(config).run.device``, never ``config["run"]["device"]``
(``tests/pate/run/config/test_config_reads.py``)."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from pate import mechanisms
from pate.run.config.schema import PLANNED, REQUIRED, SCHEMA
from pate.teachers.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RunSection:
    """``[run]``: what the run is called, its seed and where it runs."""

    name: str
    seed: int | None
    secure: bool
    device: str
    run_dir: str | None
    smoke_test: bool
    threads: int | None
    feature_cache: str | bool | None


@dataclasses.dataclass(frozen=True)
class DataSection:
    """``[data]``: the data source, its public and evaluation sizes, and the public facts the
    user declares about it: the label set (``classes``), the column marking a pool's rows
    (``split_column``), whether the pool's evaluation rows are public (``evaluation_public``),
    and the number of private records (``records``, :func:`pate.run.config.declared_records`)."""

    name: str
    root: str | None
    download: bool
    public_size: int | None
    eval_size: int | None
    image_size: int | tuple[int, ...] | None
    records: int | None
    classes: tuple[str, ...] | None
    split_column: str
    evaluation_public: bool


@dataclasses.dataclass(frozen=True)
class PartitionSection:
    """``[partition]``: how many teachers (None: a mechanism without teachers) and how records
    are dealt to them."""

    num_teachers: int | None
    mode: str
    unit_ids: str | None


@dataclasses.dataclass(frozen=True)
class TeachersSection:
    """``[teachers]``: the teachers' recipe (None: the recipe's default)."""

    model: str
    model_params: Mapping[str, Any] | None
    epochs: int | None
    batch_size: int | None
    lr: float | None
    optimizer: str | None
    weight_decay: float | None
    momentum: float | None
    augment: str | None
    label_smoothing: float | None
    trainer: str | None
    chunk_size: int | None
    memory_budget_mb: float | None
    checkpoint: str | None
    checkpoint_every_s: float | None
    amp: bool | None
    n_jobs: int | None
    features: str | None
    standardize: str | None


@dataclasses.dataclass(frozen=True)
class AggregatorSection:
    """``[aggregator]``: the mechanism, the noise parameters given (``noise``: name -> value,
    "auto" ones calibrated by :func:`pate.run.config.aggregator_params`), the queries and the
    budget basis."""

    mechanism: str
    noise: Mapping[str, float | str]
    queries: int | str | None
    budget_basis: str
    noise_seed: int | None
    target_eps: float | None

    @property
    def spec(self) -> mechanisms.MechanismSpec:
        """The mechanism's registry entry (its kind, parameters and analysis)."""
        return mechanisms.get(self.mechanism)


@dataclasses.dataclass(frozen=True)
class PrivacySection:
    """``[privacy]``: delta, the budget, the conversion and orders, the sanitized release and
    the ledger."""

    delta: float
    budget_eps: float | None
    orders: str | tuple[float, ...]
    conversion: str
    release_order: float
    release_beta: float
    release_sigma_ss: float
    release: bool
    ledger: str | bool
    dataset: str | None
    private: bool


@dataclasses.dataclass(frozen=True)
class StudentSection:
    """``[student]``: the student's recipe (None: its default), what it is trained to and
    whether it is released times its labelling rule."""

    method: str | None
    model: str | None
    epochs: int | None
    steps_per_epoch: int | None
    batch_size: int | None
    unlabeled_ratio: int | None
    threshold: float | None
    unlabeled_weight: float | None
    learning_rate: float | None
    momentum: float | None
    weight_decay: float | None
    ema_decay: float | None
    flip: bool | None
    pad: int | None
    strong_ops: int | None
    cutout: float | None
    distribution_alignment: bool | None
    amp: bool | None
    targets: str | None
    temperature: float | None
    combine_with_rule: bool | None


@dataclasses.dataclass(frozen=True)
class ClusterSection:
    """``[cluster]``: where the teachers train."""

    backend: str
    address: str | None
    num_cpus: int | None
    cpus_per_task: int | None
    gpus_per_task: float | None
    teachers_per_task: int | None
    max_retries: int | None


@dataclasses.dataclass(frozen=True)
class KnnSection:
    """``[knn]``: the embedding of the mechanisms that read the private records, as given
    (:func:`pate.run.config.knn_settings` fills in the defaults)."""

    features: str | None
    dims: int | None
    student_run: str | None
    rule: str | None


@dataclasses.dataclass(frozen=True)
class Sections:
    """A validated config, table by table; ``planned`` is what the planner filled in (None
    when nothing was left to it)."""

    run: RunSection
    data: DataSection
    partition: PartitionSection
    teachers: TeachersSection
    aggregator: AggregatorSection
    privacy: PrivacySection
    student: StudentSection
    cluster: ClusterSection
    knn: KnnSection
    planned: Mapping[str, Any] | None


#: The dataclass of each table of :data:`SCHEMA`.
SECTION_TYPES: dict[str, type] = {
    "run": RunSection,
    "data": DataSection,
    "partition": PartitionSection,
    "teachers": TeachersSection,
    "aggregator": AggregatorSection,
    "privacy": PrivacySection,
    "student": StudentSection,
    "cluster": ClusterSection,
    "knn": KnnSection,
}


def _frozen(value: Any) -> Any:
    """A config value that cannot be changed through a section: lists become tuples, tables
    read-only mappings."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return types.MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _section(table: str, given: Mapping[str, Any]) -> Any:
    cls = SECTION_TYPES[table]
    values = {}
    for field in dataclasses.fields(cls):
        if field.name == "noise":  # the mechanisms' noise parameters given in [aggregator]
            values["noise"] = types.MappingProxyType(
                {k: given[k] for k in mechanisms.all_param_names() if k in given}
            )
            continue
        if field.name not in given and SCHEMA[table][field.name][1] is REQUIRED:
            raise ConfigError(
                f"[{table}] {field.name} is missing: sections are read from a "
                "validated config; build it with pate.run.config.load or "
                "from_dict first"
            )
        values[field.name] = _frozen(given.get(field.name))
    return cls(**values)


def sections(config: Mapping[str, Any]) -> Sections:
    """The typed sections of a validated config (:func:`pate.run.config.load`,
    :func:`pate.run.config.from_dict`): built from the dict as it is now (a few small
    dataclasses; no validation runs again). A table a config saved before it existed left out
    (``[cluster]``, ``[knn]``) reads as its defaults."""
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"config must be a validated configuration (a dict from "
            f"pate.run.config.load or from_dict), got {type(config).__name__}"
        )
    tables = {}
    for table in SECTION_TYPES:
        given = config.get(table) or {}
        if not isinstance(given, Mapping):
            raise ConfigError(
                f"[{table}] must be a table, got {given!r}; build the config with "
                "pate.run.config.load or from_dict"
            )
        defaults = {
            k: d for k, (_, d) in SCHEMA[table].items() if d is not REQUIRED and d is not None
        }
        tables[table] = _section(table, dict(defaults, **given))
    planned = config.get(PLANNED)
    return Sections(**tables, planned=None if planned is None else _frozen(planned))


def with_ledger(config: Mapping[str, Any], path) -> dict:
    """A copy of a validated config that charges the ledger at ``path`` (``[privacy] ledger``,
    resolved to an absolute path): what :class:`pate.run.pipeline.Pipeline` runs when it is
    given a ledger. ``config`` itself is not changed."""
    import json
    import pathlib

    out = json.loads(json.dumps(config))
    out["privacy"]["ledger"] = str(pathlib.Path(path).expanduser().resolve())
    return out


def set_budget_eps(config: dict, eps: float) -> None:
    """Set ``[privacy] budget_eps`` of a validated config in memory: the lifetime budget a run
    goes on under once the ledger (or, without one, the config's target) resolved it
    (:func:`pate.run.stages.authorize`). The one change a run makes to its config."""
    config["privacy"]["budget_eps"] = float(eps)
