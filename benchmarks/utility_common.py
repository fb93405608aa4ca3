"""What benchmarks/utility.py and benchmarks/dpsgd_linear.py share: the checks of their common
arguments (before any work) and the commit a result was made at."""

from __future__ import annotations

import math
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def check_budget_args(parser, *, targets, delta: float, threads: int | None, seeds=None) -> None:
    """``parser.error`` (exit code 2, the flag and the value named) on a target eps that is not a
    positive finite number, a delta outside (0, 1), fewer than one thread, or a negative seed;
    ``seeds``: ``{flag: an int or a list of ints}`` (None: no seed flags)."""
    for t in targets:
        if not (math.isfinite(t) and t > 0):
            parser.error(f"--targets must be positive finite numbers, got {t}")
    if not 0 < delta < 1:
        parser.error(f"--delta must be in (0, 1), got {delta}")
    if threads is not None and threads < 1:
        parser.error(f"--threads must be positive, got {threads}")
    for flag, values in (seeds or {}).items():
        if values is not None and any(
            s < 0 for s in (values if isinstance(values, list) else [values])
        ):
            parser.error(f"{flag} must be >= 0, got {values}")


def commit() -> str:
    """The repository's short HEAD, marked when tracked files have uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
        return head + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
