"""What training the teachers gives: their predictions and accuracies, and the files that hold them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pate.analysis.errors import InputError
from pate.core.io import atomic_savez, atomic_write_json

__all__ = ["EnsembleResult", "plurality_accuracy", "ensemble_result", "write_result"]


@dataclass(frozen=True)
class EnsembleResult:
    """``public_predictions`` (T, N_public), ``eval_predictions`` (T, N_eval), ``eval_labels``,
    ``teacher_accuracy`` (T,), ``plurality_accuracy``, ``num_classes`` and how it was trained;
    ``execution``: where (``backend`` and its resources; not in ``summary()`` nor metrics.json)."""

    public_predictions: np.ndarray
    eval_predictions: np.ndarray
    eval_labels: np.ndarray
    teacher_accuracy: np.ndarray
    plurality_accuracy: float
    num_classes: int
    trainer: str
    device: str
    chunk_size: int
    train_seconds: float
    #: where it ran: ``backend`` ("local" | "ray") and its resources (not part of summary())
    execution: dict = field(default_factory=dict, compare=False)

    @property
    def num_teachers(self) -> int:
        return int(self.public_predictions.shape[0])

    def summary(self) -> dict:
        acc = self.teacher_accuracy
        return {
            "num_teachers": self.num_teachers,
            "num_classes": self.num_classes,
            "teacher_accuracy_mean": float(acc.mean()),
            "teacher_accuracy_std": float(acc.std()),
            "teacher_accuracy_min": float(acc.min()),
            "teacher_accuracy_max": float(acc.max()),
            "plurality_accuracy": float(self.plurality_accuracy),
            "trainer": self.trainer,
            "device": self.device,
            "chunk_size": self.chunk_size,
            "train_seconds": round(self.train_seconds, 2),
            "evaluation_size": int(self.eval_labels.shape[0]),
            "public_size": int(self.public_predictions.shape[1]),
        }


def plurality_accuracy(predictions, labels, *, num_classes: int) -> float:
    """Accuracy of the (noiseless) plurality vote of ``predictions`` (T, N) against ``labels``
    (ties go to the lowest class index)."""
    from pate.core.votes import votes_from_predictions

    labels = np.asarray(labels)
    votes = votes_from_predictions(predictions, num_classes=num_classes)
    if labels.shape != (votes.shape[0],):
        raise InputError(f"labels must have shape ({votes.shape[0]},), got {labels.shape}")
    return float(np.mean(votes.argmax(axis=1) == labels))


def ensemble_result(
    data, public_preds, eval_preds, *, trainer: str, device: str, chunk_size: int, seconds: float
) -> EnsembleResult:
    """The :class:`EnsembleResult` of these predictions of the teachers."""
    num_classes = int(data.num_classes)
    y_eval = data.evaluation.y
    acc = (eval_preds == y_eval[None, :]).mean(axis=1)
    return EnsembleResult(
        public_predictions=public_preds,
        eval_predictions=eval_preds,
        eval_labels=y_eval.copy(),
        teacher_accuracy=acc,
        plurality_accuracy=plurality_accuracy(eval_preds, y_eval, num_classes=num_classes),
        num_classes=num_classes,
        trainer=trainer,
        device=device,
        chunk_size=chunk_size,
        train_seconds=seconds,
    )


def write_result(out, result: EnsembleResult, config, dataset: str) -> None:
    """``predictions.npz`` (``public``, ``evaluation``, ``evaluation_labels``) and
    ``metrics.json`` of ``result`` in the folder ``out``."""
    atomic_savez(
        out / "predictions.npz",
        public=result.public_predictions,
        evaluation=result.eval_predictions,
        evaluation_labels=result.eval_labels,
    )
    metrics = dict(
        result.summary(),
        teacher_accuracy=[round(float(a), 6) for a in result.teacher_accuracy],
        recipe=config.fingerprint(),
        dataset=dataset,
    )
    atomic_write_json(out / "metrics.json", metrics)
