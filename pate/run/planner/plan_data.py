"""The plan's data: the planner's constants (their sources and measurements:
``docs/plan.md``), how an error names a setting, :class:`PlanError`, the
non-private :class:`Facts` a plan reads and the :class:`Plan` it returns."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pate import mechanisms
from pate.run.config.messages import assignment
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")

# The rules' constants; their sources and measurements: docs/plan.md, "What it refuses".
#: Refused above: the argmax noise std relative to the voters (noise drowns the votes).
DROWNING_NOISE = 0.5
#: What the planner aims at when it chooses teachers and queries (noise drowns the votes).
TARGET_NOISE = 0.2
#: Refused above: Confident GNMax's sigma1 relative to the teachers (a coin-flip check).
DROWNING_CHECK_NOISE = 2.0
#: Refused below: private records per teacher per class (shards too small).
MIN_RECORDS_PER_CLASS = 2
#: The planner's preference when it chooses the number of teachers (shards too small).
TARGET_RECORDS_PER_CLASS = 5
#: Refused below: worst-case answers per class the budget buys (too few answers).
MIN_LABELS_PER_CLASS = 10
#: Warned below; what the planner aims at (too few answers).
TARGET_LABELS_PER_CLASS = 50
#: The most teachers the planner chooses by itself.
MAX_TEACHERS = 1000
#: The numbers of teachers the planner considers.
TEACHER_GRID = (5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1000)
#: Confident GNMax's threshold when the planner sets it: 0.8 x teachers ([P18] MNIST: 200 of 250).
THRESHOLD_FRACTION = 0.8
#: What ``mechanism = "auto"`` becomes with calibrated noise (a fixed rule: docs/plan.md): the
#: registered mechanism that says so (its spec's ``auto_for``).
AUTO_MECHANISM = mechanisms.auto_choice(mechanisms.AUTO_WITH_TEACHERS)
#: What ``mechanism = "auto"`` becomes with a target when the user left the teachers open too
#: (teacher model "auto", number of teachers open): one release of the records (docs/plan.md).
AUTO_NO_TEACHERS = mechanisms.auto_choice(mechanisms.AUTO_WITHOUT_TEACHERS)
#: What ``pate.fit``'s ``mechanism="auto"`` becomes without ``target_eps`` (noise given).
FIXED_NOISE_MECHANISM = mechanisms.auto_choice(mechanisms.AUTO_FIXED_NOISE)

#: Refused when the declared number of private records is off from the loaded split's by more
#: than this factor either way (the plan would be sized for another dataset).
RECORDS_TOLERANCE = 2.0
#: How the plan names where its number of private records comes from
#: (:meth:`pate.run.config.DataTable.declared_records`).
RECORDS_BASES = {
    "declared": "declared public",
    "builtin": "the built-in dataset's published size",
}

#: The table of a setting an error names outside ``[aggregator]`` (TOML keys; ``pate.fit`` and
#: ``pate.plan`` reword them at their boundary: :func:`pate.run.config.python_wording`).
_TABLES = {"records": "data", "num_teachers": "partition", "budget_eps": "privacy"}


def setting_name(key: str) -> str:
    """``[partition] num_teachers`` for ``num_teachers``."""
    return f"[{_TABLES.get(key, 'aggregator')}] {key}"


def assignment_text(key: str, value: float) -> str:
    """``key`` set to a (rounded up) number: ``[aggregator] target_eps = 0.84``."""
    return f"{setting_name(key)} = {value:.3g}"


def setting_text(key: str, value: Any) -> str:
    """``[aggregator] mechanism = "auto"`` (:func:`pate.run.config.assignment`)."""
    return assignment(_TABLES.get(key, "aggregator"), key, value)


class PlanError(ConfigError):
    """A plan that cannot give a useful student: ``setting`` names what to change, ``fix`` says
    to what; the message holds both."""

    def __init__(self, message: str, *, setting: str, fix: str, plan: Plan | None = None):
        super().__init__(f"{message}. Fix: {fix}")
        self.setting = setting
        self.fix = fix
        self.plan = plan


@dataclasses.dataclass(frozen=True)
class Facts:
    """The public facts a plan is made from (docs/plan.md). ``private_records`` is
    the DECLARED number of private records (``records_basis``: a key of :data:`RECORDS_BASES`),
    never the count of the loaded split: every figure the plan publishes is the same for a
    dataset and that dataset with one record more or less."""

    private_records: int
    classes: int
    public_items: int
    input_shape: tuple[int, ...]
    records_basis: str = "declared"

    @property
    def kind(self) -> str:
        """ "image" (channels x height x width) or "tabular" (anything else, flattened)."""
        return "image" if len(self.input_shape) == 3 else "tabular"


def facts_of(data, *, records: int, basis: str) -> Facts:
    """The public facts of a loaded :class:`pate.teachers.data.PateData`: the declared number of
    private records (``basis``: :meth:`pate.run.config.DataTable.declared_records`), the public
    split's size, the declared class count and the input shape. The exact private count is
    internal: only compared with ``records`` (off by more than :data:`RECORDS_TOLERANCE`:
    refused before anything is trained or charged) and logged marked internal."""
    exact = len(data.private)
    if basis == "declared" and not (
        exact / RECORDS_TOLERANCE <= records <= exact * RECORDS_TOLERANCE
    ):
        key = setting_name("records")
        suggestion = int(float(f"{exact:.2g}"))  # two significant digits: to the operator only
        raise PlanError(
            f"{setting_text('records', records)} is more than a factor "
            f"{RECORDS_TOLERANCE:g} away from the number of private records of {data.name} "
            "(internal: not published)",
            setting=key,
            fix=f"declare about as many private records as you have, e.g. "
            f"{setting_text('records', suggestion)} (public: the plan is sized from it)",
        )
    logger.info(
        "plan: internal, not published: the private split holds %d records; the plan uses %d (%s)",
        exact,
        records,
        RECORDS_BASES[basis],
    )
    return Facts(
        private_records=records,
        classes=int(data.num_classes),
        public_items=len(data.public),
        input_shape=tuple(int(size) for size in data.input_shape),
        records_basis=basis,
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run will do and what to expect (docs/plan.md)."""

    facts: Facts
    mechanism: str
    num_teachers: int | None
    queries: int
    noise: dict
    relative_noise: dict
    records_per_teacher: float | None
    answers: int
    guarantee_eps: float | None
    delta: float
    budget_eps: float
    target_eps: float | None
    release: bool
    remaining_eps: float | None
    filled: dict
    checked: tuple[str, ...]
    warnings: tuple[str, ...]
    usable: bool = True
    #: predicted share of labels equal to the noiseless rule's (pate.run.planner.quality)
    label_agreement: float | None = None
    #: a table's columns and how they are used, one line each (pate.teachers.tables.column_lines)
    columns: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["facts"] = dict(
            out["facts"], kind=self.facts.kind, input_shape=list(self.facts.input_shape)
        )
        out["checked"], out["warnings"] = list(self.checked), list(self.warnings)
        out["columns"] = list(self.columns)
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The plan in plain words, one line each (what ``pate plan`` prints)."""
        f = self.facts
        shape = "x".join(map(str, f.input_shape))
        out = [
            f"data        {f.private_records} private records "
            f"({RECORDS_BASES[f.records_basis]}), {f.public_items} public items, "
            f"{f.classes} classes, {f.kind} inputs ({shape})"
        ]
        mech = self.mechanism + (f", {self.num_teachers} teachers" if self.num_teachers else "")
        out.append(f"mechanism   {mech}")
        if self.records_per_teacher is not None:
            out.append(
                f"shards      {self.records_per_teacher:.0f} private records per teacher "
                f"({self.records_per_teacher / max(f.classes, 1):.1f} per class)"
            )
        if self.noise:
            out.append("noise       " + ", ".join(f"{k} = {v:.4g}" for k, v in self.noise.items()))
        if self.relative_noise:
            out.append(
                "relative    "
                + ", ".join(f"{k} = {v:.3g}" for k, v in self.relative_noise.items())
                + f" (argmax noise refused above {DROWNING_NOISE:g}, planned at "
                f"{TARGET_NOISE:g}; sigma1 refused above {DROWNING_CHECK_NOISE:g})"
            )
        out.append(
            f"queries     {self.queries} public items asked; the budget buys at least "
            f"{self.answers} answers (worst case: every asked query answered)"
        )
        target = f", target eps = {self.target_eps:g}" if self.target_eps is not None else ""
        guarantee = (
            f"eps <= {self.guarantee_eps:.4g}"
            if self.guarantee_eps is not None
            else "stops at the budget"
        )
        out.append(
            f"guarantee   {guarantee} at delta = {self.delta:g} (budget eps = "
            f"{self.budget_eps:g}{target}; sanitized release "
            f"{'on' if self.release else 'off'})"
        )
        if self.label_agreement is not None:
            out.append(
                f"labels      about {100 * self.label_agreement:.0f} % expected equal to the "
                f"noiseless {'vote' if self.num_teachers or 'k' in self.noise else 'rule'}'s "
                f"(chance {100 / max(f.classes, 2):.0f} %; docs/plan.md)"
            )
        if self.remaining_eps is not None:
            out.append(f"ledger      eps = {self.remaining_eps:.4g} left for these records")
        for key, item in self.filled.items():
            out.append(f"chosen      {key} = {item['value']}: {item['why']}")
        for line in self.checked:
            out.append(f"checked     {line}")
        for line in self.warnings:
            out.append(f"WARNING     {line}")
        return [*out, *self.columns]
