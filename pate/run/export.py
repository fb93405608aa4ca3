"""The publishable bundle of a finished run (``pate export RUN_DIR OUT``, ``pate.export``): the
released student, the public report and its plots, on request the released labels, and
``manifest.json``; nothing under the run's ``private/`` folder, and anything internal refused
before a file is written (docs/publishing.md lists the refusals)."""

from __future__ import annotations

import hashlib
import logging
import pathlib
import shutil

from pate.core.io import atomic_write_json, read_json, staged_folder
from pate.run import rundir
from pate.teachers.errors import ConfigError

logger = logging.getLogger("pate")

MANIFEST = "manifest.json"
#: What each file of a bundle is (a plot: "plot").
WHAT = {
    rundir.STUDENT_WEIGHTS: "the released student (torch weights; pate.student.Student.load)",
    rundir.STUDENT_ENCODER: "the student's table encoder, fitted on public rows only, and the "
    "declared class names (JSON; pate.student.raw_rows.RawRowStudent.load takes raw rows)",
    rundir.REPORT_MD: "the privacy report (Markdown), public part",
    rundir.REPORT_HTML: "the privacy report (self-contained HTML), public part",
    rundir.REPORT_JSON: "the privacy report's figures (JSON), public part",
    rundir.LABELS: "the released labels of the public items (-1: not answered), a charged output",
    rundir.ANSWERED: "which public items were answered, a charged output",
    rundir.LABEL_SCORES: "the labelling rule's class scores of the public items, a charged output",
}
#: The released labels: exported only on request (``labels=True``, ``--labels``).
LABEL_FILES = (rundir.LABELS, rundir.ANSWERED, rundir.LABEL_SCORES)
_INTERNAL_NAMES = (
    pathlib.PurePath(rundir.REPORT_INTERNAL_MD).name,
    pathlib.PurePath(rundir.REPORT_INTERNAL_JSON).name,
)


def export_run(run_dir, out, *, labels: bool = False, names=("RUN_DIR", "OUT")) -> pathlib.Path:
    """Write the publishable bundle of the finished run in ``run_dir`` to the new folder ``out``
    and return it; ``labels``: add the released labels; ``names``: how errors name the two."""
    run_name, out_name = names
    run_dir, out = pathlib.Path(run_dir), pathlib.Path(out)
    files = _publishable_files(run_dir, labels=labels, name=run_name)
    _check_out(run_dir, out, name=out_name)
    staged = staged_folder(
        out,
        "export",
        recheck=lambda: _check_out(run_dir, out, name=out_name),
        rename_error=lambda exc: ConfigError(
            f"{out_name} {out}: cannot move the bundle there ({exc.strerror}); choose a new folder"
        ),
    )
    with staged as staging:
        entries = []
        for rel, what in files:
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / rel, target)
            with open(target, "rb") as fh:
                sha256 = hashlib.file_digest(fh, "sha256").hexdigest()
            entries.append(
                {
                    "path": rel,
                    "sha256": sha256,
                    "bytes": target.stat().st_size,
                    "what": what,
                }
            )
        report = read_json(run_dir / rundir.REPORT_JSON)
        atomic_write_json(
            staging / MANIFEST,
            {
                "format": 1,
                "run": (report.get("run") or {}).get("name"),
                "files": entries,
                "note": "every file here is publishable: a fact the user declared public, the "
                "output of a charged mechanism, or post-processing of those",
            },
        )
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    logger.info("export: %d files and %s in %s", len(files), MANIFEST, out)
    return out


def _check_out(run_dir: pathlib.Path, out: pathlib.Path, *, name: str) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ConfigError(
            f"{name} {out} exists and is not an empty folder; the bundle never overwrites "
            "anything: choose a new folder"
        )
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise ConfigError(f"{name} {out} lies inside the run directory; choose a folder outside it")


