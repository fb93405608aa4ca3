"""Writing a run's report: :func:`write_report` turns ``<run_dir>/analysis.json`` into
``report.json``, ``report.md``, ``report.html`` and ``plots/<name>.png``, each written atomically
(temporary file + ``os.replace``), ``report.json`` last; nothing is written when the input is
invalid.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pate.core.io import naming_write_errors
from pate.run.report.model import PLOTS_DIR, build_report, read_rule_check
from pate.run.report.plots import render_plots
from pate.run.report.render import render_html, render_markdown
from pate.run.report.resources import (
    read_execution,
    read_gpu_memory,
    read_precision,
    read_threads,
)
from pate.run.report.schema import load_analysis

__all__ = ["REPORT_FILES", "write_report"]

REPORT_FILES = ("report.json", "report.md", "report.html")


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


def write_report(run_dir: str | os.PathLike) -> dict:
    """Generate the privacy report of a run from ``<run_dir>/analysis.json``.

    Writes ``report.json`` (the analysis plus ``statement``, ``plots``, ``warnings`` and, when
    the teachers stage recorded it, ``execution``: the backend and resources it ran on),
    ``report.md``, ``report.html`` (self-contained, renders offline) and
    ``plots/<name>.png`` for each of :data:`PLOT_NAMES`, each
    atomically (temporary file + ``os.replace``); ``report.json`` is replaced last. The input is
    validated first: a missing run directory or file raises ``FileNotFoundError``, a malformed
    file or a missing key raises ``ValueError`` naming the file and the key, and nothing is
    written. Returns the content of ``report.json``.
    """
    run_dir = Path(run_dir)
    analysis = load_analysis(run_dir)
    report = build_report(analysis)
    execution = read_execution(run_dir)
    if execution is not None:
        report["execution"] = execution  # the backend and its resources (docs/cluster.md)
    check = read_rule_check(run_dir)
    if check is not None and check.weak:  # the release's statistics not reproduced (free)
        report["warnings"].append(check.warning_text())
    threads = read_threads(run_dir)
    if threads is not None:
        report["threads"] = threads  # the CPU threads of each stage (docs/threads.md)
    gpu_memory = read_gpu_memory(run_dir)
    if gpu_memory is not None:
        report["gpu_memory"] = gpu_memory  # the peak GPU memory of each stage that used one
    precision = read_precision(run_dir)
    if precision is not None:
        report["student_precision"] = precision  # float32, or bfloat16 autocast ([student] amp)
    images = render_plots(analysis)
    documents = {
        "report.md": render_markdown(report).encode("utf-8"),
        "report.html": render_html(report, images).encode("utf-8"),
        "report.json": (json.dumps(report, indent=2) + "\n").encode("utf-8"),
    }
    plots_dir = run_dir / PLOTS_DIR
    plots_dir.mkdir(exist_ok=True)
    targets = [(run_dir / rel, images[name]) for name, rel in report["plots"].items()]
    targets += [
        (run_dir / name, documents[name]) for name in ("report.md", "report.html", "report.json")
    ]
    mode = _file_mode()
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in targets:
            staged.append((_stage(target, data, mode), target))
        for tmp, target in staged:
            with naming_write_errors(target):
                os.replace(tmp, target)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return report
