"""StackedOptimizer reproduces torch.optim per teacher, and leaves inactive teachers untouched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pate.teachers.optim import StackedOptimizer, make_torch_optimizer  # noqa: E402


def _copying_adam(opt, param, grad, state, shape):
    """Adam / AdamW for every teacher as copies (the formulas of torch.optim, in its order): the
    reference the in-place update must equal bit for bit."""
    lr, wd = opt.lr, opt.weight_decay
    beta1, beta2 = opt.betas
    if opt.name == "adamw":
        param = param.mul(1 - lr * wd)
    elif wd:
        grad = grad.add(param, alpha=wd)
    exp_avg = state["exp_avg"].lerp(grad, 1 - beta1)
    exp_avg_sq = state["exp_avg_sq"].mul(beta2).addcmul(grad, grad, value=1 - beta2)
    step_size, bias_correction2_sqrt = opt._bias_corrections(param.dtype, shape)
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add(opt.eps)
    new_param = param - step_size * (exp_avg / denom)
    return new_param, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}


@pytest.mark.parametrize("name,wd", [("adam", 0.0), ("adam", 0.01), ("adamw", 0.05), ("sgd", 0.01)])
def test_matches_torch_optim_per_teacher(name, wd):
    gen = torch.Generator().manual_seed(0)
    t_count, steps = 3, 6
    init = {
        "w": torch.randn(t_count, 4, 5, generator=gen),
        "b": torch.randn(t_count, 5, generator=gen),
    }
    grads = [
        {k: torch.randn(v.shape, generator=gen) for k, v in init.items()} for _ in range(steps)
    ]
    # teacher 2 sits out steps 2 and 4 (its shard is exhausted), teacher 0 sits out step 5
    active = [torch.tensor([True, True, s not in (2, 4)]) for s in range(steps)]
    active[5] = torch.tensor([False, True, True])
    stacked = {k: v.clone() for k, v in init.items()}
    opt = StackedOptimizer(stacked, name=name, lr=0.01, weight_decay=wd, momentum=0.9)
    for g, a in zip(grads, active):
        opt.step(stacked, g, a)
    for t in range(t_count):
        params = [torch.nn.Parameter(init[k][t].clone()) for k in ("w", "b")]
        ref = make_torch_optimizer(name, params, lr=0.01, weight_decay=wd, momentum=0.9)
        for g, a in zip(grads, active):
            if not a[t]:
                continue
            for p, k in zip(params, ("w", "b")):
                p.grad = g[k][t].clone()
            ref.step()
        for p, k in zip(params, ("w", "b")):
            torch.testing.assert_close(stacked[k][t], p.detach(), rtol=1e-5, atol=1e-6)
    assert opt.steps.tolist() == [5.0, 6.0, 4.0]


def test_state_dict_round_trip():
    params = {"w": torch.ones(2, 3)}
    opt = StackedOptimizer(params, name="adam", lr=0.1)
    opt.step(params, {"w": torch.full((2, 3), 0.5)})
    clone_params = {"w": params["w"].clone()}
    other = StackedOptimizer(clone_params, name="adam", lr=0.1)
    other.load_state_dict(opt.state_dict())
    g = {"w": torch.full((2, 3), -0.25)}
    opt.step(params, g)
    other.step(clone_params, g)
    torch.testing.assert_close(params["w"], clone_params["w"])


def test_unknown_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        StackedOptimizer({"w": torch.ones(1, 2)}, name="lbfgs")


@pytest.mark.parametrize("name,wd", [("adam", 0.0), ("adam", 0.01), ("adamw", 0.05)])
def test_the_in_place_step_is_the_copying_step_bit_for_bit(name, wd):
    """With every teacher active, Adam updates in place; the numbers are those of the copying
    update (same operations, same order)."""
    gen = torch.Generator().manual_seed(1)
    init = {"w": torch.randn(4, 7, 3, generator=gen), "b": torch.randn(4, 3, generator=gen)}
    fast = {k: v.clone() for k, v in init.items()}
    slow = {k: v.clone() for k, v in init.items()}
    opt = StackedOptimizer(fast, name=name, lr=0.01, weight_decay=wd)
    ref = StackedOptimizer(slow, name=name, lr=0.01, weight_decay=wd)
    for _ in range(5):
        grads = {k: torch.randn(v.shape, generator=gen) for k, v in init.items()}
        opt.step(fast, grads)  # all active: in place
        ref.steps += 1
        for key, param in slow.items():
            shape = (-1,) + (1,) * (param.dim() - 1)
            new_param, new_state = _copying_adam(ref, param, grads[key], ref.state[key], shape)
            param.copy_(new_param)
            for n, t in new_state.items():
                ref.state[key][n].copy_(t)
    for key in init:
        assert torch.equal(fast[key], slow[key])
        for n in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[key][n], ref.state[key][n])
    assert not torch.equal(fast["w"], init["w"])


@pytest.mark.parametrize("name,wd", [("adam", 0.0), ("adam", 0.01), ("adamw", 0.05)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_masked_in_place_step_is_the_masked_copying_step_bit_for_bit(name, wd, dtype):
    """When some teachers sit out, Adam still updates in place; an active teacher gets the
    numbers of the copying update, and one that sits out keeps its weights and moments bit for
    bit, whatever its gradient (here random, and once not finite)."""
    gen = torch.Generator().manual_seed(2)
    init = {
        "w": torch.randn(5, 7, 3, generator=gen, dtype=dtype),
        "b": torch.randn(5, 3, generator=gen, dtype=dtype),
    }
    fast = {k: v.clone() for k, v in init.items()}
    slow = {k: v.clone() for k, v in init.items()}
    opt = StackedOptimizer(fast, name=name, lr=0.01, weight_decay=wd)
    ref = StackedOptimizer(slow, name=name, lr=0.01, weight_decay=wd)
    for step in range(8):
        active = torch.rand(5, generator=gen) < 0.6
        active[step % 5] = False  # at least one sits out
        grads = {k: torch.randn(v.shape, generator=gen, dtype=dtype) for k, v in init.items()}
        grads["w"][step % 5, 0, 0] = float("nan") if step % 2 else float("inf")
        before = {k: v.clone() for k, v in fast.items()}
        moments = {k: {n: t.clone() for n, t in opt.state[k].items()} for k in init}
        opt.step(fast, grads, active)  # in place, masked
        ref.steps += active.to(ref.steps.dtype)
        for key, param in slow.items():
            shape = (-1,) + (1,) * (param.dim() - 1)
            new_param, new_state = _copying_adam(ref, param, grads[key], ref.state[key], shape)
            mask = active.view(shape)
            param.copy_(torch.where(mask, new_param, param))
            for n, t in new_state.items():
                ref.state[key][n].copy_(torch.where(mask, t, ref.state[key][n]))
        for key in init:
            assert torch.equal(fast[key], slow[key])
            assert torch.equal(fast[key][~active], before[key][~active])
            for n in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(opt.state[key][n], ref.state[key][n])
                assert torch.equal(opt.state[key][n][~active], moments[key][n][~active])
    assert opt.steps.tolist() == ref.steps.tolist()
    assert not torch.equal(fast["w"], init["w"])
