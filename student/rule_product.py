"""The student times its labelling rule: the released model of a class-means run with
``[student] combine_with_rule = true`` (a product of experts).

More: docs/student.md, "pate.student.rule_product".
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pate.analysis.errors import InputError

__all__ = ["RuleHead", "RuleProduct", "product_log_proba", "HEAD_FEATURES"]

#: The front-ends a rule head reproduces in torch (``[knn] features``).
HEAD_FEATURES = ("scatternet", "scatternet+patches", "kernel", "none")


def product_log_proba(student_proba, rule_scores, *, temperature: float) -> np.ndarray:
    """The product's unnormalised log-probabilities (N, m) in numpy: log p_S + log softmax(T s)
    (the formula :class:`RuleProduct` computes in torch)."""
    from scipy.special import log_softmax

    if not temperature > 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    logp = np.log(np.clip(np.asarray(student_proba, dtype=np.float64), 1e-300, None))
    return logp + log_softmax(temperature * np.asarray(rule_scores, dtype=np.float64), axis=1)


class RuleHead(nn.Module):
    """x -> s(e(x)) (docs/student.md), float64. Built empty from its shapes (what
    ``Student.load`` needs), then filled by :meth:`from_fitted`; every array is a buffer, so the
    head travels in the student's state dict."""

    def __init__(self, *, input_shape, features: str, rule: str, dims: int, num_classes: int):
        super().__init__()
        from pate.core.labelling_rules import RULES
        from pate.teachers.features import ScatterNet, feature_shape

        if features not in HEAD_FEATURES:
            raise InputError(f"features must be one of {HEAD_FEATURES}, got {features!r}")
        if rule not in RULES:
            raise InputError(f"rule must be one of {RULES}, got {rule!r}")
        self.features, self.rule = features, rule
        shape = tuple(int(s) for s in input_shape)
        if features in ("scatternet", "scatternet+patches"):
            front = feature_shape(shape)
            self.scatter = ScatterNet(shape[1], shape[2])
            self.register_buffer("feature_mean", torch.zeros(front[0], 1, 1))
            self.register_buffer("feature_std", torch.ones(front[0], 1, 1))
            width = int(np.prod(front))
            if features == "scatternet+patches":
                from pate.teachers.patch_features import CENTROIDS, PATCH, patch_width

                side = shape[0] * PATCH * PATCH
                width += patch_width(shape)
                f64 = dict(dtype=torch.float64)
                self.register_buffer("patch_centres", torch.zeros(CENTROIDS, side, **f64))
                self.register_buffer("patch_mean", torch.zeros(side, **f64))
                self.register_buffer("patch_zca", torch.zeros(side, side, **f64))
                self.register_buffer("patch_column_mean", torch.zeros(4 * CENTROIDS, **f64))
                self.register_buffer("patch_column_std", torch.ones(4 * CENTROIDS, **f64))
        elif features == "kernel":
            from pate.teachers.public_embedding import KERNEL_FEATURES

            columns, width = int(np.prod(shape)), KERNEL_FEATURES
            self.register_buffer("kernel_mean", torch.zeros(columns, dtype=torch.float64))
            self.register_buffer("kernel_std", torch.ones(columns, dtype=torch.float64))
            self.register_buffer("kernel_weights", torch.zeros(columns, width, dtype=torch.float64))
            self.register_buffer("kernel_phases", torch.zeros(width, dtype=torch.float64))
        else:
            width = int(np.prod(shape))
        f64 = dict(dtype=torch.float64)
        self.register_buffer("pca_mean", torch.zeros(width, **f64))
        self.register_buffer("pca_axes", torch.zeros(dims, width, **f64))
        self.register_buffer("scale", torch.ones(dims, **f64))
        self.register_buffer("radius", torch.ones((), **f64))
        self.register_buffer("weights", torch.zeros(num_classes, dims, **f64))
        self.register_buffer("bias", torch.zeros(num_classes, **f64))

    @classmethod
    def from_fitted(cls, *, input_shape, front, recovered, num_classes: int) -> RuleHead:
        """The head of a run: its public ``front`` (``pate.teachers.public_embedding.PublicFrontEnd``)
        and the ``recovered`` rule (``pate.core.labelling_rules.AffineRule``)."""
        pca = front.pca
        head = cls(
            input_shape=input_shape,
            features=front.features,
            rule=recovered.rule,
            dims=pca.axes.shape[0],
            num_classes=num_classes,
        )
        with torch.no_grad():
            if front.standardizer is not None:
                head.feature_mean.copy_(torch.from_numpy(np.asarray(front.standardizer.mean)))
                head.feature_std.copy_(torch.from_numpy(np.asarray(front.standardizer.std)))
            if front.patches is not None:
                for name in ("centres", "mean", "zca", "column_mean", "column_std"):
                    getattr(head, f"patch_{name}").copy_(
                        torch.as_tensor(np.asarray(getattr(front.patches, name), np.float64))
                    )
            if front.kernel is not None:
                for name in ("mean", "std", "weights", "phases"):
                    getattr(head, f"kernel_{name}").copy_(
                        torch.as_tensor(np.asarray(getattr(front.kernel, name), dtype=np.float64))
                    )
            for name, value in (
                ("pca_mean", pca.mean),
                ("pca_axes", pca.axes),
                ("scale", recovered.geometry.scale),
                ("radius", recovered.geometry.radius),
                ("weights", recovered.weights),
                ("bias", recovered.bias),
            ):
                getattr(head, name).copy_(torch.as_tensor(np.asarray(value, dtype=np.float64)))
        return head.eval()

    def _patches(self, x: torch.Tensor) -> torch.Tensor:
        """The standardised patch features (N, 4 K), float64, as
        ``pate.teachers.patch_features.PatchFeatures.transform`` gives them."""
        from pate.teachers.patch_features import PATCH, PATCH_ROWS, triangle_activations

        raw = torch.cat(
            [
                triangle_activations(
                    block,
                    centres=self.patch_centres,
                    mean=self.patch_mean,
                    zca=self.patch_zca,
                    patch=PATCH,
                )
                for block in x.double().split(PATCH_ROWS)
            ]
        )
        return (raw - self.patch_column_mean) / self.patch_column_std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = x.float()
        if self.features in ("scatternet", "scatternet+patches"):
            f = (self.scatter(f) - self.feature_mean) / self.feature_std
        f = f.reshape(f.shape[0], -1).double()
        if self.features == "scatternet+patches":
            f = torch.cat([f, self._patches(x)], 1)
        if self.features == "kernel":
            from pate.teachers.public_embedding import KERNEL_CLIP

            z = ((f - self.kernel_mean) / self.kernel_std).clamp(-KERNEL_CLIP, KERNEL_CLIP)
            f = (2.0 / self.kernel_weights.shape[1]) ** 0.5 * torch.cos(
                z @ self.kernel_weights + self.kernel_phases
            )
        e = ((f - self.pca_mean) @ self.pca_axes.T).float().double()  # float32, as the run's
        w = e / self.scale  # whitened w(e)
        if self.rule == "logistic":  # clipped, scaled u(e)
            norm = torch.linalg.vector_norm(w, dim=1, keepdim=True)
            factor = torch.where(
                norm > self.radius, self.radius / norm.clamp_min(1e-300), torch.ones_like(norm)
            )
            w = w * factor / self.radius
        return w @ self.weights.T + self.bias


class RuleProduct(nn.Module):
    """The released model: logits log p_S(x) + log softmax(T · head(x)) (docs/student.md)."""

    def __init__(self, student: nn.Module, head: RuleHead, temperature: float):
        super().__init__()
        if not temperature > 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        self.student, self.head, self.temperature = student, head, float(temperature)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (
            torch.log_softmax(self.student(x).double(), dim=1)
            + torch.log_softmax(self.temperature * self.head(x), dim=1)
        ).float()
