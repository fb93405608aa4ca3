"""The layer-at-a-time scattering transform is kymatio's Scattering2D(J=2, L=8)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("kymatio")

from pate.teachers import scattering  # noqa: E402


def _kymatio(x: torch.Tensor) -> torch.Tensor:
    """kymatio's path-by-path transform, reshaped as the front-end's output."""
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    b, c, h, w = x.shape
    out = ScatteringTorch2D(J=scattering.J, shape=(h, w), L=scattering.L)(x.contiguous())
    return out.reshape(b, c * scattering.PATHS, h // 4, w // 4)


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (1, 8, 12), (2, 20, 16)])
def test_equals_kymatio_to_float32_rounding(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.rand((5,) + shape, generator=gen)
    with torch.no_grad():
        ours = scattering.Scattering2D(shape[1], shape[2])(x)
        theirs = _kymatio(x)
    assert ours.shape == theirs.shape == (5, shape[0] * 81, shape[1] // 4, shape[2] // 4)
    torch.testing.assert_close(ours, theirs, rtol=2e-5, atol=2e-6)


def test_float64_is_exact_and_every_path_is_in_kymatio_order():
    """In float64 the two agree to 1e-12, path by path: the order is the same, not only the
    set of paths (a swapped pair of paths would fail here)."""
    gen = torch.Generator().manual_seed(7)
    x = torch.rand((3, 1, 28, 28), generator=gen, dtype=torch.float64)
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    ref = ScatteringTorch2D(J=scattering.J, shape=(28, 28), L=scattering.L).double()
    with torch.no_grad():
        ours = scattering.Scattering2D(28, 28).double()(x)
        theirs = ref(x).reshape(3, 81, 7, 7)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    # the paths are distinct functions: every path differs from every other one
    flat = ours[0].reshape(81, -1)
    distances = torch.cdist(flat, flat) + torch.eye(81, dtype=torch.float64)
    assert float(distances.min()) > 1e-6


def test_chunks_do_not_change_the_result(monkeypatch):
    x = torch.rand((7, 2, 12, 12), generator=torch.Generator().manual_seed(3))
    net = scattering.Scattering2D(12, 12)
    with torch.no_grad():
        whole = net(x)
        monkeypatch.setattr(scattering, "CHUNK", 3)  # 14 rows in chunks of 3, 3, 3, 3, 2
        chunked = net(x)
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-7)  # BLAS blocking only


def test_no_parameters_and_the_constants_move_with_the_module():
    net = scattering.Scattering2D(28, 28)
    assert list(net.parameters()) == []
    assert {name for name, _ in net.named_buffers()} == {
        "lowpass_0",
        "lowpass_1",
        "wavelets_0",
        "wavelets_1",
    }
    assert net.state_dict() == {}  # nothing of it is saved with a student's weights
    assert net.lowpass_0.dtype == torch.float64  # cast to the input's dtype when used
    assert net.float().lowpass_0.dtype == torch.float32


@pytest.mark.parametrize("size", [(6, 8), (28, 30), (4, 4)])
def test_bad_sizes_are_refused(size):
    with pytest.raises(ValueError, match="multiples of 4"):
        scattering.Scattering2D(*size)


def test_another_image_size_is_refused():
    net = scattering.Scattering2D(28, 28)
    with pytest.raises(ValueError, match="28x28 images, got 32x32"):
        net(torch.zeros((1, 1, 32, 32)))


def test_front_end_uses_it_and_its_cache_key_names_it():
    from pate.teachers import features

    assert isinstance(features.ScatterNet(28, 28), scattering.Scattering2D)
    assert features.SCATTER_SETTINGS["implementation"].startswith("pate.teachers.scattering")
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    with torch.no_grad():
        direct = scattering.Scattering2D(8, 8)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(features.scatter(x, batch_size=3), direct, rtol=1e-6, atol=1e-7)
