import numpy as np
import pytest
import torch

from pate.student import augment as aug


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_weak_is_a_translation_of_the_input():
    x = torch.rand(16, 1, 8, 8)
    out = aug.weak_augment(x, generator=_gen(), flip=False, pad=1)
    assert out.shape == x.shape
    # Every output image equals its input shifted by some (dy, dx) in [-1, 1]^2 in the interior.
    for i in range(16):
        found = False
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                shifted = torch.roll(x[i], shifts=(dy, dx), dims=(1, 2))
                if torch.allclose(out[i, :, 1:-1, 1:-1], shifted[:, 1:-1, 1:-1]):
                    found = True
        assert found, i


def _flip_pad_crop(x, *, generator, flip, pad):
    """The weak view done in turn -- flip, pad (torch's reflect / replicate), crop -- drawing what
    ``weak_augment`` draws: the reference its single gather must equal."""
    n, _, h, w = x.shape
    if flip:
        mask = torch.rand(n, generator=generator) < 0.5
        x = torch.where(mask[:, None, None, None], x.flip(-1), x)
    mode = "reflect" if pad < min(h, w) else "replicate"
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode=mode)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    return torch.stack([padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize(
    "shape,pad", [((40, 1, 28, 28), 4), ((40, 3, 8, 8), 1), ((40, 2, 5, 7), 6), ((9, 1, 3, 3), 2)]
)
def test_weak_is_flip_pad_and_crop_bit_for_bit(shape, pad, flip):
    x = torch.rand(shape, generator=_gen(1))
    got = aug.weak_augment(x, generator=_gen(2), flip=flip, pad=pad)
    expected = _flip_pad_crop(x, generator=_gen(2), flip=flip, pad=pad)
    assert torch.equal(got, expected)


def test_weak_flip_only_when_asked():
    x = torch.rand(64, 3, 8, 8)
    out = aug.weak_augment(x, generator=_gen(), flip=True, pad=0)
    flipped = [bool(torch.equal(out[i], x[i].flip(-1))) for i in range(64)]
    same = [bool(torch.equal(out[i], x[i])) for i in range(64)]
    assert all(f or s for f, s in zip(flipped, same))
    assert 10 < sum(flipped) < 54
    assert torch.equal(aug.weak_augment(x, generator=_gen(), flip=False, pad=0), x)


def test_strong_stays_in_range_and_is_reproducible():
    x = torch.rand(200, 1, 28, 28)
    a = aug.strong_augment(x, generator=_gen(3))
    b = aug.strong_augment(x, generator=_gen(3))
    assert torch.equal(a, b)
    assert a.shape == x.shape and float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert float((a - x).abs().mean()) > 0.05
    c = aug.strong_augment(torch.rand(5, 3, 32, 32), generator=_gen())
    assert c.shape == (5, 3, 32, 32)


def _strong_one_op_at_a_time(x, generator, num_ops=2, cutout=0.5, fill=0.5):
    """strong_augment as it was: each operation's rows gathered and scattered on their own."""
    out = x.clone()
    op_index = torch.randint(0, len(aug._OP_LIST), (len(x), num_ops), generator=generator)
    magnitude = torch.rand(len(x), num_ops, generator=generator)
    for slot in range(num_ops):
        for k, op in enumerate(aug._OP_LIST):
            chosen = (op_index[:, slot] == k).nonzero(as_tuple=True)[0]
            if op is not aug._op_identity and chosen.numel():
                out[chosen] = op(out[chosen], magnitude[chosen, slot], generator)
    if cutout > 0:
        out = aug._cutout(out, generator=generator, size_fraction=cutout, fill=fill)
    return out


@pytest.mark.parametrize(("n", "channels", "seed"), [(96, 1, 0), (7, 3, 1), (1, 1, 2), (300, 1, 3)])
def test_strong_grouped_by_operation_is_bit_for_bit_the_gathered_one(n, channels, seed):
    """Issue #33: grouping the images by operation (one gather and one scatter per slot, not per
    operation) changes neither the images nor the random numbers drawn after it."""
    x = torch.rand(n, channels, 28, 28)
    g_new, g_old = _gen(seed), _gen(seed)
    assert torch.equal(aug.strong_augment(x, generator=g_new), _strong_one_op_at_a_time(x, g_old))
    assert torch.equal(torch.rand(4, generator=g_new), torch.rand(4, generator=g_old))


@pytest.mark.parametrize("name", sorted(aug.IMAGE_OPS))
def test_each_op_keeps_shape_and_range(name):
    x = torch.rand(12, 3, 8, 8)
    m = torch.rand(12, generator=_gen())
    out = aug.IMAGE_OPS[name](x, m, _gen())
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert float(out.min()) >= -1e-6 and float(out.max()) <= 1 + 1e-6


def test_equalize_spreads_a_narrow_histogram():
    x = 0.4 + 0.1 * torch.rand(4, 1, 16, 16)
    out = aug.IMAGE_OPS["equalize"](x, torch.zeros(4), _gen())
    assert float(out.amax()) == pytest.approx(1.0) and float(out.amin()) < 0.05


def test_cutout_fills_a_square():
    x = torch.zeros(50, 1, 16, 16)
    out = aug.strong_augment(x, generator=_gen(), num_ops=0, cutout=0.5, fill=0.5)
    filled = (out == 0.5).flatten(1).sum(1)
    assert int(filled.max()) <= 9 * 9 and int(filled.max()) > 0


def test_tabular_augmentations():
    x = torch.randn(100, 6)
    std = x.std(0)
    w = aug.weak_augment_tabular(x, generator=_gen(), feature_std=std)
    s = aug.strong_augment_tabular(x, generator=_gen(), feature_std=std, corruption=0.5, noise=0.0)
    assert w.shape == s.shape == x.shape
    assert 0 < float((w - x).abs().mean()) < 0.2
    # Corrupted entries come from the same column of other rows.
    changed = s != x
    assert 0.3 < float(changed.float().mean()) < 0.6
    for i, j in zip(*np.nonzero(changed.numpy())):
        assert bool((x[:, j] == s[i, j]).any())


def test_default_pad():
    assert aug.default_pad(32) == 4 and aug.default_pad(28) == 4 and aug.default_pad(8) == 1
