"""Defaults tuned on benchmarks (one place, so that they are not mistaken for derived values): each was chosen by looking at results of development runs, and
docs/ lists the runs and the measurements beside their results files. A change here is a new
choice to measure and record there.

* ``LOGISTIC_RIDGE`` (the "logistic" rule's ridge): a development simulation on Fashion-MNIST
  that looked at private data (docs/benchmarks.md, "Choices and what they looked at").
* ``LDA_FLOOR`` (the "lda" rule's eigenvalue floor): runs on ``benchmarks/messy_tables.py`` and
  ``benchmarks/own_data.py`` tables at eps 2 (docs/own_data.md, "pate.core.labelling_rules").
* :func:`kernel_dims` (``KERNEL_DIMS_*``): an empirical power law fitted to the best dimensions
  of runs on the ``benchmarks/own_data.py`` tables at eps 2 (docs/plan.md, ``[knn] dims``).
* :func:`table_front_end` (``QDA_RECORDS_PER_FEATURE``, ``QDA_MIN_COLUMNS``): runs on the
  ``benchmarks/own_data.py`` tables at eps 1 to 4 (docs/plan.md, ``[knn] features``);
  ``LINEAR_MIN_COLUMNS``, ``LINEAR_RECORDS_PER_COLUMN``: runs on the ``benchmarks/messy_tables.py`` and ``own_data.py`` tables
  at eps 2 (docs/plan.md, ``[knn] features``).
* ``MISMATCH_WARNING`` (:mod:`pate.core.release_check`): ``benchmarks/unseen_tables.py`` and runs
  on its tables at eps 2 (docs/own_data.md, "The rule check").
* ``SEPARATION_WARNING`` and ``SEPARABLE_DISTANCE``
  (:func:`pate.core.release_check.class_separation`): the ``benchmarks/messy_tables.py`` tables
  and eight real tables of R's carData at eps 2, checked on the ``benchmarks/unseen_tables.py``
  tables (docs/own_data.md, "Classes the release cannot place").
* ``PATCH_SIZE`` and ``PATCH_CENTROIDS`` (the patch features of ``[knn] features =
  "scatternet+patches"``, :mod:`pate.teachers.patch_features`): ``benchmarks/public_features_fmnist.py``,
  which scored them on Fashion-MNIST's held-out training images (docs/utility.md, "Features
  learned on the public images alone").
* ``ONE_THREAD_MACS`` (:func:`pate.teachers.sequential.step_threads`): steps timed on one and two
  idle cores (docs/threads.md, "One exception inside the teachers stage").

Every function here reads public sizes and the noise only (no record): its choice is free.
"""

from __future__ import annotations

from pate.analysis.validation import check_int, check_positive
from pate.core.quadratic_rule import QUADRATIC_MAX_WIDTH, quadratic_width

__all__ = [
    "LOGISTIC_RIDGE",
    "LDA_FLOOR",
    "MISMATCH_WARNING",
    "SEPARATION_WARNING",
    "SEPARABLE_DISTANCE",
    "KERNEL_DIMS_EXPONENT",
    "KERNEL_DIMS_MIN",
    "KERNEL_DIMS_MAX",
    "kernel_dims",
    "QDA_RECORDS_PER_FEATURE",
    "QDA_MIN_COLUMNS",
    "LINEAR_MIN_COLUMNS",
    "LINEAR_RECORDS_PER_COLUMN",
    "linear_dims",
    "table_front_end",
    "ONE_THREAD_MACS",
    "PATCH_SIZE",
    "PATCH_CENTROIDS",
]

#: Ridge penalty of the public-marginal logistic rule, on W in u-coordinates (||u|| <= 1).
LOGISTIC_RIDGE = 1e-3
#: The "lda" rule's within-class covariance has its eigenvalues floored at this fraction of the
#: public total covariance's mean eigenvalue (:func:`pate.core.labelling_rules.linear_discriminant`).
LDA_FLOOR = 0.2
#: Above this ratio of a rule's mismatch to what noise and sampling explain, the rule does not
#: reproduce the release's class statistics: a warning (:func:`pate.core.release_check.checked_rule`).
MISMATCH_WARNING = 3.0
#: Below this ratio of a class's distance from the nearest other class to the noise on its
#: released statistic, the release cannot place the class: a warning
#: (:func:`pate.core.release_check.class_separation`).
SEPARATION_WARNING = 2.0
#: ... and only when the two classes' means lie at least this far apart (estimated, in public
#: standard deviations): closer classes overlap whatever the noise (two Gaussians this far
#: apart are still confused on 31 % of their rows), and the noise is not what to blame.
SEPARABLE_DISTANCE = 1.0
#: The side of the patches and the number of k-means centroids of the public patch features
#: (:mod:`pate.teachers.patch_features`): 4 x PATCH_CENTROIDS features per image.
PATCH_SIZE = 6
PATCH_CENTROIDS = 400
#: A sequential teacher whose batch's forward pass is below this many multiply-adds trains on one
#: thread on a CPU (:func:`pate.teachers.sequential.step_threads`).
ONE_THREAD_MACS = 10_000_000
#: A table's quadratic front-end is chosen (:func:`table_front_end`) when an average class has at
#: least this many private records per quadratic feature.
QDA_RECORDS_PER_FEATURE = 5
#: ... and when the table has at least this many columns (below it the kernel rule is chosen).
QDA_MIN_COLUMNS = 8
#: ... else, with at least this many columns and LINEAR_RECORDS_PER_COLUMN private records per
#: class for each, the table's own columns (``[knn] features = "none"``) and the "lda" rule; else
#: the kernel front-end (:func:`table_front_end`).
LINEAR_MIN_COLUMNS = 20
LINEAR_RECORDS_PER_COLUMN = 20
#: The kernel front-end's PCA dimensions: (records per class / sigma) ** KERNEL_DIMS_EXPONENT,
#: between KERNEL_DIMS_MIN and KERNEL_DIMS_MAX (:func:`kernel_dims`).
KERNEL_DIMS_EXPONENT = 0.75
KERNEL_DIMS_MIN = 8
KERNEL_DIMS_MAX = 512


