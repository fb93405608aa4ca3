"""A table's columns turned into features with statistics of the PUBLIC rows only (no privacy
cost): the column roles (:class:`TableColumns`) and the encoder (:class:`TableEncoder`: the
built-in one, stored as JSON, or the user's scikit-learn transformer fitted on the public rows;
one already fitted only wrapped in :class:`FittedOnPublic`). What the built-in encoder does, and
why, measured: docs/own_data.md, "Preprocessing".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe

QUANTILES = 1000
_BOUND = 1e-7  # the scores of the public extremes: +-5.2 (scikit-learn's bound)
_FORMAT = "pate-table-encoder"
_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TableColumns:
    """The roles of a table's columns: the label, the privacy-unit id (never a feature), the
    numeric and categorical feature columns, and the columns ignored."""

    label: str
    id: str | None
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    dropped: tuple[str, ...] = ()

    @property
    def features(self) -> tuple[str, ...]:
        return self.numeric + self.categorical

    @classmethod
    def from_json(cls, names: dict) -> TableColumns:
        """The roles from ``dataclasses.asdict``'s dictionary (a JSON file's)."""
        return cls(
            label=names["label"],
            id=names["id"],
            **{key: tuple(names[key]) for key in ("numeric", "categorical", "dropped")},
        )


@dataclasses.dataclass(frozen=True)
class FittedOnPublic:
    """A user's scikit-learn transformer already fitted, with the user's declaration that it was
    fitted on public data only (it is then used as it is; the report says it is declared)."""

    transformer: Any


def _normal_scores(values: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """``values`` mapped through the public quantiles to standard-normal scores (ties: the mean
    of the lowest and highest rank, as scikit-learn's QuantileTransformer; beyond the public
    range: the end scores, +-5.2)."""
    ranks = np.linspace(0.0, 1.0, quantiles.size)
    forward = np.interp(values, quantiles, ranks)
    backward = -np.interp(-values, -quantiles[::-1], -ranks[::-1])
    share = np.clip(0.5 * (forward + backward), _BOUND, 1.0 - _BOUND)
    return special.ndtri(share)


def _nothing_to_fit(name: str) -> InputError:
    return InputError(
        f"column {name!r} has no value in the public rows: the encoder fits on public "
        f"rows only and has nothing to fit; drop it (drop=[{name!r}])"
    )


@dataclasses.dataclass(frozen=True)
class _Numeric:
    name: str
    median: float
    indicator: bool
    quantiles: tuple[float, ...]

    @classmethod
    def fit(cls, name: str, values: np.ndarray) -> _Numeric:
        seen = values[~np.isnan(values)]
        if seen.size == 0:
            raise _nothing_to_fit(name)
        count = min(QUANTILES, seen.size)
        return cls(
            name=name,
            median=float(np.median(seen)),
            indicator=bool(seen.size < values.size),
            quantiles=tuple(float(q) for q in np.quantile(seen, np.linspace(0, 1, count))),
        )

    def encode(self, values: np.ndarray) -> list[np.ndarray]:
        missing = np.isnan(values)
        filled = np.where(missing, self.median, values)
        scores = _normal_scores(filled, np.asarray(self.quantiles, dtype=np.float64))
        return [scores, missing.astype(np.float64)] if self.indicator else [scores]

    def names(self) -> list[str]:
        return [self.name, f"{self.name}_missing"] if self.indicator else [self.name]


@dataclasses.dataclass(frozen=True)
class _Categorical:
    name: str
    fill: str
    categories: tuple[str, ...]

    @classmethod
    def fit(cls, name: str, values: pd.Series) -> _Categorical:
        seen = values.dropna().astype(str)
        if seen.empty:
            raise _nothing_to_fit(name)
        counts = seen.value_counts()
        fill = str(min(counts.index[counts == counts.max()]))  # ties: the first by name
        return cls(name=name, fill=fill, categories=tuple(sorted(counts.index)))

    def encode(self, values: pd.Series) -> list[np.ndarray]:
        text = values.astype(object).where(values.notna(), self.fill).astype(str).to_numpy()
        return [(text == category).astype(np.float64) for category in self.categories]

    def names(self) -> list[str]:
        return [f"{self.name}={category}" for category in self.categories]


def _numbers(frame: pd.DataFrame, name: str) -> np.ndarray:
    try:
        return pd.to_numeric(frame[name], errors="raise").to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    except (TypeError, ValueError) as error:
        raise InputError(
            f"column {name!r} is numeric in the public rows but has a value that is not a number "
            f"here ({error}); fix the value or declare the column categorical"
        ) from None


def _check_columns(frame: Any, columns: TableColumns, what: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise InputTypeError(
            f"the {what} must be a pandas DataFrame with named columns, got {type(frame).__name__}"
        )
    absent = [name for name in columns.features if name not in frame.columns]
    if absent:
        raise InputError(
            f"the {what} lacks the feature column(s) {absent} that the encoder was fitted with "
            f"(columns there: {list(frame.columns)}); give every split the same columns"
        )


class TableEncoder:
    """Raw table rows to float32 features, fitted on the public rows only (:meth:`fit_public`)."""

    def __init__(
        self,
        columns: TableColumns,
        *,
        public_rows: int,
        numeric: tuple[_Numeric, ...] = (),
        categorical: tuple[_Categorical, ...] = (),
        transformer: Any = None,
        declared: bool = False,
    ) -> None:
        self.columns = columns
        self.public_rows = public_rows
        self._numeric = numeric
        self._categorical = categorical
        self.transformer = transformer
        self._declared = declared
        self.feature_names: tuple[str, ...] = tuple(
            name for column in numeric + categorical for name in column.names()
        )

    @property
    def builtin(self) -> bool:
        """Whether this is the built-in encoder (storable as JSON)."""
        return self.transformer is None

    @classmethod
    def fit_public(
        cls, public: pd.DataFrame, columns: TableColumns, *, transformer: Any = None
    ) -> TableEncoder:
        """The encoder fitted on ``public`` (the public rows ONLY; never pass private rows).
        ``transformer``: a user's unfitted scikit-learn transformer (cloned, fitted here on the
        public feature columns), or one already fitted wrapped in :class:`FittedOnPublic`."""
        _check_columns(public, columns, "public table")
        if len(public) == 0:
            raise InputError("the public table has no row: the encoder fits on public rows only")
        features = public[list(columns.features)]
        if transformer is None:
            numeric = tuple(_Numeric.fit(name, _numbers(public, name)) for name in columns.numeric)
            categorical = tuple(
                _Categorical.fit(name, public[name]) for name in columns.categorical
            )
            return cls(columns, public_rows=len(public), numeric=numeric, categorical=categorical)
        if isinstance(transformer, FittedOnPublic):
            fitted, declared = transformer.transformer, True
        else:
            fitted, declared = _fitted_clone(transformer, features), False
        encoder = cls(columns, public_rows=len(public), transformer=fitted, declared=declared)
        width = encoder.transform(public.head(1)).shape[1]  # numbers out, before any work
        try:
            names = [str(name) for name in fitted.get_feature_names_out()]
        except (AttributeError, ValueError, TypeError):
            names = []
        if len(names) != width:
            names = [f"feature_{index}" for index in range(width)]
        encoder.feature_names = tuple(names)
        return encoder

    def _apply_transformer(self, features: pd.DataFrame) -> np.ndarray:
        out = self.transformer.transform(features)
        out = out.toarray() if hasattr(out, "toarray") else out
        try:
            return np.asarray(out, dtype=np.float32).reshape(len(features), -1)
        except (TypeError, ValueError) as error:
            raise InputError(
                f"the preprocess transformer {type(self.transformer).__name__} returned values "
                f"that are not numbers ({error}); end it with numeric steps (e.g. OneHotEncoder "
                f"for text columns, SimpleImputer for gaps)"
            ) from None

    def transform(self, frame: pd.DataFrame) -> np.ndarray:
        """``frame``'s rows as float32 features, shape ``(len(frame), len(feature_names))``
        (columns other than the feature columns are ignored)."""
        _check_columns(frame, self.columns, "table")
        if self.transformer is not None:
            return self._apply_transformer(frame[list(self.columns.features)])
        parts: list[np.ndarray] = []
        for numeric in self._numeric:
            parts.extend(numeric.encode(_numbers(frame, numeric.name)))
        for categorical in self._categorical:
            parts.extend(categorical.encode(frame[categorical.name]))
        if not parts:
            return np.zeros((len(frame), 0), dtype=np.float32)
        return np.stack(parts, axis=1).astype(np.float32)

    def describe(self) -> list[str]:
        """Plain lines for the plan and the report: what was fitted, on what."""
        rows = f"{self.public_rows} public row{'s' if self.public_rows != 1 else ''}"
        name = type(self.transformer).__name__
        if self.transformer is None:
            lines = [f"preprocessing: built-in encoder fitted on the {rows} only"]
        elif self._declared:
            lines = [
                f"preprocessing: the user's {name}, fitted by the user on data declared "
                f"public (not refitted here)"
            ]
        else:
            lines = [f"preprocessing: the user's {name}, fitted on the {rows} only"]
        if self._numeric:
            gaps = [column.name for column in self._numeric if column.indicator]
            lines.append(
                f"numeric columns ({len(self._numeric)}): gaps filled with the public median"
                + (f", a missing indicator for {gaps}" if gaps else "")
                + "; each mapped through its public quantiles to normal scores (bounded: a value "
                "beyond the public range gets the end score)"
            )
        if self._categorical:
            counts = ", ".join(f"{c.name}: {len(c.categories)}" for c in self._categorical)
            lines.append(
                f"categorical columns ({len(self._categorical)}): gaps filled with the most "
                f"frequent public category; one-hot of the categories seen in the public rows "
                f"({counts}); a category not seen there is all zeros"
            )
        lines.append(
            f"{len(self.feature_names)} features from {len(self.columns.features)} columns; "
            f"label {self.columns.label!r}"
            + (f"; id {self.columns.id!r} (never a feature)" if self.columns.id else "")
            + (f"; dropped {list(self.columns.dropped)}" if self.columns.dropped else "")
        )
        return lines

    def to_json(self) -> dict:
        """The built-in encoder's fitted state (public statistics only: publishable)."""
        if self.transformer is not None:
            raise InputError(
                f"the user's preprocess transformer {type(self.transformer).__name__} cannot be "
                f"stored as JSON (and pate-learn stores no pickles): keep it yourself and pass "
                f"it when loading the student"
            )
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "public_rows": self.public_rows,
            "columns": dataclasses.asdict(self.columns),
            "numeric": [dataclasses.asdict(column) for column in self._numeric],
            "categorical": [dataclasses.asdict(column) for column in self._categorical],
        }

    @classmethod
    def from_json(cls, state: dict) -> TableEncoder:
        """The built-in encoder from :meth:`to_json`'s dictionary."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise InputError(f"not a pate-learn table encoder (format {_FORMAT!r} expected)")
        if state.get("version") != _VERSION:
            raise InputError(
                f"table encoder version {state.get('version')!r} is not {_VERSION}; "
                f"re-export the run with this version of pate-learn"
            )
        try:
            columns = TableColumns.from_json(state["columns"])
            numeric = tuple(
                _Numeric(c["name"], float(c["median"]), bool(c["indicator"]), tuple(c["quantiles"]))
                for c in state["numeric"]
            )
            categorical = tuple(
                _Categorical(column["name"], column["fill"], tuple(column["categories"]))
                for column in state["categorical"]
            )
            rows = int(state["public_rows"])
        except (KeyError, TypeError) as error:
            raise InputError(f"table encoder JSON is incomplete or malformed ({error})") from None
        if any(not math.isfinite(v) for c in numeric for v in (c.median, *c.quantiles)):
            raise InputError("table encoder JSON has a statistic that is not a finite number")
        return cls(columns, public_rows=rows, numeric=numeric, categorical=categorical)


def check_transformer(transformer: Any) -> None:
    """Refuse a ``preprocess`` that is not a scikit-learn transformer (with ``fit`` and
    ``transform``) or one wrapped in :class:`FittedOnPublic`."""
    if not isinstance(transformer, FittedOnPublic) and not (
        hasattr(transformer, "fit") and hasattr(transformer, "transform")
    ):
        raise InputTypeError(
            f'preprocess must be "auto", "none" or a scikit-learn transformer (with fit and '
            f"transform), got {describe(transformer)}"
        )


def _fitted_clone(transformer: Any, features: pd.DataFrame) -> Any:
    """``transformer`` cloned and fitted on the public ``features``; refused when already fitted
    (it may have seen private rows) or when it is not a scikit-learn transformer."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    check_transformer(transformer)
    try:
        check_is_fitted(transformer)
    except (NotFittedError, TypeError):  # not fitted (TypeError: not a scikit-learn estimator)
        pass
    else:
        raise InputError(
            f"the preprocess transformer {type(transformer).__name__} is already fitted: it "
            f"may have seen private rows, which would cost privacy that is never charged. Pass "
            f"it unfitted (it is then fitted on the public rows only), or, if you fitted it on "
            f"public data only, declare it: preprocess=FittedOnPublic(transformer) (from "
            f"pate.teachers.table_encoding)"
        )
    return clone(transformer).fit(features)
