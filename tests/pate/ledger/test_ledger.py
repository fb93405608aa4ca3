"""The privacy-budget ledger: storage, exact recomposition, refusal before overspend, reservations,
order grids, Sage blocks, stale reservations, damaged/locked files, and the ``pate budget`` CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from pate.analysis import DEFAULT_ORDERS, PrivacyEvent, RdpAccountant, eps_from_rdp, gnmax_event
from pate.cli import main as cli_main
from pate.core.errors import BudgetExceededError, LedgerError
from pate.ledger import SCHEMA_VERSION, Ledger, dataset_digest, default_ledger_path
from pate.ledger.keying import keyed_digest, read_key

DELTA = 1e-5
VOTES = np.tile(np.array([[200, 30, 20]]), (30, 1))
DIGEST = dataset_digest(np.arange(1000))


@pytest.fixture
def event():
    return gnmax_event(VOTES, sigma=40.0)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.sqlite3"


@pytest.fixture
def ledger(path):
    with Ledger(path) as led:
        led.set_budget(DIGEST, eps=2.0, delta=DELTA, name="toy")
        yield led


def eps_of(events, *, data_dependent=False, orders=None):
    orders = DEFAULT_ORDERS if orders is None else orders
    acc = RdpAccountant(orders).compose(*[e.on_orders(orders) for e in events])
    return float(acc.epsilon(delta=DELTA, data_dependent=data_dependent)[0])


def max_fitting(event, budget_eps, *, data_dependent=False):
    curve = event.rdp if data_dependent else event.rdp_data_independent
    n = 0
    while eps_from_rdp((n + 1) * curve, orders=event.orders, delta=DELTA)[0] <= budget_eps:
        n += 1
    return n


# ------------------------------------------------------------------------------ digest


def test_digest_is_order_independent_and_distinguishes_sets_and_types():
    ids = np.arange(50)
    assert dataset_digest(ids) == dataset_digest(ids[::-1]) == dataset_digest(list(range(50)))
    assert dataset_digest(ids) != dataset_digest(np.arange(51))
    assert dataset_digest([1, 2]) != dataset_digest(["1", "2"])
    assert dataset_digest(["a", "bc"]) != dataset_digest(["ab", "c"])  # length-prefixed
    assert len(dataset_digest(["x"])) == 64


@pytest.mark.parametrize(
    "bad, err, text",
    [
        ([1, 2, 2], ValueError, "unique"),
        (["a", "a"], ValueError, "unique"),
        ([], ValueError, "non-empty"),
        (np.zeros((2, 2), int), ValueError, "1-D"),
        ([1.5, 2.5], TypeError, "dtype"),
        ("abc", TypeError, "1-D array"),
    ],
)
def test_digest_rejects_bad_ids(bad, err, text):
    with pytest.raises(err, match=text):
        dataset_digest(bad)


def test_default_path_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PATE_LEDGER", str(tmp_path / "x.sqlite3"))
    assert default_ledger_path() == tmp_path / "x.sqlite3"
    monkeypatch.delenv("PATE_LEDGER")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_ledger_path() == tmp_path / "pate" / "ledger.sqlite3"


# ------------------------------------------------------------------------------ storage


def test_file_is_wal_with_schema_version(ledger, path):
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_events_round_trip_exactly(ledger, event):
    other = PrivacyEvent(
        "lnmax",
        {"scale": 3.0, "note": "x"},
        DEFAULT_ORDERS,
        np.full(DEFAULT_ORDERS.size, 1e-3),
        np.full(DEFAULT_ORDERS.size, 1 / 3),
        7,
        4,
    )
    ids = ledger.charge("toy", [event, other], run_id="run-1")
    stored = ledger.events("toy")
    assert [s.id for s in stored] == ids
    for original, s in zip([event, other], stored):
        e = s.event
        assert (e.mechanism, e.params, e.queries, e.answered) == (
            original.mechanism,
            original.params,
            original.queries,
            original.answered,
        )
        for field in ("orders", "rdp", "rdp_data_independent"):
            assert np.array_equal(getattr(e, field), getattr(original, field))
        assert s.run_id == "run-1" and s.time_utc.endswith("+00:00")
    assert ledger.events("toy", run_id="nope") == []


def test_totals_are_recomposed_exactly(ledger, event):
    small = gnmax_event(VOTES[:10], sigma=60.0)
    ledger.charge("toy", [event])
    ledger.charge("toy", [small], run_id="second")
    s = ledger.summary("toy")
    assert s["spent"] == s["spent_data_independent"] == eps_of([event, small])
    assert s["spent_data_dependent"] == eps_of([event, small], data_dependent=True)
    assert s["spent_data_dependent"] < s["spent_data_independent"]
    assert s["remaining"] == pytest.approx(2.0 - s["spent"], abs=0, rel=1e-15)
    hist = ledger.history("toy")
    assert [h["eps"] for h in hist] == pytest.approx([eps_of([event]), eps_of([small])], rel=1e-12)
    assert hist[-1]["cumulative_eps"] == pytest.approx(s["spent"], rel=1e-12)
    assert hist[0]["cumulative_eps"] == pytest.approx(eps_of([event]), rel=1e-12)


def test_no_budget_records_without_limit(path, event):
    with Ledger(path) as led:
        led.register_dataset(DIGEST)
        assert led.budget(DIGEST) is None
        for _ in range(20):
            led.charge(led.resolve(DIGEST)[:10], [event])  # a prefix of the stored id
        s = led.summary(DIGEST)
        assert s["events"] == 20 and s["remaining"] is None and s["budget"] is None


def test_resolve_by_digest_name_and_prefix(ledger):
    stored = ledger.resolve(DIGEST)  # the ledger keeps the digest keyed with its secret
    assert stored != DIGEST and stored == keyed_digest(read_key(ledger.path), DIGEST)
    assert (
        ledger.resolve("toy")
        == ledger.resolve(stored)
        == ledger.resolve(stored[:8].upper())
        == stored
    )
    with pytest.raises(LedgerError, match="not in the ledger"):
        ledger.resolve(DIGEST[:8])  # a prefix of the unkeyed digest names nothing
    with pytest.raises(LedgerError, match="pate budget set"):
        ledger.resolve("unknown")
    with pytest.raises(ValueError, match="looks like a digest"):
        ledger.register_dataset(dataset_digest([1]), name=dataset_digest([2]))
    with pytest.raises(ValueError, match="already names another dataset"):
        ledger.register_dataset(dataset_digest([1]), name="toy")


def test_a_dataset_keeps_its_first_name_and_every_later_name_resolves(ledger):
    # main renamed the dataset to each later name: the first ("toy") no longer resolved
    ledger.register_dataset(DIGEST, name="npz:/data/a.npz")
    ledger.register_dataset(DIGEST, name="npz:/data/b.npz")
    ledger.register_dataset(DIGEST, name="npz:/data/a.npz")  # known already: nothing added
    ledger.register_dataset(DIGEST, name="toy")
    for name in ("toy", "npz:/data/a.npz", "npz:/data/b.npz"):
        assert ledger.resolve(name) == ledger.resolve(DIGEST)
    (row,) = ledger.datasets()
    assert row["name"] == "toy" and row["aliases"] == ["npz:/data/a.npz", "npz:/data/b.npz"]
    s = ledger.summary("npz:/data/b.npz")
    assert s["name"] == "toy" and s["aliases"] == row["aliases"]
    assert [(a["action"], a["detail"]) for a in ledger.audit_log("toy")][-2:] == [
        ("add-name", {"name": "npz:/data/a.npz", "first": "toy"}),
        ("add-name", {"name": "npz:/data/b.npz", "first": "toy"}),
    ]
    # a later name is taken like a first one: another dataset cannot have it
    other = dataset_digest([1])
    with pytest.raises(ValueError, match="already names another dataset"):
        ledger.register_dataset(other, name="npz:/data/b.npz")
    with pytest.raises(ValueError, match="already names another dataset"):
        ledger.set_budget(other, eps=1.0, delta=DELTA, name="npz:/data/a.npz")
    # refused before any write
    assert [d["digest"] for d in ledger.datasets()] == [ledger.resolve(DIGEST)]
    # a dataset registered without a name takes its first name later
    ledger.register_dataset(other)
    ledger.register_dataset(other, name="second")
    assert {d["name"]: d["aliases"] for d in ledger.datasets()}["second"] == []


def test_cli_show_and_list_by_first_and_later_names(tmp_path, capsys):
    led_path = str(tmp_path / "names.sqlite3")
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                DIGEST,
                "--eps",
                "3",
                "--delta",
                "1e-5",
                "--name",
                "digits",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    with Ledger(led_path) as led:
        led.register_dataset(DIGEST, name="npz:digits-copy.npz")  # what a later run does
    capsys.readouterr()
    for name in ("digits", "npz:digits-copy.npz"):
        assert cli_main(["budget", "show", "--dataset", name, "--ledger", led_path]) == 0
        out = capsys.readouterr().out
        stored = keyed_digest(read_key(tmp_path / "names.sqlite3"), DIGEST)
        assert f"digits  ({stored})" in out and "also named npz:digits-copy.npz" in out
    assert cli_main(["budget", "list", "--ledger", led_path]) == 0
    out = capsys.readouterr().out
    assert "digits" in out and "(also named npz:digits-copy.npz)" in out
    assert cli_main(["budget", "list", "--ledger", led_path, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "digits" and row["aliases"] == ["npz:digits-copy.npz"]


# ------------------------------------------------------------------------------ refusing overspend


def test_charge_refuses_before_overspending_and_records_nothing(ledger, event):
    expected = max_fitting(event, 2.0)
    assert expected >= 2
    for _ in range(expected):
        ledger.charge("toy", [event])
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge("toy", [event])
    message = str(info.value)
    assert "pate budget show --dataset toy" in message and str(ledger.path) in message
    s = ledger.summary("toy")
    assert s["events"] == expected and s["spent"] <= 2.0
    assert info.value.remaining == pytest.approx(2.0 - s["spent"])
    assert info.value.requested == pytest.approx(eps_of([event]))


def test_reservation_blocks_others_and_commit_within_it_always_fits(ledger, event):
    k = max_fitting(event, 2.0)
    big = ledger.reserve(
        "toy", orders=event.orders, rdp=(k - 1) * event.rdp_data_independent, run_id="big"
    )
    other = ledger.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent, run_id="one")
    with pytest.raises(BudgetExceededError, match="reserving for run late"):
        ledger.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent, run_id="late")
    assert len(ledger.reservations("toy")) == 2
    # Over its own reservation while another holds the rest: refused, nothing recorded, still live.
    with pytest.raises(BudgetExceededError):
        big.commit([event] * k)
    assert ledger.summary("toy")["events"] == 0 and not big.closed
    assert big.commit([event] * (k - 2)) and big.closed  # within: commits, the rest is released
    with pytest.raises(LedgerError, match="already closed"):
        big.commit([event])
    assert other.commit([event])
    s = ledger.summary("toy")
    assert s["events"] == k - 1 and s["reservations"] == []
    ledger.charge("toy", [event])  # the released part of the big reservation is free again
    assert ledger.summary("toy")["spent"] <= 2.0


def test_reservation_context_manager_releases_on_error(ledger, event):
    with pytest.raises(RuntimeError):
        with ledger.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent) as res:
            raise RuntimeError("run crashed politely")
    infos = ledger.reservations("toy", live_only=False)
    assert [r.status for r in infos] == ["released"] and infos[0].id == res.id
    assert any(a["action"] == "release-reservation" for a in ledger.audit_log("toy"))


def test_prior_rdp_is_what_others_spent_and_reserved(ledger, event):
    ledger.charge("toy", [event])
    mine = ledger.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent)
    theirs = ledger.reserve("toy", orders=event.orders, rdp=0.5 * event.rdp_data_independent)
    assert np.array_equal(mine.prior_rdp(), 1.5 * event.rdp_data_independent)
    assert np.array_equal(
        ledger.prior_rdp("toy", orders=event.orders, include_reservations=False),
        event.rdp_data_independent,
    )
    # Orders no event has get +inf; the shared ones the composed value.
    asked = np.array([2.0, 3.0, 7.77])
    prior = mine.prior_rdp(asked)
    idx = [list(event.orders).index(o) for o in (2.0, 3.0)]
    assert np.array_equal(prior[:2], 1.5 * event.rdp_data_independent[idx]) and prior[2] == np.inf
    theirs.release()
    assert np.array_equal(mine.prior_rdp(), event.rdp_data_independent)


def test_data_dependent_basis_is_explicit_and_allows_more(path, event):
    with Ledger(path) as led:
        led.set_budget(DIGEST, eps=2.0, delta=DELTA, name="dd", data_dependent=True)
        n = 0
        with pytest.raises(BudgetExceededError, match="data-dependent RDP"):
            while True:
                led.charge("dd", [event])
                n += 1
        assert n == max_fitting(event, 2.0, data_dependent=True) > max_fitting(event, 2.0)
        s = led.summary("dd")
        assert s["budget"]["basis"] == "data-dependent" and s["spent"] == s["spent_data_dependent"]


# ------------------------------------------------------------------------------ order grids


def test_different_grids_compose_on_shared_orders(ledger, event):
    orders_a = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    orders_b = np.array([3.0, 4.0, 16.0, 64.0])
    a = gnmax_event(VOTES, sigma=40.0, orders=orders_a)
    b = gnmax_event(VOTES, sigma=40.0, orders=orders_b)
    ledger.charge("toy", [a, b])
    shared = np.array([4.0, 16.0])
    assert ledger.summary("toy")["spent"] == eps_of([a, b], orders=shared)
    assert ledger.summary("toy")["orders"]["count"] == 2
    # Never below the composition on either full grid.
    assert ledger.summary("toy")["spent"] >= eps_of([a, a], orders=orders_a)
    disjoint = gnmax_event(VOTES, sigma=40.0, orders=np.array([5.0, 6.0]))
    with pytest.raises(LedgerError, match="share no Renyi order"):
        ledger.charge("toy", [disjoint])
    assert ledger.summary("toy")["events"] == 2


# ------------------------------------------------------------------------------ Sage blocks


def test_blocks_give_fresh_budget_and_loss_is_max_over_blocks(ledger, event):
    ledger.add_block("toy", "2025-01")
    k = max_fitting(event, 2.0)
    for _ in range(k):
        ledger.charge("toy", [event], blocks=["2025-01"])
    with pytest.raises(BudgetExceededError, match="block '2025-01'"):
        ledger.charge("toy", [event])  # None = every block, and 2025-01 is full
    ledger.add_block("toy", "2025-02")
    ledger.charge("toy", [event], blocks=["2025-02"])  # new records, fresh budget
    s = ledger.summary("toy")
    by_block = {b["block"]: b for b in s["blocks"]}
    assert by_block["2025-01"]["events"] == k and by_block["2025-02"]["events"] == 1
    assert by_block["2025-02"]["spent"] == eps_of([event])
    assert s["spent"] == max(b["spent"] for b in s["blocks"]) == eps_of([event] * k)
    assert ledger.history("toy")[-1]["cumulative_eps"] == pytest.approx(s["spent"], rel=1e-12)
    with pytest.raises(ValueError, match="not registered"):
        ledger.charge("toy", [event], blocks=["2030-01"])
    with pytest.raises(ValueError, match="already registered"):
        ledger.add_block("toy", "2025-02")


def test_events_before_any_block_count_in_every_block(ledger, event):
    ledger.charge("toy", [event])  # no blocks yet: which records it used is unknown
    ledger.add_block("toy", "later")
    s = ledger.summary("toy")
    assert s["blocks"][0]["spent"] == eps_of([event])
    np.testing.assert_array_equal(
        ledger.prior_rdp("toy", orders=event.orders, blocks=["later"]), event.rdp_data_independent
    )


# ------------------------------------------------------------------------------ crashed runs


def _run_child(path, code):
    script = f"""
