"""A new run from a finished run's partition, teachers and votes, with a new run id."""

from __future__ import annotations

import pathlib

from pate.core.io import atomic_write_json, staged_folder
from pate.run import rundir
from pate.run.rundir import Run
from pate.teachers.errors import ConfigError


def _check_fork_target(source: pathlib.Path, target: pathlib.Path) -> None:
    """Refuse a fork target that would overwrite or delete anything: the source itself, a folder
    inside the source, a folder the source lies in, or a path that exists and is not an empty
    folder. Checked before anything is written; fork never deletes what it did not create."""
    src, dst = source.resolve(), target.resolve()
    if dst == src:
        raise ConfigError(
            f"fork_run: the new run directory is the source itself ({source}); "
            "pick a new directory for the forked run"
        )
    if dst.is_relative_to(src):
        raise ConfigError(
            f"fork_run: the new run directory {target} lies inside the source run "
            f"{source}; pick a new directory outside it"
        )
    if src.is_relative_to(dst):
        raise ConfigError(
            f"fork_run: the new run directory {target} holds the source run "
            f"{source}; pick a new directory that does not contain it"
        )
    if target.is_symlink() and not target.exists():
        raise ConfigError(
            f"fork_run: the new run directory {target} is a dangling symbolic "
            "link; pick a new directory, or remove the link yourself"
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "a file" if not target.is_dir() else "a folder that is not empty"
        raise ConfigError(
            f"fork_run: the new run directory {target} exists and is {what}; it is "
            "never overwritten: pick a new directory, or remove it yourself"
        )


def fork(source, config: dict) -> pathlib.Path:
    """Start a new run (``config``'s directory) from a finished run's partition, teachers and
    votes, with a NEW run id (its answers are charged as its own). It is assembled in a folder
    beside the target (:func:`_check_fork_target`) and renamed into place: an interrupted fork
    leaves no half-copied run."""
    import shutil

    source = pathlib.Path(source)
    missing = [s for s in FORKED_STAGES if not (source / rundir.STAGE_DIR / f"{s}.json").exists()]
    if missing:
        raise ConfigError(
            f"{source} has not finished stage(s) {', '.join(missing)}; run "
            f"`pate run --run-dir {source} --resume --until votes` there first"
        )
    target = config.run.directory()
    _check_fork_target(source, target)
    parent = Run.open(source, progress=False)
    staged = staged_folder(  # the umask's permissions, like any run directory
        target,
        "fork",
        recheck=lambda: _check_fork_target(source, target),
        rename_error=lambda exc: ConfigError(
            f"fork_run: cannot move the forked run into {target} ({exc.strerror}); pick a new "
            "directory, or remove it yourself"
        ),
    )
    with staged as staging:
        run = Run.create(config, progress=False, run_dir=staging)
        run.state.update(stream_seed=parent.state["stream_seed"], forked_from=parent.run_id)
        run.start()
        (staging / rundir.STAGE_DIR).mkdir()
        records = (source / rundir.KNN_EMBEDDINGS).exists()  # a run that reads the records:
        for name in FORKED_FILES:  # its embeddings, and no partition, no teachers
            if records and name == rundir.VOTES:
                name = rundir.KNN_EMBEDDINGS
            elif records and not (source / name).exists():
                continue
            (shutil.copytree if (source / name).is_dir() else shutil.copy2)(
                source / name, staging / name
            )
        if (source / rundir.KEYS).exists():  # the same keys: the same shards, the same data split
            shutil.copy2(source / rundir.KEYS, staging / rundir.KEYS)
        for stage in FORKED_STAGES:
            shutil.copy2(
                source / rundir.STAGE_DIR / f"{stage}.json",
                staging / rundir.STAGE_DIR / f"{stage}.json",
            )
    # the run now lives at the target (same inode): record that path, not the staging folder's
    atomic_write_json(
        target / rundir.STATE, dict(run.state, directory=rundir.directory_identity(target))
    )
    return target


#: What a forked run reuses: the files and the finished stages up to the vote matrix (a
#: run that reads the private records: its skipped stages and ``knn_embeddings.npz``).
FORKED_FILES = (rundir.PARTITION, rundir.TEACHERS, rundir.VOTES)
FORKED_STAGES = ("partition", "teachers", "votes")
