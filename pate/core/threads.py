"""How many CPU threads this process computes with, and how its idle threads wait.

More: docs/threads.md, "pate.core.threads".
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import pathlib
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from pate.analysis.errors import InputError, InputTypeError

logger = logging.getLogger("pate")

#: The environment variables that make idle OpenMP threads sleep instead of spinning.
PASSIVE_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0", "KMP_BLOCKTIME": "0"}
#: How each source of an explicit setting ("flag", "config", "keyword") writes it.
_EXPLICIT_NAMES = {"flag": "--threads", "config": "[run] threads", "keyword": "threads="}
#: Why idle threads spin on: OpenMP was loaded before :func:`prepare_environment`.
_TOO_LATE = (
    "; too late to make them sleep in this process: on a shared machine set "
    "OMP_WAIT_POLICY=PASSIVE before starting Python, or call pate.fit before importing torch"
)
#: The OpenMP runtimes whose wait policy is fixed once they are loaded.
_OPENMP_LIBRARIES = ("libgomp", "libiomp", "libomp")
_CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")
_PROC_CGROUP = pathlib.Path("/proc/self/cgroup")
_PROC_LOADAVG = pathlib.Path("/proc/loadavg")
_PROC_SELF_TASK = pathlib.Path("/proc/self/task")
#: :func:`other_runnable`'s samples of the run queue, and the seconds between two of them.
RUNNABLE_SAMPLES, RUNNABLE_INTERVAL_S = 10, 0.005


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The thread count chosen and why (docs/threads.md)."""

    count: int
    #: "flag", "config", "keyword", "env", "torch", "affinity", "cgroup" or "busy"
    source: str
    #: the CPUs this process may use (affinity and cgroup quota), whatever the choice
    cpus: int
    #: how the value was found, for a person (e.g. "OMP_NUM_THREADS=3")
    detail: str
    #: source "busy": the other processes' running threads seen (:func:`other_runnable`)
    others: float | None = None


def check_threads(value: Any, name: str) -> int:
    """An explicit thread count: an integer >= 1 (bool refused); ``name`` is how the caller
    wrote the setting (``--threads``, ``[run] threads``, ``threads=``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(
            f"{name} must be an integer >= 1 (the number of CPU threads), got "
            f"{value!r} of type {type(value).__name__}"
        )
    if value < 1:
        raise InputError(
            f"{name} must be an integer >= 1 (the number of CPU threads), got "
            f"{value}; leave it out to use the CPUs this process may use"
        )
    return int(value)


# ------------------------------------------------------------------------------ usable CPUs


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux: no affinity mask
        return os.cpu_count() or 1


def _read(path: pathlib.Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_cpus(quota: str | None, period: str | None) -> float | None:
    """CPUs of a CFS quota: quota / period; None for no limit ("max", -1) or unreadable."""
    try:
        q, p = int(quota), int(period)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def _ancestors(root: pathlib.Path, cgroup_path: str) -> Iterator[pathlib.Path]:
    """``root/<cgroup_path>`` and each of its parents up to ``root`` (a quota applies to the
    cgroup and everything under it: the smallest along the path limits the process)."""
    parts = [p for p in cgroup_path.split("/") if p]
    for n in range(len(parts), -1, -1):
        yield root.joinpath(*parts[:n])


def cgroup_cpus(
    *, cgroup_root: pathlib.Path = _CGROUP_ROOT, proc_cgroup: pathlib.Path = _PROC_CGROUP
) -> tuple[float, str] | None:
    """The CPU quota of this process's cgroup (path from ``/proc/self/cgroup``, ancestors too:
    the smallest wins) as ``(cpus, where)``, or None: cgroup v2 ``cpu.max`` ("quota period"),
    v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none)."""
    text = _read(proc_cgroup) or ""
    found: list[tuple[float, str]] = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # cgroup v2 (unified); a hybrid system mounts it at unified/
            for base in (cgroup_root, cgroup_root / "unified"):
                for folder in _ancestors(base, path):
                    cpu_max = (_read(folder / "cpu.max") or "").split()
                    cpus = _quota_cpus(*cpu_max) if len(cpu_max) == 2 else None
                    if cpus is not None:
                        found.append((cpus, f"{folder / 'cpu.max'} {' '.join(cpu_max)}"))
        elif "cpu" in controllers.split(","):  # cgroup v1
            for mount in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                for folder in _ancestors(cgroup_root / mount, path):
                    quota = _read(folder / "cpu.cfs_quota_us")
                    period = _read(folder / "cpu.cfs_period_us")
                    cpus = _quota_cpus(quota, period)
                    if cpus is not None:
                        where = f"{folder}/cpu.cfs_quota_us {quota} / cpu.cfs_period_us {period}"
                        found.append((cpus, where))
    return min(found) if found else None


def usable_cpus(
    *,
    affinity: int | None = None,
    cgroup_root: pathlib.Path = _CGROUP_ROOT,
    proc_cgroup: pathlib.Path = _PROC_CGROUP,
) -> tuple[int, str, str]:
    """``(cpus, source, detail)``: the CPUs this process may use -- its affinity mask, lowered to
    its cgroup's CPU quota (rounded up) where that is smaller; source "affinity" or "cgroup"."""
    mask = _affinity() if affinity is None else int(affinity)
    quota = cgroup_cpus(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)
    if quota is not None and math.ceil(quota[0]) < mask:
        cpus = max(1, math.ceil(quota[0]))
        return cpus, "cgroup", f"cgroup quota {quota[0]:g} CPUs ({quota[1]}), affinity {mask}"
    return mask, "affinity", f"sched_getaffinity: {mask} CPUs"