import numpy as np, os
from pate.analysis import gnmax_event
from pate.ledger import Ledger
led = Ledger({str(path)!r})
ev = gnmax_event(np.tile(np.array([[200, 30, 20]]), (30, 1)), sigma=40.0)
{code}
os._exit(0)  # no cleanup: like a crash as far as the reservation is concerned
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_dead_process_reservation_is_reconciled(ledger, path, event):
    k = max_fitting(event, 2.0)
    _run_child(path, f"led.reserve('toy', orders=ev.orders, rdp={k} * ev.rdp_data_independent)")
    infos = ledger.reservations("toy", live_only=False)
    assert [i.status for i in infos] == ["stale"]  # shown as stale, not counted
    assert ledger.summary("toy")["spent_and_reserved"] == 0.0
    ledger.charge("toy", [event])  # the next writer reconciles, then the budget is free
    assert [i.status for i in ledger.reservations("toy", live_only=False)] == ["expired"]
    assert any(
        a["action"] == "expire-reservation" and a["detail"]["reason"] == "process gone"
        for a in ledger.audit_log("toy")
    )


def test_live_reservation_of_other_host_holds_until_lease_expires(ledger, path, event):
    res = ledger.reserve(
        "toy", orders=event.orders, rdp=event.rdp_data_independent, lease_seconds=3600
    )
    conn = sqlite3.connect(path)
    conn.execute("UPDATE reservations SET hostname='elsewhere', pid=1 WHERE id=?", (res.id,))
    conn.commit()
    assert ledger.reconcile() == []  # lease still running
    conn.execute("UPDATE reservations SET heartbeat=heartbeat-7200 WHERE id=?", (res.id,))
    conn.commit()
    conn.close()
    assert ledger.reconcile() == [res.id]
    assert ledger.reservations("toy") == []


