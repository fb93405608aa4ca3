"""One dataset identity: content keys per record, order-independent digests, overlap links that
make a charge count against every dataset it touches, budget changes in the audit log, and
``pate budget digest --config``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pate.analysis import DEFAULT_ORDERS, RdpAccountant, gnmax_event
from pate.cli import main as cli_main
from pate.core.errors import BudgetExceededError
from pate.ledger import (
    DatasetIdentity,
    Ledger,
    dataset_digest,
    dataset_identity,
    record_keys,
)

DELTA = 1e-5
VOTES = np.tile(np.array([[200, 30, 20]]), (30, 1))


@pytest.fixture
def event():
    return gnmax_event(VOTES, sigma=40.0)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(300, 1, 4, 4)).astype(np.float32) / 255.0
    y = rng.integers(0, 10, size=300)
    return x, y


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.sqlite3"


def eps_of(events, *, delta=DELTA):
    acc = RdpAccountant(DEFAULT_ORDERS).compose(*[e.on_orders(DEFAULT_ORDERS) for e in events])
    return float(acc.epsilon(delta=delta, data_dependent=False)[0])


def fitting(event, budget):
    n = 0
    while eps_of([event] * (n + 1)) <= budget:
        n += 1
    return n


# ------------------------------------------------------------------------------ the identity


def test_identity_ignores_row_order_and_storage_dtype(data):
    x, y = data
    ident = dataset_identity(x, y)
    assert isinstance(ident, DatasetIdentity) and ident.num_records == 300
    assert len(ident.digest) == 64 and set(ident.digest) <= set("0123456789abcdef")
    assert ident.record_keys.dtype == np.dtype("S16") and ident.record_keys.shape == (300,)
    perm = np.random.default_rng(1).permutation(300)
    shuffled = dataset_identity(x[perm], y[perm])
    assert shuffled.digest == ident.digest
    assert np.array_equal(shuffled.record_keys, ident.record_keys[perm])  # a key per record
    # The same float32 values stored as float64, with int32 labels: the same records.
    assert dataset_identity(x.astype(np.float64), y.astype(np.int32)).digest == ident.digest
    # uint8 pixels and the float32 array holding the same values are the same content.
    raw = np.random.default_rng(2).integers(0, 256, size=(50, 8), dtype=np.uint8)
    labels = np.arange(50) % 3
    assert dataset_identity(raw, labels) == dataset_identity(raw.astype(np.float32), labels)
    # -0.0 is 0.0 as a float32 value.
    assert (
        record_keys(np.array([[-0.0, 1.0]]), [1]).tobytes()
        == record_keys(np.array([[0.0, 1.0]]), [1]).tobytes()
    )


def test_identity_changes_with_one_record_or_label_but_not_with_the_layout(data):
    x, y = data
    ident = dataset_identity(x, y)
    x2 = x.copy()
    x2[17, 0, 2, 3] = np.nextafter(x2[17, 0, 2, 3], np.float32(2.0))  # one value, one ulp
    changed = dataset_identity(x2, y)
    assert changed.digest != ident.digest
    assert np.sum(changed.record_keys != ident.record_keys) == 1
    y2 = y.copy()
    y2[5] = (y2[5] + 1) % 10
    assert dataset_identity(x, y2).digest != ident.digest
    # the same values in another array layout are the same records (issue #30)
    assert dataset_identity(x.reshape(300, 16), y).digest == ident.digest
    assert dataset_identity(x[:-1], y[:-1]).digest != ident.digest
    assert (
        dataset_identity(np.concatenate([x, x[:1]]), np.concatenate([y, y[:1]])).digest
        != ident.digest
    )  # a duplicated record is a different multiset


def test_dataset_digest_of_keys_is_the_one_definition(data):
    x, y = data
    keys = record_keys(x, y)
    assert dataset_identity(x, y).digest == dataset_digest(keys) == dataset_digest(keys[::-1])
    assert dataset_digest(keys) != dataset_digest(np.arange(300))
    with pytest.raises(TypeError, match="S16"):
        dataset_digest(np.array([b"abc"], dtype="S3"))


@pytest.mark.parametrize(
    "x, y, err, text",
    [
        (np.zeros((0, 3)), np.zeros(0, int), ValueError, "at least one record"),
        (np.zeros((3, 2)), np.zeros(2, int), ValueError, "one label per record"),
        (np.zeros((3, 2)), np.array([0.5, 1, 2]), TypeError, "integer labels"),
        (np.array([["a", "b"]]), np.zeros(1, int), TypeError, "numeric"),
    ],
)
def test_record_keys_refuse_bad_input(x, y, err, text):
    with pytest.raises(err, match=text):
        record_keys(x, y)


# ------------------------------------------------------------------------------ overlap links


def test_superset_registered_after_a_spent_subset_is_limited_by_it(path, data, event):
    x, y = data
    sub, sup = dataset_identity(x[:200], y[:200]), dataset_identity(x, y)
    with Ledger(path) as led:
        assert led.register_identity(sub, name="sub") == led.dataset_id(sub) != sub.digest
        sub_id, sup_id = led.dataset_id(sub), led.dataset_id(sup)
        led.set_budget("sub", eps=2.0, delta=DELTA)
        k = fitting(event, 2.0)
        for _ in range(k - 1):
            led.charge("sub", [event])
        # The same records plus a hundred more: a new digest, but not a fresh budget.
        led.register_identity(sup, name="sup")
        led.set_budget("sup", eps=100.0, delta=DELTA)
        assert [(r["dataset"], r["shared_records"]) for r in led.linked("sup")] == [(sub_id, 200)]
        led.charge("sup", [event])  # the last one that fits the subset
        with pytest.raises(BudgetExceededError, match="shares 200 record"):
            led.charge("sup", [event])
        with pytest.raises(BudgetExceededError, match="budget eps=2 of sub"):
            led.reserve("sup", orders=event.orders, rdp=event.rdp_data_independent)
        assert led.summary("sup")["events"] == 1  # nothing recorded by the refusals
        assert led.reservations("sup", live_only=False) == []
        # Spend on the superset shows in the subset's summary and history.
        s = led.summary("sub")
        assert s["events"] == k - 1 and s["linked_events"] == 1
        assert s["spent"] == pytest.approx(eps_of([event] * k), rel=1e-12) and s["spent"] <= 2.0
        assert s["linked"][0]["dataset"] == sup_id
        hist = led.history("sub")
        assert [h["linked"] for h in hist] == [False] * (k - 1) + [True]
        assert hist[-1]["dataset"] == sup_id
        assert hist[-1]["cumulative_eps"] == pytest.approx(s["spent"], rel=1e-12)
        # The superset's view: its own budget is far away, the subset's is the binding one.
        t = led.summary("sup")
        assert t["remaining"] > 90 and t["limited_by"] == sub_id
        assert t["remaining_effective"] == pytest.approx(2.0 - s["spent"])


def test_shuffled_rows_are_the_same_dataset_in_the_ledger(path, data, event):
    x, y = data
    perm = np.random.default_rng(3).permutation(len(y))
    with Ledger(path) as led:
        first = led.register_identity(dataset_identity(x, y), name="clinic")
        led.set_budget(first, eps=1.0, delta=DELTA)
        led.charge(first, [event])
        again = led.register_identity(dataset_identity(x[perm], y[perm]))
        assert again == first and len(led.datasets()) == 1
        assert led.summary(again)["events"] == 1 and led.budget(again).eps == 1.0


def test_dataset_without_budget_is_limited_by_a_linked_budget(path, data, event):
    x, y = data
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x[:100], y[:100]), name="small")
        led.set_budget("small", eps=2.0, delta=DELTA)
        led.register_identity(dataset_identity(x[50:], y[50:]), name="open")
        assert led.budget("open") is None
        k = fitting(event, 2.0)
        for _ in range(k):
            led.charge("open", [event])
        with pytest.raises(BudgetExceededError, match="shares 50 record"):
            led.charge("open", [event])
        assert led.summary("small")["spent"] <= 2.0
        # Disjoint records are not linked: a third dataset keeps its own fresh budget.
        led.register_identity(dataset_identity(x[100:], y[100:]), name="later")
        assert [r["name"] for r in led.linked("later")] == ["open"]
        led.set_budget("later", eps=2.0, delta=DELTA)
        with pytest.raises(BudgetExceededError):  # "open" already spent eps ~2 on its records
            led.charge("later", [event] * k)


def test_linked_reservations_count_and_commit_rechecks_every_budget(path, data, event):
    x, y = data
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x[:200], y[:200]), name="sub")
        led.set_budget("sub", eps=2.0, delta=DELTA)
        led.register_identity(dataset_identity(x, y), name="sup")
        led.set_budget("sup", eps=50.0, delta=DELTA)
        k = fitting(event, 2.0)
        held = led.reserve("sup", orders=event.orders, rdp=(k - 1) * event.rdp_data_independent)
        led.charge("sub", [event])  # exactly the rest of the subset's budget
        with pytest.raises(BudgetExceededError, match="reserving"):
            led.reserve("sub", orders=event.orders, rdp=event.rdp_data_independent)
        # The reservation's prior and constraints see the subset's spend.
        assert np.allclose(held.prior_rdp(), event.rdp_data_independent)
        cons = {c["name"]: c for c in held.constraints()}
        assert set(cons) == {"sub", "sup"} and cons["sub"]["linked"] and not cons["sup"]["linked"]
        assert np.allclose(cons["sub"]["prior_rdp"], event.rdp_data_independent)
        # Beyond the reservation, the commit re-checks the subset's budget: refused, still live.
        with pytest.raises(BudgetExceededError, match="of sub"):
            held.commit([event] * k)
        assert not held.closed and led.summary("sup")["events"] == 0
        assert held.commit([event] * (k - 1))
        assert led.summary("sub")["spent"] == pytest.approx(eps_of([event] * k), rel=1e-12)
        assert led.summary("sub")["spent"] <= 2.0


def test_linked_spend_counts_in_every_block(path, data, event):
    x, y = data
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x[:200], y[:200]), name="blocks")
        led.set_budget("blocks", eps=2.0, delta=DELTA)
        led.add_block("blocks", "2025-01")
        led.add_block("blocks", "2025-02")
        led.charge("blocks", [event], blocks=["2025-01"])
        led.register_identity(dataset_identity(x[150:], y[150:]), name="other")
        led.charge("other", [event])
        by_block = {b["block"]: b for b in led.summary("blocks")["blocks"]}
        assert by_block["2025-02"]["spent"] == pytest.approx(eps_of([event]), rel=1e-12)
        assert by_block["2025-01"]["spent"] == pytest.approx(eps_of([event, event]), rel=1e-12)
        np.testing.assert_allclose(
            led.prior_rdp("blocks", orders=event.orders, blocks=["2025-02"]),
            event.rdp_data_independent,
        )


def test_register_identity_is_idempotent_and_adopts_a_digest_only_dataset(path, data, event):
    x, y = data
    ident = dataset_identity(x, y)
    with Ledger(path) as led:
        # An admin set the budget by the digest of the records (the ledger keys it).
        led.set_budget(ident.digest, eps=1.5, delta=DELTA, name="admin")
        led.charge("admin", [event])
        assert led.register_identity(ident) == led.dataset_id(ident)
        assert led.register_identity(ident) == led.resolve("admin") == led.resolve(ident.digest)
        assert led.budget(ident.digest).eps == 1.5 and led.summary("admin")["events"] == 1
        assert led.summary("admin")["records"] == 300
        led.register_identity(dataset_identity(x[:10], y[:10]), name="tiny")
        led.register_identity(dataset_identity(x[:10], y[:10]), name="tiny")
        assert [r["name"] for r in led.linked("admin")] == ["tiny"]
        assert [a["action"] for a in led.audit_log("tiny")].count("link") == 1
        over = led.overlapping(dataset_identity(x[5:20], y[5:20]))
        assert [(o["name"], o["shared_records"]) for o in over] == [("admin", 15), ("tiny", 5)]
        with pytest.raises(TypeError, match="DatasetIdentity"):
            led.register_identity(ident.digest)
        forged = DatasetIdentity(dataset_digest(np.arange(3)), ident.record_keys, ident.num_records)
        with pytest.raises(ValueError, match="not the digest of its record keys"):
            led.register_identity(forged)


# ------------------------------------------------------------------------------ budget authority


def test_budget_changes_are_recorded_with_spend(path, event):
    digest = dataset_digest(np.arange(100))
    with Ledger(path) as led:
        led.set_budget(digest, eps=1.0, delta=DELTA, name="d")
        k = fitting(event, 1.0)
        for _ in range(k):
            led.charge("d", [event])
        with pytest.raises(BudgetExceededError):
            led.charge("d", [event])
        led.set_budget("d", eps=3.0, delta=DELTA, reason="data owner approved more")
        led.charge("d", [event])  # the raise is authoritative
        led.set_budget("d", eps=0.5, delta=DELTA)
        with pytest.raises(BudgetExceededError):
            led.charge("d", [event])
        changes = led.budget_changes("d")
        assert [c["change"] for c in changes] == ["initial", "raised", "lowered"]
        assert changes[1]["previous"] == {
            "eps": 1.0,
            "delta": DELTA,
            "basis": "data-independent",
            "conversion": "classic",
        }
        assert changes[1]["eps"] == 3.0 and changes[1]["reason"] == "data owner approved more"
        assert changes[1]["spent_eps"] == pytest.approx(eps_of([event] * k), rel=1e-12)
        assert changes[2]["spent_eps"] == pytest.approx(eps_of([event] * (k + 1)), rel=1e-12)
        s = led.summary("d")
        assert s["budget_changes"] == changes and s["remaining"] == 0.0


# ------------------------------------------------------------------------------ CLI


def test_cli_digest_of_config_is_the_identity_of_the_private_split(tmp_path, capsys, event):
    from pate.teachers.data import load_pate_data

    private = load_pate_data("digits").private
    expected = dataset_identity(private.x, private.y)
    led_path = str(tmp_path / "cli.sqlite3")
    assert (
        cli_main(["budget", "digest", "--config", "configs/digits.toml", "--ledger", led_path]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    with Ledger(led_path) as led:
        stored = led.dataset_id(expected)  # keyed: tells nothing about the records
    assert out[0] == stored != expected.digest and "digits" in out[1]
    assert str(expected.num_records) in out[2]

    # The printed id (registered, no budget yet) is what `pate budget set/show/list` take.
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                stored,
                "--eps",
                "4",
                "--delta",
                "1e-5",
                "--name",
                "digits-private",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    with Ledger(led_path) as led:
        led.register_identity(dataset_identity(private.x[:100], private.y[:100]), name="part")
        led.set_budget("part", eps=1.0, delta=1e-5)
        led.charge("part", [event])
    capsys.readouterr()
    assert (
        cli_main(
            ["budget", "digest", "--config", "configs/digits.toml", "--ledger", led_path, "--json"]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["digest"] == stored and shown["records"] == expected.num_records
    assert [(o["name"], o["same"], o["shared_records"]) for o in shown["overlaps"]] == [
        ("digits", True, expected.num_records),
        ("part", False, 100),
    ]
    assert shown["overlaps"][1]["budget"]["eps"] == 1.0
    assert cli_main(["budget", "show", "--dataset", stored, "--ledger", led_path, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == stored and summary["budget"]["eps"] == 4.0
    assert cli_main(["budget", "list", "--ledger", led_path]) == 0
    listed = capsys.readouterr().out
    assert stored[:12] in listed and expected.digest[:12] not in listed
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                "digits-private",
                "--eps",
                "5",
                "--delta",
                "1e-5",
                "--reason",
                "more",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli_main(["budget", "show", "--dataset", "digits-private", "--ledger", led_path]) == 0
    assert "raised: eps=4 -> 5" in capsys.readouterr().out
    assert cli_main(["budget", "digest", "--ids", led_path, "--ledger", led_path]) == 2


def test_link_by_hand_joins_an_id_digest_budget_to_the_identity(tmp_path, capsys, data, event):
    x, y = data
    led_path = str(tmp_path / "link.sqlite3")
    ids_digest = dataset_digest(np.arange(300))  # how an admin once named these records
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                ids_digest,
                "--eps",
                "1",
                "--delta",
                "1e-5",
                "--name",
                "by-ids",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    with Ledger(led_path) as led:
        led.register_identity(dataset_identity(x, y), name="by-content")
        assert led.linked("by-content") == []  # nothing ties an id digest to the records
    assert (
        cli_main(
            [
                "budget",
                "link",
                "--dataset",
                "by-content",
                "--with",
                "by-ids",
                "--reason",
                "same records",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    assert (
        cli_main(
            ["budget", "link", "--dataset", "by-ids", "--with", "by-content", "--ledger", led_path]
        )
        == 0
    )  # idempotent
    with Ledger(led_path) as led:
        assert [(r["name"], r["shared_records"]) for r in led.linked("by-content")] == [
            ("by-ids", None)
        ]
        k = fitting(event, 1.0)
        for _ in range(k):
            led.charge("by-content", [event])
        with pytest.raises(BudgetExceededError, match="linked by hand"):
            led.charge("by-content", [event])
        with pytest.raises(ValueError, match="same dataset"):
            led.link("by-ids", ids_digest)
    capsys.readouterr()
    assert cli_main(["budget", "show", "--dataset", "by-ids", "--ledger", led_path]) == 0
    assert "linked by hand" in capsys.readouterr().out


def test_record_keys_converted_a_block_at_a_time_are_the_keys_of_one_block(monkeypatch):
    """The records are converted to canonical float32 a block of rows at a time (issue #33: no
    float32 copy of the whole split); the keys are those of the whole split at once."""
    from pate.ledger import identity

    rng = np.random.default_rng(4)
    x = rng.random((37, 3, 4)).astype(np.float64)
    x[3, 0, 0], x[20, 1, 2], x[36, 2, 3] = -0.0, np.nan, -np.nan
    y = rng.integers(0, 5, 37)
    whole = identity.dataset_identity(x, y)
    monkeypatch.setattr(identity, "_BLOCK_BYTES", 5 * 12 * 4)  # 5 rows a block
    blocks = identity.dataset_identity(x, y)
    assert blocks.digest == whole.digest
    assert blocks.record_keys.tobytes() == whole.record_keys.tobytes()
    x[36, 2, 3] = 0.5  # and the keys still see every row
    assert identity.dataset_identity(x, y).digest != whole.digest
