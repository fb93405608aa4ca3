"""Model zoo for teachers (and students): small networks that ``torch.func.vmap`` can batch.

More: docs/teachers.md, "pate.teachers.models".
"""

from __future__ import annotations

import importlib
import inspect
import math

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_int, describe

__all__ = [
    "build_model",
    "MODEL_NAMES",
    "STUDENT_ONLY_MODELS",
    "check_input_shape",
    "is_model_name",
    "import_factory",
    "is_factory_spec",
    "factory_estimator",
    "auto_model_name",
]

MODEL_NAMES = (
    "cnn28",
    "cnn32",
    "mlp",
    "cnn8",
    "linear",
    "scatter_cnn",
    "scatternet_cnn",
    "wrn16_4",
)
#: Zoo models a student may use but teachers may not (not vectorizable over teachers).
STUDENT_ONLY_MODELS = ("scatternet_cnn",)


def is_model_name(name: str) -> bool:
    """Whether a model given by name is one :func:`build_model` can resolve: ``"auto"``, a zoo
    name, or a ``"module:factory"`` / ``"sklearn:..."`` / ``"python:..."`` reference (checked
    when it is built). For up-front validation of teacher and student settings."""
    return name == "auto" or name in MODEL_NAMES or ":" in name


def check_input_shape(input_shape, name: str = "input_shape") -> tuple[int, ...]:
    """A non-empty tuple of positive ints (``(C, H, W)`` or ``(F,)``)."""
    try:
        shape = tuple(input_shape)
    except TypeError:
        raise InputTypeError(
            f"{name} must be a tuple of positive ints, got {describe(input_shape)}"
        ) from None
    if not shape:
        raise InputError(f"{name} must be non-empty, got {shape}")
    return tuple(check_int(s, f"{name}[{i}]", minimum=1) for i, s in enumerate(shape))


def _image_shape(name: str, input_shape: tuple[int, ...], side: int) -> int:
    if len(input_shape) != 3 or input_shape[1:] != (side, side):
        raise InputError(
            f"model {name!r} needs input_shape (C, {side}, {side}), got {input_shape}; "
            f"use 'mlp' (any shape) or a 'module:factory' of your own"
        )
    return input_shape[0]


# Every 2x2 max-pool here comes before its ReLU. Max and ReLU commute (ReLU is monotone:
# max(relu(a), relu(b)) = relu(max(a, b))), so each network is the usual ReLU-then-pool one: the
# same function, gradients, parameter names and initialisation (tests/teachers/test_models.py),
# while the ReLU and its backward pass touch 4x fewer activations (measured: docs/student.md).


