"""Datasets: resolving a name or digest, registering by digest or with records, the links
between datasets that share records (Sage-style, conservative) and each dataset's budget row.

A dataset registered with its records (:func:`add_records`) is linked to every registered
dataset sharing at least one record key (table ``links``, with the number of shared distinct
records); :func:`add_link` adds a link by hand (shared count unknown). Links are never removed.
Every function runs inside the caller's transaction (:meth:`pate.ledger.ledger_file.LedgerFile.transaction`).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from pate.core.errors import LedgerError
from pate.ledger.audit import write_audit
from pate.ledger.budget import Budget
from pate.ledger.formats import utc_now
from pate.ledger.identity import HEX_DIGITS, KEY_VERSION, distinct_keys, is_digest
from pate.ledger.keying import KeyedIdentity, keyed_digest
from pate.ledger.names import add_name, aliases, first_name, name_owner


def stored_id(conn: sqlite3.Connection, digest: str, secret: bytes) -> str:
    """The id under which the ledger keeps the dataset ``digest`` (64 hex): ``digest`` itself
    when it is a stored id (as ``pate budget list`` shows them), else its keyed form
    (:func:`pate.ledger.keying.keyed_digest`: a digest of ids or records given by hand)."""
    if conn.execute("SELECT 1 FROM datasets WHERE digest=?", (digest,)).fetchone():
        return digest
    return keyed_digest(secret, digest)


def resolve(conn: sqlite3.Connection, dataset: Any, path: Any, secret: bytes) -> str:
    """The id of ``dataset`` given as a stored id, a name, a digest (of ids or records: keyed
    with the ledger's ``secret``) or a unique prefix (>= 8) of a stored id, in the ledger at
    ``path``."""
    if not isinstance(dataset, str) or not dataset:
        raise TypeError(f"dataset must be a digest or a name (a non-empty string), got {dataset!r}")
    key = dataset.strip()
    keyed = keyed_digest(secret, key.lower()) if is_digest(key.lower()) else None
    row = (
        conn.execute(
            "SELECT digest FROM datasets WHERE digest=? OR name=?", (key.lower(), key)
        ).fetchone()
        or conn.execute("SELECT dataset FROM dataset_names WHERE name=?", (key,)).fetchone()
        or conn.execute("SELECT digest FROM datasets WHERE digest=?", (keyed,)).fetchone()
    )
    if row:
        found: str = row[0]
        return found
    low = key.lower()
    if len(low) >= 8 and set(low) <= HEX_DIGITS:
        rows = conn.execute(
            "SELECT digest FROM datasets WHERE digest LIKE ?", (low + "%",)
        ).fetchall()
        if len(rows) == 1:
            only: str = rows[0][0]
            return only
        if len(rows) > 1:
            raise ValueError(
                f"dataset prefix {dataset!r} matches {len(rows)} datasets; "
                "give more digits of the digest"
            )
    raise LedgerError(
        f"dataset {dataset!r} is not in the ledger at {path}; register it with "
        f"`pate budget set --dataset DIGEST --eps E --delta D --name NAME --ledger "
        f"{path}`, DIGEST from `pate budget digest --config CONFIG` (list "
        "known ones with `pate budget list`)"
    )


def register(conn: sqlite3.Connection, digest: str, name: str | None) -> None:
    """Add ``digest`` (with ``name``), or give a registered dataset ``name``: its first name
    if it has none, else one more of its names (the first is kept, :func:`names.add_name`)."""
    row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
    owner = None
    if name is not None:
        owner = name_owner(conn, name)
        if owner is not None and owner != digest:
            raise ValueError(
                f"name {name!r} already names another dataset (other records); choose another name"
            )
        if is_digest(name.lower()):
            raise ValueError(f"name {name!r} looks like a digest; choose a readable name")
    if row is None:
        conn.execute(
            "INSERT INTO datasets (digest, name, created_utc) VALUES (?, ?, ?)",
            (digest, name, utc_now()),
        )
        write_audit(conn, digest, "register", {"name": name})
    elif name is not None and owner is None:
        if row[0] is None:
            conn.execute("UPDATE datasets SET name=? WHERE digest=?", (name, digest))
            write_audit(conn, digest, "name", {"name": name})
        else:
            add_name(conn, digest, name, first=row[0])


def add_records(conn: sqlite3.Connection, identity: KeyedIdentity) -> list[tuple[str, int]]:
    """Store the record keys of the registered dataset ``identity`` (unless stored already) and
    link it to every registered dataset sharing a record with it; returns those datasets, each
    with its number of shared distinct records."""
    if conn.execute("SELECT 1 FROM identities WHERE dataset=?", (identity.digest,)).fetchone():
        return []
    keys = distinct_keys(identity.record_keys)
    cur = conn.execute(
        "INSERT INTO identities (dataset, num_records, distinct_records, "
        "created_utc, key_version) VALUES (?, ?, ?, ?, ?)",
        (identity.digest, identity.num_records, len(keys), utc_now(), KEY_VERSION),
    )
    iid = cur.lastrowid
    if iid is None:  # sqlite3 sets it after every INSERT
        raise LedgerError(f"the ledger did not return the id of the identity of {identity.digest}")
    conn.executemany("INSERT INTO records (key, identity) VALUES (?, ?)", ((k, iid) for k in keys))
    shared = conn.execute(
        "SELECT i.dataset, count(*) FROM records r1 JOIN records r2 "
        "ON r2.key = r1.key AND r2.identity <> r1.identity "
        "JOIN identities i ON i.id = r2.identity WHERE r1.identity = ? "
        "GROUP BY i.dataset ORDER BY i.dataset",
        (iid,),
    ).fetchall()
    now = utc_now()
    for other, count in shared:
        a, b = sorted((identity.digest, other))
        conn.execute(
            "INSERT OR REPLACE INTO links (a, b, shared, created_utc) VALUES (?, ?, ?, ?)",
            (a, b, int(count), now),
        )
        write_audit(conn, identity.digest, "link", {"dataset": other, "shared_records": count})
        write_audit(conn, other, "link", {"dataset": identity.digest, "shared_records": count})
    write_audit(
        conn,
        identity.digest,
        "register-records",
        {
            "num_records": identity.num_records,
            "distinct_records": len(keys),
            "linked": [o for o, _ in shared],
        },
    )
    return shared


def overlapping(conn: sqlite3.Connection, identity: KeyedIdentity) -> list[dict[str, Any]]:
    """Registered datasets sharing records with ``identity`` (:meth:`Ledger.overlapping`)."""
    keys = distinct_keys(identity.record_keys)
    counts = _overlap_counts(conn, identity, keys)
    out = []
    for ds in sorted(counts, key=lambda d: (d != identity.digest, -counts[d], d)):
        budget = budget_of(conn, ds)
        row = conn.execute("SELECT num_records FROM identities WHERE dataset=?", (ds,)).fetchone()
        out.append(
            {
                "dataset": ds,
                "name": first_name(conn, ds),
                "same": ds == identity.digest,
                "shared_records": len(keys) if ds == identity.digest else counts[ds],
                "num_records": None if row is None else int(row[0]),
                "budget": None if budget is None else dataclasses.asdict(budget),
            }
        )
    return out


def _overlap_counts(
    conn: sqlite3.Connection, identity: KeyedIdentity, keys: list[bytes]
) -> dict[str, int]:
    """Shared distinct records of every registered dataset holding one of ``keys`` (the
    distinct keys of ``identity``); 0 for ``identity`` itself if registered."""
    counts: dict[str, int] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        for ds, count in conn.execute(
            "SELECT i.dataset, count(*) FROM records r JOIN identities i "
            "ON i.id = r.identity WHERE r.key IN ("
            + ",".join("?" * len(chunk))
            + ") GROUP BY i.dataset",
            chunk,
        ):
            counts[ds] = counts.get(ds, 0) + int(count)
    if conn.execute("SELECT 1 FROM datasets WHERE digest=?", (identity.digest,)).fetchone():
        counts.setdefault(identity.digest, 0)
    return counts


def linked_pairs(conn: sqlite3.Connection, digest: str) -> list[tuple[str, int | None]]:
    """(digest, shared distinct records or None when linked by hand) of every dataset linked to
    ``digest``, sorted."""
    return sorted(
        conn.execute(
            "SELECT b, shared FROM links WHERE a=? UNION ALL SELECT a, shared FROM links WHERE b=?",
            (digest, digest),
        ).fetchall()
    )


def linked_datasets(conn: sqlite3.Connection, digest: str) -> list[dict[str, Any]]:
    """The datasets linked to ``digest``: digest, name, shared distinct records and budget."""
    out = []
    for other, shared in linked_pairs(conn, digest):
        budget = budget_of(conn, other)
        out.append(
            {
                "dataset": other,
                "name": first_name(conn, other),
                "shared_records": shared,
                "budget": None if budget is None else dataclasses.asdict(budget),
            }
        )
    return out


def add_link(
    conn: sqlite3.Connection, pair: tuple[str, str], given: tuple[str, str], reason: str | None
) -> None:
    """Link the datasets ``pair`` (digests, resolved from the ``given`` names) by hand."""
    a, b = pair
    if a == b:
        raise ValueError(
            f"dataset {given[0]!r} and other {given[1]!r} are the same dataset "
            f"({a[:12]}...); link two different datasets"
        )
    lo, hi = sorted((a, b))
    if conn.execute("SELECT 1 FROM links WHERE a=? AND b=?", (lo, hi)).fetchone():
        return
    conn.execute(
        "INSERT INTO links (a, b, shared, created_utc) VALUES (?, ?, NULL, ?)", (lo, hi, utc_now())
    )
    for x, y in ((a, b), (b, a)):
        write_audit(
            conn,
            x,
            "link",
            {"dataset": y, "shared_records": None, "by_hand": True, "reason": reason},
        )


def list_datasets(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every dataset (:meth:`pate.ledger.Ledger.datasets`)."""
    rows = conn.execute(
        "SELECT d.digest, d.name, d.budget_eps, d.budget_delta, d.basis, d.created_utc, "
        "(SELECT count(*) FROM events e WHERE e.dataset=d.digest), "
        "(SELECT num_records FROM identities i WHERE i.dataset=d.digest), d.conversion "
        "FROM datasets d ORDER BY d.created_utc"
    ).fetchall()
    links = {r[0]: [d for d, _ in linked_pairs(conn, r[0])] for r in rows}
    later = {r[0]: aliases(conn, r[0]) for r in rows}
    return [
        {
            "digest": r[0],
            "name": r[1],
            "aliases": later[r[0]],
            "budget_eps": r[2],
            "budget_delta": r[3],
            "basis": r[4],
            "conversion": r[8],
            "created_utc": r[5],
            "events": r[6],
            "records": r[7],
            "linked": links[r[0]],
        }
        for r in rows
    ]


def budget_of(conn: sqlite3.Connection, digest: str) -> Budget | None:
    """The budget of ``digest``; None when none was set."""
    row = conn.execute(
        "SELECT budget_eps, budget_delta, basis, conversion, relation FROM datasets WHERE digest=?",
        (digest,),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return Budget(float(row[0]), float(row[1]), row[2], row[3], row[4])


def label(conn: sqlite3.Connection, digest: str) -> str:
    """What messages call ``digest``: its first name, else its first 12 hex digits."""
    row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
    return row[0] if row and row[0] else digest[:12]
