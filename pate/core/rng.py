"""Explicit randomness for a PATE run: one seed, independent named streams.

One ``numpy.random.SeedSequence(seed)`` is the root; each stage gets a child with a *fixed*
spawn key (:data:`STREAM_KEYS`), so the streams are statistically independent, never share
state, and adding a stage later does not change the numbers of the existing ones. Teacher ``t``
uses the grandchild ``(1, t)``.

Secure mode (``make_streams(secure=True)``): the ``noise`` and ``release`` streams are
``SecureGenerator`` objects, whose uniforms are 53 random bits read from ``os.urandom`` for every
draw (no PRNG state exists that could be recovered or replayed), normal / Laplace variates exact
transforms of them; the other streams are seeded from fresh OS entropy.

Floating point: uniforms lie on a 2**-53 grid, so the inverse-CDF normal never goes beyond
about 8.3 standard deviations (a tail of probability < 1e-16 per draw is cut off). The
aggregators publish only the *argmax* of the noisy votes, never the noisy values themselves,
which removes the direct channel of the low-order-bit attacks on floating-point Laplace
sampling (Mironov, CCS 2012).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
from scipy.special import ndtri

from pate.analysis.arrays import FloatArray
from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_bool, check_int, describe

__all__ = ["Streams", "SecureGenerator", "Rng", "make_streams", "check_rng", "STREAM_KEYS"]

#: Fixed spawn key of each stage's child of the root ``SeedSequence``.
STREAM_KEYS = {"partition": 0, "teachers": 1, "noise": 2, "student": 3, "release": 4}

_TWO_POW_M53 = 2.0**-53

#: A ``size`` of :class:`SecureGenerator`'s draws that gives an array (None gives a float).
SizeArg = int | np.integer[Any] | tuple[int, ...]


def _size_tuple(size: Any) -> tuple[int, ...]:
    """numpy's ``size``: None (one float), an int or a tuple of ints (an array's shape)."""
    return () if size is None else tuple(int(n) for n in np.atleast_1d(size))


class SecureGenerator:
    """Random variates drawn from OS entropy (``os.urandom``) at every call, without a seed: the
    subset of :class:`numpy.random.Generator` the aggregators use, with the same signatures."""

    secure = True

    def _uniform_open(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniforms on the open interval (0, 1): (k + 0.5) * 2**-53 with k uniform on 53 bits."""
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        words = np.frombuffer(os.urandom(8 * count), dtype="<u8")
        out = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * _TWO_POW_M53
        return out.reshape(shape) if shape else out

    @staticmethod
    def _finish(values: FloatArray, shape: tuple[int, ...]) -> float | FloatArray:
        return float(values[0]) if not shape else values

    @overload
    def random(self, size: None = None) -> float: ...

    @overload
    def random(self, size: SizeArg) -> FloatArray: ...

    def random(self, size: Any = None) -> float | FloatArray:
        """Uniform on (0, 1)."""
        shape = _size_tuple(size)
        return self._finish(self._uniform_open(shape), shape)

    @overload
    def standard_normal(self, size: None = None) -> float: ...

    @overload
    def standard_normal(self, size: SizeArg) -> FloatArray: ...

    def standard_normal(self, size: Any = None) -> float | FloatArray:
        """N(0, 1) by the inverse normal CDF of an OS-entropy uniform."""
        shape = _size_tuple(size)
        return self._finish(ndtri(self._uniform_open(shape)), shape)

    @overload
    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: None = None) -> float: ...

    @overload
    def normal(self, loc: Any = 0.0, scale: Any = 1.0, *, size: SizeArg) -> FloatArray: ...

    @overload
    def normal(self, loc: Any, scale: Any, size: SizeArg) -> FloatArray: ...

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> float | FloatArray:
        """N(loc, scale**2)."""
        _check_scale(scale)
        shape = _size_tuple(size)
        values = loc + scale * ndtri(self._uniform_open(shape))
        return self._finish(np.asarray(values, dtype=np.float64), shape)

    @overload
    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: None = None) -> float: ...

    @overload
    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, *, size: SizeArg) -> FloatArray: ...

    @overload
    def laplace(self, loc: Any, scale: Any, size: SizeArg) -> FloatArray: ...

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> float | FloatArray:
        """Laplace(loc, scale) as the difference of two independent exponentials."""
        _check_scale(scale)
        shape = _size_tuple(size)
        e1 = -np.log(self._uniform_open(shape))
        e2 = -np.log(self._uniform_open(shape))
        values = loc + scale * (e1 - e2)
        return self._finish(np.asarray(values, dtype=np.float64), shape)

    def __repr__(self) -> str:
        return "SecureGenerator(os.urandom)"


