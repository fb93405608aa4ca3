"""Issue #48, case 7: a crash can never publish uncharged answers (fail closed).

Before: a round was reserve -> draw -> write ``aggregate.pending.npz`` -> commit. SIGKILL after the
pending write and before the commit left noisy labels on disk while the ledger reclaimed the dead
process's reservation ("no events recorded"); a second run spent that budget; resuming the first
said its answers "were discarded, never released" although they had been readable on disk.

Now the round's reservation is marked ``drawn`` (durably) before any noise is drawn: it counts as
spent and is never reclaimed. The runs here skip the teachers (a fixed synthetic vote matrix
written as the votes stage's output), so each aggregate stage takes a fraction of a second, and
the aggregate stage runs in a real subprocess killed with SIGKILL at the chosen point.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pate.analysis import eps_from_rdp
from pate.core.errors import LedgerError
from pate.core.io import atomic_save_npy, atomic_savez
from pate.ledger import Ledger
from pate.run import rundir, stages
from pate.run.config import load
from pate.run.rundir import Run

REPO = pathlib.Path(__file__).resolve().parents[3]
DIGITS = REPO / "configs" / "digits.toml"
BUDGET = 20.0


def _votes() -> np.ndarray:
    """597 public items, 10 teachers, 10 classes: mostly clear pluralities."""
    rng = np.random.default_rng(0)
    votes = np.zeros((597, 10), dtype=np.int64)
    for row, top in zip(votes, rng.integers(0, 10, len(votes))):
        agree = rng.integers(5, 11)
        row[top] += agree
        row += np.bincount(rng.integers(0, 10, 10 - agree), minlength=10)
    return votes


def votes_run(folder: pathlib.Path, ledger: pathlib.Path) -> pathlib.Path:
    """A started digits run whose partition, teachers and votes stages are done (synthetic
    votes), preflighted against ``ledger`` (budget eps 20: the aggregate asks in rounds)."""
    overrides = {"privacy": {"budget_eps": BUDGET}, "aggregator": {"noise_seed": 0}}
    config = load(DIGITS, run_dir=str(folder), ledger=str(ledger), overrides=overrides)
    run = Run.create(config, progress=False)
    run.start()
    atomic_save_npy(run.path(rundir.VOTES), _votes())
    atomic_savez(run.path(rundir.PARTITION), synthetic=np.zeros(1))
    run.path(rundir.TEACHERS).mkdir()
    for stage in ("partition", "teachers"):
        run.mark(stage, {"synthetic": True})
    run.mark("votes", {"queries": 597, "classes": 10, "teachers": 10})
    stages.preflight(run)
    return run.run_dir


def aggregate(run_dir: pathlib.Path) -> dict:
    """The aggregate stage of ``run_dir`` in this process, as ``pate run --resume`` runs it."""
    run = Run.open(run_dir, progress=False)
    stages.preflight(run, stages=("aggregate",))
    return stages.run_stage(run, "aggregate")


# the aggregate stage in a subprocess that SIGKILLs itself when ``target`` is first called
KILLED_AT = textwrap.dedent(
    """
    import os, signal, sys
    import pate.ledger.ledger as ledger_module
    import pate.run.stages.rounds as rounds
    from pate.run import stages
    from pate.run.rundir import Run

    def kill(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if sys.argv[2] == "commit":  # after the pending write, before the ledger commit
        ledger_module.Reservation.commit = kill
    else:  # after the reservation is marked drawn, while the answers are drawn
        rounds.write_pending = kill
    run = Run.open(sys.argv[1], progress=False)
    stages.preflight(run, stages=("aggregate",))
    stages.run_stage(run, "aggregate")
    """
)


def kill_aggregate(run_dir: pathlib.Path, at: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_AT, str(run_dir), at],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def run_id_of(run_dir: pathlib.Path) -> str:
    return json.loads((run_dir / rundir.STATE).read_text())["run_id"] + ":aggregate"


def published(run_dir: pathlib.Path) -> int:
    """Answers in the files a later stage or a user reads (labels.npy, answered.npy)."""
    counts = [0]
    if (run_dir / rundir.LABELS).exists():
        counts.append(int((np.load(run_dir / rundir.LABELS) >= 0).sum()))
    if (run_dir / rundir.ANSWERED).exists():
        counts.append(int(np.load(run_dir / rundir.ANSWERED).sum()))
    return max(counts)


def test_sigkill_between_the_pending_write_and_the_commit_keeps_the_budget_spent(tmp_path, caplog):
    ledger = tmp_path / "ledger.sqlite3"
    first = votes_run(tmp_path / "first", ledger)
    kill_aggregate(first, "commit")
    with np.load(first / rundir.PENDING, allow_pickle=False) as pending:
        on_disk = int(pending["answered"].sum())
        (entry,) = json.loads(pending["state"].tobytes().decode())["rounds"]
    assert on_disk > 0 and published(first) == 0
    with Ledger(ledger) as led:
        (dataset,) = [d["digest"] for d in led.datasets()]
        assert led.events(dataset, run_id=run_id_of(first)) == []
        led.reconcile()  # the process is gone: a drawn reservation is not reclaimed
        statuses = [r.status for r in led.reservations(dataset, live_only=False)]
        assert "active" not in statuses  # the planned release's reservation: reclaimed
        (held,) = [r for r in led.reservations(dataset, live_only=False) if r.status == "drawn"]
        assert held.id in entry["keys"]
        lost = float(eps_from_rdp(held.rdp, orders=held.orders, delta=1e-5)[0])
        summary = led.summary(dataset)
        # the budget is spent: the whole reserved bound, before the answers are charged
        assert summary["spent"] == pytest.approx(lost, rel=1e-9) and lost > 0
        assert summary["remaining"] == pytest.approx(BUDGET - lost, rel=1e-9)

    # a second run on the same records cannot get that budget back
    second = votes_run(tmp_path / "second", ledger)
    aggregate(second)
    assert published(second) > 0
    with Ledger(ledger) as led:
        summary = led.summary(dataset)
        assert summary["spent"] <= BUDGET + 1e-9
        second_spent = sum(
            float(eps_from_rdp(e.event.rdp_data_independent, orders=e.event.orders, delta=1e-5)[0])
            for e in led.events(dataset, run_id=run_id_of(second))
        )
        assert second_spent > 0
        assert [r.status for r in led.reservations(dataset, live_only=False)].count("drawn") == 1

    # resuming the first commits its round's events under its drawn reservation and publishes
    caplog.set_level(logging.INFO)
    info = aggregate(first)
    assert published(first) == on_disk and not (first / rundir.PENDING).exists()
    with Ledger(ledger) as led:
        events = led.events(dataset, run_id=run_id_of(first))
        assert events[0].reservation in entry["keys"]
        assert events[0].event.mechanism == entry["events"][0]["mechanism"]
        assert sum(e.event.answered for e in events) == on_disk
        assert all(r.status != "drawn" for r in led.reservations(dataset, live_only=False))
        assert led.summary(dataset)["spent"] <= BUDGET + 1e-9
    said = caplog.text + json.dumps(info) + (first / rundir.AGGREGATE).read_text()
    assert "discarded" not in said and "never released" not in said


def test_sigkill_after_the_draw_before_the_pending_write_loses_the_budget_and_says_so(
    tmp_path, caplog
):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = votes_run(tmp_path / "run", ledger)
    kill_aggregate(run_dir, "pending")
    assert not (run_dir / rundir.PENDING).exists() and published(run_dir) == 0
    with Ledger(ledger) as led:
        (dataset,) = [d["digest"] for d in led.datasets()]
        (held,) = [r for r in led.reservations(dataset) if r.status == "drawn"]
        spent = led.summary(dataset)["spent"]
        assert spent > 0
    caplog.set_level(logging.WARNING)
    aggregate(run_dir)  # --resume: the drawn reservation is forfeited, then the stage runs
    assert "budget lost" in caplog.text and held.id in caplog.text
    assert "discarded" not in caplog.text
    with Ledger(ledger) as led:
        events = led.events(dataset, run_id=run_id_of(run_dir))
        (forfeit,) = [e for e in events if e.reservation == held.id]
        assert forfeit.event.mechanism == "lost-drawn-answers" and forfeit.event.answered == 0
        np.testing.assert_allclose(forfeit.event.rdp_data_independent, held.rdp)
        assert led.summary(dataset)["spent"] >= spent
    # what is published is charged under the resumed rounds' own reservations
    charged = sum(e.event.answered for e in events if e.reservation != held.id)
    assert 0 < published(run_dir) == charged


def test_a_drawn_reservation_is_never_reclaimed_and_counts_as_spent(tmp_path, capsys):
    from pate.analysis import gnmax_event
    from pate.cli import main

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid of a process that is gone
    path = tmp_path / "ledger.sqlite3"
    event = gnmax_event(np.tile([[30, 5, 5]], (10, 1)), sigma=4.0)
    with Ledger(path) as led:
        led.set_budget(
            "0" * 64, eps=50.0, delta=1e-5, name="toy"
        )  # registered by hand: the ledger keys the digest
        drawn = led.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent)
        drawn.mark_drawn()
        active = led.reserve("toy", orders=event.orders, rdp=event.rdp_data_independent)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE reservations SET pid=?, process_token=NULL", (dead.pid,))
    conn.commit()
    conn.close()
    with Ledger(path) as led:
        assert led.reconcile() == [active.id]  # only the one without drawn noise is reclaimed
        status = {r.id: r.status for r in led.reservations("toy", live_only=False)}
        assert status == {drawn.id: "drawn", active.id: "expired"}
        assert led.release(drawn.id) is False  # nor given back by hand
        alone = float(eps_from_rdp(event.rdp_data_independent, orders=event.orders, delta=1e-5)[0])
        summary = led.summary("toy")
        assert summary["spent"] == pytest.approx(alone, rel=1e-9)
        assert summary["drawn_reservations"] == 1 and summary["events"] == 0
        assert [r["status"] for r in summary["reservations"]] == ["drawn"]
        with pytest.raises(LedgerError, match="not live"):
            led.mark_drawn(active.id)  # an expired reservation can never be drawn under
    assert main(["budget", "show", "--dataset", "toy", "--ledger", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spent"] == pytest.approx(alone, rel=1e-9)
    # forfeited (its whole bound, as an event) once its process is gone, never while it runs
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        conn = sqlite3.connect(path)
        conn.execute("UPDATE reservations SET pid=? WHERE id=?", (alive.pid, drawn.id))
        conn.commit()
        conn.close()
        with Ledger(path) as led, pytest.raises(LedgerError, match="still runs"):
            led.forfeit(drawn.id)
    finally:
        alive.kill()
        alive.wait()
    with Ledger(path) as led:
        led.forfeit(drawn.id)
        (lost,) = [e.event for e in led.events("toy")]
        assert lost.mechanism == "lost-drawn-answers" and lost.answered == 0
        assert led.summary("toy")["spent"] == pytest.approx(alone, rel=1e-9)
