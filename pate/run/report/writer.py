"""Writing a run's publishable and internal reports (:data:`REPORT_FILES`,
:data:`INTERNAL_REPORT_FILES` and their plots), each file atomically, ``report.json`` last."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pate.core.io import naming_write_errors
from pate.run import rundir
from pate.run.report.content import (
    build_report,
    public_report,
    read_class_separation,
    read_rule_check,
)
from pate.run.report.plots import render_plots
from pate.run.report.render import render_html, render_markdown
from pate.run.report.resources import read_resources
from pate.run.report.schema import load_analysis

#: The publishable report's files (its plots in ``plots/``).
REPORT_FILES = ("report.json", "report.md", "report.html")
#: The internal report's files (its plots in ``private/plots/``).
INTERNAL_REPORT_FILES = (rundir.REPORT_INTERNAL_JSON, rundir.REPORT_INTERNAL_MD)
#: The accuracy of a non-private reference model on the same private rows, written by the report
#: stage (:func:`pate.run.stages.report.reference_accuracy`): INTERNAL.
REFERENCE_FILE = f"{rundir.PRIVATE_DIR}/reference.json"
#: The dataset's budget outlook the report stage read from the ledger
#: (:func:`pate.run.report.ledger_outlook.ledger_outlook`): post-processing of charged events.
OUTLOOK_FILE = f"{rundir.PRIVATE_DIR}/ledger_outlook.json"


def _file_mode() -> int:
    """rw for whoever the umask allows (mkstemp's files are 0600, too tight for a report)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _stage(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a temporary file beside ``path``; the caller os.replace()s it. A full
    disk raises ``RunDirError`` naming ``path`` (:func:`pate.core.io.naming_write_errors`)."""
    with naming_write_errors(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return Path(tmp)


def _full_report(run_dir: Path) -> dict:
    """The full (internal) report of a run: the analysis, its wording, and what the run computed
    on (the backend, threads, GPU memory, precision)."""
    analysis = load_analysis(run_dir)
    outlook, reference = run_dir / OUTLOOK_FILE, run_dir / REFERENCE_FILE
    if outlook.is_file() and analysis["privacy"].get("ledger"):  # the budget in words
        analysis["privacy"]["ledger"].update(json.loads(outlook.read_text()))
    if reference.is_file():  # internal: utility.reference_accuracy is not in PUBLIC_FIELDS
        analysis["utility"]["reference_accuracy"] = json.loads(reference.read_text())["accuracy"]
    report = build_report(analysis)
    report.update(read_resources(run_dir))
    check = read_rule_check(run_dir)
    if check is not None and check.weak:  # the release's statistics not reproduced (free)
        report["warnings"].append(check.warning_text())
    separation = read_class_separation(run_dir)
    if separation is not None and separation.unplaced:  # classes the noise hides (free)
        names = report.get("utility", {}).get("class_names")
        report["warnings"].append(separation.warning_text(names))
    return report


def _json_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def write_report(run_dir: str | os.PathLike) -> dict:
    """Write the two reports of ``run_dir`` from its ``analysis.json`` (nothing when it is
    missing, ``FileNotFoundError``, or invalid, ``InputError``) and return ``report.json``'s
    content; a plot left in ``plots/`` that is not publishable for this run is removed."""
    run_dir = Path(run_dir)
    full = _full_report(run_dir)
    public = public_report(full)
    public_images = render_plots(public, tuple(public["plots"]))
    internal_names = tuple(name for name in full["plots"] if name not in public["plots"])
    images = {**public_images, **render_plots(full, internal_names)}
    targets = [(run_dir / full["plots"][name], images[name]) for name in full["plots"]]
    targets += [
        (run_dir / rundir.REPORT_INTERNAL_MD, render_markdown(full, internal=True).encode("utf-8")),
        (run_dir / rundir.REPORT_INTERNAL_JSON, _json_bytes(full)),
        (run_dir / "report.md", render_markdown(public).encode("utf-8")),
        (run_dir / "report.html", render_html(public, public_images).encode("utf-8")),
        (run_dir / "report.json", _json_bytes(public)),
    ]
    private = run_dir / rundir.PRIVATE_DIR
    with naming_write_errors(private):
        private.mkdir(mode=0o700, exist_ok=True)
        private.chmod(0o700)
        (run_dir / rundir.PLOTS_DIR).mkdir(exist_ok=True)
        (run_dir / rundir.PRIVATE_PLOTS_DIR).mkdir(mode=0o700, exist_ok=True)
    mode = _file_mode()
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in targets:
            owner_only = target.is_relative_to(private)
            staged.append((_stage(target, data, 0o600 if owner_only else mode), target))
        for tmp, target in staged:
            with naming_write_errors(target):
                os.replace(tmp, target)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    for name in internal_names:  # a plot that was publishable for an earlier analysis
        (run_dir / rundir.PLOTS_DIR / f"{name}.png").unlink(missing_ok=True)
    return public
