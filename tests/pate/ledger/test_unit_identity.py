"""Issue #50, "the budget follows people, not encodings": with an id column the ledger knows the
private rows by (keyed hashes of) their people's ids, so the same people re-encoded --
standardised, one-hot, a column added, rows reordered -- are the same dataset with the same
budget; people added or removed link as records do; other people are another dataset. Without
an id column a re-encoded copy is a new dataset (and the report's sentence says so)."""

from __future__ import annotations

import numpy as np
import pytest

from pate.analysis import gnmax_event
from pate.analysis.errors import InputError, InputTypeError
from pate.ledger import (
    Ledger,
    dataset_identity,
    identity_note,
    private_identity,
    record_keys,
    unit_identity,
)
from pate.teachers.data import ArraySplit, PateData

PEOPLE = 150  # two rows each


def raw_table(seed: int = 0, people: int = PEOPLE):
    """``(numeric, category, labels, unit ids)`` of a small table: two rows per person, four
    numeric columns on very different scales, one categorical column (codes 0..2)."""
    rng = np.random.default_rng(seed)
    rows = 2 * people
    numeric = rng.normal(size=(rows, 4)) * np.array([0.25, 1.0, 300.0, 20000.0])
    category = rng.integers(0, 3, size=rows)
    labels = (numeric[:, 0] > 0).astype(np.int64) + (category == 2)
    ids = np.repeat(np.arange(1000, 1000 + people), 2)
    return numeric, category, labels, ids


def encoded(numeric, category, how: str) -> np.ndarray:
    """The same rows in another encoding: ``codes`` (the category as its integer code),
    ``standardised`` (numeric scaled, category one-hot) or ``added`` (that, plus a column)."""
    if how == "codes":
        return np.column_stack([numeric, category]).astype(np.float32)
    scaled = (numeric - numeric.mean(axis=0)) / numeric.std(axis=0)
    onehot = np.eye(3)[category]
    out = np.column_stack([scaled, onehot])
    if how == "added":
        out = np.column_stack([out, numeric[:, 2] / numeric[:, 3]])
    return out.astype(np.float32)


def pate_data(x, y, unit_ids=None) -> PateData:
    split = ArraySplit(x[:20], y[:20])
    return PateData(
        name="memory:patients",
        private=ArraySplit(x, y),
        public=split,
        evaluation=split,
        num_classes=3,
        input_shape=(x.shape[1],),
        unit_ids=unit_ids,
    )


# ------------------------------------------------------------------------------ the identity


def test_the_same_people_re_encoded_or_reordered_are_one_identity():
    numeric, category, y, ids = raw_table()
    order = np.random.default_rng(1).permutation(len(ids))
    identities = [
        private_identity(pate_data(encoded(numeric, category, "codes"), y, ids)),
        private_identity(pate_data(encoded(numeric, category, "standardised"), y, ids)),
        private_identity(
            pate_data(encoded(numeric, category, "added")[order], y[order], ids[order])
        ),
    ]
    assert identities[0] == identities[1] == identities[2]
    assert identities[0].num_records == PEOPLE  # one key per person, not per row
    # without the ids each encoding is other records: a new dataset to the ledger
    by_records = {
        private_identity(pate_data(encoded(numeric, category, how), y)).digest
        for how in ("codes", "standardised", "added")
    }
    assert len(by_records) == 3


def test_one_key_per_person_and_ids_are_text_or_integers():
    ids = np.array([7, 3, 7, 12])
    identity = unit_identity(ids)
    keys = identity.record_keys
    assert keys.dtype == np.dtype("S16") and keys.shape == (3,) and len(set(keys.tolist())) == 3
    # an integer id and its decimal text are the same person (a CSV column read either way)
    assert unit_identity(np.array(["12", "7", "3", "7"])) == identity
    assert unit_identity(np.array(["12", "7", "3", "7"], dtype=object)) == identity
    # another person is another dataset; a row more of a person is the same people
    assert unit_identity(np.array([7, 3, 7, 13])) != identity
    assert unit_identity(np.array([7, 3, 7, 12, 12])) == identity


def test_unit_keys_are_not_record_keys_of_any_row():
    """Unit keys are hashed under their own versioned tag: a person's key is never the content
    key of a record, so records and people never link by accident."""
    numeric, category, y, ids = raw_table()
    x = encoded(numeric, category, "codes")
    assert not set(unit_identity(ids).record_keys.tolist()) & set(record_keys(x, y).tolist())
    assert unit_identity(ids) != dataset_identity(x, y)


@pytest.mark.parametrize(
    "ids, error, message",
    [
        (np.array([1.0, 2.0]), InputTypeError, "float ids are refused"),
        (np.array(["a", None], dtype=object), InputTypeError, "integers or strings"),
        (np.array(["P1", " ", "P2"]), InputError, r"unit_ids\[1\] is empty"),
        (np.array([], dtype=np.int64), InputError, "unit_ids is empty"),
        (np.array([[1, 2]]), InputError, "must be 1-D"),
    ],
)
def test_bad_unit_ids_are_refused_naming_them(ids, error, message):
    with pytest.raises(error, match=message):
        unit_identity(ids)


def test_private_identity_refuses_ids_of_another_length():
    numeric, category, y, ids = raw_table()
    data = pate_data(encoded(numeric, category, "codes"), y, ids[:-1])
    with pytest.raises(InputError, match="299 ids but the private split has 300 rows"):
        private_identity(data)


def test_the_report_sentence_says_what_the_ledger_knows_the_records_by():
    by_records, by_people = identity_note(False), identity_note(True)
    assert "re-encoded copy" in by_records and "new dataset" in by_records
    assert "same people re-encoded" in by_people and "same budget" in by_people


# ------------------------------------------------------------------------------ in the ledger


def test_in_the_ledger_people_added_or_removed_link_and_other_people_do_not(tmp_path):
    numeric, category, y, ids = raw_table()
    event = gnmax_event(np.tile([[20, 3, 2]], (10, 1)), sigma=4.0)
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        first = unit_identity(ids)
        digest = ledger.register_identity(first, name="patients")
        ledger.set_budget(digest, eps=8.0, delta=1e-5)
        ledger.charge(digest, [event], run_id="run-1")
        # re-encoded: the same id, the same budget and spend
        again = private_identity(pate_data(encoded(numeric, category, "added"), y, ids))
        assert ledger.dataset_id(again) == digest
        # ten people left, five joined: another dataset, linked (shared people)
        moved = np.concatenate([ids[20:], np.repeat(np.arange(5000, 5005), 2)])
        changed = ledger.register_identity(unit_identity(moved), name="patients v2")
        assert changed != digest
        linked = {d["dataset"]: d["shared_records"] for d in ledger.linked(changed)}
        assert linked == {digest: PEOPLE - 10}
        ledger.set_budget(changed, eps=8.0, delta=1e-5)
        spent = ledger.summary(digest)["spent"]
        assert spent > 0 and ledger.summary(changed)["spent"] == spent  # it counts against both
        # other people: a new dataset, nothing shared, nothing spent
        others = ledger.register_identity(unit_identity(ids + 100_000), name="other clinic")
        ledger.set_budget(others, eps=8.0, delta=1e-5)
        assert ledger.linked(others) == [] and ledger.summary(others)["spent"] == 0