def _own_running(own_tasks: pathlib.Path) -> int:
    """This process's threads in state R (running or runnable), from ``/proc/self/task``."""
    count = 0
    try:
        tasks = list(own_tasks.iterdir())
    except OSError:
        return 1  # the reading thread itself
    for task in tasks:
        text = _read(task / "stat")
        if text and text[text.rfind(")") + 2 : text.rfind(")") + 3] == "R":
            count += 1
    return max(count, 1)


def other_runnable(
    *,
    samples: int = RUNNABLE_SAMPLES,
    interval_s: float = RUNNABLE_INTERVAL_S,
    loadavg: pathlib.Path = _PROC_LOADAVG,
    own_tasks: pathlib.Path = _PROC_SELF_TASK,
) -> float | None:
    """The mean number of other processes' threads running or waiting for a CPU: the runnable
    count of ``/proc/loadavg`` less this process's threads in state R, over ``samples`` readings
    ``interval_s`` apart; None where ``/proc/loadavg`` is unreadable (not Linux)."""
    import time

    seen: list[int] = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        fields = (_read(loadavg) or "").split()
        try:
            runnable = int(fields[3].split("/")[0])
        except (IndexError, ValueError):
            return None
        seen.append(max(0, runnable - _own_running(own_tasks)))
    return sum(seen) / len(seen) if seen else None


def _lowered_by_others(cpus: int, source: str, detail: str, others: float | None) -> ThreadChoice:
    """The usable CPUs less the other processes' runnable threads (docs/threads.md, step 5)."""
    machine = os.cpu_count() or cpus
    if others is None or cpus != machine or others < 0.5:
        return ThreadChoice(cpus, source, cpus, detail)
    count = max(1, min(cpus, math.floor(cpus - others + 0.5)))
    return ThreadChoice(
        count,
        "busy",
        cpus,
        f"{detail}; {others:.1f} threads of other processes running on average "
        f"(/proc/loadavg): {count} of {cpus}",
        others=round(others, 2),
    )


# ------------------------------------------------------------------------------ the choice


