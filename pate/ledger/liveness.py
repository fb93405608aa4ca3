"""Process liveness: whether the process that holds a reservation can still commit it.

On the reservation's own host the process is checked directly (gone, a zombie, or its pid reused
by another process: dead); a reservation of another host is live until its lease runs out after
its last heartbeat. Unsure means alive: a reservation is only given back when its process is
certainly gone.
"""

from __future__ import annotations

import os
import time


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a Linux process, or None where /proc can't tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def process_token(pid: int) -> str | None:
    """The start time of process ``pid`` (told apart from a later process given the same pid)."""
    info = _proc_stat(pid)
    return None if info is None else info[1]


def process_alive(pid: int, token: str | None) -> bool:
    """Whether process ``pid`` (started at ``token``) still runs on this host.

    Unsure means alive: a reservation is only given back when its process is certainly gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return True
    info = _proc_stat(pid)
    if info is None:
        return True
    state, start = info
    if state in ("Z", "X"):  # zombie or dead: it will never commit
        return False
    if token is not None and start != token:  # pid reused by another process
        return False
    return True


def is_stale(
    pid: int,
    token: str | None,
    hostname: str,
    heartbeat: float,
    lease: float,
    *,
    here: str,
    now: float | None = None,
) -> bool:
    """Whether a reservation held by process ``pid`` (started at ``token``) of ``hostname``, last
    renewed at ``heartbeat`` with a lease of ``lease`` seconds, is dead as seen from host ``here``."""
    if hostname == here:
        return not process_alive(int(pid), token)
    return (time.time() if now is None else now) > heartbeat + lease
