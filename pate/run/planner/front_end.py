"""The planner's choice of a table's front-end for a mechanism that releases once (``[knn] features``, ``rule``,
``dims``, and the automatic student's ``targets``): sizes and the calibrated noise only, so it
is free (:func:`pate.core.tuned_defaults.table_front_end`), and the width of the release's rows
(:func:`release_dims`)."""

from __future__ import annotations

from pate.run.planner.costs import is_number
from pate.run.planner.plan_data import Facts


def plan_table_front_end(config, facts: Facts, noise: dict, filled: dict, *, every_item: bool):
    """A release of the records on a table, when the user named no front-end: the quadratic
    features and the "qda" rule when the sizes afford every class's covariance, else the columns
    themselves (``"none"``, the "lda" rule) or random Fourier features (``"kernel"``) with, when
    left open, their PCA dimensions from the sizes and the calibrated noise
    (:func:`pate.core.tuned_defaults.table_front_end`, ``kernel_dims``, ``linear_dims``), and the
    automatic student's training (:func:`_plan_student`; ``every_item``: the release labels every
    public item). Returns ``config`` (a :class:`pate.run.config.RunConfig`) with them set, and
    records them in ``filled`` (sizes and noise only: free)."""
    from pate.core.tuned_defaults import table_front_end

    features, sigma = config.knn.features, noise.get("sigma")
    if len(facts.input_shape) != 1 or features not in (None, "kernel") or not is_number(sigma):
        return config
    classes = max(facts.classes, 2)
    chosen = features or table_front_end(
        private_records=facts.private_records, num_classes=classes, columns=facts.input_shape[0]
    )
    if chosen == "quadratic":
        config = _plan_quadratic(config, filled)
    else:
        config = _plan_reduced(config, facts, float(sigma), filled, chosen)
    return _plan_student(config, filled, every_item=every_item)


def _plan_student(config, filled: dict, *, every_item: bool):
    """The automatic student of a table's release, its training left open: the rule's class
    probabilities as soft targets (temperature 1) and, when the release labels every public item,
    supervised training (FixMatch has no unlabelled item to learn from; its confident
    pseudo-labels favour the majority class). Measured: docs/plan.md."""
    student = config.student
    if (student.model or "auto") != "auto":
        return config
    if student.targets is None:
        filled["targets"] = {
            "value": "soft",
            "why": "the automatic student learns the labelling rule's class probabilities "
            "(temperature 1), not its labels alone",
        }
        config = config.replace("student", targets="soft", temperature=student.temperature or 1.0)
    if student.method is None and every_item:
        filled["method"] = {
            "value": "supervised",
            "why": "the release labels every public item: the student learns from them all",
        }
        config = config.replace("student", method="supervised")
    return config


def _plan_quadratic(config, filled: dict):
    """The quadratic features and the "qda" rule when left open."""
    from pate.core.tuned_defaults import QDA_MIN_COLUMNS, QDA_RECORDS_PER_FEATURE

    filled["features"] = {
        "value": "quadratic",
        "why": f"a table of {QDA_MIN_COLUMNS} or more "
        f"columns with at least {QDA_RECORDS_PER_FEATURE} private records per "
        "class for each column and product of two: the release holds every "
        "class's mean and covariance",
    }
    config = config.replace("knn", features="quadratic")
    if config.knn.rule is None:
        filled["rule"] = {
            "value": "qda",
            "why": "quadratic discriminant analysis read from "
            "the release (a rule quadratic in the inputs), the class moments as released "
            "or shrunk by their noise level, whichever's public labels reproduce the "
            "release (free)",
        }
        config = config.replace("knn", rule="qda")
    return config


#: What the planner says when it chooses a table's "none" or "kernel" front-end, and its axes.
_REDUCED_WHY = {
    "none": (
        "a table of many columns with many private records per class for each "
        "(tuned_defaults.table_front_end): linear discriminant analysis of its public-"
        "standardised columns, the covariance read from the public rows",
        "columns: (records per class / sigma) ** 0.75, at most the columns",
    ),
    "kernel": (
        "a table: the release labels through random Fourier features of the public-"
        "standardised columns (a nonlinear rule)",
        "kernel features: (records per class / sigma) ** 0.75",
    ),
}


def _reduced_dims(features: str, facts: Facts, sigma: float) -> int:
    """The public principal axes a release at ``sigma`` affords (sizes and noise only)."""
    from pate.core.tuned_defaults import kernel_dims, linear_dims

    sizes = dict(
        private_records=facts.private_records, num_classes=max(facts.classes, 2), sigma=sigma
    )
    if features == "none":
        return linear_dims(columns=facts.input_shape[0], **sizes)
    return kernel_dims(public_items=max(facts.public_items, 1), **sizes)


def _plan_reduced(config, facts: Facts, sigma: float, filled: dict, features: str):
    """The ``features`` ("none" or "kernel") and, when left open, their PCA dimensions."""
    why, axes = _REDUCED_WHY[features]
    if config.knn.features is None:
        filled["features"] = {"value": features, "why": why}
    if config.knn.dims is None:
        dims = _reduced_dims(features, facts, sigma)
        filled["dims"] = {
            "value": dims,
            "why": f"{dims} public principal axes of the {axes} "
            "(more records or less noise afford more)",
        }
        config = config.replace("knn", dims=dims)
    return config.replace("knn", features=features)


def table_size_warning(facts: Facts) -> str | None:
    """A table with fewer than LINEAR_RECORDS_PER_COLUMN declared private records per class for
    each column: what the messy-table benchmark measured such tables' students to close (declared
    facts only: free), or None."""
    from pate.core.tuned_defaults import LINEAR_RECORDS_PER_COLUMN

    if len(facts.input_shape) != 1:
        return None
    columns, per_class = facts.input_shape[0], facts.private_records / max(facts.classes, 2)
    if per_class >= LINEAR_RECORDS_PER_COLUMN * columns:
        return None
    return (
        f"a table of {columns} (encoded) columns with {per_class:.0f} declared private records "
        f"per class, {per_class / columns:.1f} per column (below {LINEAR_RECORDS_PER_COLUMN}): "
        "such tables' students were the weakest of the messy-table benchmark at eps 2, some "
        "closing less than 0.8 of the gap between the majority class and a non-private model "
        "(docs/plan.md); the student may be weak: give more private records per class, fewer "
        "columns or a larger target eps"
    )


def release_dims(config, facts: Facts, sigma: float, filled: dict) -> int:
    """The width of a release's rows: the quadratic features' width, the dims of the "none" or
    "kernel" front-end (as :func:`plan_table_front_end` sizes them at ``sigma`` when the planner
    chose them), else ``[knn] dims`` (the default's, at most the raw inputs' size without
    features)."""
    if "dims" in filled:
        return _reduced_dims(config.knn.features, facts, sigma)
    return int(config.knn_settings(facts.input_shape)["dims"])
