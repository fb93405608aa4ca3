"""The second evaluation set of the utility benchmark for pipeline runs (issue #34): 10000 images
held out of the private training set.

The pipeline's Fashion-MNIST protocol uses all 60000 training images as the private split. With
``benchmarks/utility.py --holdout`` a run is made on an own-data file instead (``[data] name =
"npz:PATH"``, the pipeline's ordinary way to give it other splits; a user can do the same):

* ``x_private, y_private``: the FIRST 50000 training images -- the only private records the run
  sees (its class sums, its ledger's private split, its embeddings);
* ``x_public`` (and its true labels ``y_public``, used only to report the labels' accuracy, as for
  the built-in dataset), ``x_evaluation, y_evaluation``: the pipeline's public and evaluation
  splits, unchanged (the first 9000 and the last 1000 test images).

The LAST 10000 training images are never written into that file: nothing of the run sees them.
After the run, its released model is loaded from the run directory as ``pate predict`` and
:func:`pate.api` load it (``Student.load(run_dir / "student.pt")``) and scored on them, and on
the 1000 evaluation images. A class-means run that releases its student times its labelling rule
(``[student] combine_with_rule``) is also scored with the student alone and the rule alone (the
two factors of the released model; neither is what the config releases).

The same split as DP-SGD's ``--holdout`` (:data:`dpsgd_linear.HOLDOUT`), so the two columns
compare like with like. The held-out protocol is ``pate-holdout``: its score on the 1000
evaluation images is a row of its own (trained on 50000, not 60000).
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any, NamedTuple

import numpy as np

logger = logging.getLogger("benchmarks.utility")

#: Images held out of the private training split (the last ones), as benchmarks/dpsgd_linear.py.
HOLDOUT = 10000
#: Evaluation sets of a held-out run (the names of benchmarks/utility_table.py).
HOLDOUT_SET, EVALUATION_SET = "holdout-10000", "evaluation-1000"
#: The row field suffix of a score on each set (``accuracy``, ``accuracy_holdout``).
FIELD = {EVALUATION_SET: "", HOLDOUT_SET: "_holdout"}


def write_holdout_data(data, path: pathlib.Path, *, holdout: int = HOLDOUT):
    """Write the own-data file of the held-out protocol (module docstring) to ``path`` and return
    the held-out split (the last ``holdout`` private records, never written)."""
    from pate.teachers.data import ArraySplit

    n = len(data.private.x)
    if not 0 < holdout < n:
        raise ValueError(
            f"holdout must be between 1 and {n - 1} (the private split has {n} records), "
            f"got {holdout}"
        )
    keep = n - holdout
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        "x_private": data.private.x[:keep],
        "y_private": data.private.y[:keep],
        "x_public": data.public.x,
        "y_public": data.public.y,
        "x_evaluation": data.evaluation.x,
        "y_evaluation": data.evaluation.y,
    }
    if data.class_names is not None:
        arrays["class_names"] = np.asarray(list(data.class_names), dtype=str)
    np.savez(path, **arrays)
    logger.info("held-out protocol: %s (private = the first %d of %d records)", path, keep, n)
    return ArraySplit(data.private.x[keep:], data.private.y[keep:])


class HeldOut(NamedTuple):
    """The held-out protocol of one benchmark run: its own-data file, the held-out split (never
    in the file) and the student's flip augmentation of the dataset the file was cut from."""

    path: pathlib.Path
    split: Any
    flip: bool
    #: the private records the file holds, declared in the run's ``[data] records``
    records: int


def prepare(data, out: pathlib.Path, *, holdout: int = HOLDOUT) -> HeldOut:
    """Write ``out/holdout-privateN.npz`` (N = the private records kept: 50000 for
    Fashion-MNIST) from the built-in dataset ``data``: the protocol every method of one
    ``--holdout`` run shares."""
    from pate.student.augment import FLIP_DATASETS

    path = out / f"holdout-private{len(data.private.x) - holdout}.npz"
    split = write_holdout_data(data, path, holdout=holdout)
    return HeldOut(path, split, data.name in FLIP_DATASETS, len(data.private.x) - holdout)


def edit_config(config: dict, heldout: HeldOut | None, *, seed: int | None = None) -> None:
    """A base run's edits: its ``[run] seed`` (when given) and, on the held-out protocol, the
    own-data file (:func:`holdout_config_edits`)."""
    if seed is not None:
        config["run"]["seed"] = seed
    if heldout is not None:
        holdout_config_edits(config, heldout.path, flip=heldout.flip, records=heldout.records)


def holdout_config_edits(config: dict, npz_path: pathlib.Path, *, flip: bool, records: int) -> None:
    """Point a config at the held-out protocol's own-data file, declaring its ``records``
    private records (``[data] records``: own data declares its size). ``flip``: the student's flip
    augmentation as the built-in dataset would have it (the pipeline decides it by the dataset's
    name, which the own-data file does not carry); set explicitly so the run is the config's."""
    config["data"] = {"name": f"npz:{pathlib.Path(npz_path).resolve()}", "records": int(records)}
    config["student"].setdefault("flip", flip)


def _accuracy(student, split) -> float:
    return float(np.mean(student.predict(split.x) == np.asarray(split.y)))


def factor_accuracy(module, split, *, batch: int = 1000) -> float:
    """Accuracy of the argmax of a module's class scores (a factor of the released model)."""
    import torch

    module.eval()
    with torch.no_grad():
        pred = np.concatenate(
            [
                module(torch.from_numpy(np.ascontiguousarray(split.x[i : i + batch])))
                .argmax(1)
                .numpy()
                for i in range(0, len(split.x), batch)
            ]
        )
    return float(np.mean(pred == np.asarray(split.y)))


def score_released_model(run_dir: pathlib.Path, splits: dict) -> dict:
    """Accuracies of the run's released model on each of ``splits`` (name -> ArraySplit), loaded
    from ``run_dir`` as ``pate predict`` loads it; for a student times its rule also the two
    factors alone: ``{"released": {name: acc}, "student_alone": {...}, "rule_alone": {...}}``."""
    from pate.run import rundir
    from pate.student.rule_product import RuleProduct
    from pate.student.train import Student

    student = Student.load(pathlib.Path(run_dir) / rundir.STUDENT_WEIGHTS)
    scores = {"released": {name: _accuracy(student, s) for name, s in splits.items()}}
    product = student.model_
    if isinstance(product, RuleProduct):
        for key, factor in (("student_alone", product.student), ("rule_alone", product.head)):
            scores[key] = {name: factor_accuracy(factor, s) for name, s in splits.items()}
    return scores
