"""Train a chunk of same-architecture teachers simultaneously with ``torch.func``.

More: docs/teachers.md, "pate.teachers.vectorized".
"""

from __future__ import annotations

import math

import numpy as np

from pate.teachers.schedule import augment, epoch_plan, init_teacher, parse_augmentation

__all__ = [
    "VectorizedChunk",
    "vmap_support",
    "has_convolution",
    "has_batchnorm",
    "linear_keys",
    "sequential_is_faster",
    "per_teacher_bytes",
    "EVAL_BATCH",
]

EVAL_BATCH = 256
#: Items predicted at a time by all teachers of a chunk at once (vmap) on a CPU.
CPU_VMAP_EVAL_BATCH = 1024


def has_convolution(module) -> bool:
    """Whether ``module`` holds a convolution layer (``torch.nn.modules.conv._ConvNd``)."""
    from torch.nn.modules.conv import _ConvNd

    return any(isinstance(m, _ConvNd) for m in module.modules())


def sequential_is_faster(model: str, input_shape, num_classes: int, *, device) -> bool:
    """Whether ``trainer="auto"`` trains ``model`` one teacher after another on ``device``: on
    a CPU when it has a convolution (vmap's grouped convolutions are slow there: docs/teachers.md)."""
    import torch

    if torch.device(device).type != "cpu":
        return False
    net = init_teacher(model, 0, input_shape=tuple(input_shape), num_classes=int(num_classes))
    return has_convolution(net)


