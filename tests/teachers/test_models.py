"""Model zoo: shapes, no BatchNorm, custom factories, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pate.teachers.models import build_model  # noqa: E402


@pytest.mark.parametrize("name,shape", [("cnn28", (1, 28, 28)), ("cnn28", (3, 28, 28)),
                                        ("cnn32", (3, 32, 32)), ("mlp", (17,)),
                                        ("mlp", (1, 8, 8)), ("cnn8", (1, 8, 8))])
def test_zoo_shapes_and_no_batchnorm(name, shape):
    from torch.nn.modules.batchnorm import _BatchNorm

    model = build_model(name, input_shape=shape, num_classes=7)
    assert model(torch.zeros((3,) + shape)).shape == (3, 7)
    assert not any(isinstance(m, _BatchNorm) for m in model.modules())
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())


def test_custom_factory(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "def tiny(input_shape, num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(input_shape[-1], num_classes))\n"
        "def not_a_module():\n    return 3\n")
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