def kernel_dims(*, private_records: int, num_classes: int, sigma: float, public_items: int) -> int:
    """How many public principal axes of a table's kernel features (``[knn] features =
    "kernel"``) a class-means release with noise ``sigma`` can afford: round((n / sigma) **
    KERNEL_DIMS_EXPONENT) with n = private_records (DECLARED, never the exact count: the dims are
    published) / num_classes, clamped to [KERNEL_DIMS_MIN, KERNEL_DIMS_MAX] and to the public
    items. Reads public sizes and the noise only (no record), so the choice is free.

    Why this shape: a class mean is a sum of n clipped rows (norm <= 1) divided by n, released
    with noise sigma per coordinate, so the noise on it grows like sigma sqrt(d) / n in d
    dimensions while the kernel rule gains resolution with d at a decreasing rate (the public
    spectrum decays): more records per class or less noise afford more dimensions. The power
    law and its exponent are empirical, not derived (tuned on benchmarks: docs/plan.md)."""
    n = check_int(private_records, "private_records", minimum=1)
    m = check_int(num_classes, "num_classes", minimum=1)
    sigma = check_positive(sigma, "sigma")
    public = check_int(public_items, "public_items", minimum=1)
    dims = int(round(((n / m) / sigma) ** KERNEL_DIMS_EXPONENT))
    return max(1, min(max(dims, KERNEL_DIMS_MIN), KERNEL_DIMS_MAX, public))


def linear_dims(*, columns: int, private_records: int, num_classes: int, sigma: float) -> int:
    """The public principal axes of a table's own columns (``[knn] features = "none"``) a
    release affords: :func:`kernel_dims` (the same noise argument), at most the columns. Reads
    public sizes and the noise only (free)."""
    f = check_int(columns, "columns", minimum=1)
    dims = kernel_dims(
        private_records=private_records, num_classes=num_classes, sigma=sigma, public_items=f
    )
    return min(dims, f)


def table_front_end(*, private_records: int, num_classes: int, columns: int) -> str:
    """The front-end of a class-means release on a table when the user names none: "quadratic"
    (with the "qda" rule) when the table has at least QDA_MIN_COLUMNS columns, an average class
    has at least QDA_RECORDS_PER_FEATURE private records per quadratic feature and the features
    stay within QUADRATIC_MAX_WIDTH; else "none" (the columns themselves, standardised and
    reduced by a public PCA, with the "lda" rule) when it has at least LINEAR_MIN_COLUMNS
    columns and an average class LINEAR_RECORDS_PER_COLUMN records per column; else "kernel". Reads public sizes only (free; the DECLARED private_records, never
    the exact count: the choice is published).

    Why: each class's covariance has F (F + 1) / 2 entries read from n noisy, clipped sums
    (n = private_records / num_classes); with few records per entry the class covariances are
    mostly noise and a rule that needs none of them (linear or kernel) is the better labeller --
    Friedman (1989, "Regularized Discriminant Analysis", JASA 84) on QDA's need for many
    records per covariance entry. With few columns the kernel rule, a kernel density estimate
    of each class, resolves shapes no Gaussian has, but its error grows with the dimension
    (Stone 1980's rate n^(-4 / (4 + d))): with many columns it dilutes, and LDA (one covariance,
    read from the public rows) labels better once the records per class outnumber the columns
    enough for the noisy mean differences in every column (the noise on a class mean grows like
    sigma sqrt(d) / n); with fewer, the kernel's public PCA keeps the few directions that carry
    the classes. The constants are empirical (tuned on
    benchmarks: docs/plan.md)."""
    n = check_int(private_records, "private_records", minimum=1)
    m = check_int(num_classes, "num_classes", minimum=1)
    width = quadratic_width(columns)
    if (
        QDA_MIN_COLUMNS <= columns
        and width <= QUADRATIC_MAX_WIDTH
        and n / m >= QDA_RECORDS_PER_FEATURE * width
    ):
        return "quadratic"
    linear = columns >= LINEAR_MIN_COLUMNS and n / m >= LINEAR_RECORDS_PER_COLUMN * columns
    return "none" if linear else "kernel"
