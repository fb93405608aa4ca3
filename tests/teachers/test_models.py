"""Model zoo: shapes, no BatchNorm, custom factories, errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pate.teachers.models import build_model  # noqa: E402


@pytest.mark.parametrize(
    "name,shape",
    [
        ("cnn28", (1, 28, 28)),
        ("cnn28", (3, 28, 28)),
        ("cnn32", (3, 32, 32)),
        ("mlp", (17,)),
        ("mlp", (1, 8, 8)),
        ("cnn8", (1, 8, 8)),
        ("wrn16_4", (1, 28, 28)),
        ("wrn16_4", (3, 8, 8)),
        ("scatternet_cnn", (1, 28, 28)),
        ("scatternet_cnn", (3, 8, 8)),
    ],
)
def test_zoo_shapes_and_no_batchnorm(name, shape):
    from torch.nn.modules.batchnorm import _BatchNorm

    model = build_model(name, input_shape=shape, num_classes=7)
    assert model(torch.zeros((3,) + shape)).shape == (3, 7)
    assert not any(isinstance(m, _BatchNorm) for m in model.modules())
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())


def test_wrn16_4_is_the_wide_resnet_of_the_paper():
    """WRN-16-4: 2 blocks per stage at 64/128/256 channels, 28 -> 14 -> 7, one linear head."""
    from pate.teachers.wide_resnet import wide_resnet

    model = build_model("wrn16_4", input_shape=(1, 28, 28), num_classes=10)
    convs = [
        m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)
    ]
    assert len(convs) == 1 + 3 * 2 * 2  # stem + 3 stages x 2 blocks x 2 convs
    assert [c.out_channels for c in convs[1::4]] == [64, 128, 256]
    assert 2.6e6 < sum(p.numel() for p in model.parameters()) < 2.9e6
    seen = []
    hook = model.blocks[-1].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    model(torch.zeros(2, 1, 28, 28))
    hook.remove()
    assert seen == [(2, 256, 7, 7)]
    # GroupNorm, no running statistics: an item's output does not depend on its batch.
    x = torch.rand(4, 1, 28, 28)
    torch.testing.assert_close(model(x)[:1], model(x[:1]), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="6 n \\+ 4"):
        wide_resnet(1, 10, depth=18)


def test_wrn16_4_can_be_vmapped_over_stacked_weights():
    from torch.func import functional_call, stack_module_state, vmap

    models = [build_model("wrn16_4", input_shape=(1, 8, 8), num_classes=3) for _ in range(2)]
    params, buffers = stack_module_state(models)
    x = torch.rand(5, 1, 8, 8)
    batched = vmap(lambda p, b: functional_call(models[0], (p, b), (x,)))(params, buffers)
    for k, model in enumerate(models):
        torch.testing.assert_close(batched[k], model(x), rtol=1e-4, atol=1e-5)


def test_custom_factory(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "def tiny(input_shape, num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(input_shape[-1], num_classes))\n"
        "def not_a_module():\n    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("my_models:tiny", input_shape=(5,), num_classes=4)
    assert model(torch.zeros(2, 5)).shape == (2, 4)
    with pytest.raises(TypeError, match="nn.Module"):
        build_model("my_models:not_a_module", input_shape=(5,), num_classes=4)
    with pytest.raises(ValueError, match="no attribute"):
        build_model("my_models:missing", input_shape=(5,), num_classes=4)
    with pytest.raises(ValueError, match="cannot import"):
        build_model("no_such_module_xyz:f", input_shape=(5,), num_classes=4)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"\(C, 28, 28\)"):
        build_model("cnn28", input_shape=(1, 32, 32), num_classes=10)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("resnet", input_shape=(1, 28, 28), num_classes=10)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("mlp", input_shape=(4,), num_classes=1)
    with pytest.raises(ValueError, match="input_shape"):
        build_model("mlp", input_shape=(0,), num_classes=3)
    with pytest.raises(ValueError, match="wrn16_4.*H, W >= 4"):
        build_model("wrn16_4", input_shape=(17,), num_classes=3)


def test_scatternet_cnn_is_the_fixed_front_end_then_the_scatter_cnn_head():
    from pate.teachers.features import scatter

    model = build_model("scatternet_cnn", input_shape=(1, 28, 28), num_classes=10)
    front, norm = model[0], model[1]
    x = torch.rand(4, 1, 28, 28)
    # the front-end is pate's ScatterNet (no trainable weights), then GroupNorm on 81 channels
    assert not any(p.requires_grad for p in front.parameters())
    np.testing.assert_allclose(front(x).numpy(), scatter(x.numpy()), rtol=1e-5, atol=1e-6)
    assert isinstance(norm, torch.nn.GroupNorm) and norm.num_channels == 81
    head = build_model("scatter_cnn", input_shape=(81, 7, 7), num_classes=10)
    assert (
        sum(p.numel() for p in model.parameters())
        == sum(p.numel() for p in head.parameters()) + 2 * 81
    )
    with pytest.raises(ValueError, match="multiples of 4 and at least 8"):
        build_model("scatternet_cnn", input_shape=(1, 10, 10), num_classes=10)


def test_scatternet_cnn_is_refused_for_teachers():
    from pate.teachers.ensemble import TeacherConfig

    with pytest.raises(ValueError, match="'scatternet_cnn' is a student model"):
        TeacherConfig(model="scatternet_cnn")


@pytest.mark.parametrize(
    "name,shape",
    [
        ("cnn28", (1, 28, 28)),
        ("cnn32", (3, 32, 32)),
        ("cnn8", (1, 8, 8)),
        ("scatter_cnn", (9, 7, 7)),
    ],
)
def test_pool_before_relu_is_the_usual_network(name, shape):
    """The zoo pools before each ReLU (4x fewer activations); with the same weights, the usual
    ReLU-then-pool network gives the same outputs and the same gradients, and the parameter
    names (so saved weights) are the usual ones."""
    torch.manual_seed(0)
    model = build_model(name, input_shape=shape, num_classes=5).double()
    layers = list(model)
    swapped = 0
    for i in range(len(layers) - 1):
        if isinstance(layers[i], torch.nn.MaxPool2d) and isinstance(layers[i + 1], torch.nn.ReLU):
            layers[i], layers[i + 1] = layers[i + 1], layers[i]
            swapped += 1
    assert swapped >= 1
    usual = torch.nn.Sequential(*layers)
    assert list(dict(usual.named_parameters())) == list(dict(model.named_parameters()))
    x = torch.randn((6,) + shape, dtype=torch.float64)
    out = model(x)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    usual_out = usual(x)
    usual_grads = torch.autograd.grad(usual_out.square().sum(), list(usual.parameters()))
    torch.testing.assert_close(out, usual_out, rtol=0, atol=0)
    for g, h in zip(grads, usual_grads):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)