# ------------------------------------------------------------------------------ damaged / locked files


def test_existing_non_ledger_files_are_never_touched(tmp_path):
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database at all" * 100)
    other = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE patients (id INTEGER)")
    conn.execute("INSERT INTO patients VALUES (1)")
    conn.commit()
    conn.close()
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    for target, text in (
        (garbage, "unreadable|not a pate-learn ledger"),
        (other, "not a pate-learn ledger"),
        (empty, "not a pate-learn ledger"),
    ):
        before = target.read_bytes()
        with pytest.raises(LedgerError, match=text):
            Ledger(target)
        assert target.read_bytes() == before


def test_newer_schema_is_refused_untouched(ledger, path):
    ledger.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="newer pate-learn"):
        Ledger(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_an_older_schema_is_refused_with_its_version_named_never_converted(ledger, path, version):
    """Version 4 is the first released format: an older ledger (a pre-release pate-learn's) is
    refused with the version found and the one read, and the way on (a new ledger); nothing in
    the file or its key file changes."""
    ledger.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={version}")
    conn.commit()
    conn.close()
    before, key = path.read_bytes(), (path.parent / (path.name + ".key")).read_bytes()
    with pytest.raises(LedgerError) as refused:
        Ledger(path)
    message = str(refused.value)
    assert f"schema version {version}," in message and "reads schema version 4 only" in message
    assert "start a new ledger" in message
    assert path.read_bytes() == before
    assert (path.parent / (path.name + ".key")).read_bytes() == key


def test_missing_ledger_is_not_created_when_reading(tmp_path):
    target = tmp_path / "sub" / "none.sqlite3"
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger(target, create=False)
    assert not target.exists() and not target.parent.exists()


def test_corrupted_page_gives_ledger_error_and_keeps_file(ledger, path, event):
    for _ in range(3):
        ledger.charge("toy", [event])
    ledger.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    probe = sqlite3.connect(path)
    page = probe.execute("PRAGMA page_size").fetchone()[0]
    probe.close()
    assert len(data) > 2 * page
    data[page:] = (
        np.random.default_rng(0).integers(0, 256, len(data) - page, dtype=np.uint8).tobytes()
    )
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match="unreadable|not a pate-learn"):
        with Ledger(path) as led:
            led.summary("toy")
            led.history("toy")
    assert path.read_bytes() == bytes(data)


