"""pate.partition: disjoint shards, modes, persistence, and every error before work."""

from __future__ import annotations

import numpy as np
import pytest

from pate.analysis.errors import PartitionError
from pate.partition import (Partition, check_partition, ids_digest, partition_by_unit,
                            partition_random, partition_stratified)


def _covers_disjointly(p: Partition, n: int) -> None:
    check_partition(p, n)
    check_partition(p.shards, n)
    merged = np.sort(np.concatenate(p.shards))
    assert np.array_equal(merged, np.arange(n))
    for t, shard in enumerate(p.shards):
        assert np.all(np.diff(shard) > 0)
        assert np.all(p.assignment[shard] == t)


def test_random_equal_sizes_and_disjoint():
    p = partition_random(1003, num_teachers=10, rng=np.random.default_rng(0), seed=0)
    _covers_disjointly(p, 1003)
    assert set(p.shard_sizes.tolist()) == {100, 101}
    assert p.mode == "random" and p.seed == 0
    assert p.ids_digest == ids_digest(np.arange(1003))
    assert "record-level" in p.neighbouring_relation


def test_random_is_deterministic_from_seed_and_random_across_seeds():
    a = partition_random(500, num_teachers=7, rng=np.random.default_rng(1))
    b = partition_random(500, num_teachers=7, rng=np.random.default_rng(1))
    c = partition_random(500, num_teachers=7, rng=np.random.default_rng(2))
    assert a == b
    assert not np.array_equal(a.assignment, c.assignment)
    # Not a trivial contiguous split.
    assert len(np.unique(a.assignment[:50])) > 1


def test_stratified_balances_every_class():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, size=997)
    labels[:3] = 3
    p = partition_stratified(labels, num_teachers=9, num_classes=5, rng=np.random.default_rng(0))
    _covers_disjointly(p, 997)
    assert p.shard_sizes.max() - p.shard_sizes.min() <= 1
    for c in range(5):
        per_teacher = np.bincount(p.assignment[labels == c], minlength=9)
        assert per_teacher.max() - per_teacher.min() <= 1
    assert p.mode == "stratified"


def test_unit_mode_keeps_units_whole_and_balances_records():
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 20, size=300)
    unit_ids = np.repeat(np.array([f"patient-{i}" for i in range(300)]), sizes)
    rng.shuffle(unit_ids)
    p = partition_by_unit(unit_ids, num_teachers=12, rng=np.random.default_rng(5))
    _covers_disjointly(p, unit_ids.size)
    for u in np.unique(unit_ids)[:50]:
        assert np.unique(p.assignment[unit_ids == u]).size == 1
    assert p.shard_sizes.max() - p.shard_sizes.min() <= sizes.max()
    assert "unit-level" in p.neighbouring_relation
    assert p.summary()["num_units"] == 300


def test_unit_mode_single_record_units_is_equal_split():
    p = partition_by_unit(np.arange(100) * 7, num_teachers=8, rng=np.random.default_rng(0))
    assert set(p.shard_sizes.tolist()) == {12, 13}


def test_check_partition_detects_overlap_gaps_and_empty_shards():
    good = [np.array([0, 1]), np.array([2, 3])]
    check_partition(good, 4)
    with pytest.raises(PartitionError, match="overlap: record 1"):
        check_partition([np.array([0, 1]), np.array([1, 2, 3])], 4)
    with pytest.raises(PartitionError, match="belong to no shard"):
        check_partition([np.array([0]), np.array([2, 3])], 4)
    with pytest.raises(PartitionError, match="empty"):
        check_partition([np.array([0, 1, 2, 3]), np.array([], dtype=int)], 4)
    with pytest.raises(PartitionError, match="outside"):
        check_partition([np.array([0, 1]), np.array([2, 4])], 4)
    with pytest.raises(PartitionError, match="twice"):
        check_partition([np.array([0, 0, 1]), np.array([2, 3])], 4)
    p = Partition(assignment=np.array([0, 0, 0]), num_teachers=2, mode="random", seed=None,
                  ids_digest=ids_digest(np.arange(3)))
    with pytest.raises(PartitionError, match="teacher 1 has an empty shard"):
        check_partition(p, 3)
    with pytest.raises(PartitionError, match="covers 3 records, expected 4"):
        check_partition(partition_random(3, num_teachers=1, rng=np.random.default_rng(0)), 4)
    split = Partition(assignment=np.array([0, 1, 1]), num_teachers=2, mode="unit", seed=None,
                      ids_digest=ids_digest(["a", "a", "b"]), unit_ids=np.array(["a", "a", "b"]))
    with pytest.raises(PartitionError, match="spread over several shards"):
        check_partition(split, 3)


