"""Data-parallel training of the student on the CPU: one training in several processes.

More: docs/student.md, "pate.student.parallel".
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch

logger = logging.getLogger("pate.student")

#: A waiting process checks every this many seconds that its peers are alive.
POLL_S = 1.0
#: ``prctl(PR_SET_PDEATHSIG, ...)``: Linux sends a signal to a process when its parent dies.
_PR_SET_PDEATHSIG = 1


class ParallelTrainingError(RuntimeError):
    """A helper process of a data-parallel training failed or was lost."""


class _Aborted(Exception):
    """The group was stopped by one of its processes (that process reports why)."""


def fork_available() -> bool:
    """Whether processes can be forked here (Linux, the BSDs; not Windows)."""
    return "fork" in multiprocessing.get_all_start_methods()


def autograd_survives_fork() -> bool:
    """Whether a forked process can run a backward pass: not where torch sees a GPU, even for a
    training on the CPU (autograd's per-device threads refuse a fork: docs/student.md)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "device_count"):
        return int(accelerator.device_count()) == 0
    return torch.cuda.device_count() == 0


def choose_processes(requested: int | str, *, shards: int, device: torch.device, cpus: int) -> int:
    """How many processes train: ``requested`` (an int, or ``"auto"``: ``cpus``, the CPUs the
    training may use) at most ``shards`` (a step cannot be split further); 1 where one of the
    reasons below holds (a daemonic process, a pool's worker, may not start processes)."""
    wanted = max(1, cpus) if requested == "auto" else int(requested)
    reasons = (
        (device.type != "cpu", f"the device is {device.type}"),
        (shards < 2, "the network's rows are not independent (BatchNorm or a layer of its own)"),
        (multiprocessing.current_process().daemon, "this is a daemonic process"),
        (not fork_available(), "processes cannot be forked here"),
        (
            not autograd_survives_fork(),
            "torch sees a GPU, and autograd cannot run in a process forked then",
        ),
    )
    why = next((reason for holds, reason in reasons if holds), None)
    if why is None:
        return max(1, min(wanted, shards))
    if requested != "auto" and wanted > 1:
        logger.info("student: processes=%d: training in one process (%s)", wanted, why)
    return 1


class _Barrier:
    """A barrier whose waits poll for lost peers (``multiprocessing.Barrier``'s timeout breaks
    it for good), and whose last arrival goes on at once: each party waits on a semaphore of
    its own, released by the last to arrive for the parties of its generation only (so a fast
    party never passes a later generation on a slow one's release; docs/threads.md)."""

    def __init__(self, context: Any, parties: int) -> None:
        self.parties = parties
        self._lock = context.Lock()
        self._state = context.RawArray("q", 2)  # arrived, aborted
        self._go = [context.Semaphore(0) for _ in range(parties)]

    def wait(self, rank: int, healthy: Callable[[], str | None]) -> None:
        with self._lock:
            if self._state[1]:
                raise _Aborted
            self._state[0] += 1
            last = self._state[0] == self.parties
            if last:
                self._state[0] = 0
        if last:
            for other in range(self.parties):
                if other != rank:
                    self._go[other].release()
            return
        while not self._go[rank].acquire(timeout=POLL_S):
            if self._state[1]:
                raise _Aborted
            problem = healthy()
            if problem is not None:
                raise ParallelTrainingError(problem)
        if self._state[1]:
            raise _Aborted

    def abort(self) -> None:
        with self._lock:
            self._state[1] = 1
        for go in self._go:
            go.release()


class Group:
    """The processes of one data-parallel training, as seen from one of them (``rank``)."""

    def __init__(
        self,
        rank: int,
        size: int,
        *,
        slots: torch.Tensor | None = None,
        states: torch.Tensor | None = None,
        barrier: _Barrier | None = None,
        healthy: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.rank, self.size = rank, size
        self._slots, self._states, self._barrier = slots, states, barrier
        self._healthy = healthy
        self._parity = 0

    def _wait(self) -> None:
        if self._barrier is not None:
            self._barrier.wait(self.rank, self._healthy)

    def _next_slots(self) -> torch.Tensor:
        """The set of slots for the next sum: two in turn, so a set is written again only after
        every process has passed the next wait, having read its previous sums."""
        slots = cast(torch.Tensor, self._slots)[self._parity]  # callers checked it is set
        self._parity ^= 1
        return slots

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over the processes of ``tensor`` (float32, on the CPU, one shape in all)."""
        if self.size == 1 or self._slots is None:
            return tensor
        slots, n = self._next_slots(), tensor.numel()
        slots[self.rank, :n].copy_(tensor.reshape(-1))
        self._wait()
        return slots[:, :n].sum(dim=0).view_as(tensor)

    def sum_gradients(self, params: Sequence[torch.Tensor]) -> None:
        """Every parameter's gradient replaced by its sum over the processes (a missing one counts
        as zeros), written straight into this process's slot."""
        if self.size == 1 or self._slots is None:
            return
        slots, n = self._next_slots(), sum(p.numel() for p in params)
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params
        ]
        torch.cat(grads, out=slots[self.rank, :n])
        self._wait()
        total = slots[:, :n].sum(dim=0)
        offset = 0
        for p in params:
            part = total[offset : offset + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = part.clone()
            else:
                p.grad.copy_(part)
            offset += p.numel()

    def share_states(self, states: list[torch.Tensor], owners: Sequence[int]) -> list[torch.Tensor]:
        """Byte tensors of one size (generator states), ``states[k]`` current in the process
        ``owners[k]``: every process gets them all as their owners hold them."""
        if self.size == 1 or self._states is None:
            return states
        for k, owner in enumerate(owners):
            if owner == self.rank:
                self._states[k].copy_(states[k])
        self._wait()
        out = [
            states[k] if owner == self.rank else self._states[k].clone()
            for k, owner in enumerate(owners)
        ]
        self._wait()  # everyone has read before anyone writes the next time
        return out


#: The group of a training in one process.
SINGLE = Group(0, 1)


def _helper_main(
    group: Group, barrier: _Barrier, helper: Callable[[Group], None], threads_each: int
) -> None:
    # Linux stops this process when its parent dies; elsewhere (no prctl) the waits notice.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    torch.set_num_threads(threads_each)
    code = 0
    try:
        helper(group)
    except _Aborted:
        code = 0  # the caller stopped the training and reports why
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the caller reports it
        code = 130
        barrier.abort()
    except BaseException:  # noqa: BLE001 - reported, then the group is stopped
        code = 1
        sys.stderr.write(
            f"pate student: training process {group.rank} of {group.size} failed:\n"
            + traceback.format_exc()
        )
        sys.stderr.flush()
        barrier.abort()
    os._exit(code)  # no atexit handlers or finalisers of the parent's objects run here


@contextlib.contextmanager
def data_parallel(
    processes: int,
    helper: Callable[[Group], None],
    *,
    states: tuple[int, int],
    slot_size: int,
    threads_each: int,
) -> Iterator[Group]:
    """Fork ``processes - 1`` helpers running ``helper(their group)`` and yield this process's
    (rank 0), on ``threads_each`` threads meanwhile; ``slot_size``: the largest tensor summed,
    ``states``: the shared byte tensors' count and length. On leaving, the helpers have finished
    (or are stopped); a failed or lost one raises :class:`ParallelTrainingError`."""
    if processes <= 1:
        yield SINGLE
        return
    context = multiprocessing.get_context("fork")
    barrier = _Barrier(context, processes)
    slots = torch.zeros((2, processes, max(1, slot_size))).share_memory_()
    shared = {"slots": slots, "states": torch.zeros(states, dtype=torch.uint8).share_memory_()}
    parent = os.getpid()

    def parent_alive() -> str | None:  # a helper's waits check that this process is alive
        return None if os.getppid() == parent else "the training's main process is gone"

    helpers = [
        context.Process(
            target=_helper_main,
            args=(
                Group(rank, processes, **shared, barrier=barrier, healthy=parent_alive),
                barrier,
                helper,
                threads_each,
            ),
            name=f"pate-student-{rank}",
            daemon=True,
        )
        for rank in range(1, processes)
    ]

    def helpers_alive() -> str | None:
        """While the caller waits: any helper that has ended is lost to the training."""
        for rank, process in enumerate(helpers, start=1):
            if not process.is_alive():
                return _lost(rank, processes, process.exitcode)
        return None

    def failed() -> str | None:
        for rank, process in enumerate(helpers, start=1):
            if process.exitcode not in (0, None):
                return _lost(rank, processes, process.exitcode)
        return None

    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads_each)
    for process in helpers:
        process.start()
    ok = False
    try:
        yield Group(0, processes, **shared, barrier=barrier, healthy=helpers_alive)
        ok = True
    except _Aborted:
        _stop(helpers, barrier)
        raise ParallelTrainingError(
            failed() or "student: a training process stopped the training (its error is above)"
        ) from None
    finally:
        if ok:
            for process in helpers:
                process.join()
        else:
            _stop(helpers, barrier)
        torch.set_num_threads(threads_before)
    problem = failed()
    if problem is not None:
        raise ParallelTrainingError(problem)


def _stop(helpers: list, barrier: _Barrier) -> None:
    """Stop the group: waiting helpers leave their wait; any still running after 10 s are
    terminated."""
    barrier.abort()
    for process in helpers:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
            process.join()


def _lost(rank: int, size: int, exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        how = f"was killed by signal {-exitcode}"
    elif exitcode == 130:
        how = "was interrupted (exit code 130, Ctrl-C)"
    else:
        how = f"failed (exit code {exitcode}; its error is above)"
    return (
        f"student: training process {rank} of {size} {how}; the student's checkpoint holds the "
        "last finished epoch. Run again to resume, or set threads = 1 ([run] threads, --threads "
        "1, or Student(processes=1)) to train in one process"
    )
