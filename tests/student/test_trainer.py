"""pate.student.trainer: the standardisation statistics and a run's state across a checkpoint."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from pate.student.draws import (
    DRAW_BYTES,
    MAX_STEPS_PER_DRAW,
    Batches,
    draw_steps,
    rows_independent,
    steps_per_draw,
)
from pate.student.trainer import (
    CHANNELS_LAST_MODELS,
    KEPT_ROWS_MULTIPLE,
    Standardize,
    Training,
    _kept_rows,
    bf16_native,
    build_network,
    input_stats,
    step,
)
from pate.teachers.checkpoint import CheckpointError

SETTINGS = {
    "ema_decay": 0.9,
    "learning_rate": 0.1,
    "momentum": 0.9,
    "weight_decay": 0.0,
    "flip": False,
    "pad": 1,
    "strong_ops": 1,
    "cutout": 0.5,
}


def test_input_stats_are_per_channel_for_images_and_per_feature_for_tables():
    rng = np.random.default_rng(0)
    images = rng.random((10, 3, 4, 4), dtype=np.float32)
    mean, std = input_stats(images)
    assert mean.shape == std.shape == (1, 3, 1, 1) and mean.dtype == np.float32
    np.testing.assert_allclose(mean.reshape(-1), images.mean(axis=(0, 2, 3)), rtol=1e-6)
    table = np.c_[rng.normal(size=10), np.full(10, 5.0)].astype(np.float32)
    mean, std = input_stats(table)
    assert mean.shape == (1, 2) and std[0, 1] == 1.0  # a constant feature is not divided by 0
    np.testing.assert_allclose(std[0, 0], table[:, 0].std(), rtol=1e-5)


def _training(seed: int) -> Training:
    torch.manual_seed(seed)
    model = Standardize(nn.Linear(3, 2), torch.zeros(1, 3), torch.ones(1, 3))
    return Training.start(model, SETTINGS, seed=seed, num_classes=2, device=torch.device("cpu"))


def test_a_restored_run_draws_and_predicts_what_the_original_would():
    a = _training(5)
    x = np.random.default_rng(1).random((8, 3), dtype=np.float32)
    batches = Batches(
        x,
        np.array([0, 1, -1, 0, 1, -1, 0, 1]),
        None,
        np.array([0, 1, 3, 4, 6, 7]),
        np.ones((1, 3), np.float32),
        SETTINGS,
        generator=a.generators[0],
        device=torch.device("cpu"),
    )
    batches.labelled_rows(4)
    saved = a.checkpoint(fingerprint="f", seed=5, epoch=3)
    saved = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in saved.items()}
    expected = (batches.labelled_rows(4), batches.unlabelled_rows(4), batches.weak(batches.x))

    b = _training(6)  # other weights, other generator: everything comes from the checkpoint
    b.restore(saved, device=torch.device("cpu"), checkpoint_path="ckpt.pt")
    batches.generator = b.generators[0]
    assert b.start_epoch == 3 and b.final is b.ema
    got = (batches.labelled_rows(4), batches.unlabelled_rows(4), batches.weak(batches.x))
    for e, g in zip(expected, got):
        torch.testing.assert_close(e, g)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb)
    assert set(batches.labelled_rows(50).tolist()) <= {0, 1, 3, 4, 6, 7}  # answered items only


def test_a_damaged_checkpoint_is_refused_naming_the_file():
    with pytest.raises(CheckpointError, match="ckpt.pt.*not a student file.*KeyError"):
        _training(1).restore(
            {"model": _training(2).model.state_dict()},
            device=torch.device("cpu"),
            checkpoint_path="ckpt.pt",
        )


@pytest.mark.parametrize("name,shape", [("cnn28", (1, 28, 28)), ("cnn8", (1, 8, 8))])
def test_the_zoo_cnns_train_channels_last_on_the_cpu_computing_the_same(name, shape):
    assert name in CHANNELS_LAST_MODELS
    x = np.random.default_rng(0).random((6, *shape), dtype=np.float32)
    cpu = torch.device("cpu")
    net, _ = build_network(name, seed=3, x=x, input_shape=shape, num_classes=10, device=cpu)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    assert not convs[-1].weight.is_contiguous()  # 16 -> 32 channels: not the default layout
    plain, _ = build_network("mlp", seed=3, x=x, input_shape=shape, num_classes=10, device=cpu)
    assert all(p.is_contiguous() for p in plain.parameters())  # no convolution: left alone
    # the same weights in the default layout compute the same logits (rounding aside)
    default = copy.deepcopy(net).to(memory_format=torch.contiguous_format)
    assert all(p.is_contiguous() for p in default.parameters())
    with torch.no_grad():
        got, expected = net(torch.from_numpy(x)), default(torch.from_numpy(x))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_ema_update_is_the_running_average_of_the_weights():
    run = _training(2)
    before = [p.detach().clone() for p in run.ema.parameters()]
    with torch.no_grad():
        for p in run.model.parameters():
            p.add_(1.0)
    run.update_ema(0.9)
    for e, old, m in zip(run.ema.parameters(), before, run.model.parameters()):
        torch.testing.assert_close(e, 0.9 * old + 0.1 * m, rtol=0, atol=1e-6)
        assert not torch.equal(e, old)
    no_ema = Training.start(
        run.model,
        {**SETTINGS, "ema_decay": None},
        seed=1,
        num_classes=2,
        device=torch.device("cpu"),
    )
    no_ema.update_ema(0.9)  # nothing to average: a no-op
    assert no_ema.ema is None


FIXMATCH = {
    **SETTINGS,
    "method": "fixmatch",
    "batch_size": 4,
    "unlabeled_ratio": 3,
    "unlabeled_weight": 1.0,
    "distribution_alignment": False,
}


class _RowMixer(nn.Module):
    """A layer of the user's own: pate cannot know whether it mixes the rows (it does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=0, keepdim=True)