def choose(
    *,
    explicit: int | None = None,
    explicit_source: str = "config",
    environ: Mapping[str, str] | None = None,
    torch_threads: int | None = None,
    others: Callable[[], float | None] | None = None,
    affinity: int | None = None,
    cgroup_root: pathlib.Path = _CGROUP_ROOT,
    proc_cgroup: pathlib.Path = _PROC_CGROUP,
) -> ThreadChoice:
    """The thread count, first that applies (docs/threads.md): ``explicit``, ``OMP_NUM_THREADS``
    of ``environ`` (default ``os.environ``), ``torch_threads`` (:func:`caller_torch_threads`) below
    the usable CPUs, the usable CPUs lowered by ``others()`` (:func:`other_runnable`) if given."""
    environ = os.environ if environ is None else environ
    cpus, source, detail = usable_cpus(
        affinity=affinity, cgroup_root=cgroup_root, proc_cgroup=proc_cgroup
    )
    if explicit is not None:
        name = _EXPLICIT_NAMES[explicit_source]
        count = check_threads(explicit, name)
        return ThreadChoice(count, explicit_source, cpus, f"{name} {count}")
    env = environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        try:  # its first entry ("4,2": nested levels)
            env_count = int(env.split(",")[0])
        except ValueError:
            env_count = 0
        if env_count >= 1:
            return ThreadChoice(env_count, "env", cpus, f"OMP_NUM_THREADS={env}")
        logger.warning("threads: OMP_NUM_THREADS=%r is not a positive integer; it is ignored", env)
    if torch_threads is not None and 1 <= torch_threads < cpus:
        return ThreadChoice(
            int(torch_threads),
            "torch",
            cpus,
            f"torch.get_num_threads() {torch_threads} before pate set it (the "
            f"caller's torch.set_num_threads, or torch's default; {detail})",
        )
    return _lowered_by_others(cpus, source, detail, None if others is None else others())


# ------------------------------------------------------------------------------ applying it


def openmp_loaded() -> bool:
    """Whether an OpenMP runtime is already loaded into this process (its wait policy is then
    fixed): read from ``/proc/self/maps``; where that is unreadable, whether torch is imported."""
    try:
        maps = pathlib.Path("/proc/self/maps").read_text()
    except OSError:
        return "torch" in sys.modules
    return any(name in maps for name in _OPENMP_LIBRARIES)


#: What :func:`prepare_environment` did to ``os.environ`` before OpenMP was loaded (None: not yet).
_wait: str | None = None


def prepare_environment(environ: MutableMapping[str, str] | None = None) -> str:
    """Make idle OpenMP threads sleep (:data:`PASSIVE_WAIT`), keeping every variable the user
    set (beside their own ``OMP_WAIT_POLICY`` nothing is added); returns what happened, e.g.
    "passive", "OMP_WAIT_POLICY=ACTIVE (the user's ... kept)" or "unchanged: ..." (too late)."""
    global _wait
    environ = os.environ if environ is None else environ
    if _wait is not None and environ is os.environ:  # set before OpenMP loaded: still in force
        return _wait
    user = {k: environ[k] for k in PASSIVE_WAIT if k in environ}
    if openmp_loaded():
        if "OMP_WAIT_POLICY" in user:  # in the environment already, most likely from the start
            return f"OMP_WAIT_POLICY={user['OMP_WAIT_POLICY']} (from the environment)"
        return "unchanged: OpenMP was already loaded" + (
            f" (environment: {_pairs(user)})" if user else ""
        )
    if "OMP_WAIT_POLICY" not in user:
        # GNU OpenMP's GOMP_SPINCOUNT (and Intel's KMP_BLOCKTIME) override OMP_WAIT_POLICY:
        # set beside a policy of the user's they would silently undo it
        for key, value in PASSIVE_WAIT.items():
            environ.setdefault(key, value)
    policy = environ["OMP_WAIT_POLICY"]
    result = ("passive" if policy.strip().upper() == "PASSIVE" else f"OMP_WAIT_POLICY={policy}") + (
        f" (the user's {_pairs(user)} kept)" if user else ""
    )
    if environ is os.environ:
        _wait = result
    return result


