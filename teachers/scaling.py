"""Tabular inputs on their scales: standardisation with PUBLIC statistics, and a warning for a
user's raw model (the rules, and why the limit is 100: docs/teachers.md, "Input scaling").

Nothing here ever reads a private record's value: a statistic of the private split would have to
be charged to the ledger like a query, and is not used.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pate.analysis.errors import InputError

__all__ = [
    "SCALE_RATIO_LIMIT",
    "STANDARDIZE",
    "public_scale_ratio",
    "handles_scale",
    "scale_warning",
    "PublicScaler",
    "standardized_data",
]

SCALE_RATIO_LIMIT = 100.0
STANDARDIZE = ("auto", "public", "none")
_CONSTANT = 1e-6
logger = logging.getLogger("pate.teachers.scaling")

#: scikit-learn steps that put features on comparable scales (a Pipeline holding one is fine).
_SCALERS = (
    "StandardScaler",
    "MinMaxScaler",
    "MaxAbsScaler",
    "RobustScaler",
    "QuantileTransformer",
    "PowerTransformer",
    "Normalizer",
    "SplineTransformer",
    "KBinsDiscretizer",
)
#: scikit-learn estimators whose predictions do not depend on a feature's scale (trees).
_SCALE_FREE = (
    "DecisionTreeClassifier",
    "ExtraTreeClassifier",
    "RandomForestClassifier",
    "ExtraTreesClassifier",
    "GradientBoostingClassifier",
    "HistGradientBoostingClassifier",
    "AdaBoostClassifier",
    "XGBClassifier",
    "LGBMClassifier",
    "CatBoostClassifier",
    "GaussianNB",
)


def public_scale_ratio(public_x) -> float | None:
    """Largest over smallest standard deviation of the public features that vary (tabular (N, F)
    inputs; None for images or fewer than 2 varying features)."""
    x = np.asarray(public_x)
    if x.ndim != 2 or x.shape[0] < 2:
        return None
    std = x.std(axis=0, dtype=np.float64)
    std = std[std > _CONSTANT]
    if std.size < 2:
        return None
    return float(std.max() / std.min())


def _steps(model):
    """The estimators inside a scikit-learn Pipeline / ColumnTransformer / meta-estimator."""
    out = [model]
    for attr in ("steps", "transformers"):
        for item in getattr(model, attr, None) or []:
            if isinstance(item, tuple) and len(item) >= 2:
                out.extend(_steps(item[1]))
    for attr in ("estimator", "base_estimator"):
        inner = getattr(model, attr, None)
        if inner is not None and hasattr(inner, "fit"):
            out.extend(_steps(inner))
    return out


def handles_scale(model) -> bool:
    """Whether a scikit-learn ``model`` takes care of feature scales itself: a scaler step in it
    (a ``Pipeline`` that scales), or trees only (a tree model, alone or inside a ``Pipeline`` or
    a meta-estimator: a tree's splits do not depend on a feature's scale)."""
    steps = _steps(model)
    if {type(step).__name__ for step in steps} & set(_SCALERS):
        return True
    # a Pipeline's or ColumnTransformer's "passthrough" / "drop" / None step is no leaf
    leaves = [
        step
        for step in steps
        if len(_steps(step)) == 1 and not (step is None or isinstance(step, str))
    ]
    return bool(leaves) and all(type(step).__name__ in _SCALE_FREE for step in leaves)


def scale_warning(public_x, model, *, role: str = "teacher") -> str | None:
    """A warning when a user's own ``model`` receives unscaled tabular inputs whose public
    features differ wildly in scale (ratio of standard deviations > :data:`SCALE_RATIO_LIMIT`).

    ``model``: a scikit-learn estimator, a torch factory (callable) or a ``module:factory`` /
    ``sklearn:...`` name; zoo names (standardised here) never warn. ``role``: "teacher" or
    "student" (for the wording)."""
    if isinstance(model, str):
        from pate.teachers.models import MODEL_NAMES

        if model == "auto" or model in MODEL_NAMES:
            return None
        if model.startswith("sklearn:") and model.rsplit(".", 1)[-1] in _SCALE_FREE:
            return None  # a tree model named by class
    elif hasattr(model, "fit") and hasattr(model, "get_params") and handles_scale(model):
        return None
    ratio = public_scale_ratio(public_x)
    if ratio is None or ratio <= SCALE_RATIO_LIMIT:
        return None
    what = f"{role} model" if isinstance(model, str) else f"{role} model {type(model).__name__}"
    return (
        f"the {what} gets the tabular inputs unscaled, and the public features' standard "
        f"deviations differ by a factor of {ratio:.3g} (above {SCALE_RATIO_LIMIT:g}): "
        f"gradient-trained and regularised models learn poorly on such inputs. Wrap a "
        f"scikit-learn model in make_pipeline(StandardScaler(), ...), standardise inside a "
        f'torch model, or use {role}="auto" (zoo models are standardised with public '
        f"statistics)"
    )


@dataclasses.dataclass(frozen=True)
class PublicScaler:
    """Per-feature ``(x - mean) / std`` with the public split's statistics (constant features:
    std 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, public_x) -> PublicScaler:
        x = np.asarray(public_x, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] < 1:
            raise InputError(
                f"PublicScaler.fit needs tabular public inputs (N >= 1, F), got shape {x.shape}"
            )
        std = x.std(axis=0)
        return cls(
            mean=x.mean(axis=0).astype(np.float32),
            std=np.where(std > _CONSTANT, std, 1.0).astype(np.float32),
        )

    def transform(self, x) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float32) - self.mean) / self.std).astype(np.float32)


def standardized_data(data):
    """``data`` with its three splits standardised by the public split's statistics (free: the
    public split is public). The private split's values are transformed, never measured."""
    from pate.teachers.data import ArraySplit

    scaler = PublicScaler.fit(data.public.x)
    splits = {
        name: ArraySplit(scaler.transform(getattr(data, name).x), getattr(data, name).y)
        for name in ("private", "public", "evaluation")
    }
    logger.info(
        "teachers: tabular inputs standardised with the public split's per-feature "
        "mean and std (%d features)",
        scaler.mean.size,
    )
    return dataclasses.replace(data, **splits)