def test_save_load_roundtrip_and_verification(tmp_path):
    units = np.array([10, 11, 10, 12, 13, 11, 14])
    p = partition_by_unit(units, num_teachers=3, rng=np.random.default_rng(0), seed=42)
    path = p.save(tmp_path / "partition.npz")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["partition.npz"]  # no temp left
    q = Partition.load(path, ids=units)
    assert q == p and q.seed == 42 and np.array_equal(q.unit_ids, units)
    assert [s.tolist() for s in q.shards] == [s.tolist() for s in p.shards]
    with pytest.raises(PartitionError, match="other ids"):
        Partition.load(path, ids=units[::-1])
    with pytest.raises(PartitionError, match="ids has 6 entries"):
        Partition.load(path, ids=units[:6])
    r = partition_random(20, num_teachers=4, rng=np.random.default_rng(0))
    r.save(tmp_path / "r.npz")
    assert Partition.load(tmp_path / "r.npz", ids=np.arange(20)).seed is None
    with pytest.raises(ValueError, match=".npz"):
        r.save(tmp_path / "r.bin")
    with pytest.raises(FileNotFoundError, match="pate partition"):
        Partition.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(PartitionError, match="not a readable"):
        Partition.load(tmp_path / "junk.npz")


def test_load_rejects_tampered_file(tmp_path):
    p = partition_random(10, num_teachers=2, rng=np.random.default_rng(0))
    fields = dict(np.load(p.save(tmp_path / "p.npz")))
    fields["assignment"] = np.where(fields["assignment"] == 1, 0, 0)  # teacher 1 emptied
    np.savez(tmp_path / "t.npz", **fields)
    with pytest.raises(PartitionError, match="empty shard"):
        Partition.load(tmp_path / "t.npz")


def test_record_ids_change_the_digest():
    rng = np.random.default_rng
    a = partition_random(5, num_teachers=2, rng=rng(0), record_ids=["a", "b", "c", "d", "e"])
    b = partition_random(5, num_teachers=2, rng=rng(0), record_ids=["a", "b", "c", "d", "f"])
    assert a.ids_digest != b.ids_digest and np.array_equal(a.assignment, b.assignment)
    assert ids_digest(np.array([1, 2], dtype=np.int32)) == ids_digest(np.array([1, 2]))
    assert ids_digest(["1", "2"]) != ids_digest([1, 2])


def test_partition_is_immutable():
    p = partition_random(10, num_teachers=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        p.assignment[0] = 1
    with pytest.raises(AttributeError):
        p.num_teachers = 3


class _CountingRng:
    """A Generator stand-in that records whether any randomness was drawn."""

    def __init__(self):
        self.calls = 0

    def permutation(self, *a, **k):  # pragma: no cover - must never be reached
        self.calls += 1
        raise AssertionError("drew randomness before validating")


@pytest.mark.parametrize("call, exc, match", [
    (lambda r: partition_random(5, num_teachers=6, rng=r), PartitionError, "at most 5 teachers"),
    (lambda r: partition_random(5, num_teachers=0, rng=r), ValueError, "num_teachers must be >= 1"),
    (lambda r: partition_random(0, num_teachers=1, rng=r), ValueError, "num_records"),
    (lambda r: partition_random(5.0, num_teachers=1, rng=r), TypeError, "num_records"),
    (lambda r: partition_random(5, num_teachers=2, rng=r, record_ids=[1, 2]), ValueError,
     "record_ids must have one id per record"),
    (lambda r: partition_random(3, num_teachers=2, rng=r, record_ids=[1, 1, 2]), ValueError,
     "unique"),
    (lambda r: partition_stratified([0, 1, 5], num_teachers=2, num_classes=3, rng=r), ValueError,
     r"labels must lie in \[0, num_classes=3\); got 5"),
    (lambda r: partition_stratified([0, -1, 1], num_teachers=2, num_classes=3, rng=r), ValueError,
     "got -1"),
    (lambda r: partition_stratified([0.5, 1], num_teachers=2, num_classes=3, rng=r), TypeError,
     "integer class"),
    (lambda r: partition_stratified([[0, 1]], num_teachers=1, num_classes=3, rng=r), ValueError,
     "1-D"),
    (lambda r: partition_stratified([0, 1], num_teachers=3, num_classes=3, rng=r), PartitionError,
     "num_teachers=3"),
    (lambda r: partition_by_unit([1, 1, 2, 2], num_teachers=3, rng=r), PartitionError,
     "2 privacy units"),
    (lambda r: partition_by_unit([1.0, 2.0], num_teachers=1, rng=r), TypeError, "float ids"),
    (lambda r: partition_by_unit([[1, 2]], num_teachers=1, rng=r), ValueError, "1-D"),
    (lambda r: partition_by_unit([], num_teachers=1, rng=r), ValueError, "empty"),
    (lambda r: partition_by_unit(np.array([1, None], dtype=object), num_teachers=1, rng=r),
     TypeError, "object array"),
])
def test_bad_inputs_rejected_before_any_randomness(call, exc, match):
    rng = _CountingRng()
    with pytest.raises(exc, match=match):
        call(rng)
    assert rng.calls == 0


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError, match="rng must be"):
        partition_random(5, num_teachers=2, rng=0)
