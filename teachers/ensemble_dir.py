"""The teachers' output directory (normally ``<run_dir>/teachers``): its state (``state.json``:
recipe fingerprint, seeds, chunking, completed chunks), checked on resume.
"""

from __future__ import annotations

import json
import pathlib

from pate.analysis.errors import InputError
from pate.teachers.errors import ConfigError

__all__ = [
    "STATE",
    "PROGRESS",
    "FORMAT_VERSION",
    "peek_state",
    "open_out_dir",
]

STATE, PROGRESS = "state.json", "progress.pt"
FORMAT_VERSION = 1


def peek_state(out_dir):
    """The saved ``state.json`` of ``out_dir``, or None (none, or unreadable)."""
    if out_dir is None:
        return None
    try:
        return json.loads((pathlib.Path(out_dir) / STATE).read_text())
    except (OSError, ValueError):
        return None


def open_out_dir(out_dir, fingerprint, resume):
    """Create ``out_dir`` or check it for a resume; returns the saved state (or None)."""
    if out_dir is None:
        if resume:
            raise InputError("resume=True needs out_dir (the directory with the checkpoints)")
        return None
    out = pathlib.Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"out_dir {str(out)!r} exists and is not a directory")
    state_path = out / STATE
    if state_path.exists():
        if not resume:
            raise ConfigError(
                f"{str(out)!r} already holds teachers (or a run in progress); pass "
                "--resume (resume=True) to continue it, or use a new --run-dir"
            )
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{str(state_path)!r} is unreadable ({exc}); delete {str(out)!r} "
                "to train from scratch"
            ) from None
        saved = state.get("fingerprint", {})
        if saved != fingerprint:
            diff = sorted(
                k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k)
            )
            if "recipe" in diff:
                a, b = saved.get("recipe", {}), fingerprint["recipe"]
                diff += [f"recipe.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            raise ConfigError(
                f"cannot resume {str(out)!r}: it was trained with different "
                f"settings ({', '.join(diff)}); rerun with the original settings, "
                "or use a new --run-dir"
            )
        return state
    out.mkdir(parents=True, exist_ok=True)
    return None
