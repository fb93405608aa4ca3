"""The votes stage: the teachers' vote matrix on the public split, or, for a mechanism that
reads the private records, public-fitted embeddings of both splits."""

from __future__ import annotations

import logging
import pathlib
import time

import numpy as np

from pate.core.io import atomic_save_npy, atomic_savez, load_npz
from pate.run import config as C
from pate.run import rundir as R
from pate.run.rundir import Run
from pate.run.stages.records import embedding_features, feature_cache, knn_prior

logger = logging.getLogger("pate")


def votes(run: Run) -> dict:
    if C.sections(run.config).aggregator.spec.kind.reads_private_records:
        return _knn_embeddings(run)
    from pate.core.votes import votes_from_predictions

    public = load_npz(run.path(R.TEACHER_PREDICTIONS), what="the teachers stage")["public"]
    counts = votes_from_predictions(public, num_classes=run.data.num_classes)
    atomic_save_npy(run.path(R.VOTES), counts)
    return {
        "queries": int(counts.shape[0]),
        "classes": int(counts.shape[1]),
        "teachers": int(counts[0].sum()),
    }


def _knn_embeddings(run: Run) -> dict:
    """The votes stage of a run whose mechanism reads the private records (Private-kNN, noisy
    class means): embeddings of the public and private splits for its neighbour search or class
    means, fitted on PUBLIC data only (the ``[knn] features`` front-end, standardised
    with public statistics, then a PCA of the public rows), so the embedding itself reveals
    nothing about the private records. Writes ``knn_embeddings.npz``; no histogram is drawn."""
    from pate.teachers.features import PublicFrontEnd

    data = run.data
    features, dims, width = embedding_features(run)
    front_end = {}  # the front-end's seconds and feature-cache lookups (not for a student's)
    if features == "student":
        # the earlier round's released student: square roots of its class probabilities
        # (Euclidean distance between them is the Hellinger distance)
        from pate.student.train import Student

        # checked again (the directory may have changed since preflight); the last run of the
        # chain is the one whose student embeds
        path = pathlib.Path(knn_prior(run)["runs"][-1]["run_dir"])
        model = Student.load(path / R.STUDENT_WEIGHTS)
        public, private = (
            np.sqrt(model.predict_proba(x)).astype(np.float32)
            for x in (data.public.x, data.private.x)
        )
    else:
        cache, t0 = feature_cache(run), time.perf_counter()
        front, public = PublicFrontEnd.fit_transform(
            data.public.x, features=features, dims=dims, cache=cache
        )
        private = front.embed(data.private.x, cache=cache)
        front_end = {
            "front_end_seconds": round(time.perf_counter() - t0, 2),
            "feature_cache": None if cache is None else cache.summary(),
        }
    labels = np.asarray(data.private.y, dtype=np.int64)
    atomic_savez(
        run.path(R.KNN_EMBEDDINGS),
        public=public,
        private=private,
        private_labels=labels,
        num_classes=np.int64(data.num_classes),
    )
    logger.info(
        "votes: public-fitted embeddings (%s features -> %d dims) of %d public and %d "
        "private items",
        features,
        dims,
        len(public),
        len(private),
    )
    return {
        "queries": int(public.shape[0]),
        "classes": int(data.num_classes),
        "private_records": int(private.shape[0]),
        "features": features,
        "dims": int(dims),
        "feature_count": width,
        "embedding": R.KNN_EMBEDDINGS,
        **front_end,
    }
