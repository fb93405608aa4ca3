"""The datasets of a ledger: resolving one by name, id or digest; registering one by digest or
with its records; its names, its links to the datasets it shares records with, its Sage blocks
and its budget row (:class:`Budget`).

A dataset keeps the FIRST name it was registered with (``datasets.name``); its later names live
in table ``dataset_names``, and any of its names resolves it (a name names one dataset only). A
dataset registered with its records (:func:`add_records`) is linked to every registered dataset
sharing at least one record key (table ``links``, with the number of shared distinct records;
Sage-style, conservative); :func:`add_link` adds a link by hand (shared count unknown). Links are
never removed. Blocks (Sage: Lecuyer et al. 2019): an event is charged only to the blocks its
teachers were trained on, each block composes on its own and a dataset's loss is the max over its
blocks, so a new block brings fresh budget; events recorded before any block existed count in
every block. Every function runs inside the caller's transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.validation import check_choice
from pate.core.errors import LedgerError
from pate.ledger.identity import HEX_DIGITS, KEY_VERSION, distinct_keys, is_digest
from pate.ledger.keying import KeyedIdentity, keyed_digest
from pate.ledger.ledger_file import LedgerConnection, utc_now, write_audit

#: The one neighbouring relation a budget and every event composed against it are stated for.
LEDGER_RELATION = "add-remove"
BASES = ("data-independent", "data-dependent")
CONVERSIONS = ("classic", "tight")


@dataclasses.dataclass(frozen=True)
class Budget:
    """The privacy budget of one dataset: total ``eps`` at ``delta``, judged on ``basis`` RDP
    converted to (eps, delta) with ``conversion`` (``"classic"`` or ``"tight"``), a promise for
    ``relation`` (the only one: add/remove)."""

    eps: float
    delta: float
    basis: str = "data-independent"
    conversion: str = "classic"
    relation: str = LEDGER_RELATION

    def __post_init__(self) -> None:
        check_choice(self.conversion, "conversion", CONVERSIONS)
        check_choice(self.relation, "relation", (LEDGER_RELATION,))

    @property
    def data_dependent(self) -> bool:
        return self.basis == "data-dependent"


def budget_of(conn: LedgerConnection, digest: str) -> Budget | None:
    """The budget of ``digest``; None when none was set."""
    row = conn.execute(
        "SELECT budget_eps, budget_delta, basis, conversion, relation FROM datasets WHERE digest=?",
        (digest,),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return Budget(float(row[0]), float(row[1]), row[2], row[3], row[4])


def budget_dict(conn: LedgerConnection, digest: str) -> dict[str, Any] | None:
    """The budget of ``digest`` as a dict (None when none was set), as reports show it."""
    budget = budget_of(conn, digest)
    return None if budget is None else dataclasses.asdict(budget)


def stored_id(conn: LedgerConnection, digest: str) -> str:
    """The id under which the ledger keeps the dataset ``digest`` (64 hex): ``digest`` itself
    when it is a stored id (as ``pate budget list`` shows them), else its keyed form (a digest
    of ids or records given by hand)."""
    if conn.execute("SELECT 1 FROM datasets WHERE digest=?", (digest,)).fetchone():
        return digest
    return keyed_digest(conn.secret, digest)


def resolve(conn: LedgerConnection, dataset: Any) -> str:
    """The id of ``dataset`` given as a stored id, a name, a digest (of ids or records: keyed
    with the ledger's secret) or a unique prefix (>= 8) of a stored id."""
    if not isinstance(dataset, str) or not dataset:
        raise InputTypeError(
            f"dataset must be a digest or a name (a non-empty string), got {dataset!r}"
        )
    key, low = dataset.strip(), dataset.strip().lower()
    keyed = keyed_digest(conn.secret, low) if is_digest(low) else None
    row = (
        conn.execute("SELECT digest FROM datasets WHERE digest=? OR name=?", (low, key)).fetchone()
        or conn.execute("SELECT dataset FROM dataset_names WHERE name=?", (key,)).fetchone()
        or conn.execute("SELECT digest FROM datasets WHERE digest=?", (keyed,)).fetchone()
    )
    if row:
        return str(row[0])
    if len(low) >= 8 and set(low) <= HEX_DIGITS:
        rows = conn.execute("SELECT digest FROM datasets WHERE digest LIKE ?", (low + "%",))
        matches = [str(r[0]) for r in rows]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InputError(
                f"dataset prefix {dataset!r} matches {len(matches)} datasets; "
                "give more digits of the digest"
            )
    raise LedgerError(
        f"dataset {dataset!r} is not in the ledger at {conn.path}; register it with "
        f"`pate budget set --dataset DIGEST --eps E --delta D --name NAME --ledger "
        f"{conn.path}`, DIGEST from `pate budget digest --config CONFIG` (list "
        "known ones with `pate budget list`)"
    )


def resolve_or_register(conn: LedgerConnection, dataset: Any, name: str | None) -> str:
    """The id of ``dataset`` (:func:`resolve`), registered first when it is a digest not in the
    ledger yet; given ``name`` too when there is one (:func:`register`)."""
    if isinstance(dataset, str) and is_digest(dataset.strip().lower()):
        digest = stored_id(conn, dataset.strip().lower())
    else:
        digest = resolve(conn, dataset)
    register(conn, digest, name)
    return digest


def first_name(conn: LedgerConnection, digest: str) -> str | None:
    """The first name of ``digest`` (``datasets.name``; None when it has none)."""
    row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
    return None if row is None else row[0]


def aliases(conn: LedgerConnection, digest: str) -> list[str]:
    """The later names of ``digest``, oldest first."""
    rows = conn.execute(
        "SELECT name FROM dataset_names WHERE dataset=? ORDER BY created_utc, rowid", (digest,)
    )
    return [r[0] for r in rows]


def label(conn: LedgerConnection, digest: str) -> str:
    """What messages call ``digest``: its first name, else its first 12 hex digits."""
    return first_name(conn, digest) or digest[:12]


def register(conn: LedgerConnection, digest: str, name: str | None) -> None:
    """Add ``digest`` (with ``name``), or give a registered dataset ``name``: its first name
    if it has none, else one more of its names (the first is kept)."""
    row = conn.execute("SELECT name FROM datasets WHERE digest=?", (digest,)).fetchone()
    owner = None
    if name is not None:
        found = (
            conn.execute("SELECT digest FROM datasets WHERE name=?", (name,)).fetchone()
            or conn.execute("SELECT dataset FROM dataset_names WHERE name=?", (name,)).fetchone()
        )
        owner = None if found is None else found[0]
        if owner is not None and owner != digest:
            raise InputError(
                f"name {name!r} already names another dataset (other records); choose another name"
            )
        if is_digest(name.lower()):
            raise InputError(f"name {name!r} looks like a digest; choose a readable name")
    if row is None:
        conn.execute(
            "INSERT INTO datasets (digest, name, created_utc) VALUES (?, ?, ?)",
            (digest, name, utc_now()),
        )
        write_audit(conn, digest, "register", {"name": name})
    elif name is not None and owner is None and row[0] is None:
        conn.execute("UPDATE datasets SET name=? WHERE digest=?", (name, digest))
        write_audit(conn, digest, "name", {"name": name})
    elif name is not None and owner is None:
        conn.execute(
            "INSERT INTO dataset_names (name, dataset, created_utc) VALUES (?, ?, ?)",
            (name, digest, utc_now()),
        )
        write_audit(conn, digest, "add-name", {"name": name, "first": row[0]})


def add_records(conn: LedgerConnection, identity: KeyedIdentity) -> list[tuple[str, int]]:
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
    conn.executemany(
        "INSERT INTO records (key, identity) VALUES (?, ?)", ((k, cur.lastrowid) for k in keys)
    )
    shared = conn.execute(
        "SELECT i.dataset, count(*) FROM records r1 JOIN records r2 "
        "ON r2.key = r1.key AND r2.identity <> r1.identity "
        "JOIN identities i ON i.id = r2.identity WHERE r1.identity = ? "
        "GROUP BY i.dataset ORDER BY i.dataset",
        (cur.lastrowid,),
    ).fetchall()
    for other, count in shared:
        a, b = sorted((identity.digest, other))
        conn.execute(
            "INSERT OR REPLACE INTO links (a, b, shared, created_utc) VALUES (?, ?, ?, ?)",
            (a, b, int(count), utc_now()),
        )
        write_audit(conn, identity.digest, "link", {"dataset": other, "shared_records": count})
        write_audit(conn, other, "link", {"dataset": identity.digest, "shared_records": count})
    detail = {"num_records": identity.num_records, "distinct_records": len(keys)}
    write_audit(
        conn, identity.digest, "register-records", detail | {"linked": [o for o, _ in shared]}
    )
    return shared


def overlapping(conn: LedgerConnection, identity: KeyedIdentity) -> list[dict[str, Any]]:
    """Registered datasets sharing records with ``identity`` (:meth:`Ledger.overlapping`): the
    registered dataset of the same digest first, then by shared distinct records."""
    keys = distinct_keys(identity.record_keys)
    counts: dict[str, int] = {}
    if conn.execute("SELECT 1 FROM datasets WHERE digest=?", (identity.digest,)).fetchone():
        counts[identity.digest] = len(keys)
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        for ds, count in conn.execute(
            "SELECT i.dataset, count(*) FROM records r JOIN identities i ON i.id = r.identity "
            f"WHERE r.key IN ({','.join('?' * len(chunk))}) GROUP BY i.dataset",
            chunk,
        ):
            if ds != identity.digest:
                counts[ds] = counts.get(ds, 0) + int(count)
    out = []
    for ds in sorted(counts, key=lambda d: (d != identity.digest, -counts[d], d)):
        row = conn.execute("SELECT num_records FROM identities WHERE dataset=?", (ds,)).fetchone()
        out.append(
            {
                "dataset": ds,
                "name": first_name(conn, ds),
                "same": ds == identity.digest,
                "shared_records": counts[ds],
                "num_records": None if row is None else int(row[0]),
                "budget": budget_dict(conn, ds),
            }
        )
    return out


def linked_pairs(conn: LedgerConnection, digest: str) -> list[tuple[str, int | None]]:
    """(digest, shared distinct records or None when linked by hand) of every dataset linked to
    ``digest``, sorted."""
    return sorted(
        conn.execute(
            "SELECT b, shared FROM links WHERE a=? UNION ALL SELECT a, shared FROM links WHERE b=?",
            (digest, digest),
        ).fetchall()
    )


def linked_datasets(conn: LedgerConnection, digest: str) -> list[dict[str, Any]]:
    """The datasets linked to ``digest``: digest, name, shared distinct records and budget."""
    return [
        {
            "dataset": other,
            "name": first_name(conn, other),
            "shared_records": shared,
            "budget": budget_dict(conn, other),
        }
        for other, shared in linked_pairs(conn, digest)
    ]


def add_link(
    conn: LedgerConnection, pair: tuple[str, str], given: tuple[str, str], reason: str | None
) -> None:
    """Link the datasets ``pair`` (digests, resolved from the ``given`` names) by hand."""
    a, b = pair
    if a == b:
        raise InputError(
            f"dataset {given[0]!r} and other {given[1]!r} are the same dataset "
            f"({a[:12]}...); link two different datasets"
        )
    lo, hi = sorted(pair)
    if conn.execute("SELECT 1 FROM links WHERE a=? AND b=?", (lo, hi)).fetchone():
        return
    conn.execute(
        "INSERT INTO links (a, b, shared, created_utc) VALUES (?, ?, NULL, ?)", (lo, hi, utc_now())
    )
    for x, y in ((a, b), (b, a)):
        detail = {"dataset": y, "shared_records": None, "by_hand": True, "reason": reason}
        write_audit(conn, x, "link", detail)


def list_datasets(conn: LedgerConnection) -> list[dict[str, Any]]:
    """Every dataset (:meth:`pate.ledger.Ledger.datasets`)."""
    rows = conn.execute(
        "SELECT d.digest, d.name, d.budget_eps, d.budget_delta, d.basis, d.conversion, "
        "d.created_utc, (SELECT count(*) FROM events e WHERE e.dataset=d.digest), "
        "(SELECT num_records FROM identities i WHERE i.dataset=d.digest) "
        "FROM datasets d ORDER BY d.created_utc"
    ).fetchall()
    keys = "digest name budget_eps budget_delta basis conversion created_utc events records"
    return [
        dict(zip(keys.split(), r))
        | {"aliases": aliases(conn, r[0]), "linked": [d for d, _ in linked_pairs(conn, r[0])]}
        for r in rows
    ]


def block_names(conn: LedgerConnection, digest: str) -> dict[int, str]:
    """The name of every block of ``digest`` by its id, oldest first."""
    return dict(conn.execute("SELECT id, name FROM blocks WHERE dataset=? ORDER BY id", (digest,)))


def add_block(conn: LedgerConnection, digest: str, name: str) -> None:
    """Register block ``name`` of dataset ``digest`` (a name not registered for it yet)."""
    if name in block_names(conn, digest).values():
        raise InputError(
            f"block {name!r} is already registered for dataset "
            f"{label(conn, digest)}; choose a new name for new records"
        )
    conn.execute(
        "INSERT INTO blocks (dataset, name, created_utc) VALUES (?, ?, ?)",
        (digest, name, utc_now()),
    )
    write_audit(conn, digest, "add-block", {"block": name})


def target_blocks(conn: LedgerConnection, digest: str, blocks: Any) -> frozenset[int]:
    """The ids of the blocks named ``blocks`` (None: every block) of ``digest``."""
    by_name = {name: bid for bid, name in block_names(conn, digest).items()}
    if blocks is None:
        return frozenset(by_name.values())
    if isinstance(blocks, str) or not isinstance(blocks, Iterable):
        raise InputTypeError(f"blocks must be a list of block names or None, got {blocks!r}")
    names = list(blocks)
    if not names:
        raise InputError("blocks must name at least one block (None charges every block)")
    unknown = [b for b in names if b not in by_name]
    if unknown:
        raise InputError(
            f"blocks {unknown!r} are not registered for dataset "
            f"{label(conn, digest)} (registered: {sorted(by_name) or 'none'}); "
            "register them with Ledger.add_block / `pate budget add-block`"
        )
    return frozenset(by_name[b] for b in names)
