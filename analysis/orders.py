"""Grids of Renyi orders (lambda).

``REFERENCE_ORDERS`` is the 298-order "long list" of the Scalable-PATE reference analysis
(``np.concatenate((np.arange(2, 100 + 1, .5), np.logspace(np.log10(100), np.log10(500), num=100)))``).
It is kept exactly, quirks included: it is not sorted (entry 197 is 100.5, entry 198 is 100.0) and
100.0 appears twice. Use it to compare with published numbers.

``DEFAULT_ORDERS`` is pate-learn's own grid: sorted, without duplicates, denser at the small orders
that win for large epsilons (1.1 ... 11) and reaching 1000 for the tiny epsilons of a few queries.
"""

from __future__ import annotations

import numpy as np

from pate.analysis.arrays import FloatArray

REFERENCE_ORDERS: FloatArray = np.concatenate(
    (np.arange(2, 100 + 1, 0.5), np.logspace(np.log10(100), np.log10(500), num=100))
)
REFERENCE_ORDERS.setflags(write=False)

DEFAULT_ORDERS: FloatArray = np.unique(
    np.concatenate(
        (
            np.round(np.arange(1.1, 11.0, 0.1), 10),
            np.arange(11.0, 100.0, 0.5),
            np.geomspace(100.0, 1000.0, 61),
        )
    )
)
DEFAULT_ORDERS.setflags(write=False)
