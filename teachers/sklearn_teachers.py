"""scikit-learn teachers, fitted in chunks (joblib workers), their predictions checkpointed as
plain arrays, never pickles: the scikit-learn path of
:func:`pate.teachers.ensemble.train_teachers`. More: docs/teachers.md,
"pate.teachers.sklearn_teachers".
"""

from __future__ import annotations

import importlib
import logging
import pathlib
import sys
import time

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.core.io import atomic_savez, atomic_write_json
from pate.teachers.checkpoint import CheckpointError, load_plain_npz
from pate.teachers.chunks import EnsembleJob, finished_result, plan_chunks, prediction_arrays
from pate.teachers.ensemble_dir import STATE, open_out_dir

__all__ = [
    "train_sklearn",
    "load_sklearn_chunk",
    "warn_about_pickles",
    "make_sklearn_estimator",
    "fit_sklearn_teachers",
    "CHUNK_FORMAT",
    "CHUNK_KEYS",
]

CHUNK_FORMAT = 1
CHUNK_KEYS = (
    "format",
    "teachers",
    "seeds",
    "random_states",
    "shard_sizes",
    "public_predictions",
    "eval_predictions",
)
logger = logging.getLogger("pate.teachers.ensemble")  # the ensemble's messages (the CLI shows them)


def train_sklearn(data, shards, seeds, config, fingerprint, out_dir, resume, progress):
    """Fit one scikit-learn teacher per shard, a chunk at a time (finished chunks of a resumed
    run are read back); returns the :class:`pate.teachers.result.EnsembleResult`."""
    from tqdm.auto import tqdm

    num_teachers = len(shards)
    _check_two_classes(data.private.y, shards)  # before any fitting
    state = open_out_dir(out_dir, fingerprint, resume)
    out = pathlib.Path(out_dir) if out_dir is not None else None
    job = EnsembleJob(data, shards, seeds, config, "sklearn", "cpu", out)
    chunk_size = min(config.chunk_size or 25, num_teachers)
    plan = plan_chunks(job, state, fingerprint, int((state or {}).get("chunk_size", chunk_size)))
    if out is not None:
        warn_about_pickles(out)
    public_preds, eval_preds = prediction_arrays(data, num_teachers)
    started = time.perf_counter()
    with tqdm(
        total=num_teachers,
        file=sys.stderr,
        disable=not progress,
        desc="teachers",
        unit="teacher",
        dynamic_ncols=True,
    ) as bar:
        for ci, members in enumerate(plan.chunks):
            lo, hi = members[0], members[-1] + 1
            saved = _chunk_predictions(job, ci, members, plan.state)
            public_preds[lo:hi] = saved["public_predictions"]
            eval_preds[lo:hi] = saved["eval_predictions"]
            bar.update(hi - lo)
    bad = (public_preds < 0) | (public_preds >= data.num_classes)
    if np.any(bad):
        raise InputError(f"a scikit-learn teacher predicted labels outside [0, {data.num_classes})")
    return finished_result(
        job, public_preds, eval_preds, plan.chunk_size, time.perf_counter() - started
    )


def _check_two_classes(y: np.ndarray, shards) -> None:
    """ValueError where a teacher's shard holds a single class (scikit-learn needs two)."""
    for t, shard in enumerate(shards):
        if len(np.unique(y[shard])) < 2:
            raise InputError(
                f"teacher {t}'s shard has a single class ({int(y[shard][0])}); "
                "scikit-learn classifiers need at least two. Use a stratified "
                "partition or fewer teachers"
            )


def _chunk_predictions(job: EnsembleJob, ci: int, members: list, state) -> dict:
    """The predictions of chunk ``ci`` (teachers ``members``): read back when a resumed run
    finished it, else fitted now, each teacher a clone of the recipe's estimator (and saved,
    with the state, when there is an output folder)."""
    data, shards, seeds, config, out = job.data, job.shards, job.seeds, job.config, job.out
    lo, hi = members[0], members[-1] + 1
    expected = {
        "teachers": np.array([lo, hi], dtype=np.int64),
        "seeds": np.asarray(seeds[lo:hi], dtype=np.int64),
        "shard_sizes": np.array([len(shards[t]) for t in members], dtype=np.int64),
    }
    path = out / f"chunk_{ci:04d}.npz" if out is not None else None
    if out is not None and ci in state["completed"]:
        return load_sklearn_chunk(
            path,
            expected,
            num_classes=int(data.num_classes),
            n_public=len(data.public),
            n_eval=len(data.evaluation),
        )
    estimator = (
        make_sklearn_estimator(config.model, config.model_params)
        if isinstance(config.model, str)
        else config.model
    )
    fitted = fit_sklearn_teachers(
        estimator,
        data.private.x,
        data.private.y,
        [shards[t] for t in members],
        [seeds[t] for t in members],
        n_jobs=config.n_jobs,
    )
    saved = dict(
        expected,
        format=np.array(CHUNK_FORMAT, dtype=np.int64),
        random_states=sklearn_random_states(fitted),
        public_predictions=sklearn_predict(fitted, data.public.x),
        eval_predictions=sklearn_predict(fitted, data.evaluation.x),
    )
    del fitted  # kept in memory only: estimators are never written (no pickles)
    if out is not None:
        atomic_savez(path, **{k: np.asarray(saved[k], dtype=np.int64) for k in CHUNK_KEYS})
        state["completed"] = sorted(set(state["completed"]) | {ci})
        atomic_write_json(out / STATE, state)
    return saved