def test_altered_event_fails_its_checksum(ledger, path, event):
    ledger.charge("toy", [event])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET payload=replace(payload, '\"queries\":30', '\"queries\":3')")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="fails its checksum"):
        ledger.summary("toy")


def test_locked_ledger_gives_clear_error_and_no_data_loss(ledger, path, event):
    ledger.charge("toy", [event])
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with Ledger(path, timeout=0.2) as other:
            with pytest.raises(LedgerError, match="locked by another process"):
                other.charge("toy", [event])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert ledger.summary("toy")["events"] == 1
    ledger.charge("toy", [event])
    assert ledger.summary("toy")["events"] == 2


# ------------------------------------------------------------------------------ input validation


def test_bad_input_is_refused_before_any_write(ledger, event):
    with pytest.raises(ValueError, match="eps must be > 0"):
        ledger.set_budget("toy", eps=0.0, delta=DELTA)
    with pytest.raises(ValueError, match="delta must lie strictly between"):
        ledger.set_budget("toy", eps=1.0, delta=1.5)
    with pytest.raises(TypeError, match=r"events\[1\]"):
        ledger.charge("toy", [event, "not an event"])
    with pytest.raises(ValueError, match="one value per order"):
        ledger.reserve("toy", orders=[2.0, 3.0], rdp=[1.0])
    with pytest.raises(ValueError, match="must not repeat"):
        ledger.reserve("toy", orders=[2.0, 2.0], rdp=[1.0, 1.0])
    with pytest.raises(ValueError, match=">= 0"):
        ledger.reserve("toy", orders=[2.0], rdp=[-1.0])
    with pytest.raises(ValueError, match="64-character"):
        ledger.register_dataset("abc")
    assert ledger.summary("toy")["events"] == 0
    assert ledger.reservations("toy", live_only=False) == []
    assert ledger.budget("toy").eps == 2.0