def _small_cnn(channels: int, num_classes: int, side: int, hidden: int):
    """cnn28 (side 28, hidden 128) and cnn8 (side 8, hidden 64): two conv-pool-ReLU blocks."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
        nn.MaxPool2d(2),  # 16 x side/2 x side/2 (pool, then ReLU: see above)
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.MaxPool2d(2),  # 32 x side/4 x side/4
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * (side // 4) ** 2, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _cnn32(channels: int, num_classes: int):
    from torch import nn

    def block(cin, cout):
        return [
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.GroupNorm(8, cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.GroupNorm(8, cout),
            nn.MaxPool2d(2),
            nn.ReLU(),
        ]

    return nn.Sequential(
        *block(channels, 32),
        *block(32, 64),
        *block(64, 128),  # 128 x 4 x 4
        nn.Flatten(),
        nn.Linear(128 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


def _mlp(features: int, num_classes: int):
    from torch import nn

    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(features, 256),
        nn.ReLU(),
        nn.Linear(256, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


def _scatter_cnn(input_shape: tuple[int, ...], num_classes: int):
    from torch import nn

    if len(input_shape) != 3 or min(input_shape[1:]) < 2:
        raise InputError(
            f"model 'scatter_cnn' needs (C, H, W) features with H, W >= 2 "
            f"(ScatterNet features of images), got input shape {input_shape}"
        )
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * (h // 2) * (w // 2), num_classes),
    )


def _scatternet_cnn(input_shape: tuple[int, ...], num_classes: int):
    from torch import nn

    from pate.teachers.features import ScatterNet, feature_shape

    try:
        shape = feature_shape(input_shape)
    except ValueError:
        raise InputError(
            f"model 'scatternet_cnn' needs images (C, H, W) with H and W multiples "
            f"of 4 and at least 8, got input shape {tuple(input_shape)}"
        ) from None
    return nn.Sequential(
        ScatterNet(input_shape[1], input_shape[2]),
        nn.GroupNorm(9 * input_shape[0], shape[0]),
        *_scatter_cnn(shape, num_classes),
    )


def import_factory(spec: str):
    """The callable named by ``"package.module:factory"`` (ValueError / TypeError naming it)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InputError(f"model {spec!r}: a custom model is given as 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            f"model {spec!r}: cannot import module {module_name!r} ({exc}); "
            "make it importable (e.g. add its directory to PYTHONPATH)"
        ) from None
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise InputError(f"model {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise InputTypeError(f"model {spec!r}: {attr!r} is not callable")
    return factory


def is_factory_spec(name) -> bool:
    """Whether ``name`` is a ``"package.module:factory"`` reference (not ``sklearn:`` /
    ``python:``)."""
    return isinstance(name, str) and ":" in name and not name.startswith(("sklearn:", "python:"))


def factory_estimator(spec: str, *, input_shape, num_classes: int):
    """The scikit-learn estimator a ``"package.module:factory"`` returns (a ``Pipeline`` too),
    or None when it builds a torch module (built once here and thrown away, under a forked torch
    RNG so that the teachers' initialisation is unchanged). A factory that returns anything else
    is refused with a TypeError naming it."""
    import torch

    factory = import_factory(spec)
    with torch.random.fork_rng(devices=[]):
        built = call_factory(factory, check_input_shape(input_shape), num_classes)
    if isinstance(built, torch.nn.Module):
        return None
    if hasattr(built, "fit") and hasattr(built, "get_params"):
        return built
    raise InputTypeError(
        f"model {spec!r} must return a torch.nn.Module or a scikit-learn estimator "
        f"(e.g. a Pipeline), got {type(built).__name__}"
    )


def factory_name(factory) -> str:
    """``module.qualname`` of a model factory given as a Python callable (for logs and
    fingerprints: the callable itself is not saved anywhere)."""
    return (
        f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"
    )


def call_factory(factory, input_shape, num_classes):
    """Call a model factory with ``input_shape=`` and ``num_classes=`` when it accepts them
    (a zero-argument factory, e.g. ``lambda: nn.Sequential(...)``, is called without)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {
        k: v
        for k, v in (("input_shape", input_shape), ("num_classes", num_classes))
        if takes_kwargs or k in params
    }
    return factory(**kwargs)


def build_model(name: str, *, input_shape, num_classes: int):
    """Build a fresh, randomly initialised model (uses torch's global RNG for the init)."""
    from torch import nn

    if not isinstance(name, str) and not callable(name):
        raise InputTypeError(
            f"model must be a name or a factory returning a torch.nn.Module, got {describe(name)}"
        )
    input_shape = check_input_shape(input_shape)
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if callable(name):
        model = call_factory(name, input_shape, num_classes)
        name = factory_name(name)
    elif name in ("cnn28", "cnn8"):
        side = int(name[3:])
        channels = _image_shape(name, input_shape, side)
        model = _small_cnn(channels, num_classes, side, hidden=128 if side == 28 else 64)
    elif name == "cnn32":
        model = _cnn32(_image_shape(name, input_shape, 32), num_classes)
    elif name == "mlp":
        model = _mlp(math.prod(input_shape), num_classes)
    elif name == "linear":
        model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
    elif name == "scatter_cnn":
        model = _scatter_cnn(input_shape, num_classes)
    elif name == "scatternet_cnn":
        model = _scatternet_cnn(input_shape, num_classes)
    elif name == "wrn16_4":
        from pate.teachers.wide_resnet import wide_resnet

        if len(input_shape) != 3 or min(input_shape[1:]) < 4:
            raise InputError(
                f"model 'wrn16_4' needs (C, H, W) images with H, W >= 4, got input "
                f"shape {input_shape}; use 'mlp' for tabular inputs"
            )
        model = wide_resnet(input_shape[0], num_classes, depth=16, widen=4)
    elif ":" in name and not name.startswith("sklearn:"):
        model = call_factory(import_factory(name), input_shape, num_classes)
    else:
        raise InputError(
            f"unknown model {name!r}; use one of {', '.join(MODEL_NAMES)} or "
            "'package.module:factory'"
        )
    if not isinstance(model, nn.Module):
        raise InputTypeError(
            f"model {name!r} must build a torch.nn.Module, got {type(model).__name__}"
        )
    return model


def auto_model_name(input_shape: tuple[int, ...]) -> str:
    """The zoo model of ``model="auto"`` (teachers and student): cnn28 / cnn32 / cnn8 by image
    side, else the MLP."""
    if len(input_shape) == 3:
        side = tuple(input_shape[1:])
        if side == (28, 28):
            return "cnn28"
        if side == (32, 32):
            return "cnn32"
        if side == (8, 8):
            return "cnn8"
    return "mlp"
