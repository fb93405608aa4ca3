"""The plan: what a run will do and whether it can give a useful student, before any private
record is read, any model trained or any budget spent.

``pate plan`` (CLI), ``pate.plan(...)`` (Python) and the first step of every ``pate run`` /
``pate.fit`` call :func:`plan_config`. It looks only at facts that are not private:

* the DECLARED number of private records (``[data] records``, ``records=``; a built-in
  dataset declares its published split's size: :meth:`pate.run.config.DataTable.declared_records`), never
  the exact count -- under add/remove it changes by one, and the plan is published
  (``plan.json``, the report's ``config.planned``, the student's design) --; the loaded split's
  count is only compared with it (:func:`facts_of` refuses a declaration off by more than
  :data:`RECORDS_TOLERANCE`) and logged to the operator marked internal;
* the number of public items and the input shape (tabular: one axis; image: channels x
  height x width);
* the number of classes: the data source's declared class count (its class names, or the
  largest label + 1 the loader already uses to check labels);
* the mechanism, its noise parameters, the (eps, delta) target and budget, the conversion;
* optionally, what the ledger has left for the dataset.

Nothing here reads a feature value or a label, so planning is not charged to the ledger. It
fills in what the user left open and checks what the user set; a plan that cannot give a useful
student is refused with a :class:`PlanError` naming the setting (``num_teachers=``
in Python, ``[partition] num_teachers`` in a config) and a fix.

Rules (constants in :mod:`pate.run.planner.model`; their sources, the measurements behind the
heuristic ones and every figure are in ``docs/plan.md``; ``benchmarks/plan_constants.py``
reproduces them):

1. **Noise must not drown the votes** ([P18] Sec. 4): the argmax noise's standard deviation
   relative to the voters (sigma / T, sigma2 / T, sqrt(2) scale / T, sigma2 / k) above
   :data:`DROWNING_NOISE` is refused, :data:`TARGET_NOISE` is aimed at; a threshold check with
   sigma1 / T above :data:`DROWNING_CHECK_NOISE` is a coin flip, refused.
2. **Shards large enough to learn**: at least :data:`MIN_RECORDS_PER_CLASS` private records per
   class per teacher; the planner's own choice keeps :data:`TARGET_RECORDS_PER_CLASS`.
3. **Enough answers for the classes**: the worst-case budget must buy
   :data:`MIN_LABELS_PER_CLASS` answers per class; fewer than :data:`TARGET_LABELS_PER_CLASS`
   is a warning.

Filling in (only what the user left open; ``docs/plan.md``, "What it fills in"):

* ``mechanism = "auto"`` (needs ``target_eps``; :func:`auto_mechanism`): the registry's choice
  (``pate.mechanisms.auto_choice``): one release of the records when the user asked for no
  teachers (teacher model "auto", number of teachers open), else teacher votes with the noise
  calibrated to ``target_eps`` for every planned query (a threshold check would only discard
  answers already paid for). A fixed rule: no data is looked at to choose. (``pate.fit`` without
  ``target_eps`` takes the fixed-noise choice with the noise given.)
* ``threshold`` (left out): :data:`THRESHOLD_FRACTION` x T ([P18]'s MNIST setting).
* ``num_teachers``: [P18]'s trade-off (at a fixed sigma / T one answer costs 1 / T^2 as much):
  the *smallest* T of :data:`TEACHER_GRID` whose budget buys :data:`TARGET_LABELS_PER_CLASS`
  answers per class at :data:`TARGET_NOISE` (or whose fixed noise is at most that), never above
  declared records / (:data:`MIN_RECORDS_PER_CLASS` x classes) or :data:`MAX_TEACHERS`.
* ``queries`` (calibrated noise): the most public items whose calibrated noise stays at
  :data:`TARGET_NOISE` x T, at least ``MIN_LABELS_PER_CLASS x classes`` while below
  :data:`DROWNING_NOISE`; with fixed noise every public item (the ledger stops asking).
* ``[knn] features``, ``rule`` and ``dims`` (a release on a table, left out):
  :mod:`pate.run.planner.front_end`, from the sizes and the calibrated noise only.

A run marked ``[run] smoke_test = true`` (it only checks that the pipeline works; its report
says so first) gets the refusals as warnings.

[P17] Papernot et al., "Semi-supervised Knowledge Transfer for Deep Learning from Private
      Training Data", ICLR 2017.  [P18] Papernot et al., "Scalable Private Learning with PATE",
      ICLR 2018.
"""

from pate.run.planner.model import (
    AUTO_MECHANISM,
    AUTO_NO_TEACHERS,
    DROWNING_CHECK_NOISE,
    DROWNING_NOISE,
    FIXED_NOISE_MECHANISM,
    MAX_TEACHERS,
    MIN_LABELS_PER_CLASS,
    MIN_RECORDS_PER_CLASS,
    RECORDS_BASES,
    RECORDS_TOLERANCE,
    TARGET_LABELS_PER_CLASS,
    TARGET_NOISE,
    TARGET_RECORDS_PER_CLASS,
    TEACHER_GRID,
    THRESHOLD_FRACTION,
    Facts,
    Plan,
    PlanError,
    facts_of,
    setting_name,
)
from pate.run.planner.rules import plan_config, plan_for
from pate.run.planner.steps import (
    auto_mechanism,
    ledger_remaining,
    log_plan,
    needs_plan,
    probe,
    write_plan,
)

__all__ = [
    "Facts",
    "Plan",
    "PlanError",
    "plan_config",
    "facts_of",
    "AUTO_MECHANISM",
    "AUTO_NO_TEACHERS",
    "FIXED_NOISE_MECHANISM",
    "auto_mechanism",
    "setting_name",
    "DROWNING_NOISE",
    "TARGET_NOISE",
    "DROWNING_CHECK_NOISE",
    "MIN_RECORDS_PER_CLASS",
    "TARGET_RECORDS_PER_CLASS",
    "MIN_LABELS_PER_CLASS",
    "TARGET_LABELS_PER_CLASS",
    "MAX_TEACHERS",
    "RECORDS_BASES",
    "RECORDS_TOLERANCE",
    "TEACHER_GRID",
    "THRESHOLD_FRACTION",
    "ledger_remaining",
    "log_plan",
    "needs_plan",
    "plan_for",
    "probe",
    "write_plan",
]