# ------------------------------------------------------------------------------ CLI


def test_cli_set_show_history_and_errors(tmp_path, capsys, event):
    led_path = str(tmp_path / "cli.sqlite3")
    assert cli_main(["budget", "show", "--dataset", "x", "--ledger", led_path]) == 3
    assert "no ledger at" in capsys.readouterr().err
    assert not os.path.exists(led_path)
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                DIGEST,
                "--eps",
                "3",
                "--delta",
                "1e-5",
                "--name",
                "hospital",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    assert (
        cli_main(
            [
                "budget",
                "add-block",
                "--dataset",
                "hospital",
                "--block",
                "2025-01",
                "--ledger",
                led_path,
            ]
        )
        == 0
    )
    with Ledger(led_path) as led:
        led.charge("hospital", [event], run_id="run-x")
    capsys.readouterr()
    assert (
        cli_main(["budget", "show", "--dataset", "hospital", "--ledger", led_path, "--json"]) == 0
    )
    shown = json.loads(capsys.readouterr().out)
    stored = keyed_digest(read_key(tmp_path / "cli.sqlite3"), DIGEST)
    assert shown["dataset"] == stored and shown["spent"] == eps_of([event])
    assert shown["budget"] == {
        "eps": 3.0,
        "delta": 1e-5,
        "basis": "data-independent",
        "conversion": "classic",
        "relation": "add-remove",
    }
    assert shown["blocks"][0]["block"] == "2025-01"
    assert cli_main(["budget", "show", "--dataset", stored[:12], "--ledger", led_path]) == 0
    text = capsys.readouterr().out
    assert "remaining" in text and "2025-01" in text and "not differentially private" in text
    assert (
        cli_main(["budget", "history", "--dataset", "hospital", "--ledger", led_path, "--json"])
        == 0
    )
    hist = json.loads(capsys.readouterr().out)
    assert [e["run_id"] for e in hist["events"]] == ["run-x"]
    assert [a["action"] for a in hist["audit"]] == ["register", "set-budget", "add-block"]
    assert cli_main(["budget", "history", "--dataset", "hospital", "--ledger", led_path]) == 0
    assert "run-x" in capsys.readouterr().out
    assert (
        cli_main(
            [
                "budget",
                "set",
                "--dataset",
                "hospital",
                "--eps",
                "-1",
                "--delta",
                "1e-5",
                "--ledger",
                led_path,
            ]
        )
        == 2
    )
    assert "eps must be > 0" in capsys.readouterr().err
    assert cli_main(["budget", "list", "--ledger", led_path]) == 0
    assert "hospital" in capsys.readouterr().out


