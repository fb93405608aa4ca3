"""pate.core.keys: a run's secret keys from OS entropy, kept owner-only, or derived from a seed."""

from __future__ import annotations

import json
import stat

import pytest

from pate.analysis.errors import CorruptFileError
from pate.core import keys as run_keys


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_stored_owner_only_and_read_back(tmp_path):
    keys = {"partition": run_keys.fresh_key(), "split": run_keys.fresh_key()}
    path = tmp_path / run_keys.KEYS_FILE
    assert run_keys.read_keys(path) == {}  # none drawn yet
    run_keys.write_keys(path, keys)
    assert keys["partition"] != keys["split"] and len(keys["split"]) == run_keys.KEY_BYTES
    assert run_keys.read_keys(path) == keys  # a resume reads them back
    assert mode(path) == 0o600 and mode(tmp_path / run_keys.PRIVATE_DIR) == 0o700


def test_a_seeded_key_is_derived_from_the_seed_and_the_name():
    key = run_keys.seeded_key(7, "partition")
    assert key == run_keys.seeded_key(7, "partition") != run_keys.seeded_key(8, "partition")
    assert key != run_keys.seeded_key(7, "split") and len(key) == run_keys.KEY_BYTES


def test_bad_names_and_tampered_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="a key's name must be a word"):
        run_keys.seeded_key(7, "../x")
    path = tmp_path / run_keys.KEYS_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"partition": "abc"}))
    with pytest.raises(CorruptFileError, match="32-byte hex keys"):
        run_keys.read_keys(path)


def test_seal_makes_a_folder_owner_only(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "a" / "b" / "f").chmod(0o644)
    run_keys.seal(tmp_path / "a")
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    assert mode(tmp_path / "a" / "b" / "f") == 0o600
