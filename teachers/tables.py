"""Tables with named columns: CSV and Parquet files and pandas DataFrames given for the private,
public and evaluation rows separately, checked in the table's words (file, row, column, value)
before anything is trained or charged, the column roles decided from the PUBLIC rows, encoded by
the public-fitted encoder (:mod:`pate.teachers.table_encoding`). More: docs/own_data.md,
"pate.teachers.tables".
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import describe
from pate.teachers.data_checks import NOTHING_DONE, class_indices, declared_or_public_classes
from pate.teachers.errors import DatasetNotFoundError
from pate.teachers.table_encoding import TableColumns, TableEncoder, check_transformer

_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
#: ``preprocess=`` by name: the public-fitted encoder, or the columns as they are
PREPROCESS = ("auto", "none")
#: A text column of the public rows with more distinct values than this share of its rows (and
#: than :data:`_ID_MIN_DISTINCT`) is an identifier or free text, not a category.
_ID_SHARE, _ID_MIN_DISTINCT = 0.5, 20


@dataclass(frozen=True)
class TableSpec:
    """What the user declares about a table: the public and evaluation sources (the private one
    is the dataset's name), the label and privacy-unit columns by name, the dropped columns and
    the preprocessing (``"auto"``, ``"none"``, an unfitted scikit-learn transformer or one in
    :class:`pate.teachers.table_encoding.FittedOnPublic`)."""

    public: Any
    evaluation: Any = None
    label: str | None = None
    id: str | None = None
    drop: tuple[str, ...] = ()
    preprocess: Any = "auto"


@dataclass(frozen=True)
class EncodedTables:
    """The encoded splits (``x`` float32, ``y`` class indices, -1: a public row without label),
    the class names, the columns and the encoder (None with ``preprocess="none"``) and one
    privacy-unit id per private row (None without ``id``)."""

    x: dict[str, np.ndarray]
    y: dict[str, np.ndarray]
    class_names: list[str]
    columns: TableColumns
    encoder: Any
    unit_ids: np.ndarray | None


@dataclass(frozen=True)
class Table:
    """One source's rows as read (``frame``: a CSV's cells as text, gaps as NaN), ``source``:
    how messages name it, ``first_row``: the file's number of the frame's index 0 (a CSV's
    header is row 1; None: a DataFrame, whose index labels name its rows)."""

    frame: pd.DataFrame
    source: str
    first_row: int | None

    def row(self, position: int) -> str:
        """``row R`` of the row at ``position``, as the file (or the frame's index) counts it."""
        label = self.frame.index[position]
        if self.first_row is None:
            return f"the row with index {label!r}"
        return f"row {int(label) + self.first_row}"


def _kind(source) -> tuple[str, pathlib.Path | None] | None:
    """``(kind, path)`` of a table source (``"frame"``, ``"csv"``, ``"parquet"``), or None."""
    if isinstance(source, pd.DataFrame):
        return "frame", None
    if isinstance(source, pathlib.Path):
        kind = _SUFFIXES.get(source.suffix.lower())
        return None if kind is None else (kind, source)
    if not isinstance(source, str):
        return None
    prefix, _, rest = source.partition(":")
    if prefix in ("csv", "parquet") and rest:
        return prefix, pathlib.Path(rest).expanduser()
    kind = _SUFFIXES.get(pathlib.Path(source).suffix.lower())
    return None if kind is None or ":" in source else (kind, pathlib.Path(source).expanduser())


def is_table(source) -> bool:
    """Whether ``source`` is a table: a DataFrame, or a CSV / Parquet path or ``csv:``/
    ``parquet:`` source."""
    return _kind(source) is not None


def table_name(source) -> str:
    """The source string of a table path (``csv:PATH`` / ``parquet:PATH``); a DataFrame: None."""
    kind, path = _kind(source) or (None, None)
    return None if kind in (None, "frame") else f"{kind}:{path}"


def read_table(source, split: str) -> Table:
    """The :class:`Table` of ``source`` given for ``split``. A CSV is read as text (every cell
    a string, an empty or ``NA`` cell a gap), blank lines skipped but counted."""
    found = _kind(source)
    if found is None:
        raise InputTypeError(
            f"{split}: a table is a pandas DataFrame or a .csv / .parquet path (or csv:PATH, "
            f"parquet:PATH), got {describe(source)}"
        )
    kind, path = found
    if kind == "frame":
        frame = source.copy()
        frame.columns = [str(c) for c in frame.columns]
        return Table(frame, f"the {split} DataFrame", None)
    if not path.is_file():
        raise DatasetNotFoundError(f"{split}: {kind} file {path} does not exist; give its path")
    if kind == "csv":
        frame = pd.read_csv(path, dtype=str, skip_blank_lines=False, skipinitialspace=True)
        frame = frame.dropna(how="all")  # blank lines; the index keeps the file's numbering
        first_row = 2
    else:
        frame = pd.read_parquet(path).reset_index(drop=True)
        first_row = 1
    frame.columns = [str(c).strip() for c in frame.columns]
    if frame.empty:
        raise InputError(f"{split}: file {path} has no rows ({NOTHING_DONE})")
    return Table(frame, f"file {path}", first_row)


def _numbers(values: pd.Series) -> pd.Series:
    """``values`` as float64 (NaN where a cell is a gap or is not a number)."""
    if pd.api.types.is_bool_dtype(values):
        return values.astype("float64")
    return pd.to_numeric(values, errors="coerce").astype("float64")


def _refuse(table: Table, position: int | None, column: str, problem: str) -> InputError:
    where = "row 1 (the header)" if position is None else table.row(position)
    if table.first_row is None and position is None:
        where = "its columns"
    return InputError(f"{table.source}, {where}, column {column!r}: {problem} ({NOTHING_DONE})")


def _named_columns(tables: dict[str, Table], spec: TableSpec) -> list[str]:
    """The feature columns (the private table's, less label, id and drop), after checking that
    every table has the named columns and the same features."""
    private = tables["private"]
    if spec.label is None:
        raise InputError(
            f"{private.source}: name the label column: label= in pate.fit, [data] label in a "
            f"config (its columns: {list(private.frame.columns)}) ({NOTHING_DONE})"
        )
    for split, table in tables.items():
        columns = list(table.frame.columns)
        for what, column in (("label", spec.label), ("id", spec.id)):
            needed = split != "public" if what == "label" else split == "private"
            if column is not None and needed and column not in columns:
                raise _refuse(
                    table,
                    None,
                    column,
                    f"there is no such column, yet it is the {what} (its columns: {columns}); "
                    f"give the {what} column's name as it is written in the header",
                )
    for column in spec.drop:
        if column not in private.frame.columns:
            raise _refuse(private, None, column, "drop= names a column the table does not have")
    ignored = {spec.label, spec.id, *spec.drop}
    features = [c for c in private.frame.columns if c not in ignored]
    if not features:
        raise _refuse(private, None, spec.label, "no column is left to learn from")
    for split, table in tables.items():
        theirs = [c for c in table.frame.columns if c not in ignored]
        missing = [c for c in features if c not in theirs]
        extra = [c for c in theirs if c not in features]
        if missing or extra:
            column = (missing or extra)[0]
            raise _refuse(
                table,
                None,
                column,
                f"the {split} table's columns differ from the private table's (missing: "
                f"{missing}, not in the private table: {extra}); give every table the same "
                f"columns, or drop= the extra ones",
            )
    return features


def _roles(public: Table, features: list[str], spec: TableSpec) -> TableColumns:
    """Numeric or categorical, each feature column, from the public rows' values: a column with
    a text value in the public table is categorical; one of text different in most rows is an
    identifier and is refused (unless declared ``id`` or dropped)."""
    numeric, categorical = [], []
    for column in features:
        values = public.frame[column]
        present = values.notna()
        if not present.any():
            raise _refuse(public, None, column, "no public row has a value; drop= it")
        text = present & _numbers(values).isna()
        if not text.any():
            numeric.append(column)
            continue
        distinct = values[present].astype(str).nunique()
        if distinct > max(_ID_MIN_DISTINCT, _ID_SHARE * int(present.sum())):
            first = int(np.flatnonzero(text.to_numpy())[0])
            raise _refuse(
                public,
                first,
                column,
                f"{values.iloc[first]!r}: text different in almost every row, an identifier "
                f"or free text, not a category; declare it id={column!r} ([data] id) if it "
                f"names the person, else drop=[{column!r}]",
            )
        categorical.append(column)
    return TableColumns(
        label=str(spec.label),
        id=spec.id,
        numeric=tuple(numeric),
        categorical=tuple(categorical),
        dropped=tuple(spec.drop),
    )


def _features(table: Table, columns: TableColumns) -> pd.DataFrame:
    """The feature columns of ``table``: numeric ones as float64 (a text value refused by row,
    column and value), categorical ones as text; gaps NaN."""
    out = {}
    for column in columns.numeric:
        values = table.frame[column]
        numbers = _numbers(values)
        bad = np.flatnonzero((values.notna() & numbers.isna()).to_numpy())
        if bad.size:
            raise _refuse(
                table,
                int(bad[0]),
                column,
                f"{values.iloc[int(bad[0])]!r} is not a number, and the column is numeric (its "
                f"public values are numbers); fix the cell, or leave it empty for a gap",
            )
        out[column] = numbers
    for column in columns.categorical:
        values = table.frame[column]
        text = values.astype(str).str.strip().astype(object)
        out[column] = text.where(values.notna(), np.nan)  # a gap is NaN, as sklearn expects
    return pd.DataFrame(out, index=table.frame.index)[[*columns.numeric, *columns.categorical]]


def _labels(tables: dict[str, Table], label: str, classes) -> tuple[dict, list[str]]:
    """``({split: class indices}, class names)``: the label cells mapped through the declared
    classes, else the public labels' (never the private ones')."""
    cells = {}
    for split, table in tables.items():
        values = table.frame[label] if label in table.frame.columns else None
        if values is None:
            cells[split] = [""] * len(table.frame)
        else:
            cells[split] = ["" if pd.isna(v) else str(v).strip() for v in values]
    names = declared_or_public_classes(
        classes, [t for t in cells["public"] if t], f"{tables['public'].source}, column {label!r}"
    )
    indices = {}
    for split, table in tables.items():
        indices[split] = class_indices(
            cells[split],
            names,
            lambda row, table=table: f"{table.source}, {table.row(row)}, column {label!r}",
            unlabelled_ok=split == "public",
        )
    return indices, names


def _unit_ids(private: Table, column: str | None) -> np.ndarray | None:
    """One privacy-unit id per private row (as text), a gap refused by row."""
    if column is None:
        return None
    values = private.frame[column]
    gaps = np.flatnonzero(values.isna().to_numpy())
    if gaps.size:
        raise _refuse(
            private, int(gaps[0]), column, "the id is empty; every private row needs its person"
        )
    return np.asarray(values.astype(str).str.strip(), dtype=str)


def _encoded(tables: dict[str, Table], columns: TableColumns, preprocess) -> tuple[dict, Any]:
    """``({split: x}, encoder)``: the features of every split encoded by ``preprocess`` fitted
    on the public rows only."""
    frames = {split: _features(table, columns) for split, table in tables.items()}
    if isinstance(preprocess, str) and preprocess == "none":
        for split, frame in frames.items():
            if columns.categorical:
                raise _refuse(
                    tables["public"],
                    None,
                    columns.categorical[0],
                    'holds text, and preprocess="none" takes numeric columns only; leave '
                    'preprocess="auto" (one-hot fitted on the public rows) or drop= it',
                )
            gaps = np.argwhere(frame.isna().to_numpy())
            if gaps.size:
                row, col = (int(i) for i in gaps[0])
                raise _refuse(
                    tables[split],
                    row,
                    frame.columns[col],
                    'the cell is empty, and preprocess="none" takes no gaps; leave '
                    'preprocess="auto" (imputation fitted on the public rows) or fill it',
                )
        return {s: f.to_numpy(dtype=np.float32) for s, f in frames.items()}, None
    transformer = None if isinstance(preprocess, str) else preprocess
    encoder = TableEncoder.fit_public(frames["public"], columns, transformer=transformer)
    return {split: encoder.transform(frame) for split, frame in frames.items()}, encoder


def load_tables(private, spec: TableSpec, classes=None) -> EncodedTables:
    """Read, check and encode the tables ``private``, ``spec.public`` and ``spec.evaluation``
    (None: none given), every check before anything is fitted (the encoder, on public rows)."""
    preprocess = spec.preprocess
    if not (isinstance(preprocess, str) and preprocess in PREPROCESS):
        check_transformer(preprocess)
    sources = {"private": private, "public": spec.public, "evaluation": spec.evaluation}
    tables = {s: read_table(src, s) for s, src in sources.items() if src is not None}
    features = _named_columns(tables, spec)
    columns = _roles(tables["public"], features, spec)
    y, names = _labels(tables, columns.label, classes)
    unit_ids = _unit_ids(tables["private"], spec.id)
    x, encoder = _encoded(tables, columns, preprocess)
    return EncodedTables(x, y, names, columns, encoder, unit_ids)


def column_lines(columns: TableColumns, encoder) -> list[str]:
    """Which columns a run uses and how (for ``pate plan`` and the report)."""
    lines = [
        f"label       {columns.label}",
        f"id          {columns.id or '(none: each row is its own record)'}",
        f"numeric     {', '.join(columns.numeric) or '(none)'}",
        f"categorical {', '.join(columns.categorical) or '(none)'}",
        f"dropped     {', '.join(columns.dropped) or '(none)'}",
    ]
    if encoder is None:
        return [*lines, "encoding    none: the numeric columns as they are"]
    return [*lines, *(f"encoding    {line}" for line in encoder.describe())]
