"""The plan: what a run will do and whether it can give a useful student, before any private
record is read, any model trained or any budget spent.

``pate plan`` (CLI), ``pate.plan(...)`` (Python) and the first step of every ``pate run`` /
``pate.fit`` call :func:`plan_config`. It looks only at facts that are not private:

* the DECLARED number of private records (``[data] records``, ``records=``; a built-in
  dataset declares its published split's size: :func:`pate.run.config.declared_records`), never
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

Rules (constants below; their sources, and how the heuristic ones were measured, are in
``docs/plan.md``; ``benchmarks/plan_constants.py`` reproduces the measurements):

1. **Noise must not drown the votes** ([P18] Sec. 4: the noise is set relative to the number of
   teachers; their MNIST/SVHN setting is 250 teachers with sigma2 = 40, i.e. sigma2 / T = 0.16,
   and sigma1 = 150, 0.6 T). The argmax noise's standard deviation relative to the ensemble
   (GNMax sigma / T, Confident GNMax sigma2 / T, LNMax sqrt(2) scale / T, Private-kNN
   sigma2 / k) above :data:`DROWNING_NOISE` (0.5) is refused: measured with logistic-regression
   teachers, it halves the labels' accuracy on 10 classes (digits) and costs 10-15 points on 2.
   The planner aims at :data:`TARGET_NOISE` (0.2), where the measured labels lose at most a
   few points against the plurality vote when the teachers see >= 3 records per class.
   Confident GNMax's threshold check with sigma1 / T above :data:`DROWNING_CHECK_NOISE` (2.0)
   is refused: with the default threshold 0.8 T a unanimous vote then passes with probability
   Phi(0.1) = 54 % and a 30 % plurality with Phi(-0.25) = 40 % -- a coin flip, not a check
   (Gaussian tails, not a measurement).
2. **Shards large enough to learn** (heuristic, measured): a teacher needs at least
   :data:`MIN_RECORDS_PER_CLASS` (2) private records per class on average; with 1 per class the
   measured logistic-regression teachers were at chance on breast_cancer (63 %, the majority
   class) and 42 % on digits. The planner's own choice keeps >= :data:`TARGET_RECORDS_PER_CLASS`
   (5) where the budget allows (79 % / 89 % mean teacher accuracy on digits / breast_cancer).
3. **Enough answers for the classes** (heuristic, measured): the budget must buy at least
   :data:`MIN_LABELS_PER_CLASS` (10) answers per class in the worst case (every asked query
   answered, the data-independent guarantee); a logistic-regression student on 10 correct labels
   per class reached 90 % of its all-labels accuracy on digits but closed only 46 % of the gap to
   the majority class on make_classification. Fewer than :data:`TARGET_LABELS_PER_CLASS` (50)
   per class is a warning (71 % of that gap at 50).

Filling in (only what the user left open):

* ``mechanism = "auto"`` (needs ``target_eps``; :func:`auto_mechanism`): when the user asked for
  no teachers (teacher model "auto", number of teachers open) -- what ``pate.fit(private,
  public, target_eps=...)`` does -- **class-means**: one Gaussian release of the clipped class
  sums labels every public item, so the whole target buys one release instead of being split
  over queries. Measured (``pate.fit`` with only ``target_eps``, eps 2, no ledger; these are
  the own-data benchmark's datasets, so that benchmark is not an independent test of this
  choice -- ``docs/own_data.md`` says so): scikit-learn digits as arrays, class-means student
  80-84 % (labels 78-83 %) where every teacher plan is refused (GNMax needs eps ~ 7.8);
  breast_cancer 88.4 % (gap to the majority class closed 0.82-0.93); a 1000-row two-moons
  table 0.71, a 10 000-row mixed table 0.64, the issue's 40 000-row table 0.44 against 0.38
  for 250 teachers with fixed relative noise. A linear rule cannot separate nested classes
  (gaussian quantiles: 0.04); teachers then do not help at these sizes either (plurality vote
  75 %, 2 answers bought). Those figures are the linear rule's; a table's release now labels
  through kernel features (``[knn] features = "kernel"``, below), and the same benchmark at
  eps 2 closes 0.93 / 0.87 / 0.86 / 0.90 / 0.79 / 0.53 of the gap (breast-cancer, moons,
  digits, mixed, the 40 000-row table, shells). When the user names a teacher model or a number of teachers, GNMax
  ([P18] Sec. 4.1) with ``sigma`` calibrated to ``target_eps`` for the planned queries. The calibration charges every asked
  query as answered (the data-independent worst case), so Confident GNMax's threshold check
  would only discard labels the target has already paid for: measured with the planner's own
  choices (``pate.fit`` with logistic-regression teachers and student, ``target_eps`` only, no
  ledger), digits at eps 8: GNMax 104 labels 72-78 % right, student 78 / 84 %; Confident GNMax
  (threshold 0.8 T) 33-36 labels 88-89 % right, student 55.5 / 57.5 % (two runs each);
  make_classification (8400 private rows, 6 classes, eps 2, 400 teachers): GNMax student
  37.4 %, Confident GNMax 28.8 % (threshold 0.8 T) and 23.8 % (0.5 T). A fixed rule: no data is
  looked at to choose. (``pate.fit`` without ``target_eps`` keeps Confident GNMax with the noise
  given: with fixed noise and a lifetime budget a declined query costs only its check.)
* ``threshold`` (Confident GNMax, left out): 0.8 T ([P18]'s MNIST setting, 200 of 250).
* ``num_teachers``: [P18]'s trade-off -- at a fixed relative noise sigma / T one answer costs
  1 / T^2 as much, so more teachers buy more answers, but each sees fewer records. The planner
  takes the *smallest* T (largest shards) from a grid (:data:`TEACHER_GRID`) whose budget buys
  :data:`TARGET_LABELS_PER_CLASS` answers per class at :data:`TARGET_NOISE` (calibrated noise) or
  whose fixed noise is at most :data:`TARGET_NOISE` x T; it never exceeds
  declared private records / (:data:`MIN_RECORDS_PER_CLASS` x classes) or :data:`MAX_TEACHERS`
  (training time on a laptop: 1000 linear teachers take ~2 min on 2 cores, ``docs/pipeline.md``).
* ``queries`` (calibrated noise): the largest number of public items whose calibrated noise
  stays at :data:`TARGET_NOISE` x T (asking every public item would spread the budget into
  noise that drowns the votes); at least ``MIN_LABELS_PER_CLASS x classes`` when that is still
  below :data:`DROWNING_NOISE`. With fixed noise: every public item (the ledger stops asking
  when the budget is spent).
* ``[knn] features``, ``rule`` and ``dims`` (a class-means release on a table, left out; planned
  even when the noise is given): ``"quadratic"`` with the ``"qda"`` rule (the columns and their
  pairwise products, so the release holds every class's mean and covariance: quadratic
  discriminant analysis, ``pate.core.quadratic_rule.quadratic_discriminant``; the class moments as
  released or shrunk by their noise level, whichever's public labels reproduce the release:
  ``pate.core.release_check``, free) when an average class
  has at least ``QDA_RECORDS_PER_FEATURE`` (5) private records per quadratic feature
  (:func:`pate.core.tuned_defaults.table_front_end`; Friedman 1989 on QDA's need for records per
  covariance entry, the factor fitted on the own-data tables), else ``"kernel"`` (random
  Fourier features of the public-standardised columns, Rahimi & Recht 2007;
  ``pate.teachers.features.RandomFourierFeatures``) and (records per class / sigma) ** 0.75
  public principal axes of them (:func:`pate.core.tuned_defaults.kernel_dims`; an empirical power law
  fitted on the own-data tables, ``docs/plan.md``). Sizes and the calibrated noise only.

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
