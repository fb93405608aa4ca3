"""Private-kNN votes: label histograms of the k nearest records of a fresh Poisson sample.

Private-kNN [ZYW20] uses the private records themselves as "teachers": for every public query it
draws a fresh Poisson sample of the private records (each record independently with probability
``sampling_rate``) and counts the labels of the query's k nearest sampled records. The histograms
are sensitive (like teacher votes); the noisy Confident-GNMax step and its privacy cost are the
"private-knn" spec of :mod:`pate.mechanisms` (analysis: :mod:`pate.analysis.private_knn`).

Exactness
---------
Records are ranked by the squared Euclidean distance, computed in float64 as
||p||^2 - 2 <e, p> (the query's own ||e||^2 is the same for every record and is left out), ties
broken by the record's index (lower first): a total order, so adding one record to the data
inserts it in the order and changes a query's k-nearest set by at most one record in and one
out -- the sensitivity the analysis assumes. The selection is exact for that key (no
approximate search): ``np.partition`` finds the k-th key, then every key below it and the
lowest-index records tied with it are taken.

Randomness
----------
The sample of query i is ``rng.random(N) < sampling_rate``, drawn batch by batch in query order:
the stream consumed depends only on (n, N), never on the data nor on ``batch_size``.

[ZYW20] Zhu, Yu, Wang. "Private-kNN: Practical Differential Privacy for Computer Vision", CVPR 2020.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pate.analysis.arrays import BoolArray, FloatArray, IntArray
from pate.analysis.errors import InputError
from pate.analysis.validation import check_embeddings, check_int, check_labels, check_unit_interval
from pate.core.rng import Rng, check_rng

__all__ = ["knn_votes", "DEFAULT_BATCH_ELEMENTS"]

#: Distances held at once when ``batch_size`` is None: batch = max(1, this // N) queries
#: (2^22 float64 = 32 MiB per (batch, N) array; a few such arrays are alive at a time).
DEFAULT_BATCH_ELEMENTS = 2**22


def _select(keys: FloatArray, k: int) -> BoolArray:
    """(b, N) bool: the k smallest finite keys of each row, ties by lower column index."""
    b, n = keys.shape
    finite: BoolArray = np.isfinite(keys)
    if k >= n:
        return finite
    kth = np.partition(keys, k - 1, axis=1)[:, k - 1 : k]
    below = keys < kth  # +inf never counts: rows with |S| < k keep all of S
    tied = (keys == kth) & finite
    need = k - below.sum(axis=1)
    over = tied.sum(axis=1) > need  # more ties at the k-th key than places left
    if np.any(over):
        rows = np.nonzero(over)[0]
        rank = np.cumsum(tied[rows], axis=1)
        tied[rows] &= rank <= need[rows, None]
    selected: BoolArray = below | tied
    return selected


def knn_votes(
    queries: npt.ArrayLike,
    private: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    k: int,
    sampling_rate: float,
    num_classes: int,
    rng: Rng,
    batch_size: int | None = None,
) -> IntArray:
    """(n, num_classes) int64 label histograms of the k nearest records of a fresh Poisson sample
    per query, row sums min(k, |S_i|): queries (n, d) and private (N, d) finite embeddings of the
    public queries and the private records, labels (N,) in [0, num_classes); batch_size None
    (memory-bounded: DEFAULT_BATCH_ELEMENTS // N queries) or a positive int. Everything is
    validated before any randomness is drawn."""
    k = check_int(k, "k", minimum=1)
    gamma = check_unit_interval(sampling_rate, "sampling_rate")
    m = check_int(num_classes, "num_classes", minimum=2)
    q = check_embeddings(queries, "queries")
    p = check_embeddings(private, "private")
    if q.shape[1] != p.shape[1]:
        raise InputError(
            f"queries and private must have the same number of features, got "
            f"{q.shape[1]} and {p.shape[1]}"
        )
    y = check_labels(labels, p.shape[0], m)
    rng = check_rng(rng)
    n, big_n = q.shape[0], p.shape[0]
    if batch_size is None:
        batch = max(1, DEFAULT_BATCH_ELEMENTS // max(big_n, 1))
    else:
        batch = check_int(batch_size, "batch_size", minimum=1)
    out: IntArray = np.zeros((n, m), dtype=np.int64)
    if n == 0:
        return out
    norms = np.einsum("ij,ij->i", p, p)
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        sampled = rng.random((stop - start, big_n)) < gamma
        if big_n == 0:
            continue
        keys = norms[None, :] - 2.0 * (q[start:stop] @ p.T)
        keys[~sampled] = np.inf
        rows, cols = np.nonzero(_select(keys, k))
        out[start:stop] = np.bincount(rows * m + y[cols], minlength=(stop - start) * m).reshape(
            stop - start, m
        )
    return out
