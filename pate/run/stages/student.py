"""The student stage: the only model that is ever released."""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np

from pate.core.errors import BudgetExceededError
from pate.core.io import atomic_write_json, load_npy
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.preflight import is_estimator
from pate.run.stages.records import embedding_features, feature_cache
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")


def student(run: Run) -> dict:
    from pate.student.augment import FLIP_DATASETS
    from pate.student.evaluate import evaluation_metrics
    from pate.student.train import Student

    data = run.data
    settings = run.config.student_settings()
    settings.setdefault("flip", run.config.data.name in FLIP_DATASETS)
    labels = load_npy(run.path(rundir.LABELS), what="the aggregate stage")
    if labels.ndim != 1 or labels.shape[0] != len(data.public):
        raise ConfigError(
            f"{run.path(rundir.LABELS)} holds {labels.shape} labels for "
            f"{len(data.public)} public items; start a new run directory"
        )
    save_encoder(run)  # also for a scikit-learn student: the report describes the preprocessing
    temperature = run.config.student.soft_temperature()
    model = run.python_object("student_model", settings.get("model", "auto"))
    if is_estimator(model):
        if temperature is not None:
            raise ConfigError(
                '[student] targets = "soft" trains the torch student; a '
                'scikit-learn student takes hard labels: set targets = "hard"'
            )
        return _sklearn_student(run, model, labels)
    soft_targets = None if temperature is None else _soft_targets(run, labels, temperature)
    settings["model"] = model
    model = Student(
        **settings,
        num_classes=data.num_classes,
        random_state=run.streams().student,
        progress=run.progress,
        checkpoint_dir=run.path(rundir.STUDENT_CHECKPOINTS),
        resume=True,
    )
    if not isinstance(settings["model"], str):
        run.context.fitted_student = model
    # built before the training, so that a run it cannot serve fails before any work
    head = rule_head(run, labels) if bool(run.config.student.combine_with_rule) else None
    run.path(rundir.STUDENT_CHECKPOINTS).mkdir(exist_ok=True)
    # Only the public inputs and the released labels reach the student.
    t0 = time.perf_counter()
    with _smoke_test_is_short(run.config.run.smoke_test):
        model.fit(data.public.x, labels, soft_targets=soft_targets)
    seconds = time.perf_counter() - t0
    alone = None
    if head is not None:
        alone = float(np.mean(model.predict(data.evaluation.x) == np.asarray(data.evaluation.y)))
        model.combine_with_rule(head, temperature=temperature)
    model.save(run.path(rundir.STUDENT_WEIGHTS))
    metrics = evaluation_metrics(
        data.evaluation.y, model.predict(data.evaluation.x), num_classes=data.num_classes
    )
    if alone is not None:
        metrics.update(combined_with_rule=True, student_alone_accuracy=alone)
    metrics.update(
        method=model.settings_["method"],
        model=model.model_name_,
        num_labelled=int(np.sum(labels >= 0)),
        num_public=int(labels.shape[0]),
        settings=model.settings_,
        train_seconds=round(seconds, 2),
        targets="hard" if temperature is None else "soft",
        precision=model.precision_,
        processes=model.processes_,
        **({} if temperature is None else {"temperature": temperature}),
    )
    atomic_write_json(run.path(rundir.STUDENT_METRICS), metrics)
    logger.info("student: trained in %s", model.precision_)
    logger.info(
        "student: accuracy %.4f on the evaluation split (INTERNAL unless the evaluation data is "
        "declared public: docs/publishing.md)",
        metrics["accuracy"],
    )
    return {
        "accuracy": metrics["accuracy"],
        "precision": model.precision_,
        "processes": model.processes_,  # pate.student.parallel (1: one process)
    }


@contextlib.contextmanager
def _smoke_test_is_short(smoke_test: bool):
    """A smoke test's student is short on purpose: its training-length warning is left out."""
    student_logger = logging.getLogger("pate.student")

    def keep(record: logging.LogRecord) -> bool:
        return not getattr(record, "short_training", False)

    if smoke_test:
        student_logger.addFilter(keep)
    try:
        yield
    finally:
        student_logger.removeFilter(keep)


def save_encoder(run: Run) -> None:
    """Beside the student, what turns raw table rows into its inputs (``student_encoder.json``)."""
    encoder = run.data.encoder  # tables with named columns
    if encoder is None:
        return
    from pate.student.raw_rows import write_encoder_file

    write_encoder_file(run.path(rundir.STUDENT_ENCODER), encoder, run.data.class_names)
    if not encoder.builtin:
        logger.warning(
            "student: the preprocessing transformer %s is not stored with the student (no "
            "pickles); keep it, and pass it to pate.student.raw_rows.RawRowStudent.load",
            type(encoder.transformer).__name__,
        )


