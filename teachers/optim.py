"""Optimisers over *stacked* parameters: one independent optimiser state per teacher."""

from __future__ import annotations

from pate.analysis.validation import check_choice

__all__ = ["StackedOptimizer", "OPTIMIZERS", "make_torch_optimizer"]

OPTIMIZERS = ("adam", "adamw", "sgd")
#: Adam's moment decay rates and denominator term, as ``torch.optim.Adam``'s defaults.
BETAS, EPS = (0.9, 0.999), 1e-8


def make_torch_optimizer(name, parameters, *, lr, weight_decay=0.0, momentum=0.9):
    """The ``torch.optim`` optimiser that :class:`StackedOptimizer` reproduces (sequential path)."""
    import torch

    check_choice(name, "optimizer", OPTIMIZERS)
    if name == "sgd":
        return torch.optim.SGD(
            parameters, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=False
        )
    adam = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return adam(parameters, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay, foreach=False)


class StackedOptimizer:
    """The per-teacher state of ``torch.optim.Adam`` / ``AdamW`` / ``SGD`` (with momentum) and a
    per-teacher step counter for every tensor of a ``{name: (T, ...)}`` dict of stacked teacher
    parameters. ``step(params, grads, active)`` updates in place exactly as ``torch.optim`` would
    update each teacher alone, but only the teachers whose ``active`` entry is True: a teacher
    whose shard is exhausted for this step keeps its weights, moments and step count."""

    def __init__(
        self,
        params: dict,
        *,
        name: str = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        momentum: float = 0.9,
    ) -> None:
        import torch

        check_choice(name, "optimizer", OPTIMIZERS)
        self.name, self.lr, self.weight_decay = name, float(lr), float(weight_decay)
        self.momentum, self.betas, self.eps = float(momentum), BETAS, EPS
        first = next(iter(params.values()))
        self.num_teachers = int(first.shape[0])
        self.steps = torch.zeros(self.num_teachers, dtype=torch.float64, device=first.device)
        if name == "sgd":
            self.state = {k: {"momentum_buffer": torch.zeros_like(p)} for k, p in params.items()}
        else:
            self.state = {
                k: {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                for k, p in params.items()
            }

    def state_dict(self) -> dict:
        return {
            "steps": self.steps.detach().cpu().clone(),
            "state": {
                k: {n: t.detach().cpu().clone() for n, t in s.items()}
                for k, s in self.state.items()
            },
        }

    def load_state_dict(self, sd: dict) -> None:
        dev = self.steps.device
        self.steps = sd["steps"].to(dev).clone()
        self.state = {
            k: {n: t.to(dev).clone() for n, t in s.items()} for k, s in sd["state"].items()
        }

    def step(self, params: dict, grads: dict, active=None) -> None:
        """One update of every active teacher; ``active``: (T,) bool tensor or None (= all)."""
        import torch

        with torch.no_grad():
            if active is not None and bool(active.all()):
                active = None
            if active is None:
                self.steps += 1
            else:
                self.steps += active.to(self.steps.dtype)
            for key, param in params.items():
                grad = grads[key]
                shape = (-1,) + (1,) * (param.dim() - 1)
                mask = None if active is None else active.view(shape)
                if self.name != "sgd":
                    self._adam_in_place(param, grad, self.state[key], shape, mask)
                    continue
                buf = self.state[key]["momentum_buffer"]
                new_param, new_buf = self._sgd_update(param, grad, buf, shape)
                if mask is not None:
                    new_param = torch.where(mask, new_param, param)
                    new_buf = torch.where(mask, new_buf, buf)
                param.copy_(new_param)
                buf.copy_(new_buf)

    def _bias_corrections(self, dtype, shape):
        """Per teacher: Adam's step size lr / (1 - beta1^t) and sqrt(1 - beta2^t)."""
        beta1, beta2 = self.betas
        steps = self.steps.clamp(min=1)  # float64, like torch's python-float bias corrections
        step_size = (self.lr / (1 - beta1**steps)).to(dtype).view(shape)
        bias_correction2_sqrt = (1 - beta2**steps).sqrt().to(dtype).view(shape)
        return step_size, bias_correction2_sqrt

    def _adam_in_place(self, param, grad, state, shape, mask=None) -> None:
        """Adam / AdamW for every teacher, in place: ``torch.optim.Adam``'s operations in the same
        order (the same numbers as a copying update: tests/teachers/test_optim.py), without
        copies. With ``mask`` (``(T, 1, ...)`` bool, False for a teacher that sits out this
        step) a sitting-out teacher's gradient is 0 and its coefficients the identity (weight
        0, decay 1, step 0), so it stays exactly as it was (why: docs/teachers.md)."""
        import torch

        lr, wd = self.lr, self.weight_decay
        beta1, beta2 = self.betas
        if self.name == "adamw":
            param.mul_(self._masked(1 - lr * wd, 1.0, mask, param))
        elif wd:
            grad = grad.add(param, alpha=wd)
        if mask is not None:
            grad = torch.where(mask, grad, 0.0)  # a sitting-out teacher's (any) gradient: 0
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, self._masked(1 - beta1, 0.0, mask, param))
        exp_avg_sq.mul_(self._masked(beta2, 1.0, mask, param)).addcmul_(grad, grad, value=1 - beta2)
        step_size, bias_correction2_sqrt = self._bias_corrections(param.dtype, shape)
        if mask is not None:
            step_size = torch.where(mask, step_size, 0.0)
        update = exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(self.eps)
        torch.div(exp_avg, update, out=update)
        param.sub_(update.mul_(step_size))

    @staticmethod
    def _masked(value: float, identity: float, mask, like):
        """``value`` for an active teacher, ``identity`` for one that sits out (a ``(T, 1, ...)``
        tensor of ``like``'s dtype), or the plain number when every teacher is active."""
        import torch

        if mask is None:
            return value
        return torch.where(
            mask, torch.tensor(value, dtype=like.dtype, device=like.device), identity
        )

    def _sgd_update(self, param, grad, buf, shape):
        """SGD (with momentum) for every teacher: the new weights and momentum buffer, copies
        that :meth:`step` keeps only for the active teachers."""
        lr, wd = self.lr, self.weight_decay
        if wd:
            grad = grad.add(param, alpha=wd)
        if self.momentum:
            # torch.optim.SGD sets buf = grad on the first step; buf starts at 0, so
            # momentum * 0 + grad is that same value.
            first = (self.steps == 1).view(shape)
            new_buf = buf.mul(self.momentum).add(grad)
            new_buf = new_buf.where(~first, grad)
            return param.add(new_buf, alpha=-lr), new_buf
        return param.add(grad, alpha=-lr), buf
