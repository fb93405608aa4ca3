"""The report stage: the publishable and the internal report, from the run's analysis and two
files this stage writes first under ``private/``: the dataset's budget outlook read from the
ledger, and the accuracy of a non-private reference model (:func:`reference_accuracy`)."""

from __future__ import annotations

import json
import logging

import numpy as np

from pate.run.rundir import Run
from pate.teachers.errors import ConfigError

logger = logging.getLogger(__name__)

#: Above this many private values (rows times features) the reference is not trained: the report
#: stage stays seconds long; the internal report then says nothing about a reference.
REFERENCE_LIMIT = 2_000_000
#: Up to this many private values of a table, gradient boosting is trained beside the logistic
#: regression and the better of the two is the reference (a few seconds on 2 cores; above it,
#: 15 000 x 50 took 34 s): on small tables whose classes are not linear in the columns the
#: logistic regression understates what the rows allow.
BOOSTING_LIMIT = 250_000


def reference_accuracy(run: Run) -> tuple[float, str] | None:
    """The evaluation accuracy of a model trained without privacy on all private rows, and its
    name: a logistic regression (standardised inputs) and, for a table of at most
    :data:`BOOSTING_LIMIT` values, scikit-learn's HistGradientBoostingClassifier, the better of
    the two on the evaluation rows. What privacy costs: an INTERNAL figure (computed from the
    private rows with no noise). None where the data is too large (:data:`REFERENCE_LIMIT`), was
    given in memory and is gone, or has no labelled evaluation rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    try:
        data = run.data
    except ConfigError as exc:  # a pate.fit run resumed without its data
        logger.info("no non-private reference for the internal report: %s", exc)
        return None
    labelled, known = data.private.y >= 0, data.evaluation.y >= 0
    size = int(np.size(data.private.x))
    if size > REFERENCE_LIMIT or not known.any() or len(np.unique(data.private.y[labelled])) < 2:
        logger.info("no non-private reference for the internal report (%d private values)", size)
        return None
    x, y = data.private.x[labelled].reshape(int(labelled.sum()), -1), data.private.y[labelled]
    evaluation = data.evaluation.x[known].reshape(int(known.sum()), -1)
    models = {
        "logistic regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))
    }
    if np.ndim(data.private.x) == 2 and size <= BOOSTING_LIMIT:
        models["gradient boosting"] = HistGradientBoostingClassifier(random_state=0)
    scores = {
        name: float(model.fit(x, y).score(evaluation, data.evaluation.y[known]))
        for name, model in models.items()
    }
    best = max(scores, key=lambda name: scores[name])
    return scores[best], best


def _write_private(path, doc: dict) -> None:
    """``doc`` as JSON at ``path`` under ``private/``, owner-only."""
    path.write_text(json.dumps(doc) + "\n")
    path.chmod(0o600)


def report(run: Run) -> dict:
    from pate.run.report import INTERNAL_REPORT_FILES, REPORT_FILES, write_report
    from pate.run.report.ledger_outlook import ledger_outlook
    from pate.run.report.schema import load_analysis
    from pate.run.report.writer import OUTLOOK_FILE, REFERENCE_FILE
    from pate.run.utility_warnings import WEAK_GAP_CLOSED, gap_closed

    found = reference_accuracy(run)
    accuracy, model = found if found is not None else (None, None)
    if found is not None:
        _write_private(run.run_dir / REFERENCE_FILE, {"accuracy": accuracy, "model": model})
    analysis = load_analysis(run.run_dir)  # the budget in words, as the ledger stands now
    closed = gap_closed(analysis["utility"], accuracy)
    if closed is not None and closed < WEAK_GAP_CLOSED:
        logger.warning(
            "utility (INTERNAL, do not publish): a weak result: the student closes only %.2f of "
            "the gap between always answering the most common class and a non-private %s on "
            "the same private rows (%.1f %%); more private records or a larger budget would "
            "help (docs/student.md)",
            closed,
            model,
            100 * accuracy,
        )
    outlook = ledger_outlook(analysis["privacy"].get("ledger"), analysis["run"].get("run_id"))
    if outlook:
        _write_private(run.run_dir / OUTLOOK_FILE, outlook)
    doc = write_report(run.run_dir)
    return {"files": [*REPORT_FILES, *doc["plots"].values(), *INTERNAL_REPORT_FILES]}
