"""Per-teacher randomness: stateless epoch plans and the augmentation itself."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pate.teachers.schedule import augment, epoch_plan, init_teacher, parse_augmentation  # noqa: E402


def test_epoch_plan_is_stateless_and_per_teacher():
    a = epoch_plan(7, 3, 50, max_shift=2, flip=True)
    b = epoch_plan(7, 3, 50, max_shift=2, flip=True)
    np.testing.assert_array_equal(a.order, b.order)
    np.testing.assert_array_equal(a.shifts, b.shifts)
    assert sorted(a.order) == list(range(50))
    assert np.abs(a.shifts).max() <= 2 and a.flips.dtype == bool
    assert not np.array_equal(a.order, epoch_plan(8, 3, 50).order)  # other teacher
    assert not np.array_equal(a.order, epoch_plan(7, 4, 50).order)  # other epoch


def test_augment_shifts_and_flips():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4) + 1
    shifts = torch.tensor([[1, 0], [0, -1]])
    out = augment(x, shifts, None)
    # image 0 moved down one row (zero row on top), image 1 moved left one column
    torch.testing.assert_close(out[0, 0, 1:], x[0, 0, :-1])
    assert torch.all(out[0, 0, 0] == 0)
    torch.testing.assert_close(out[1, 0, :, :-1], x[1, 0, :, 1:])
    assert torch.all(out[1, 0, :, -1] == 0)
    torch.testing.assert_close(augment(x, shifts, None, max_shift=3), out)
    flipped = augment(x, None, torch.tensor([True, False]))
    torch.testing.assert_close(flipped[0], x[0].flip(-1))
    torch.testing.assert_close(flipped[1], x[1])


def test_init_depends_only_on_the_seed():
    torch.manual_seed(0)
    a = init_teacher("cnn8", 5, input_shape=(1, 8, 8), num_classes=10)
    torch.manual_seed(123)
    b = init_teacher("cnn8", 5, input_shape=(1, 8, 8), num_classes=10)
    c = init_teacher("cnn8", 6, input_shape=(1, 8, 8), num_classes=10)
    for (k, va), vb, vc in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values()
    ):
        assert torch.equal(va, vb), k
        assert not torch.equal(va, vc)


def test_parse_augmentation():
    assert parse_augmentation("shift+flip", (1, 28, 28)) == (2, True)
    assert parse_augmentation("shift", (1, 8, 8)) == (1, False)
    assert parse_augmentation("none", (10,)) == (0, False)
    with pytest.raises(ValueError, match="image inputs"):
        parse_augmentation("flip", (10,))
