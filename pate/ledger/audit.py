"""The audit log (table ``audit``): every registration, name, link, block, budget change
and reservation expiry or release, as canonical JSON, oldest first."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from pate.ledger.formats import canonical, utc_now


def write_audit(
    conn: sqlite3.Connection, dataset: str, action: str, detail: dict[str, Any]
) -> None:
    """One audit row about ``dataset``."""
    conn.execute(
        "INSERT INTO audit (dataset, time_utc, action, detail) VALUES (?, ?, ?, ?)",
        (dataset, utc_now(), action, canonical(detail)),
    )


def read_audit(conn: sqlite3.Connection, digest: str) -> list[dict[str, Any]]:
    """The audit rows of dataset ``digest``, oldest first: ``time_utc``, ``action``, ``detail``."""
    rows = conn.execute(
        "SELECT time_utc, action, detail FROM audit WHERE dataset=? ORDER BY id", (digest,)
    ).fetchall()
    return [{"time_utc": t, "action": a, "detail": json.loads(d)} for t, a, d in rows]


def budget_changes(audit_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The budget changes among ``audit_rows`` (:meth:`pate.ledger.Ledger.budget_changes`)."""
    out = []
    for row in audit_rows:
        if row["action"] != "set-budget":
            continue
        d = row["detail"]
        conversion = d["conversion"]
        previous = None if d["previous"]["eps"] is None else d["previous"]
        if previous is None:
            change = "initial"
        elif (
            previous["delta"] != d["delta"]
            or previous["basis"] != d["basis"]
            or previous["conversion"] != conversion
        ):
            change = "changed"
        else:
            change = (
                "raised"
                if d["eps"] > previous["eps"]
                else "lowered"
                if d["eps"] < previous["eps"]
                else "unchanged"
            )
        out.append(
            {
                "time_utc": row["time_utc"],
                "eps": d["eps"],
                "delta": d["delta"],
                "basis": d["basis"],
                "conversion": conversion,
                "previous": previous,
                "change": change,
                "spent_eps": d["spent_eps"],
                "reason": d["reason"],
            }
        )
    return out