def test_only_networks_known_to_treat_rows_alone_may_skip_rows():
    cpu = torch.device("cpu")
    x = np.zeros((2, 1, 28, 28), np.float32)
    for name in ("cnn28", "mlp", "wrn16_4", "scatternet_cnn"):
        net, _ = build_network(
            name, seed=0, x=x, input_shape=(1, 28, 28), num_classes=10, device=cpu
        )
        assert rows_independent(net), name
    assert not rows_independent(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    assert not rows_independent(nn.Sequential(nn.Linear(3, 3), _RowMixer()))


def _fixmatch_pair(threshold: float):
    """Two identical runs and the draw of their first step (images of a cnn8 student)."""
    cpu = torch.device("cpu")
    x = np.random.default_rng(0).random((40, 1, 8, 8), dtype=np.float32)
    y = np.where(np.arange(40) % 3 == 0, np.arange(40) % 10, -1)
    settings = {**FIXMATCH, "threshold": threshold}
    runs = []
    for skip in (False, True):
        net, std = build_network(
            "cnn8", seed=1, x=x, input_shape=(1, 8, 8), num_classes=10, device=cpu
        )
        run = Training.start(net, settings, seed=4, num_classes=10, device=cpu)
        batches = Batches(
            x,
            y,
            None,
            np.flatnonzero(y >= 0),
            std,
            settings,
            generator=run.generators[0],
            device=cpu,
            skip_unconfident=skip,
        )
        runs.append((run, batches, draw_steps(batches, settings, 3)))
    return runs, settings


def test_leaving_unconfident_rows_out_changes_neither_the_loss_nor_the_weights():
    # the threshold at the median confidence of the first step's weak views: half are kept
    run, _, draws = _fixmatch_pair(0.0)[0][0]
    with torch.no_grad():
        confidence = torch.softmax(run.model(draws[0].unlabelled_weak), dim=1).max(dim=1).values
    runs, settings = _fixmatch_pair(float(confidence.median()))
    initial = [p.detach().clone() for p in runs[0][0].model.parameters()]
    sums = []
    for run, batches, draws in runs:
        sums.append({"loss_labelled": 0.0, "loss_unlabelled": 0.0, "mask_rate": 0.0})
        for draw in draws:
            step(run, batches, draw, settings, sums[-1], num_classes=10)
    assert 0.1 < float(sums[0]["mask_rate"]) / 3 < 0.9  # some rows left out, some kept
    assert float(sums[0]["loss_unlabelled"]) > 0
    for key in sums[0]:
        torch.testing.assert_close(sums[1][key], sums[0][key], rtol=1e-5, atol=1e-6)
    (full, *_), (skipping, *_) = runs
    for a, b, start in zip(full.model.parameters(), skipping.model.parameters(), initial):
        assert not torch.equal(a, start)  # three steps trained them
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_a_chunk_of_draws_holds_each_steps_rows_and_views():
    runs, settings = _fixmatch_pair(0.5)
    draws = runs[0][2]
    assert len(draws) == 3
    for draw in draws:
        assert draw.rows.shape == (4,) and draw.labelled.shape == (4, 1, 8, 8)
        assert draw.unlabelled_weak.shape == draw.unlabelled_strong.shape == (12, 1, 8, 8)
        assert set(draw.rows.tolist()) <= set(np.flatnonzero(np.arange(40) % 3 == 0).tolist())
    assert not torch.equal(draws[0].unlabelled_weak, draws[1].unlabelled_weak)
    # 28x28 FixMatch steps of 32 + 2 x 96 views: as many as DRAW_BYTES holds; huge images: one
    big = Batches.__new__(Batches)
    big.x = torch.zeros(2, 1, 28, 28)
    fixmatch = {**settings, "batch_size": 32}
    assert steps_per_draw(big, fixmatch) == min(MAX_STEPS_PER_DRAW, DRAW_BYTES // (224 * 3136))
    big.x = torch.zeros(2, 3, 224, 224)
    assert steps_per_draw(big, fixmatch) == 1
    assert steps_per_draw(big, {**fixmatch, "method": "supervised", "batch_size": 1}) > 1


@pytest.mark.parametrize("amp", [False, True])
def test_amp_trains_under_bfloat16_autocast_only_where_the_device_has_it(amp):
    cpu = torch.device("cpu")
    x = np.random.default_rng(0).random((6, 1, 8, 8), dtype=np.float32)
    net, _ = build_network("cnn8", seed=0, x=x, input_shape=(1, 8, 8), num_classes=10, device=cpu)
    run = Training.start(net, {**FIXMATCH, "amp": amp}, seed=0, num_classes=10, device=cpu)
    assert run.amp == (amp and bf16_native(cpu))
    inputs = torch.from_numpy(x)
    logits = run.forward(inputs)
    assert logits.dtype == torch.float32 and logits.requires_grad
    assert all(p.dtype == torch.float32 for p in net.parameters())
    with torch.no_grad():
        exact = net(inputs)
    if run.amp:  # bfloat16 keeps 8 bits of mantissa: close to the float32 logits, not equal
        assert not torch.equal(logits.detach(), exact)
        torch.testing.assert_close(logits.detach(), exact, rtol=0.05, atol=0.05)
    else:
        torch.testing.assert_close(logits.detach(), exact, rtol=0, atol=0)


def test_bf16_native_asks_the_hardware(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not bf16_native(torch.device("cpu"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert bf16_native(torch.device("cpu"))
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert not bf16_native(torch.device("cpu"))  # a torch that cannot tell: float32


@pytest.mark.parametrize("confident", [0, 1, 15, 16, 17, 90, 96])
def test_the_kept_rows_are_every_confident_row_filled_up_to_a_multiple(confident):
    mask = torch.zeros(96)
    mask[torch.randperm(96, generator=torch.Generator().manual_seed(confident))[:confident]] = 1
    kept = _kept_rows(mask)
    assert kept.numel() == min(96, -(-confident // KEPT_ROWS_MULTIPLE) * KEPT_ROWS_MULTIPLE)
    assert len(set(kept.tolist())) == kept.numel()  # no row twice
    assert set(mask.nonzero().squeeze(1).tolist()) <= set(kept.tolist())  # every confident row
    assert float(mask[kept].sum()) == confident  # the filler rows weigh 0
