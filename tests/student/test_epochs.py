"""pate.student.epochs with pate.student.trainer's shards: one training whatever the number of
processes, resumed across process counts, and the shards' draws and seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from pate.student import parallel
from pate.student.draws import (
    STEP_SHARDS,
    Batches,
    saved_shards,
    shard_seeds,
    shard_sizes,
    step_shards,
)
from pate.student.epochs import draw_shards
from pate.student.train import Student
from pate.student.trainer import Standardize, Training
from pate.teachers.checkpoint import CheckpointError

needs_fork = pytest.mark.skipif(
    not (parallel.fork_available() and parallel.autograd_survives_fork()),
    reason="needs fork, and autograd in forked processes (no GPU seen by torch)",
)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    x = rng.random((300, 1, 8, 8), dtype=np.float32)
    x[:, :, :4] += (np.arange(300) % 10)[:, None, None, None] / 10  # a learnable signal
    y = np.where(np.arange(300) % 3 == 0, np.arange(300) % 10, -1)
    return x, y


def _student(**params) -> Student:
    settings = dict(
        model="cnn8",
        epochs=2,
        steps_per_epoch=6,
        batch_size=8,
        unlabeled_ratio=3,
        threshold=0.15,
        ema_decay=0.9,
        distribution_alignment=True,
        amp=False,  # float32: the processes' sums differ from one process's by rounding only
        device="cpu",
        random_state=3,
        progress=False,
    )
    return Student(**{**settings, **params})


def _weights(student: Student) -> list[torch.Tensor]:
    return [p.detach().clone() for p in student.model_.parameters()]


def _close(a: list[torch.Tensor], b: list[torch.Tensor], tol: float) -> bool:
    return all(torch.allclose(u, v, rtol=tol, atol=tol) for u, v in zip(a, b, strict=True))


def _soft_targets(y: np.ndarray) -> np.ndarray:
    """Soft targets whose largest entry is each labelled row's label."""
    targets = np.full((len(y), 10), 0.05, dtype=np.float64)
    targets[np.arange(len(y)), np.maximum(y, 0)] = 0.55
    return targets


@needs_fork
@pytest.mark.parametrize("soft", [False, True])
def test_two_processes_train_what_one_trains(images, soft):
    targets = {"soft_targets": _soft_targets(images[1])} if soft else {}
    one = _student(processes=1).fit(*images, **targets)
    two = _student(processes=2).fit(*images, **targets)
    assert (one.processes_, two.processes_) == (1, 2)
    assert _close(_weights(one), _weights(two), 1e-5)
    for a, b in zip(one.history_, two.history_, strict=True):
        for key in ("loss_labelled", "loss_unlabelled", "mask_rate"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7)
    if not soft:
        assert 0 < one.history_[-1]["mask_rate"] < 1  # the unlabelled loss took part
    other_seed = _student(processes=1, random_state=4).fit(*images, **targets)
    assert not _close(_weights(one), _weights(other_seed), 1e-3)  # the tolerance means something


@needs_fork
@pytest.mark.parametrize("first,then", [(2, 1), (1, 2)])
def test_a_run_resumed_with_another_process_count_continues_the_same_draws(
    images, tmp_path, first, then
):
    def stop_after_one(epoch, record):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _student(processes=first, checkpoint_dir=tmp_path, on_epoch_end=stop_after_one).fit(*images)
    resumed = _student(processes=then, checkpoint_dir=tmp_path, resume=True).fit(*images)
    whole = _student(processes=first).fit(*images)
    assert [r["epoch"] for r in resumed.history_] == [1, 2]
    assert _close(_weights(resumed), _weights(whole), 1e-5)


def test_the_shards_of_a_step(images):
    assert STEP_SHARDS == 2
    x, _ = images
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert step_shards(net, 8, device=cpu) == 2
    assert step_shards(net, 1, device=cpu) == 1  # a batch of one row
    coupled = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(64))
    assert step_shards(coupled, 8, device=cpu) == 1  # coupled rows
    assert step_shards(net, 8, device=gpu) == 1  # one process trains there
    # a resumed run keeps its checkpoint's count where the network allows it
    assert step_shards(net, 8, device=gpu, resumed=2) == 2
    assert step_shards(net, 8, device=cpu, resumed=1) == 1
    assert step_shards(coupled, 8, device=cpu, resumed=2) == 1  # not allowed: restore refuses
    assert saved_shards({"generators": [0, 1]}) == 2
    assert saved_shards({}) is None
    assert shard_seeds(7, 1) == [7]  # one shard: the run's seed, as before shards
    seeds = shard_seeds(7, 2)
    assert seeds == shard_seeds(7, 2) and len(set(seeds)) == 2 and 7 not in seeds
    assert shard_seeds(8, 2) != seeds
    for total, shards in [(8, 2), (7, 2), (33, 4), (1, 1)]:
        sizes = shard_sizes(total, shards)
        assert sum(sizes) == total and max(sizes) - min(sizes) <= 1


def test_one_process_draws_what_the_shards_draw_apart(images):
    x, y = images
    settings = {
        "method": "fixmatch",
        "batch_size": 8,
        "unlabeled_ratio": 3,
        "flip": False,
        "pad": 1,
        "strong_ops": 1,
        "cutout": 0.5,
    }

    def shards():
        generators = [torch.Generator().manual_seed(s) for s in shard_seeds(1, 2)]
        batches = Batches(
            x, y, None, np.flatnonzero(y >= 0), np.ones(1, np.float32), settings,
            generator=generators[0], device=CPU,
        )  # fmt: skip
        return [(batches.drawing_with(g), 4) for g in generators]

    together = draw_shards(shards(), settings, 3)
    apart = [draw_shards([shard], settings, 3) for shard in shards()]
    for k, step in enumerate(together):
        assert step.rows.shape == (8,) and step.unlabelled_strong.shape == (24, 1, 8, 8)
        torch.testing.assert_close(step.rows, torch.cat([apart[0][k].rows, apart[1][k].rows]))
        torch.testing.assert_close(
            step.unlabelled_weak,
            torch.cat([apart[0][k].unlabelled_weak, apart[1][k].unlabelled_weak]),
        )


def test_a_checkpoint_with_another_number_of_shards_is_refused():
    settings = {"ema_decay": None, "learning_rate": 0.1, "momentum": 0.0, "weight_decay": 0.0}
    model = Standardize(nn.Linear(3, 2), torch.zeros(1, 3), torch.ones(1, 3))
    one = Training.start(model, settings, seed=1, num_classes=2, device=CPU, shards=1)
    two = Training.start(model, settings, seed=1, num_classes=2, device=CPU, shards=2)
    state = one.checkpoint(fingerprint="f", seed=1, epoch=1)
    with pytest.raises(CheckpointError, match="ckpt.pt.*1 generator states for 2 shards"):
        two.restore(state, device=CPU, checkpoint_path="ckpt.pt")
    without = {k: v for k, v in state.items() if k != "generators"}
    with pytest.raises(CheckpointError, match="ckpt.pt"):
        one.restore(without, device=CPU, checkpoint_path="ckpt.pt")


@pytest.mark.parametrize(
    "value,error,message",
    [
        ("many", ValueError, "processes must be 'auto' or an int >= 1, got 'many'"),
        (0, ValueError, "processes must be >= 1, got 0"),
        (1.5, TypeError, "processes must be an integer"),
        (True, TypeError, "processes must be an integer"),
    ],
)
def test_a_bad_process_count_is_refused_before_any_work(images, value, error, message):
    with pytest.raises(error, match=message):
        _student(processes=value).fit(*images)
