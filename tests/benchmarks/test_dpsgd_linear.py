"""benchmarks/dpsgd_linear.py: the closed-form clipped gradients against autograd, the accountant
against Tramer & Boneh's published noise, the noise calibration, group normalisation against
torch's, a DP-SGD run that learns, and argument checks before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def dpsgd(load_benchmark):
    return load_benchmark("dpsgd_linear")


def test_closed_form_clipped_sum_equals_autograd_per_example(dpsgd):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 7, generator=gen) * torch.linspace(0.01, 3, 16)[:, None]
    y = torch.randint(0, 4, (16,), generator=gen)
    w, b = torch.randn(4, 7, generator=gen), torch.randn(4, generator=gen)
    clip = 0.5
    sw, sb = torch.zeros_like(w), torch.zeros_like(b)
    clipped = 0
    for i in range(16):
        wi, bi = w.clone().requires_grad_(), b.clone().requires_grad_()
        torch.nn.functional.cross_entropy((x[i : i + 1] @ wi.T + bi), y[i : i + 1]).backward()
        norm = torch.sqrt(wi.grad.pow(2).sum() + bi.grad.pow(2).sum())
        factor = min(1.0, clip / (float(norm) + 1e-6))
        clipped += factor < 1
        sw += factor * wi.grad
        sb += factor * bi.grad
    assert 0 < clipped < 16  # both branches of the clip are exercised
    cw, cb = dpsgd.clipped_gradient_sum(w, b, x, y, clip=clip)
    torch.testing.assert_close(cw, sw, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cb, sb, rtol=1e-5, atol=1e-6)


def test_accountant_gives_tramer_boneh_eps_3_for_their_noise(dpsgd):
    """Their README: noise 4.05 for 40 epochs of batch 8192 on 60000 images at eps 3."""
    recipe = dpsgd.TRAMER_BONEH_FMNIST
    common = dict(
        noise_multiplier=4.05,
        sampling_rate=recipe.sampling_rate(60000),
        steps=recipe.steps(60000),
        delta=1e-5,
    )
    assert recipe.steps(60000) == 280
    classic = dpsgd.dpsgd_eps(orders=dpsgd.TB_ORDERS, conversion="classic", **common)
    assert 2.98 < classic <= 3.0
    tight = dpsgd.dpsgd_eps(orders=dpsgd.TB_ORDERS, conversion="tight", **common)
    assert tight < classic  # the tight conversion never charges more


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_calibrated_noise_is_the_smallest_that_fits(dpsgd, eps):
    from pate.analysis import DEFAULT_ORDERS

    kw = dict(
        sampling_rate=0.1365, steps=280, delta=1e-5, orders=DEFAULT_ORDERS, conversion="tight"
    )
    z = dpsgd.calibrate_noise(eps=eps, **kw)
    assert dpsgd.dpsgd_eps(noise_multiplier=z, **kw) <= eps
    assert dpsgd.dpsgd_eps(noise_multiplier=z * (1 - 1e-3), **kw) > eps


def test_group_normalise_equals_torch_group_norm(dpsgd):
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(5, 6, 3, 3)).astype(np.float32)
    want = torch.nn.GroupNorm(3, 6, affine=False)(torch.from_numpy(x)).reshape(5, -1).numpy()
    np.testing.assert_allclose(dpsgd.group_normalise(x, groups=3, chunk=2), want, atol=1e-5)
    with pytest.raises(ValueError, match="groups must divide the 6 channels, got groups=4"):
        dpsgd.group_normalise(x, groups=4)


def test_dpsgd_learns_a_separable_problem_and_noise_hurts(dpsgd):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 20)) * 3
    y = rng.integers(0, 3, size=3000)
    x = (centres[y] + rng.normal(size=(3000, 20))).astype(np.float32)
    recipe = dpsgd.Recipe(batch_size=300, epochs=5, lr=4.0, clip=1.0, groups=1)
    w, b = dpsgd.train_linear(x, y, recipe=recipe, noise_multiplier=0.5, seed=0, num_classes=3)
    assert dpsgd.accuracy(w, b, x, y) > 0.95
    w, b = dpsgd.train_linear(x, y, recipe=recipe, noise_multiplier=500.0, seed=0, num_classes=3)
    assert dpsgd.accuracy(w, b, x, y) < 0.9


def test_save_replaces_a_rerun_and_keeps_the_others(dpsgd, tmp_path):
    out = tmp_path / "runs.json"
    row = {"protocol": "pate", "target_eps": 1.0, "holdout": False, "seed": 0, "accuracy": 0.8}
    dpsgd.save([row, dict(row, seed=1)], out, {"m": 1})
    dpsgd.save([dict(row, accuracy=0.9)], out, {"m": 2})
    got = json.loads(out.read_text())
    assert sorted((r["seed"], r["accuracy"]) for r in got["runs"]) == [(0, 0.9), (1, 0.8)]
    assert got["meta"] == {"m": 2}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--protocol", "pate", "--targets", "0"], "--targets must be positive"),
        (["--protocol", "pate", "--delta", "1"], "--delta must be in (0, 1), got 1.0"),
        (["--protocol", "pate", "--seeds", "-1"], "--seeds must be >= 0"),
        (["--protocol", "tramer-boneh", "--holdout"], "--holdout applies to --protocol pate only"),
    ],
)
def test_bad_arguments_stop_before_any_work(dpsgd, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        dpsgd.main([*argv, "--out", str(tmp_path / "out.json")])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
