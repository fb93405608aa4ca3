"""The student's files: the per-epoch checkpoint and the saved weights, written atomically and
read back with ``weights_only=True`` (no code in a file runs).

More: docs/student.md, "pate.student.checkpoint".
"""

from __future__ import annotations

import pathlib
from typing import Any

CHECKPOINT_NAME = "student_checkpoint.pt"
FORMAT = "pate-learn-student/1"

#: The keys of the per-epoch checkpoint read before it is restored (a damaged checkpoint
#: missing any other is refused by ``Training.restore``).
CHECKPOINT_KEYS = frozenset({"fingerprint", "seed"})


def atomic_save(obj: Any, path: pathlib.Path) -> pathlib.Path:
    """``torch.save(obj)`` to ``path`` atomically (a run output: never commit it)."""
    from pate.teachers.checkpoint import atomic_torch_save

    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_torch_save(path, obj)


def start_over(path) -> str:
    """What to do with a checkpoint at ``path`` that cannot be resumed."""
    return f"delete {path} (or use a new run directory) to train the student from scratch"


def not_a_checkpoint(path, problem: BaseException | str, *, remedy: str):
    """The ``CheckpointError`` naming ``path``, a damaged or foreign file: what is wrong
    (``problem``, an exception or a phrase) and what to do (``remedy``)."""
    from pate.teachers.checkpoint import CheckpointError

    if isinstance(problem, BaseException):
        text = str(problem).strip()
        problem = (
            f"{type(problem).__name__}: {text.splitlines()[0][:200] if text else 'no details'}"
        )
    return CheckpointError(
        f"{str(path)!r} is not a student file written by pate-learn ({problem}); "
        f"{remedy.rstrip('.')}.",
        path=path,
    )


def load_student_file(path, *, remedy: str, keys: frozenset = frozenset()) -> dict:
    """A student file of pate-learn (no code in it runs): a dict of format ``FORMAT`` holding
    ``keys``; anything else raises ``CheckpointError`` (:func:`not_a_checkpoint`)."""
    from pate.teachers.checkpoint import load_torch

    blob = load_torch(path, remedy=remedy)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise not_a_checkpoint(path, f"format {FORMAT}", remedy=remedy)
    missing = sorted(keys - set(blob))
    if missing:
        raise not_a_checkpoint(path, f"it lacks {', '.join(missing)}", remedy=remedy)
    return blob
