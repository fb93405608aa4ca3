"""pate.core.votes: explicit num_classes, row sums, validation."""

from __future__ import annotations

import numpy as np
import pytest

from pate.core.votes import votes_from_predictions


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


def test_zero_queries_gives_empty_matrix():
    assert votes_from_predictions(np.zeros((3, 0), dtype=int), num_classes=2).shape == (0, 2)


@pytest.mark.parametrize(
    "preds, num_classes, exc, match",
    [
        (np.array([[0, 3]]), 3, ValueError, r"teacher 0 predicted 3 for query 1"),
        (np.array([[0, -1]]), 3, ValueError, "predicted -1"),
        (np.array([0, 1]), 3, ValueError, "2-D"),
        (np.array([[0.0, 1.0]]), 3, TypeError, "argmax over classes"),
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
