"""The votes stage: the teachers' vote matrix on the public split, or, for a mechanism that
reads the private records, public-fitted embeddings of both splits."""

from __future__ import annotations

import logging
import pathlib
import time
import zipfile

import numpy as np

from pate.core.io import atomic_save_npy, atomic_writer, load_npz
from pate.run import rundir
from pate.run.rundir import Run
from pate.run.stages.records import embedding_features, feature_cache, knn_prior, private_rows

logger = logging.getLogger("pate")


def votes(run: Run) -> dict:
    """The votes stage of the run's mechanism kind (its ``votes_stage``)."""
    return run.config.aggregator.spec.kind.step("votes_stage")(run)


def teacher_votes(run: Run) -> dict:
    """The votes stage of a "vote" mechanism: the teachers' vote counts on the public split."""
    from pate.core.votes import votes_from_predictions

    public = load_npz(run.path(rundir.TEACHER_PREDICTIONS), what="the teachers stage")["public"]
    counts = votes_from_predictions(public, num_classes=run.data.num_classes)
    atomic_save_npy(run.path(rundir.VOTES), counts)
    return {
        "queries": int(counts.shape[0]),
        "classes": int(counts.shape[1]),
        "teachers": int(counts[0].sum()),
    }


def record_embeddings(run: Run) -> dict:
    """The votes stage of a run whose mechanism reads the private records: embeddings of both
    splits by a front-end fitted on PUBLIC data only (so it reveals nothing about the private
    records), written to ``knn_embeddings.npz`` a block at a time; no histogram is drawn."""
    from pate.teachers.public_embedding import PublicFrontEnd

    data = run.data
    rows = private_rows(run)  # with an id column: one row per person
    private_x = data.private.x if rows is None else data.private.x[rows]
    private_y = data.private.y if rows is None else data.private.y[rows]
    features, dims, width = embedding_features(run)
    front_end = {}  # the front-end's seconds and feature-cache lookups (not for a student's)
    if features == "student":
        public, private_blocks = _student_embeddings(run, private_x)
    else:
        cache, t0 = feature_cache(run), time.perf_counter()
        front, public = PublicFrontEnd.fit_transform(
            data.public.x, features=features, dims=dims, cache=cache
        )
        private_blocks = front.embed_blocks(private_x, cache=cache)
    embedded = _save_embeddings(
        run.path(rundir.KNN_EMBEDDINGS),
        public=public,
        private_blocks=private_blocks,
        private_rows=len(private_y),
        private_labels=np.asarray(private_y, dtype=np.int64),
        num_classes=data.num_classes,
    )
    if features != "student":
        front_end = {
            "front_end_seconds": round(time.perf_counter() - t0, 2),
            "feature_cache": None if cache is None else cache.summary(),
        }
    logger.info(
        "votes: public-fitted embeddings (%s features -> %d dims) of %d public and %d "
        "private items (the private count is internal: not published)",
        features,
        dims,
        len(public),
        embedded,
    )
    return {
        "queries": int(public.shape[0]),
        "classes": int(data.num_classes),
        "private_records": embedded,
        "features": features,
        "dims": int(dims),
        "feature_count": width,
        "embedding": rundir.KNN_EMBEDDINGS,
        **front_end,
    }


def _student_embeddings(run: Run, private_x) -> tuple[np.ndarray, list[np.ndarray]]:
    """(public embeddings, [embeddings of ``private_x``]) by the earlier round's released
    student: square roots of its class probabilities (their distance is the Hellinger one)."""
    from pate.student.train import Student

    # checked again (the directory may have changed since preflight); the last run of the
    # chain is the one whose student embeds
    path = pathlib.Path(knn_prior(run)["runs"][-1]["run_dir"])
    model = Student.load(path / rundir.STUDENT_WEIGHTS)
    public, private = (
        np.sqrt(model.predict_proba(x)).astype(np.float32) for x in (run.data.public.x, private_x)
    )
    return public, [private]


def _save_embeddings(
    path: pathlib.Path,
    *,
    public: np.ndarray,
    private_blocks,
    private_rows: int,
    private_labels: np.ndarray,
    num_classes: int,
) -> int:
    """Write ``knn_embeddings.npz`` atomically and uncompressed (the aggregate stage memory-maps
    ``private``, float32, written from ``private_blocks`` as they come); returns its rows."""
    width = int(public.shape[1])
    with atomic_writer(path) as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as archive:
        _write_member(archive, "public", public)
        with archive.open("private.npy", "w", force_zip64=True) as f:
            header = {"descr": "<f4", "fortran_order": False, "shape": (private_rows, width)}
            np.lib.format.write_array_header_1_0(f, header)
            written = 0
            for block in private_blocks:
                block = np.ascontiguousarray(block, dtype="<f4")
                if block.ndim != 2 or block.shape[1] != width:
                    raise RuntimeError(
                        f"the front-end gave private embeddings of shape {block.shape} for "
                        f"public ones of width {width}; this is a bug in pate-learn"
                    )
                f.write(block.tobytes())
                written += len(block)
            if written != private_rows:
                raise RuntimeError(
                    f"the front-end gave {written} private embeddings for {private_rows} "
                    "records; this is a bug in pate-learn"
                )
        _write_member(archive, "private_labels", private_labels)
        _write_member(archive, "num_classes", np.int64(num_classes))
    return written


def _write_member(archive: zipfile.ZipFile, name: str, array) -> None:
    with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)