def has_batchnorm(module) -> bool:
    """Whether ``module`` holds a BatchNorm layer (batch statistics: rows not independent)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    return any(isinstance(m, _BatchNorm) for m in module.modules())


def linear_keys(module) -> tuple[str, str | None] | None:
    """The names of the weight and bias of a model that is one linear layer of its flattened
    input (``Flatten`` then ``Linear``, or a ``Linear`` alone, as ``"linear"`` of the zoo), else
    None."""
    from torch import nn

    layers = list(module) if isinstance(module, nn.Sequential) else [module]
    prefix = ""
    if len(layers) == 2 and isinstance(layers[0], nn.Flatten):
        flatten = layers[0]
        if (flatten.start_dim, flatten.end_dim) != (1, -1):
            return None
        layers, prefix = layers[1:], "1."
    elif isinstance(module, nn.Sequential) and len(layers) == 1:
        prefix = "0."
    if len(layers) != 1 or type(layers[0]) is not nn.Linear:
        return None
    return prefix + "weight", (prefix + "bias" if layers[0].bias is not None else None)


def _linear_grad_fn(weight_key: str, bias_key: str | None, *, label_smoothing: float):
    """The gradients of :func:`_make_fns`'s loss for a linear model, in closed form.

    The loss of teacher ``t`` is ``sum_b w[t,b] CE(z[t,b], y[t,b]) / max(sum_b w[t,b], 1)`` with
    ``z = x W^T + b``; the cross entropy against the smoothed target ``q = (1 - s) onehot(y) +
    s / C`` has ``dCE/dz = softmax(z) - q``, so with ``d[t,b] = w[t,b] (softmax(z[t,b]) -
    q[t,b]) / max(sum_b w[t,b], 1)`` the gradients are ``dW[t] = d[t]^T x[t]`` and ``db[t] =
    sum_b d[t,b]``: exactly those of autograd, up to float32 rounding."""
    import torch

    def grad_fn(params, buffers, x, y, w):
        weight = params[weight_key]
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        logits = torch.bmm(flat, weight.transpose(1, 2))
        if bias_key is not None:
            logits += params[bias_key].unsqueeze(1)
        d = torch.softmax(logits, dim=-1)
        classes = d.shape[-1]
        if label_smoothing:
            d -= label_smoothing / classes
        d.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(d[..., :1], label_smoothing - 1.0))
        d *= (w / w.sum(dim=1, keepdim=True).clamp(min=1.0)).unsqueeze(-1)
        grads = {weight_key: torch.bmm(d.transpose(1, 2), flat)}
        if bias_key is not None:
            grads[bias_key] = d.sum(dim=1)
        return grads

    return grad_fn


def _meta_copy(model):
    import copy

    return copy.deepcopy(model).to("meta")


def _make_fns(base, *, amp_device: str | None, label_smoothing: float):
    import torch
    from torch.func import functional_call, grad, vmap
    from torch.nn import functional

    eval_base = _meta_copy(base).eval()  # no dropout etc. when predicting
    base.train()

    def forward(params, buffers, x, module=base):
        if amp_device is not None:
            with torch.autocast(device_type=amp_device, dtype=torch.bfloat16):
                return functional_call(module, (params, buffers), (x,)).float()
        return functional_call(module, (params, buffers), (x,))

    def predict(params, buffers, x):
        return forward(params, buffers, x, module=eval_base)

    def loss(params, buffers, x, y, w):
        ce = functional.cross_entropy(
            forward(params, buffers, x), y, reduction="none", label_smoothing=label_smoothing
        )
        return (ce * w).sum() / w.sum().clamp(min=1.0)

    grad_fn = vmap(grad(loss), in_dims=(0, 0, 0, 0, 0), randomness="different")
    predict_fn = vmap(predict, in_dims=(0, 0, None))
    return grad_fn, predict_fn


def vmap_support(model: str, *, input_shape, num_classes: int) -> str | None:
    """Why ``model`` cannot be vmapped (None when it can): BatchNorm, or a failing trial step."""
    import torch
    from torch.func import stack_module_state

    nets = [
        init_teacher(model, s, input_shape=input_shape, num_classes=num_classes) for s in (0, 1)
    ]
    if has_batchnorm(nets[0]):
        return "it contains BatchNorm (in-place running statistics cannot be vmapped)"
    try:
        params, buffers = stack_module_state(nets)
        grad_fn, _ = _make_fns(_meta_copy(nets[0]), amp_device=None, label_smoothing=0.0)
        x = torch.zeros((2, 2) + tuple(input_shape))
        y = torch.zeros((2, 2), dtype=torch.long)
        w = torch.ones((2, 2))
        grad_fn(params, buffers, x, y, w)
    except Exception as exc:  # any failure of the trial step means: train sequentially
        return f"a vmapped training step failed ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def per_teacher_bytes(model: str, *, input_shape, num_classes: int, batch_size: int) -> int:
    import torch

    net = init_teacher(model, 0, input_shape=input_shape, num_classes=num_classes).eval()
    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    act = [0]

    def hook(_m, _i, out):
        if isinstance(out, torch.Tensor):
            act[0] += out.numel() * out.element_size()

    handles = [m.register_forward_hook(hook) for m in net.modules() if not list(m.children())]
    with torch.no_grad():
        net(torch.zeros((1,) + tuple(input_shape)))
    for h in handles:
        h.remove()
    in_bytes = 4 * int(np.prod(input_shape))
    # weights + grads + 2 moments + ~5 temporaries of the update; activations kept for backward,
    # their gradients and layout copies made by batched convolutions (x4); augmented inputs.
    train = 9 * param_bytes + batch_size * (4 * act[0] + 3 * in_bytes)
    evaluate = EVAL_BATCH * 2 * act[0]
    return int(train + evaluate)


class VectorizedChunk:
    """All teachers of one chunk, trained together (docs/teachers.md)."""

    def __init__(self, config, seeds, shards, x, y, *, input_shape, num_classes, device) -> None:
        import torch
        from torch.func import stack_module_state

        from pate.teachers.optim import StackedOptimizer

        self.config = config
        self.seeds = [int(s) for s in seeds]
        self.shards = [np.asarray(s, dtype=np.int64) for s in shards]
        self.x, self.y = x, y  # torch tensors of the whole private split, on ``device``
        self.device = torch.device(device)
        self.num_teachers = len(self.seeds)
        self.max_shift, self.flip = parse_augmentation(config.augment, tuple(input_shape))
        nets = [
            init_teacher(config.model, s, input_shape=input_shape, num_classes=num_classes)
            for s in self.seeds
        ]
        params, buffers = stack_module_state(nets)
        self.params = {k: v.detach().to(self.device).contiguous() for k, v in params.items()}
        self.buffers = {k: v.to(self.device) for k, v in buffers.items()}
        amp = self.device.type == "cuda" and config.amp
        self.base = nets[0].to(self.device).eval()  # parameters replaced in functional_call
        self.grad_fn, self.predict_fn = _make_fns(
            _meta_copy(nets[0]),
            amp_device="cuda" if amp else None,
            label_smoothing=config.label_smoothing,
        )
        # a linear model on a CPU: its gradient in closed form, its predictions in one product
        self.linear = linear_keys(nets[0]) if self.device.type == "cpu" else None
        if self.linear is not None:
            self.grad_fn = _linear_grad_fn(*self.linear, label_smoothing=config.label_smoothing)
        del nets[1:]
        self.optimizer = StackedOptimizer(
            self.params,
            name=config.optimizer,
            lr=config.lr,
            weight_decay=config.weight_decay,
            momentum=config.momentum,
        )

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "params": {k: v.detach().cpu().clone() for k, v in self.params.items()},
            "buffers": {k: v.detach().cpu().clone() for k, v in self.buffers.items()},
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, sd: dict) -> None:
        for k, v in sd["params"].items():
            self.params[k].copy_(v.to(self.device))
        for k, v in sd["buffers"].items():
            self.buffers[k].copy_(v.to(self.device))
        self.optimizer.load_state_dict(sd["optimizer"])

    def stacked_params(self) -> dict:
        """``{name: (T, ...)}`` CPU tensors (parameters and buffers)."""
        out = {k: v.detach().cpu().clone() for k, v in self.params.items()}
        out.update({k: v.detach().cpu().clone() for k, v in self.buffers.items()})
        return out

    # -- training -----------------------------------------------------------------------------
    def _epoch_arrays(self, epoch: int):
        bs = self.config.batch_size
        sizes = [len(s) for s in self.shards]
        steps = math.ceil(max(sizes) / bs)
        width = steps * bs
        t_count = self.num_teachers
        rows = np.empty((t_count, width), dtype=np.int64)
        weight = np.zeros((t_count, width), dtype=np.float32)
        shifts = np.zeros((t_count, width, 2), dtype=np.int64) if self.max_shift else None
        flips = np.zeros((t_count, width), dtype=bool) if self.flip else None
        for t, (seed, shard) in enumerate(zip(self.seeds, self.shards)):
            plan = epoch_plan(seed, epoch, len(shard), max_shift=self.max_shift, flip=self.flip)
            n = len(shard)
            rows[t, :n] = shard[plan.order]
            rows[t, n:] = shard[0]  # padding: the teacher's own record, weight 0
            weight[t, :n] = 1.0
            if shifts is not None:
                shifts[t, :n] = plan.shifts
            if flips is not None:
                flips[t, :n] = plan.flips
        return steps, rows, weight, shifts, flips

    def train_epoch(self, epoch: int) -> None:
        import torch

        bs = self.config.batch_size
        steps, rows, weight, shifts, flips = self._epoch_arrays(epoch)
        dev = self.device
        rows_t = torch.from_numpy(rows).to(dev)
        weight_t = torch.from_numpy(weight).to(dev)
        shifts_t = torch.from_numpy(shifts).to(dev) if shifts is not None else None
        flips_t = torch.from_numpy(flips).to(dev) if flips is not None else None
        seed = int(np.random.SeedSequence([*self.seeds, int(epoch)]).generate_state(1)[0])
        t_count = self.num_teachers
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(seed)
            for s in range(steps):
                sl = slice(s * bs, (s + 1) * bs)
                r = rows_t[:, sl].reshape(-1)
                xb = augment(
                    self.x.index_select(0, r),
                    None if shifts_t is None else shifts_t[:, sl].reshape(-1, 2),
                    None if flips_t is None else flips_t[:, sl].reshape(-1),
                    max_shift=self.max_shift,
                )
                xb = xb.view((t_count, bs) + tuple(xb.shape[1:]))
                yb = self.y.index_select(0, r).view(t_count, bs)
                wb = weight_t[:, sl]
                active = wb.sum(dim=1) > 0
                grads = self.grad_fn(self.params, self.buffers, xb, yb, wb)
                self.optimizer.step(self.params, grads, active)

    def predict(self, x, *, batch: int = EVAL_BATCH) -> np.ndarray:
        """(T, N) int64 predicted labels of every teacher for inputs ``x`` (torch, on device):
        all teachers of the chunk at once (vmap) on CUDA, or on a CPU when the model has no
        convolution; else one teacher at a time on large batches (docs/teachers.md)."""
        import torch
        from torch.func import functional_call

        out = []
        with torch.no_grad():
            if self.linear is not None:
                return self._predict_linear(x, batch=max(batch, CPU_VMAP_EVAL_BATCH))
            vmapped = self.device.type == "cuda" or not has_convolution(self.base)
            if vmapped:
                if self.device.type != "cuda":
                    batch = max(batch, CPU_VMAP_EVAL_BATCH)
                for start in range(0, x.shape[0], batch):
                    logits = self.predict_fn(self.params, self.buffers, x[start : start + batch])
                    out.append(logits.argmax(dim=-1).cpu())
                return torch.cat(out, dim=1).numpy().astype(np.int64)
            for t in range(self.num_teachers):
                params = {k: v[t] for k, v in self.params.items()}
                buffers = {k: v[t] for k, v in self.buffers.items()}
                preds = [
                    functional_call(self.base, (params, buffers), (x[i : i + batch],)).argmax(
                        dim=-1
                    )
                    for i in range(0, x.shape[0], batch)
                ]
                out.append(torch.cat(preds))
        return torch.stack(out).numpy().astype(np.int64)

    def _predict_linear(self, x, *, batch: int) -> np.ndarray:
        """:meth:`predict` of a linear model: every teacher's logits in one matrix product of
        the inputs and the chunk's stacked weights ``(T * C, features)``."""
        import torch

        weight_key, bias_key = self.linear
        weight = self.params[weight_key]
        t_count, classes = weight.shape[0], weight.shape[1]
        stacked = weight.reshape(t_count * classes, -1)
        bias = None if bias_key is None else self.params[bias_key].reshape(-1)
        out = [torch.empty((t_count, 0), dtype=torch.long)]
        for start in range(0, x.shape[0], batch):
            flat = x[start : start + batch].reshape(min(batch, x.shape[0] - start), -1)
            logits = flat @ stacked.T if bias is None else torch.addmm(bias, flat, stacked.T)
            out.append(logits.view(-1, t_count, classes).argmax(dim=-1).T.cpu())
        return torch.cat(out, dim=1).numpy().astype(np.int64)
