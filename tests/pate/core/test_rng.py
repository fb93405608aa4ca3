"""pate.core.rng: named independent streams, reproducibility, secure mode."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pate.core.rng import STREAM_KEYS, SecureGenerator, check_rng, make_streams


def test_same_seed_same_numbers_different_seed_different():
    a, b, c = make_streams(7), make_streams(7), make_streams(8)
    assert np.array_equal(a.noise.normal(size=5), b.noise.normal(size=5))
    assert np.array_equal(a.partition.permutation(50), b.partition.permutation(50))
    assert a.teacher_seeds(4) == b.teacher_seeds(4)
    assert not np.array_equal(make_streams(7).noise.normal(size=5), c.noise.normal(size=5))


def test_streams_are_distinct_and_do_not_share_state():
    s = make_streams(3)
    draws = {
        name: getattr(s, name).integers(0, 2**62, size=8)
        for name in ("partition", "noise", "student", "release")
    }
    values = list(draws.values())
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            assert not np.array_equal(values[i], values[j])
    # Consuming one stream does not move another.
    fresh, used = make_streams(3), make_streams(3)
    used.partition.normal(size=1000)
    used.student.normal(size=1000)
    assert np.array_equal(fresh.noise.normal(size=10), used.noise.normal(size=10))


def test_streams_are_statistically_independent():
    s = make_streams(11)
    x, y = s.noise.normal(size=20000), s.student.normal(size=20000)
    r = np.corrcoef(x, y)[0, 1]
    assert abs(r) < 4 / np.sqrt(20000)


def test_fixed_spawn_keys_match_seedsequence_children():
    root = np.random.SeedSequence(5)
    expected = np.random.default_rng(
        np.random.SeedSequence(root.entropy, spawn_key=(STREAM_KEYS["noise"],))
    )
    assert np.array_equal(make_streams(5).noise.random(4), expected.random(4))


def test_teacher_seeds_distinct_stable_and_in_sklearn_range():
    s = make_streams(0)
    seeds = s.teacher_seeds(300)
    assert len(set(seeds)) == 300
    assert all(0 <= x < 2**32 and isinstance(x, int) for x in seeds)
    # Teacher t's seed does not depend on how many teachers there are.
    assert s.teacher_seeds(10) == seeds[:10]
    assert make_streams(1).teacher_seeds(10) != seeds[:10]


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_seed_refused(bad):
    with pytest.raises((TypeError, ValueError), match="seed"):
        make_streams(bad)


def test_secure_refuses_seed_and_draws_from_os_entropy():
    with pytest.raises(ValueError, match="secure=True refuses a seed"):
        make_streams(0, secure=True)
    with pytest.raises(ValueError, match="refuses a seed"):
        make_streams(np.int64(0), secure=True)
    s = make_streams(secure=True)
    assert s.seed is None and s.secure
    assert isinstance(s.noise, SecureGenerator) and isinstance(s.release, SecureGenerator)
    t = make_streams(secure=True)
    assert not np.array_equal(s.noise.normal(0, 1, 8), t.noise.normal(0, 1, 8))
    assert s.teacher_seeds(5) != t.teacher_seeds(5)


def test_secure_generator_distributions():
    g = SecureGenerator()
    n = 40000
    normal = g.normal(2.0, 3.0, size=n)
    laplace = g.laplace(-1.0, 0.5, size=(200, 200))
    assert laplace.shape == (200, 200)
    assert stats.kstest(normal, "norm", args=(2.0, 3.0)).pvalue > 1e-4
    assert stats.kstest(laplace.ravel(), "laplace", args=(-1.0, 0.5)).pvalue > 1e-4
    u = g.random(n)
    assert 0 < u.min() and u.max() < 1
    assert isinstance(g.normal(), float) and isinstance(g.laplace(0, 1), float)
    with pytest.raises(ValueError, match="scale"):
        g.normal(0, -1, size=3)


def test_check_rng():
    gen = np.random.default_rng(0)
    assert check_rng(gen) is gen
    sec = SecureGenerator()
    assert check_rng(sec) is sec
    for bad in (0, None, np.random.RandomState(0)):
        with pytest.raises(TypeError, match="rng must be"):
            check_rng(bad)