def warn_about_pickles(out: pathlib.Path) -> None:
    """Log ``*.pkl`` files in ``out`` (never opened: unpickling can run code)."""
    stray = sorted(p.name for p in out.glob("*.pkl"))
    if stray:
        logger.warning(
            "ignoring %s in %s: pate-learn never reads pickles from a run directory "
            "(they can run code); delete them if you did not put them there",
            ", ".join(stray),
            out,
        )


def load_sklearn_chunk(
    path: pathlib.Path, expected: dict, *, num_classes: int, n_public: int, n_eval: int
) -> dict:
    """Read a finished scikit-learn chunk (plain arrays, no pickles) and check it fits the run."""
    remedy = f"delete {str(path.parent)!r} (or use a new --run-dir) and train the teachers again"
    arrays = load_plain_npz(path, keys=CHUNK_KEYS, remedy=remedy)

    def fail(why: str) -> CheckpointError:
        return CheckpointError(
            f"checkpoint {str(path)!r} does not belong to this run ({why}); {remedy}", path=path
        )

    for k, a in arrays.items():
        if a.dtype.kind not in "iu":
            raise fail(f"array {k!r} has dtype {a.dtype}, expected integers")
    if arrays["format"].shape != () or int(arrays["format"]) != CHUNK_FORMAT:
        raise fail(f"format {arrays['format'].tolist()!r}, expected {CHUNK_FORMAT}")
    for k, want in expected.items():
        if not np.array_equal(arrays[k], want):
            raise fail(f"{k} {arrays[k].tolist()!r}, expected {want.tolist()!r}")
    size = int(expected["seeds"].shape[0])
    shapes = {
        "random_states": (size,),
        "public_predictions": (size, n_public),
        "eval_predictions": (size, n_eval),
    }
    for k, shape in shapes.items():
        if arrays[k].shape != shape:
            raise fail(f"{k} has shape {arrays[k].shape}, expected {shape}")
    for k in ("public_predictions", "eval_predictions"):
        a = arrays[k]
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            raise fail(f"{k} holds labels outside [0, {num_classes})")
    return {k: a.astype(np.int64) for k, a in arrays.items()}


def make_sklearn_estimator(spec: str, params: dict | None = None):
    """Instantiate ``"sklearn:package.module.Class"`` with keyword ``params``."""
    path = spec[len("sklearn:") :] if spec.startswith("sklearn:") else spec
    module_name, _, cls_name = path.rpartition(".")
    if not module_name:
        raise InputError(
            f"model {spec!r}: give a scikit-learn estimator as "
            "'sklearn:package.module.Class', e.g. "
            "'sklearn:sklearn.linear_model.LogisticRegression'"
        )
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"model {spec!r}: cannot import {path!r} ({exc})") from None
    try:
        est = cls(**(params or {}))
    except TypeError as exc:
        raise InputError(f"model {spec!r}: bad model_params {params!r} ({exc})") from None
    if not (hasattr(est, "fit") and hasattr(est, "predict") and hasattr(est, "get_params")):
        raise InputTypeError(
            f"model {spec!r} is not a scikit-learn estimator (needs fit, predict, get_params)"
        )
    return est


def _fit_one(estimator, x, y, seed):
    from sklearn.base import clone

    est = clone(estimator)
    if "random_state" in est.get_params():
        est.set_params(random_state=int(seed) % (2**32))
    return est.fit(x, y)


def fit_sklearn_teachers(estimator, x, y, shards, seeds, *, n_jobs: int = 1) -> list:
    """A clone of ``estimator`` fitted on each shard (flattened inputs; every shard holds two
    classes: checked by the caller, before any fitting)."""
    from joblib import Parallel, delayed

    flat = np.asarray(x).reshape(len(x), -1)
    y = np.asarray(y)
    return Parallel(n_jobs=n_jobs)(
        delayed(_fit_one)(estimator, flat[shard], y[shard], seed)
        for shard, seed in zip(shards, seeds)
    )


def sklearn_predict(estimators, x) -> np.ndarray:
    flat = np.asarray(x).reshape(len(x), -1)
    return np.stack([np.asarray(e.predict(flat)) for e in estimators]).astype(np.int64)


def sklearn_random_states(estimators) -> np.ndarray:
    out = []
    for e in estimators:
        rs = e.get_params().get("random_state")
        out.append(
            int(rs) if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool) else -1
        )
    return np.asarray(out, dtype=np.int64)
