"""Sequential fallback: teachers trained one after another.

More: docs/teachers.md, "pate.teachers.sequential".
"""

from __future__ import annotations

import contextlib

import numpy as np

from pate.core.tuned_defaults import ONE_THREAD_MACS
from pate.teachers.schedule import augment, epoch_plan, init_teacher, parse_augmentation

__all__ = [
    "step_threads",
    "SequentialChunk",
]


def forward_macs(model, example) -> int:
    """Multiply-adds of ``model``'s linear and convolution layers on the batch ``example``."""
    import torch

    total = [0]

    def hook(module, _inputs, output):
        if isinstance(module, torch.nn.Linear):
            total[0] += output.numel() * module.in_features
        elif isinstance(module, torch.nn.modules.conv._ConvNd):
            per_output = module.in_channels // module.groups
            total[0] += output.numel() * per_output * int(np.prod(module.kernel_size))

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for h in handles:
            h.remove()
    return total[0]


def step_threads(model, *, input_shape, batch_size: int, device) -> int | None:
    """1 for a CPU step under :data:`ONE_THREAD_MACS`, else None (docs/teachers.md)."""
    import torch

    if torch.device(device).type != "cpu":
        return None
    example = torch.zeros((int(batch_size),) + tuple(input_shape))
    return 1 if forward_macs(model, example) < ONE_THREAD_MACS else None


@contextlib.contextmanager
def _at_most_threads(count: int | None):
    """torch's intra-op threads capped at ``count`` inside the block (None: unchanged)."""
    import torch

    before = torch.get_num_threads()
    if count is None or before <= count:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SequentialChunk:
    def __init__(self, config, seeds, shards, x, y, *, input_shape, num_classes, device) -> None:
        import torch

        from pate.teachers.optim import make_torch_optimizer

        self.config = config
        self.seeds = [int(s) for s in seeds]
        self.shards = [np.asarray(s, dtype=np.int64) for s in shards]
        self.x, self.y = x, y
        self.device = torch.device(device)
        self.max_shift, self.flip = parse_augmentation(config.augment, tuple(input_shape))
        self.models = [
            init_teacher(config.model, s, input_shape=input_shape, num_classes=num_classes).to(
                self.device
            )
            for s in self.seeds
        ]
        self.optimizers = [
            make_torch_optimizer(
                config.optimizer,
                m.parameters(),
                lr=config.lr,
                weight_decay=config.weight_decay,
                momentum=config.momentum,
            )
            for m in self.models
        ]
        self.amp = self.device.type == "cuda" and config.amp
        self.step_threads = step_threads(
            self.models[0], input_shape=input_shape, batch_size=config.batch_size, device=device
        )

    def state_dict(self) -> dict:
        return {
            "models": [
                {k: v.detach().cpu().clone() for k, v in m.state_dict().items()}
                for m in self.models
            ],
            "optimizers": [o.state_dict() for o in self.optimizers],
        }

    def load_state_dict(self, sd: dict) -> None:
        for m, o, msd, osd in zip(self.models, self.optimizers, sd["models"], sd["optimizers"]):
            m.load_state_dict(msd)
            o.load_state_dict(osd)

    def stacked_params(self) -> dict:
        import torch

        sds = [m.state_dict() for m in self.models]
        return {k: torch.stack([sd[k].detach().cpu() for sd in sds]) for k in sds[0]}

    def train_epoch(self, epoch: int) -> None:
        with _at_most_threads(self.step_threads):
            self._train_epoch(epoch)

    def _train_epoch(self, epoch: int) -> None:
        import torch
        from torch.nn import functional

        bs = self.config.batch_size
        dev = self.device
        for seed, shard, model, opt in zip(self.seeds, self.shards, self.models, self.optimizers):
            plan = epoch_plan(seed, epoch, len(shard), max_shift=self.max_shift, flip=self.flip)
            rows = torch.from_numpy(shard[plan.order]).to(dev)
            shifts = torch.from_numpy(plan.shifts).to(dev) if plan.shifts is not None else None
            flips = torch.from_numpy(plan.flips).to(dev) if plan.flips is not None else None
            model.train()
            with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
                torch.manual_seed(
                    int(np.random.SeedSequence([seed, int(epoch)]).generate_state(1)[0])
                )
                for start in range(0, len(shard), bs):
                    sl = slice(start, start + bs)
                    r = rows[sl]
                    xb = augment(
                        self.x.index_select(0, r),
                        None if shifts is None else shifts[sl],
                        None if flips is None else flips[sl],
                        max_shift=self.max_shift,
                    )
                    opt.zero_grad(set_to_none=True)
                    if self.amp:
                        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                            logits = model(xb)
                    else:  # no autocast context per step (pure overhead when disabled)
                        logits = model(xb)
                    loss = functional.cross_entropy(
                        logits.float(),
                        self.y.index_select(0, r),
                        label_smoothing=self.config.label_smoothing,
                    )
                    loss.backward()
                    opt.step()

    def predict(self, x, *, batch: int = 500) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for model in self.models:
                model.eval()
                preds = []
                for start in range(0, x.shape[0], batch):
                    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=self.amp):
                        logits = model(x[start : start + batch])
                    preds.append(logits.float().argmax(dim=-1).cpu())
                out.append(torch.cat(preds))
        return torch.stack(out).numpy().astype(np.int64)
