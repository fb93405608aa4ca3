"""Issue #48, case 3: nothing published names the private records by a hash of them, and the
ledger file alone is no membership oracle.

Before: the report said "spent on dataset fbe224ef..." (the sha256 over every private record
key: digest(D) != digest(D minus one record), a membership test for whoever knows the other
records), ``pate.fit`` named in-memory data ``memory:<16 hex of that digest>``, and the ledger
stored an unsalted hash of every record. Now the report names the dataset by the user's name,
the ledger keys every record key and dataset id with a per-ledger secret (``<ledger>.key``,
0600), and an old ledger is converted once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import stat

import numpy as np
import pytest

from pate.cli import main
from pate.core.errors import LedgerError
from pate.ledger import Ledger, dataset_identity, record_keys
from pate.ledger.identity import distinct_keys
from pate.ledger.keying import key_path, keyed_digest, read_key
from pate.run.memory_data import MEMORY_DATA_NAME, memory_data
from pate.teachers.data import load_pate_data

DELTA = 1e-5
#: digits' declared label set (the label set is declared, never read from the private labels)
DIGITS = [str(d) for d in range(10)]
PUBLISHED = ("report.md", "report.html", "report.json")


def _hex_runs(text: str) -> set[str]:
    """Every word of 8 or more hex digits with a letter in ``text`` (not a number, not a part of
    a hyphenated name such as the run id, nor inside the base64 of an embedded image, where
    such runs occur by chance), lower-cased."""
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "", text)
    word = r"(?<![0-9a-zA-Z.\-_])[0-9a-fA-F]{8,}(?![0-9a-zA-Z\-_])"
    runs = {m.lower() for m in re.findall(word, text)}
    return {run for run in runs if re.search("[a-f]", run)}


def _stored_values(path) -> list[bytes]:
    """Every value of every table of the SQLite file at ``path``, as bytes."""
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = []
    for table in tables:
        for row in conn.execute(f"SELECT * FROM {table}"):
            for value in row:
                if isinstance(value, bytes):
                    out.append(value)
                elif value is not None:
                    out.append(str(value).encode())
    conn.close()
    return out


@pytest.fixture(scope="module")
def digits_private():
    private = load_pate_data("digits").private
    return private.x.reshape(len(private.x), -1), private.y


def test_the_report_of_a_run_names_the_dataset_and_holds_no_digest_of_its_records(
    tmp_path, small_digits, digits_private, capsys, caplog
):
    x, y = digits_private
    caplog.set_level(logging.INFO)
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = tmp_path / "run"
    config = small_digits(tmp_path)
    rc = main(
        ["run", "--config", str(config), "--run-dir", str(run_dir), "--ledger", str(ledger)]
        + ["--no-progress"]
    )
    assert rc == 0
    identity = dataset_identity(x, y)
    with Ledger(ledger) as led:
        stored = led.dataset_id(identity)
        (row,) = led.datasets()
    assert row["digest"] == stored != identity.digest and row["name"] == "digits"
    digests = {identity.digest, stored}
    report = ""
    for name in PUBLISHED:
        path = run_dir / name
        assert path.is_file(), name
        report += path.read_text()
        found = _hex_runs(path.read_text())
        for digest in digests:  # the whole digest, its 16-hex and any shorter prefix shown
            assert not any(digest.startswith(run) or run in digest for run in found), name
        assert not any(len(run) >= 12 for run in found), (name, found)  # no digest at all
    assert "spent on dataset digits" in (run_dir / "report.md").read_text()
    captured = capsys.readouterr()
    said = _hex_runs(captured.out + captured.err + caplog.text)  # what a user pastes
    for digest in digests:
        assert not any(digest.startswith(run) or run in digest for run in said)
    public = json.loads((run_dir / "report.json").read_text())
    # the publishable cut keeps the ledger's name field (the user's name; the ledger's own key
    # for the dataset is not on the allow-list)
    assert public["privacy"]["ledger"]["name"] == "digits"
    assert "fbe224ef" not in report


def test_pate_fit_names_in_memory_data_by_the_users_name_never_by_the_records(
    digits_private,
):
    x, y = digits_private
    public = np.zeros((10, x.shape[1]), dtype=np.float32)
    evaluation = (x[:20], y[:20])
    names = set()
    for private in ((x, y), (x[:-1], y[:-1]), (x[::-1] + 1.0, y[::-1])):
        data, identity = memory_data(private, public, evaluation, DIGITS)
        assert identity.digest[:8] not in data.name
        names.add(data.name)
    assert names == {f"memory:{MEMORY_DATA_NAME}"}  # the same name whatever the records
    data, _ = memory_data((x, y), public, evaluation, DIGITS, "hospital-a")
    assert data.name == "memory:hospital-a"


def test_the_ledger_file_stores_no_unkeyed_record_key_and_its_key_is_owner_only(
    tmp_path, digits_private
):
    x, y = digits_private
    path = tmp_path / "ledger.sqlite3"
    identity = dataset_identity(x, y)
    with Ledger(path) as led:
        led.register_identity(identity, name="digits")
        led.set_budget("digits", eps=2.0, delta=DELTA)
    keys = distinct_keys(record_keys(x, y))
    values = _stored_values(path)
    assert not set(keys) & set(values)  # no record key as a stored value
    text = b"\n".join(values)
    assert not any(key in text for key in keys)  # nor inside one
    assert identity.digest.encode() not in text and identity.digest[:16].encode() not in text
    raw = path.read_bytes()
    assert not any(key in raw for key in keys)  # nor anywhere in the file
    mode = os.stat(key_path(path)).st_mode
    assert stat.S_IMODE(mode) == 0o600 and key_path(path).stat().st_size == 32
    # the keyed id, and the records found again through the key
    secret = read_key(path)
    with Ledger(path) as led:
        assert led.resolve("digits") == keyed_digest(secret, identity.digest)
        over = led.overlapping(dataset_identity(x[:10], y[:10]))
        assert [(o["name"], o["shared_records"]) for o in over] == [("digits", 10)]


def test_a_ledger_without_its_key_file_is_refused_never_rekeyed(tmp_path, digits_private):
    x, y = digits_private
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x, y), name="digits")
    key_path(path).unlink()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="key file .* is missing"):
        Ledger(path)
    assert not key_path(path).exists() and path.read_bytes() == before
    key_path(path).write_bytes(os.urandom(32))  # another key: refused too
    with pytest.raises(LedgerError, match="is not the key of the ledger"):
        Ledger(path)


def test_an_old_unkeyed_ledger_is_refused_with_its_version_named_never_keyed(
    tmp_path, digits_private
):
    x, y = digits_private
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x, y), name="digits")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=3")
    conn.commit()
    conn.close()
    key_path(path).unlink()  # schema 3 had no key file
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"schema version 3, .*reads schema version 4 only"):
        Ledger(path)
    assert not key_path(path).exists() and path.read_bytes() == before