#: What a noise step draws from: a seeded numpy Generator or the OS-entropy SecureGenerator.
Rng = np.random.Generator | SecureGenerator


def _check_scale(scale: Any) -> None:
    arr = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError(f"scale must be finite and >= 0, got {describe(scale)}")


@dataclass(frozen=True)
class Streams:
    """The independent random streams of one PATE run (:func:`make_streams`): ``seed`` the root
    seed (None: unseeded), ``secure`` whether ``noise`` and ``release`` are ``SecureGenerator``s,
    and the generators of the partition, the aggregator's noise, the student and any later noisy
    release."""

    seed: int | None
    secure: bool
    partition: np.random.Generator
    noise: Any
    student: np.random.Generator
    release: Any
    _root: np.random.SeedSequence = field(repr=False)

    def teacher_seeds(self, num_teachers: int) -> list[int]:
        """One distinct seed in [0, 2**32) (scikit-learn's ``random_state`` range) per teacher:
        teacher ``t`` gets the first 32-bit word of grandchild ``(1, t)``, so its seed does not
        depend on ``num_teachers`` (teacher 3 of 10 = teacher 3 of 250)."""
        num_teachers = check_int(num_teachers, "num_teachers", minimum=1)
        seeds: list[int] = []
        used: set[int] = set()
        for t in range(num_teachers):
            child = _child(self._root, STREAM_KEYS["teachers"], t)
            words = child.generate_state(8, np.uint32)
            # A collision of 32-bit words has probability ~ K^2 / 2**33; skip to the next word
            # (deterministically) so that no two teachers ever share a seed.
            seed = next((int(w) for w in words if int(w) not in used), None)
            if seed is None:  # pragma: no cover - probability ~ 2**-200
                raise RuntimeError("could not derive distinct teacher seeds")
            used.add(seed)
            seeds.append(seed)
        return seeds


def _child(root: np.random.SeedSequence, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(
        root.entropy, spawn_key=tuple(root.spawn_key) + tuple(key), pool_size=root.pool_size
    )


def make_streams(seed: int | None = None, *, secure: bool = False) -> Streams:
    """The named, independent random streams of a run from one root ``seed`` (int >= 0; None: a
    fresh root from OS entropy, not reproducible). ``secure=True`` draws the ``noise`` and
    ``release`` streams from OS entropy at every call and refuses a seed: a reproducible noise
    stream is one an adversary who learns the seed can replay."""
    check_bool(secure, "secure")
    if secure and seed is not None:
        raise InputError(
            f"secure=True refuses a seed (got seed={describe(seed)}): secure noise is drawn "
            "from OS entropy and cannot be replayed; drop the seed, or use secure=False "
            "for a reproducible experiment"
        )
    if seed is not None:
        seed = check_int(seed, "seed", minimum=0)
    root = np.random.SeedSequence(seed)  # seed None: fresh OS entropy

    def stream(name: str) -> np.random.Generator:
        return np.random.default_rng(_child(root, STREAM_KEYS[name]))

    return Streams(
        seed=seed,
        secure=secure,
        partition=stream("partition"),
        noise=SecureGenerator() if secure else stream("noise"),
        student=stream("student"),
        release=SecureGenerator() if secure else stream("release"),
        _root=root,
    )


def check_rng(rng: Any, name: str = "rng") -> Rng:
    """``rng`` if it is a ``numpy.random.Generator`` or a :class:`SecureGenerator`; integers,
    None and the legacy ``RandomState`` are refused, so that randomness is always explicit."""
    if isinstance(rng, (np.random.Generator, SecureGenerator)):
        return rng
    raise InputTypeError(
        f"{name} must be a numpy.random.Generator or a pate.core.rng.SecureGenerator, got "
        f"{describe(rng)} of type {type(rng).__name__}; use make_streams(seed).noise, "
        "make_streams(secure=True).noise or numpy.random.default_rng(seed)"
    )
