"""pate.core.votes: explicit num_classes, row sums, validation, storage."""

from __future__ import annotations

import numpy as np
import pytest

from pate.core.votes import (
    describe_votes,
    load_votes,
    save_votes,
    votes_from_predictions,
    votes_from_probabilities,
)


def test_votes_from_predictions_counts_and_keeps_unused_classes():
    preds = np.array([[0, 1, 1], [0, 1, 2], [1, 1, 2]])  # 3 teachers x 3 queries
    votes = votes_from_predictions(preds, num_classes=5)
    assert votes.dtype == np.int64 and votes.shape == (3, 5)
    assert votes.tolist() == [[2, 1, 0, 0, 0], [0, 3, 0, 0, 0], [0, 1, 2, 0, 0]]
    assert np.all(votes.sum(axis=1) == 3)


def test_votes_match_a_loop_on_random_data():
    rng = np.random.default_rng(0)
    preds = rng.integers(0, 7, size=(25, 40))
    votes = votes_from_predictions(preds.astype(np.int32), num_classes=7)
    expected = np.zeros((40, 7), dtype=np.int64)
    for t in range(25):
        for q in range(40):
            expected[q, preds[t, q]] += 1
    assert np.array_equal(votes, expected)


def test_votes_from_probabilities_uses_argmax():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, 10, 4))
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    votes = votes_from_probabilities(probs.astype(np.float32), num_classes=4)
    assert np.array_equal(votes, votes_from_predictions(logits.argmax(-1), num_classes=4))


def test_zero_queries_gives_empty_matrix():
    assert votes_from_predictions(np.zeros((3, 0), dtype=int), num_classes=2).shape == (0, 2)


@pytest.mark.parametrize(
    "preds, num_classes, exc, match",
    [
        (np.array([[0, 3]]), 3, ValueError, r"teacher 0 predicted 3 for query 1"),
        (np.array([[0, -1]]), 3, ValueError, "predicted -1"),
        (np.array([0, 1]), 3, ValueError, "2-D"),
        (np.array([[0.0, 1.0]]), 3, TypeError, "votes_from_probabilities"),
        (np.array([[True, False]]), 3, TypeError, "integer class labels"),
        (np.zeros((0, 3), dtype=int), 3, ValueError, "no teachers"),
        (np.array([[0, 1]]), 1, ValueError, "num_classes must be >= 2"),
        (np.array([[0, 1]]), 2.0, TypeError, "num_classes"),
        ("01", 2, TypeError, "predictions"),
    ],
)
def test_bad_predictions(preds, num_classes, exc, match):
    with pytest.raises(exc, match=match):
        votes_from_predictions(preds, num_classes=num_classes)


def test_num_classes_is_keyword_only():
    with pytest.raises(TypeError):
        votes_from_predictions(np.array([[0]]), 2)  # type: ignore[misc]


@pytest.mark.parametrize(
    "probs, match",
    [
        (np.full((2, 3, 4), 0.25), "num_classes=3"),
        (np.full((2, 3), 0.5), "3-D"),
        (np.array([[[0.5, np.nan, 0.5]]]), "finite"),
        (np.array([[[2.0, -1.0, 0.0]]]), "logits"),
        (np.array([[[0.5, 0.6, 0.0]]]), "sum to 1"),
    ],
)
def test_bad_probabilities(probs, match):
    with pytest.raises(ValueError, match=match):
        votes_from_probabilities(probs, num_classes=3)


def test_save_load_and_describe(tmp_path):
    votes = votes_from_predictions(np.array([[0, 1], [1, 1]]), num_classes=3)
    path = save_votes(tmp_path, votes)
    assert path.name == "votes.npy" and [p.name for p in tmp_path.iterdir()] == ["votes.npy"]
    assert np.array_equal(load_votes(path, num_classes=3), votes)
    with pytest.raises(ValueError, match="expected num_classes=4"):
        load_votes(path, num_classes=4)
    text = describe_votes(votes)
    assert text == "2 queries x 3 classes, 2 teachers"
    np.save(tmp_path / "bad.npy", np.array([[1, 0], [2, 0]]))
    with pytest.raises(ValueError, match="rows must all sum"):
        load_votes(tmp_path / "bad.npy")
    with pytest.raises(FileNotFoundError):
        save_votes(tmp_path / "nope", votes)
    with pytest.raises(FileNotFoundError):
        load_votes(tmp_path / "nope.npy")
