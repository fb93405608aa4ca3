"""The array types of pate-learn's annotations (numpy only): what a function takes and returns.

``FloatArray`` float64 values (RDP curves, log-probabilities, orders, embeddings),
``IntArray`` int64 counts and indices (votes, labels, distances), ``BoolArray`` masks;
``FloatOrArray`` a numpy float scalar for one curve or an array for several
(:func:`pate.analysis.rdp.eps_from_rdp`).
Inputs a user may give as lists are annotated ``numpy.typing.ArrayLike`` and checked by
:mod:`pate.analysis.validation`, which returns these types.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

FloatArray: TypeAlias = npt.NDArray[np.float64]
IntArray: TypeAlias = npt.NDArray[np.int64]
BoolArray: TypeAlias = npt.NDArray[np.bool_]
FloatOrArray: TypeAlias = np.float64 | npt.NDArray[np.float64]