def _publishable_files(run_dir: pathlib.Path, *, labels: bool, name: str) -> list[tuple[str, str]]:
    """``(path relative to run_dir, what it is)`` of every file of the bundle, checked."""
    from pate.run.report.content import INTERNAL_PLOT_NAMES

    if not (run_dir / rundir.STATE).is_file():
        raise ConfigError(
            f"{name} {run_dir} holds no run (no {rundir.STATE}); give a run directory"
        )
    rundir.Run.open(run_dir, progress=False)  # refuses a run of an earlier layout
    missing = [
        rel
        for rel in (
            rundir.REPORT_JSON,
            rundir.REPORT_MD,
            rundir.REPORT_HTML,
            f"{rundir.STAGE_DIR}/report.json",
        )
        if not (run_dir / rel).is_file()
    ]
    if missing:
        raise ConfigError(
            f"{name} {run_dir}: its report is missing or unfinished (no {', '.join(missing)}); "
            f"finish the run first (`pate run --run-dir {run_dir} --resume`)"
        )
    report = read_json(run_dir / rundir.REPORT_JSON, what="the run's public report")
    if not isinstance(report, dict) or "internal" in report:
        raise ConfigError(
            f"{name} {run_dir}: {rundir.REPORT_JSON} carries the report's internal part; it is not "
            f"publishable: regenerate the report (`pate report {run_dir}`)"
        )
    files = [(rel, WHAT[rel]) for rel in (rundir.REPORT_MD, rundir.REPORT_HTML, rundir.REPORT_JSON)]
    if (run_dir / rundir.STUDENT_WEIGHTS).is_file():
        files.append((rundir.STUDENT_WEIGHTS, WHAT[rundir.STUDENT_WEIGHTS]))
        if (run_dir / rundir.STUDENT_ENCODER).is_file():
            files.append((rundir.STUDENT_ENCODER, _encoder_what(run_dir)))
    else:
        logger.warning(
            "export: %s has no %s (a scikit-learn student given from Python is never saved)",
            run_dir,
            rundir.STUDENT_WEIGHTS,
        )
    plots = report.get("plots") if isinstance(report.get("plots"), dict) else {}
    for plot, rel in sorted(plots.items()):
        if plot in INTERNAL_PLOT_NAMES:
            continue
        if not isinstance(rel, str) or not (run_dir / rel).is_file():
            raise ConfigError(
                f"{name} {run_dir}: the report's plot {plot!r} ({rel!r}) is missing; regenerate "
                f"the report (`pate report {run_dir}`)"
            )
        files.append((rel, f"plot {plot} of the public report"))
    if labels:
        files += [(rel, WHAT[rel]) for rel in LABEL_FILES if (run_dir / rel).is_file()]
    for rel, _ in files:
        _check_publishable(run_dir, rel, name=name)
    return files


def _encoder_what(run_dir: pathlib.Path) -> str:
    """What the bundle's encoder file is; it says when the user's own transformer is missing."""
    transformer = read_json(run_dir / rundir.STUDENT_ENCODER).get("transformer")
    if transformer is None:
        return WHAT[rundir.STUDENT_ENCODER]
    logger.warning(
        "export: the run's preprocessing was the user's own %s, which is not in the bundle "
        "(no pickles); whoever loads the student must pass it (RawRowStudent.load(..., "
        "transformer=...))",
        transformer,
    )
    return (
        f"the student's table columns and class names; its preprocessing, the user's own "
        f"{transformer}, is NOT included (no pickles): pass the fitted transformer to "
        f"pate.student.raw_rows.RawRowStudent.load"
    )


def _check_publishable(run_dir: pathlib.Path, rel: str, *, name: str) -> None:
    """Refuse a file under ``private/``, outside the run directory or named like the internal
    report."""
    path = (run_dir / rel).resolve()
    root = run_dir.resolve()
    if (
        not path.is_relative_to(root)
        or path.is_relative_to(root / rundir.PRIVATE_DIR)
        or path.name in _INTERNAL_NAMES
    ):
        raise ConfigError(
            f"{name} {run_dir}: {rel} is internal (under {rundir.PRIVATE_DIR}/, outside the run "
            "directory, or the internal report); it is never exported"
        )