def test_cli_uses_env_ledger_and_digest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATE_LEDGER", str(tmp_path / "env.sqlite3"))
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(str(i) for i in range(1000)))
    assert cli_main(["budget", "digest", "--ids", str(ids)]) == 0
    assert capsys.readouterr().out.strip() == DIGEST
    assert cli_main(["budget", "set", "--dataset", DIGEST, "--eps", "1", "--delta", "1e-6"]) == 0
    assert (tmp_path / "env.sqlite3").exists()
    capsys.readouterr()
    assert cli_main(["budget", "show", "--dataset", DIGEST, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ledger"] == str(tmp_path / "env.sqlite3") and shown["budget"]["delta"] == 1e-6


def test_disjoint_grids_are_refused_even_without_a_budget(path):
    with Ledger(path) as led:
        led.register_dataset(DIGEST, name="open")
        led.charge("open", [gnmax_event(VOTES, sigma=40.0, orders=np.array([2.0, 3.0]))])
        with pytest.raises(LedgerError, match="share no Renyi order"):
            led.charge("open", [gnmax_event(VOTES, sigma=40.0, orders=np.array([5.0]))])
        assert led.summary("open")["events"] == 1


def test_expired_reservation_can_still_commit_only_what_fits(ledger, path, event):
    """Liveness is advisory: even if a live run's reservation were wrongly reclaimed, its commit
    re-checks the budget, so nothing can be overspent."""
    k = max_fitting(event, 2.0)
    res = ledger.reserve("toy", orders=event.orders, rdp=k * event.rdp_data_independent)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE reservations SET status='expired' WHERE id=?", (res.id,))
    conn.commit()
    conn.close()
    ledger.charge("toy", [event])  # someone else takes part of the budget meanwhile
    with pytest.raises(BudgetExceededError):
        res.commit([event] * k)
    assert res.commit([event] * (k - 1))
    assert ledger.summary("toy")["spent"] <= 2.0
