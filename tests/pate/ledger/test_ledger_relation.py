"""Issue #30 in the ledger: one neighbouring relation (add/remove) for every budget and every
event composed against it (a stored event without one is refused, never given one), and one
identity per set of records whatever their array layout."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import numpy as np
import pytest

from pate.analysis import ADD_REMOVE, REPLACE_ONE, PrivacyEvent, gnmax_event
from pate.analysis.class_means import class_means_event
from pate.core.errors import BudgetExceededError, LedgerError
from pate.ledger import Ledger, dataset_digest, dataset_identity

DELTA = 1e-5
VOTES = np.tile(np.array([[200, 30, 20]]), (30, 1))


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.sqlite3"


@pytest.fixture
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:500, None].astype(np.float32), d.target[:500]  # (N, 1, 8, 8)


def _set_relations(path, relation) -> None:
    """Rewrite the relation of every stored gnmax event (``None``: none at all), checksums kept
    valid: what a ledger written by some other program could hold."""
    conn = sqlite3.connect(path)
    for rid, payload in conn.execute("SELECT id, payload FROM events").fetchall():
        d = json.loads(payload)
        if d["mechanism"] != "gnmax":
            continue
        d.pop("relation")
        if relation is not None:
            d["relation"] = relation
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        conn.execute(
            "UPDATE events SET payload=?, sha256=? WHERE id=?",
            (text, hashlib.sha256(text.encode()).hexdigest(), rid),
        )
    conn.commit()
    conn.close()


def test_budgets_and_events_state_the_relation(path):
    digest = dataset_digest(np.arange(50))
    with Ledger(path) as led:
        led.set_budget(digest, eps=5.0, delta=DELTA, name="d")
        led.charge("d", [gnmax_event(VOTES, sigma=40.0)])
        assert led.budget("d").relation == ADD_REMOVE
        assert led.summary("d")["budget"]["relation"] == ADD_REMOVE
        assert led.events("d")[0].event.relation == ADD_REMOVE
    conn = sqlite3.connect(path)
    assert (
        json.loads(conn.execute("SELECT payload FROM events").fetchone()[0])["relation"]
        == ADD_REMOVE
    )
    with pytest.raises(sqlite3.IntegrityError):  # the budget's relation column is checked
        conn.execute("UPDATE datasets SET relation='replace-one'")
    conn.close()


def test_a_replace_one_event_is_never_recorded(path):
    event = gnmax_event(VOTES, sigma=40.0)
    old = PrivacyEvent(
        event.mechanism,
        event.params,
        event.orders,
        event.rdp,
        event.rdp_data_independent,
        event.queries,
        event.answered,
        relation=REPLACE_ONE,
    )
    with Ledger(path) as led:
        led.register_dataset(dataset_digest(np.arange(50)), name="d")
        with pytest.raises(LedgerError, match="replace-one"):
            led.charge("d", [old])
        assert led.events("d") == []


def test_a_ledger_mixing_relations_is_refused_not_summed(path):
    """Break 1: add/remove and replace-one events composed in one dataset's total are a bound
    under neither relation. Every later charge, reservation and summary on that dataset is
    refused, naming the relation and the fix."""
    digest = dataset_digest(np.arange(50))
    with Ledger(path) as led:
        led.set_budget(digest, eps=10.0, delta=DELTA, name="d")
        led.charge(
            "d",
            [
                gnmax_event(VOTES, sigma=40.0),
                class_means_event(sigma=4.245, count_weight=0.3, queries=9000),
            ],
        )
    _set_relations(path, REPLACE_ONE)
    with Ledger(path) as led:
        stored = [s.event for s in led.events("d")]
        assert [e.relation for e in stored] == [REPLACE_ONE, ADD_REMOVE]
        with pytest.raises(LedgerError, match="replace-one.*new ledger file"):
            led.charge("d", [class_means_event(sigma=4.245, count_weight=0.3, queries=10)])
        with pytest.raises(LedgerError, match="replace-one"):
            led.reserve("d", orders=stored[1].orders, rdp=stored[1].rdp)
        with pytest.raises(LedgerError, match="replace-one"):
            led.summary("d")
        with pytest.raises(LedgerError, match="replace-one"):
            led.prior_rdp("d", orders=stored[1].orders)
        assert len(led.events("d")) == 2  # nothing recorded


def test_a_stored_event_without_a_relation_is_refused_never_guessed(path):
    digest = dataset_digest(np.arange(50))
    with Ledger(path) as led:
        led.set_budget(digest, eps=10.0, delta=DELTA, name="d")
        led.charge("d", [gnmax_event(VOTES, sigma=40.0)])
    _set_relations(path, None)
    with Ledger(path) as led:
        for read in (lambda: led.events("d"), lambda: led.summary("d")):
            with pytest.raises(LedgerError, match=r"event 1 .* is malformed .*relation"):
                read()


def test_a_reshaped_copy_of_the_records_is_the_same_dataset(path, digits):
    """Break 4: digits as (N, 1, 8, 8) and the same values as (N, 64), float64, int32 labels --
    a CSV with 64 columns, an npz, arrays to pate.fit -- had different identities, so a run on
    the flattened copy got a fresh budget where the original was exhausted."""
    x, y = digits
    flat = dataset_identity(x.reshape(len(x), 64).astype(np.float64), y.astype(np.int32))
    assert flat.digest == dataset_identity(x, y).digest
    event = gnmax_event(VOTES, sigma=40.0)
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x, y), name="digits")
        led.set_budget("digits", eps=1.0, delta=DELTA)
        with pytest.raises(BudgetExceededError):
            for _ in range(100):
                led.charge("digits", [event])
        assert led.register_identity(flat) == led.resolve("digits")
        with pytest.raises(BudgetExceededError):
            led.charge(flat.digest, [event])  # a digest given by hand: the ledger keys it
    # what is not the same data: rescaled values, one changed label
    assert dataset_identity(x / 16.0, y).digest != flat.digest
    y2 = y.copy()
    y2[0] = (y2[0] + 1) % 10
    assert dataset_identity(x, y2).digest != flat.digest
