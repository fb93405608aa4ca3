"""pate.ledger.keying: the ledger's secret, keyed record keys and dataset ids (the file holds no
unkeyed digest or record key)."""

from __future__ import annotations

import os
import re
import sqlite3
import stat

import numpy as np
import pytest

from pate.analysis import gnmax_event
from pate.core.errors import LedgerError
from pate.ledger import Ledger, dataset_digest, dataset_identity
from pate.ledger.identity import distinct_keys
from pate.ledger.keying import KEY_BYTES, key_path, keyed_digest, keyed_keys, read_key

DELTA = 1e-5


@pytest.fixture
def event():
    return gnmax_event(np.tile([[30, 5, 5]], (20, 1)), sigma=4.0)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(120, 6)).astype(np.float32), rng.integers(0, 3, 120)


def test_a_new_ledger_has_an_owner_only_key_made_before_it(tmp_path):
    old = os.umask(0)  # even with a permissive umask
    try:
        path = tmp_path / "sub" / "ledger.sqlite3"
        Ledger(path).close()
    finally:
        os.umask(old)
    key = key_path(path)
    assert key.name == "ledger.sqlite3.key" and key.stat().st_size == KEY_BYTES
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    other = tmp_path / "other.sqlite3"
    Ledger(other).close()
    assert read_key(other) != read_key(path)  # one secret per ledger
    before = key.read_bytes()
    Ledger(path).close()  # opening again keeps the key
    assert key.read_bytes() == before


def test_keyed_values_depend_on_the_secret_only_through_hmac():
    a, b = b"a" * KEY_BYTES, b"b" * KEY_BYTES
    digest = dataset_digest(np.arange(5))
    assert keyed_digest(a, digest) != keyed_digest(b, digest) != digest
    assert re.fullmatch("[0-9a-f]{64}", keyed_digest(a, digest))
    keys = [bytes(16), b"\x01" * 16]
    assert keyed_keys(a, keys) != keyed_keys(b, keys)
    assert all(len(k) == 16 for k in keyed_keys(a, keys)) and keyed_keys(a, keys)[0] != keys[0]


def test_the_file_holds_no_unkeyed_digest_or_record_key(tmp_path, data, event):
    x, y = data
    path = tmp_path / "ledger.sqlite3"
    whole, part = dataset_identity(x, y), dataset_identity(x[:50], y[:50])
    by_ids = dataset_digest(np.arange(9))
    with Ledger(path) as led:
        led.register_identity(whole, name="whole")
        led.register_identity(part, name="part")
        led.register_dataset(whole.digest, name="whole-too")  # a later name
        led.set_budget("whole", eps=30.0, delta=DELTA)
        led.set_budget(by_ids, eps=5.0, delta=DELTA, name="by-ids")
        led.add_block("whole", "b1")
        led.charge("part", [event], run_id="r1")
        led.reserve("whole", orders=event.orders, rdp=event.rdp_data_independent)
        assert led.resolve("whole-too") == led.resolve("whole") == led.resolve(whole.digest)
        assert led.resolve(by_ids) == led.resolve("by-ids")  # a digest given by hand: keyed
        assert led.resolve("whole") == keyed_digest(read_key(path), whole.digest)
    text = path.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite3-*"))
    conn = sqlite3.connect(path)
    stored = [bytes(k) for (k,) in conn.execute("SELECT key FROM records")]
    audit = " ".join(d for (d,) in conn.execute("SELECT detail FROM audit"))
    conn.close()
    for plain in (whole.digest, part.digest, by_ids):
        assert plain not in audit and plain.encode() not in text
    assert not set(distinct_keys(whole.record_keys)) & set(stored)


def test_a_key_file_that_is_not_a_key_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    key_path(path).write_bytes(b"short")
    with pytest.raises(LedgerError, match="not a ledger key file"):
        Ledger(path)