def _pairs(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))


def apply(choice: ThreadChoice, *, torch: bool = True) -> dict[str, Any]:
    """Set torch's threads (intra-op; inter-op where torch still allows it; ``torch=False``: only
    if torch is imported) and the loaded BLAS / OpenMP pools to ``choice.count``; returns torch's
    counts as set, ``{"torch": n, "torch_interop": n}`` (empty where torch was left alone)."""
    global _torch_set
    done: dict[str, Any] = {}
    if torch or "torch" in sys.modules:
        import torch as _torch

        _torch.set_num_threads(choice.count)
        done["torch"] = _torch_set = _torch.get_num_threads()
        try:
            if _torch.get_num_interop_threads() != choice.count:
                _torch.set_num_interop_threads(choice.count)
        except RuntimeError:  # only before any inter-op work, once per process
            logger.debug(
                "threads: torch's inter-op threads are already fixed at %d",
                _torch.get_num_interop_threads(),
            )
        done["torch_interop"] = _torch.get_num_interop_threads()
    from threadpoolctl import threadpool_limits  # installed with scikit-learn, a dependency

    threadpool_limits(limits=choice.count)  # process-wide, not a context: kept until changed
    return done


#: The last record :func:`configure` made in this process (None before): what ran with it.
_last: dict[str, Any] | None = None
#: torch's intra-op thread count as :func:`apply` last set it (None: never).
_torch_set: int | None = None


def caller_torch_threads() -> int | None:
    """torch's thread count where the caller chose it: torch is imported and its count is not
    the one :func:`apply` last set (a ``torch.set_num_threads`` of the caller's, or torch's own
    default before pate set any); None where torch is not imported or holds pate's count."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return None
    current = int(torch.get_num_threads())
    return None if current == _torch_set else current


def cpu_budget() -> int:
    """The CPUs a computation of this process may spread over, in threads or processes: the count
    pate chose (:func:`configure`) while torch still holds it, else torch's current count; the
    usable CPUs where others' threads fill them all (source "busy", docs/threads.md)."""
    torch = sys.modules.get("torch")
    current = int(torch.get_num_threads()) if torch is not None else None
    if _last is not None and (current is None or current == _torch_set):
        crowded = _last["source"] == "busy" and (_last.get("others") or 0) >= _last["cpus"]
        return int(_last["cpus"] if crowded else _last["count"])
    return current if current is not None else usable_cpus()[0]


def configure(
    *, explicit: int | None = None, explicit_source: str = "config", torch: bool = True
) -> dict[str, Any]:
    """:func:`prepare_environment`, :func:`choose` and :func:`apply`; logs the choice (once per
    change) and returns the record a run keeps: ``{"count", "source", "cpus", "detail",
    "others", "wait_policy", "load_average"}``."""
    global _last
    wait = prepare_environment()
    choice = choose(
        explicit=explicit,
        explicit_source=explicit_source,
        torch_threads=caller_torch_threads(),
        others=other_runnable if torch else None,
    )
    apply(choice, torch=torch)
    try:  # the 1-minute load average, recorded with the choice
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not Unix
        load = None
    record = dict(dataclasses.asdict(choice), wait_policy=wait, load_average=load)
    if _last is None or any(_last[k] != record[k] for k in ("count", "source", "wait_policy")):
        automatic = choice.source in ("affinity", "cgroup", "busy")
        usable = "" if automatic else f"; {choice.cpus} usable CPUs"
        late = _TOO_LATE if wait.startswith("unchanged") else ""
        logger.info(
            "threads: %d (%s: %s%s); idle threads wait: %s%s",
            choice.count,
            choice.source,
            choice.detail,
            usable,
            wait,
            late,
        )
    _last = record
    return record