def rule_head(run: Run, labels: np.ndarray):
    """The labelling rule of this run's release as a torch head (``[student] combine_with_rule``):
    its front-end refitted on the public split, the rule recovered from the published scores,
    the head checked to reproduce them. Public data and published files only: post-processing."""
    import torch

    from pate.core.labelling_rules import recover_rule
    from pate.student.rule_product import RuleHead
    from pate.teachers.public_embedding import PublicFrontEnd

    data = run.data
    features, dims, _ = embedding_features(run)
    public_x = np.asarray(data.public.x, dtype=np.float32)
    front, public = PublicFrontEnd.fit_transform(
        public_x, features=features, dims=dims, cache=feature_cache(run)
    )
    with np.load(run.path(rundir.KNN_EMBEDDINGS), allow_pickle=False) as saved:
        saved_public = saved["public"]
    if saved_public.shape != public.shape or not np.allclose(saved_public, public, atol=1e-4):
        raise ConfigError(
            f"the public embeddings in {run.path(rundir.KNN_EMBEDDINGS)} are not those of "
            f"this run's [knn] front-end refitted now ({features}, {dims} dims); "
            "start a new run directory"
        )
    scores = load_npy(run.path(rundir.LABEL_SCORES), what="the aggregate stage")
    answered = labels >= 0
    try:
        recovered = recover_rule(
            public, np.where(answered[:, None], scores, np.nan), rule=run.config.knn.labelling_rule
        )
    except ValueError as exc:
        raise ConfigError(
            f"[student] combine_with_rule = true: the labelling rule cannot be "
            f"recovered from {run.path(rundir.LABEL_SCORES)} ({exc}); set "
            "combine_with_rule = false"
        ) from None
    head = RuleHead.from_fitted(
        input_shape=data.input_shape, front=front, recovered=recovered, num_classes=data.num_classes
    )
    # the torch head against the published scores on (up to) 1000 labelled items: enough to
    # catch a mismatch, without scattering the whole public split a second time
    rows = np.flatnonzero(answered)[:1000]
    with torch.no_grad():
        check = head(torch.from_numpy(public_x[rows])).numpy()
    gap = float(np.abs(check - scores[rows]).max())
    if gap > 1e-3 * max(float(np.abs(scores[rows]).max()), 1.0):
        raise RuntimeError(
            f"the rule head reproduces the published class scores only to {gap:.3g}; "
            "this is a bug in pate-learn, please report it"
        )
    logger.info(
        "student: its labelling rule, to be released with it (%s, %s front-end, %d dims; "
        "published scores reproduced to %.2g)",
        recovered.rule,
        features,
        dims,
        gap,
    )
    return head


def _soft_targets(run: Run, labels: np.ndarray, temperature: float) -> np.ndarray:
    """The student's soft targets: softmax(temperature * the published class scores) on the
    answered items, zeros elsewhere."""
    from scipy.special import softmax

    path = run.path(rundir.LABEL_SCORES)
    if not path.exists():
        raise ConfigError(
            f'[student] targets = "soft" needs the class scores {path}, which '
            f"this run's aggregate stage did not write (mechanism "
            f'{run.config.aggregator.mechanism!r}); set targets = "hard"'
        )
    scores = load_npy(path, what="the aggregate stage")
    if scores.shape != (labels.shape[0], run.data.num_classes):
        raise ConfigError(
            f"{path} holds {scores.shape} scores for {labels.shape[0]} public "
            f"items and {run.data.num_classes} classes; start a new run directory"
        )
    answered = labels >= 0
    targets = np.zeros(scores.shape)
    targets[answered] = softmax(temperature * scores[answered], axis=1)
    return targets


def _sklearn_student(run: Run, estimator, labels: np.ndarray) -> dict:
    """A scikit-learn student given from Python, fitted on the answered public items only and
    evaluated like the torch student; returned in memory, never saved (no pickles)."""
    from sklearn.base import clone

    from pate.student.evaluate import evaluation_metrics

    data = run.data
    answered = labels >= 0
    if len(np.unique(labels[answered])) < 2:
        raise BudgetExceededError(
            f"the scikit-learn student needs labels of at least two classes; "
            f"the aggregator answered {int(answered.sum())} queries"
        )
    model = clone(estimator)
    t0 = time.perf_counter()
    model.fit(data.public.x[answered].reshape(int(answered.sum()), -1), labels[answered])
    seconds = time.perf_counter() - t0
    predictions = model.predict(data.evaluation.x.reshape(len(data.evaluation), -1))
    metrics = evaluation_metrics(
        data.evaluation.y, np.asarray(predictions, dtype=np.int64), num_classes=data.num_classes
    )
    metrics.update(
        method="supervised (scikit-learn, answered items only)",
        model=run.config.student.model or "python",
        num_labelled=int(answered.sum()),
        num_public=int(labels.shape[0]),
        settings={"estimator": repr(estimator)},
        train_seconds=round(seconds, 2),
    )
    atomic_write_json(run.path(rundir.STUDENT_METRICS), metrics)
    run.context.fitted_student = model
    return {"accuracy": metrics["accuracy"]}
