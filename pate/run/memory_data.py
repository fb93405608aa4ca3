"""Data given to :func:`pate.fit` / :func:`pate.plan` in memory (arrays, ``(x, y)`` tuples, torch
datasets, tables), checked and turned into the :class:`PateData` a run reads, with the ``[data]``
table the config records."""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

from pate.analysis.errors import InputError, InputTypeError


def arrays_of(data: Any, what: str, *, labels: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(x, y) of ``data``: an array (no labels), an (x, y) tuple, a torch Dataset or DataLoader
    yielding (x, y) pairs. ``labels``: "required", "optional"."""
    if isinstance(data, np.ndarray):
        if labels == "required":
            raise InputTypeError(f"{what} needs labels: give (x, y), not x alone")
        return data, None
    if isinstance(data, tuple) and len(data) == 2:
        x, y = np.asarray(data[0]), np.asarray(data[1])
        if x.shape[:1] != y.shape[:1] or y.ndim != 1:
            raise InputError(
                f"{what}: x has {x.shape[0]} rows but y has shape {y.shape}; give "
                "(x, y) with one integer label per row"
            )
        return x, y
    import torch
    from torch.utils.data import DataLoader, Dataset

    if isinstance(data, (Dataset, DataLoader)):
        loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=256)
        xs, ys = [], []
        for batch in loader:
            if isinstance(batch, (tuple, list)) and len(batch) >= 2:
                xs.append(torch.as_tensor(batch[0]).detach().cpu().numpy())
                ys.append(torch.as_tensor(batch[1]).detach().cpu().numpy())
            else:
                xs.append(torch.as_tensor(batch).detach().cpu().numpy())
        x = np.concatenate(xs)
        y = np.concatenate(ys) if ys else None
        if y is None and labels == "required":
            raise InputTypeError(
                f"{what}: the dataset yields no labels; it must yield (x, y) pairs"
            )
        return x, y
    raise InputTypeError(
        f"{what} must be a numpy array, an (x, y) tuple, a torch Dataset or "
        f"DataLoader, got {type(data).__name__}"
    )


#: The name of records given to :func:`fit` in memory when ``dataset=`` does not name them.
MEMORY_DATA_NAME = "in-memory data"


def memory_data(private, public, evaluation, classes, name: str = MEMORY_DATA_NAME):
    """``(PateData, its identity)`` of arrays given to :func:`fit` (``name``: the user's
    ``dataset=``, never derived from the records), checked like a file's before anything is
    written or charged; the label set is ``classes``, else the public labels, never the private."""
    from pate.ledger import private_identity
    from pate.teachers.data import ArraySplit, PateData, check_class_names
    from pate.teachers.data_checks import (
        check_classes,
        check_features,
        check_in_label_set,
        check_labels,
        label_set,
    )

    xp, yp = arrays_of(private, "private", labels="required")
    xq, yq = arrays_of(public, "public", labels="optional")
    if evaluation is None:
        raise InputTypeError(
            "evaluation=(x, y) is needed: labelled held-out data on which the student's "
            "accuracy is measured for the report (never used for training)"
        )
    xe, ye = arrays_of(evaluation, "evaluation", labels="required")
    yq = np.full(len(xq), -1, dtype=np.int64) if yq is None else yq
    for split, x, y in (("private", xp, yp), ("public", xq, yq), ("evaluation", xe, ye)):
        check_features(x, f"pate.fit {split} x")
        check_labels(y, f"pate.fit {split} y", unknown_ok=split == "public")
    splits = [ArraySplit(xp, yp), ArraySplit(xq, yq), ArraySplit(xe, ye)]
    shapes = {s.x.shape[1:] for s in splits}
    if len(shapes) != 1:
        raise InputError(
            f"private, public and evaluation inputs must have one shape per item, got "
            f"{sorted(shapes)}"
        )
    names = check_class_names(classes)
    num_classes, names = label_set("pate.fit", declared=names, public_labels=splits[1].y)
    by_split = dict(zip(("private", "public", "evaluation"), splits))
    for split, part in by_split.items():
        check_in_label_set(part.y, num_classes, f"pate.fit {split} y")
    check_classes("pate.fit", len(splits[0]), num_classes)
    data = PateData(
        name=f"memory:{name}",  # the user's name for the records, never derived from them
        private=splits[0],
        public=splits[1],
        evaluation=splits[2],
        num_classes=max(2, num_classes),
        input_shape=tuple(int(s) for s in splits[0].x.shape[1:]),
        class_names=names,
    )
    return data, private_identity(data)


#: The keywords of :func:`pate.fit` that describe a table's columns (``[data]`` keys).
TABLE_KEYWORDS = ("label", "id", "drop", "preprocess")


def _is_table(private, public) -> bool:
    """Whether ``private`` (with a ``public`` source) is a table: a DataFrame or a CSV /
    Parquet path (pandas is imported only where one may be given)."""
    pandas = sys.modules.get("pandas")  # a DataFrame exists only once pandas is imported
    if public is None:
        return False
    if pandas is not None and isinstance(private, pandas.DataFrame):
        return True
    if not isinstance(private, (str, pathlib.Path)):
        return False
    from pate.teachers.tables import is_table

    return is_table(private)


def table_source(private, public, evaluation, declared: dict, dataset=None):
    """``(data, [data] table)`` of tables given to :func:`pate.fit`, read and checked now
    (:func:`pate.teachers.data.table_data`). Files are recorded by path (``csv:PATH``); with a
    DataFrame or a transformer among them, the records are named ``memory:DATASET``."""
    from pate.teachers.data import table_data
    from pate.teachers.tables import TableSpec, table_name

    if declared["split_column"] is not None:
        raise InputTypeError(
            "split_column= applies to one pool of records (csv:PATH alone); tables given "
            "with public= give their public and evaluation rows apart"
        )
    columns = {k: declared[k] for k in TABLE_KEYWORDS if declared[k] is not None}
    if "drop" in columns:
        drop = columns["drop"]
        columns["drop"] = [drop] if isinstance(drop, str) else list(drop)
    spec = TableSpec(public, evaluation, **dict(columns, drop=tuple(columns.get("drop", ()))))
    preprocess = columns.get("preprocess", "auto")
    files = [table_name(source) for source in (private, public, evaluation)]
    by_path = isinstance(preprocess, str) and files[0] and files[1]
    by_path = by_path and (evaluation is None or files[2])
    name = files[0] if by_path else f"memory:{dataset or MEMORY_DATA_NAME}"
    data = table_data(private, spec, name=name, classes=declared["classes"])
    table = {"name": name, **columns, "preprocess": _preprocess_name(preprocess)}
    if by_path:
        table.update(public=files[1], evaluation=files[2])
    return data, table


def _preprocess_name(preprocess) -> str:
    """How the config records ``preprocess=``: its name, or ``python:module.Class``."""
    if isinstance(preprocess, str):
        return preprocess
    kind = type(preprocess)
    return f"python:{kind.__module__}.{kind.__qualname__}"


def data_source(private, public, evaluation, declared: dict, dataset=None):
    """``(data, identity, [data] table)``: a dataset name is read later by the stages (``data``
    and ``identity`` None); arrays and tables are checked now (:func:`memory_data`,
    :func:`table_source`). ``declared``: the ``[data]`` facts given (``classes``,
    ``split_column``, ``evaluation_public``, :data:`TABLE_KEYWORDS`; None: not)."""
    data = identity = None
    if _is_table(private, public):
        from pate.ledger import private_identity

        data, data_table = table_source(private, public, evaluation, declared, dataset)
        identity = private_identity(data)
        declared = {k: v for k, v in declared.items() if k not in TABLE_KEYWORDS}
    elif isinstance(private, str):
        if public is not None or evaluation is not None:
            raise InputTypeError(
                f"private={private!r} names a dataset with its own public and "
                "evaluation splits; do not pass public= or evaluation="
            )
        data_table = {"name": private}
    else:
        if public is None:
            raise InputTypeError("public= (the public inputs the teachers label) is needed")
        given = [k for k in TABLE_KEYWORDS if declared.get(k) is not None]
        if given:
            raise InputTypeError(
                f"{', '.join(f'{k}=' for k in given)} name columns of a table: give private= "
                f"and public= as pandas DataFrames or CSV / Parquet paths (arrays have no names)"
            )
        if declared["split_column"] is not None:
            raise InputTypeError(
                "split_column= applies to a source that is one pool of records (csv:PATH, "
                "npz:PATH with x, y); arrays give their public and evaluation inputs apart"
            )
        data, identity = memory_data(
            private, public, evaluation, declared["classes"], dataset or MEMORY_DATA_NAME
        )
        data_table = {"name": data.name}
    if data is not None and declared["evaluation_public"]:
        data = dataclasses.replace(data, evaluation_public=True)  # the student's figures: public
    data_table.update({k: v for k, v in declared.items() if v is not None})
    if isinstance(data_table.get("classes"), tuple):  # a TOML list
        data_table["classes"] = list(data_table["classes"])
    return data, identity, data_table
