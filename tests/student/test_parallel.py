"""pate.student.parallel: the process count, the sums over processes, and a helper that fails or
is lost (the training itself in tests/student/test_epochs.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from pate.student import parallel

pytestmark = pytest.mark.skipif(not parallel.fork_available(), reason="needs fork")
CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "requested,shards,device,cpus,expected",
    [
        ("auto", 2, "cpu", 2, 2),
        ("auto", 2, "cpu", 16, 2),  # at most the shards
        ("auto", 2, "cpu", 1, 1),
        ("auto", 1, "cpu", 2, 1),  # one shard: nothing to share
        (2, 2, "cpu", 1, 2),  # an explicit count is kept (at most the shards)
        (3, 2, "cpu", 8, 2),
        (1, 2, "cpu", 8, 1),
        (2, 2, "meta", 2, 1),  # not a CPU (a GPU): one process
    ],
)
def test_choose_processes(requested, shards, device, cpus, expected, monkeypatch):
    monkeypatch.setattr(
        parallel, "autograd_survives_fork", lambda: True
    )  # as on a machine without a GPU
    got = parallel.choose_processes(
        requested, shards=shards, device=torch.device(device), cpus=cpus
    )
    assert got == expected


def test_choose_processes_says_why_an_explicit_count_is_not_used(caplog, monkeypatch):
    with caplog.at_level("INFO", logger="pate.student"):
        assert parallel.choose_processes(2, shards=1, device=CPU, cpus=2) == 1
    assert "processes=2" in caplog.text and "rows are not independent" in caplog.text
    monkeypatch.setattr(parallel, "fork_available", lambda: False)
    assert parallel.choose_processes("auto", shards=2, device=CPU, cpus=2) == 1
    monkeypatch.setattr(parallel, "fork_available", lambda: True)
    daemon = type("Daemon", (), {"daemon": True})()  # a multiprocessing pool's worker
    monkeypatch.setattr(parallel.multiprocessing, "current_process", lambda: daemon)
    with caplog.at_level("INFO", logger="pate.student"):
        assert parallel.choose_processes(2, shards=2, device=CPU, cpus=2) == 1
    assert "daemonic" in caplog.text


def test_no_processes_where_torch_sees_a_gpu(caplog, monkeypatch):
    """There autograd's device threads make every backward pass of a forked process fail."""
    monkeypatch.setattr(parallel, "fork_available", lambda: True)
    monkeypatch.setattr(parallel, "autograd_survives_fork", lambda: False)
    with caplog.at_level("INFO", logger="pate.student"):
        assert parallel.choose_processes(2, shards=2, device=CPU, cpus=2) == 1
    assert "torch sees a GPU" in caplog.text
    assert parallel.choose_processes("auto", shards=2, device=CPU, cpus=2) == 1
    monkeypatch.setattr(parallel, "autograd_survives_fork", lambda: True)
    assert parallel.choose_processes("auto", shards=2, device=CPU, cpus=2) == 2


def test_autograd_survives_fork_follows_the_gpus_torch_sees(monkeypatch):
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "device_count"):
        monkeypatch.setattr(accelerator, "device_count", lambda: 1)
        assert not parallel.autograd_survives_fork()
        monkeypatch.setattr(accelerator, "device_count", lambda: 0)
        assert parallel.autograd_survives_fork()
    else:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        assert not parallel.autograd_survives_fork()


def _sums(group: parallel.Group, out: list) -> None:
    """Three all_sums, one gradient sum and one share of states: what a training does."""
    for k in range(3):
        out.append(group.all_sum(torch.full((4,), float(group.rank + 1) * (k + 1))).clone())
    w = torch.nn.Parameter(torch.zeros(3))
    w.grad = torch.full((3,), float(group.rank + 1))
    group.sum_gradients([w])
    out.append(w.grad.clone())
    mine = [torch.full((5,), group.rank * 10 + k, dtype=torch.uint8) for k in range(3)]
    out.extend(group.share_states(mine, [k % group.size for k in range(3)]))


def test_the_sums_are_over_every_process_and_the_same_in_each():
    got: list = []
    seen = torch.zeros(2, 8).share_memory_()  # what the helper computed

    def helper(group):
        mine: list = []
        _sums(group, mine)
        seen[0, :4] = mine[0]
        seen[1, :3] = mine[3]

    with parallel.data_parallel(2, helper, states=(3, 5), slot_size=8, threads_each=1) as group:
        assert (group.rank, group.size) == (0, 2)
        _sums(group, got)
    for k in range(3):
        torch.testing.assert_close(got[k], torch.full((4,), 3.0 * (k + 1)))  # 1 + 2, times k+1
    torch.testing.assert_close(got[3], torch.full((3,), 3.0))
    torch.testing.assert_close(seen[0, :4], got[0])  # the helper got the same sums
    torch.testing.assert_close(seen[1, :3], got[3])
    # state k is current in process k % 2: 0 and 2 here, 1 in the helper (10 + 1)
    assert [int(s[0]) for s in got[4:]] == [0, 11, 2]


def test_one_process_is_the_single_group():
    with parallel.data_parallel(
        1, lambda group: None, states=(1, 1), slot_size=1, threads_each=1
    ) as g:
        assert g is parallel.SINGLE
        t = torch.ones(2)
        assert g.all_sum(t) is t


def test_a_failing_helper_stops_the_training_with_an_error_naming_it(capfd):
    def helper(group):
        raise ValueError("boom in the helper")

    threads = torch.get_num_threads()
    with pytest.raises(parallel.ParallelTrainingError, match="training process 1 of 2 failed"):
        with parallel.data_parallel(2, helper, states=(1, 1), slot_size=4, threads_each=1) as group:
            for _ in range(3):
                group.all_sum(torch.ones(2))
    assert "boom in the helper" in capfd.readouterr().err  # its traceback is shown
    assert torch.get_num_threads() == threads  # given back


def test_a_killed_helper_is_noticed_while_the_caller_waits():
    def helper(group):
        os.kill(os.getpid(), signal.SIGKILL)

    t0 = time.monotonic()
    with pytest.raises(parallel.ParallelTrainingError, match="killed by signal 9"):
        with parallel.data_parallel(2, helper, states=(1, 1), slot_size=4, threads_each=1) as group:
            group.all_sum(torch.ones(2))
    assert time.monotonic() - t0 < 30  # noticed at the next poll, not hung


def test_an_error_in_the_caller_stops_the_helpers():
    started = torch.zeros(1).share_memory_()

    def helper(group):
        started[0] = 1
        while True:  # waits for sums the caller never asks for: stopped by the abort
            group.all_sum(torch.ones(2))

    with pytest.raises(KeyError, match="the caller's"):
        with parallel.data_parallel(2, helper, states=(1, 1), slot_size=4, threads_each=1) as group:
            group.all_sum(torch.ones(2))
            raise KeyError("the caller's")
    assert started[0] == 1


def test_ctrl_c_in_a_helper_stops_it_quietly(capfd):
    def helper(group):
        raise KeyboardInterrupt  # what Ctrl-C raises in every process of the group

    with pytest.raises(parallel.ParallelTrainingError, match="exit code 130"):
        with parallel.data_parallel(2, helper, states=(1, 1), slot_size=4, threads_each=1) as group:
            for _ in range(3):
                group.all_sum(torch.ones(2))
    assert "Traceback" not in capfd.readouterr().err  # the caller's own error says it all
