"""The ledger across processes: parallel runs never overspend together, and kill -9 in the middle
of writes loses no committed spend and leaves no half-written event."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from pate.analysis import eps_from_rdp, gnmax_event
from pate.core.errors import BudgetExceededError
from pate.ledger import Ledger, dataset_digest

DELTA = 1e-5
DIGEST = dataset_digest(np.arange(500))

PRELUDE = """
import sys, numpy as np
from pate.analysis import gnmax_event
from pate.core.errors import BudgetExceededError
from pate.ledger import Ledger
led = Ledger(sys.argv[1], timeout=60)
ev = gnmax_event(np.tile(np.array([[200, 30, 20]]), (30, 1)), sigma=40.0)
"""

WORKER = (
    PRELUDE
    + """
import os, time
while not os.path.exists(sys.argv[2]):  # start line: every worker begins together
    time.sleep(0.005)
accepted = refused = 0
for i in range(int(sys.argv[3])):
    try:
        if i % 2:
            led.charge('shared', [ev], run_id=f'w{os.getpid()}-{i}')
        else:
            with led.reserve('shared', orders=ev.orders, rdp=ev.rdp_data_independent) as res:
                res.commit([ev])
        accepted += 1
    except BudgetExceededError:
        refused += 1
print(accepted, refused)
"""
)

WRITER = (
    PRELUDE
    + """
import os
res = led.reserve('shared', orders=ev.orders, rdp=1000 * ev.rdp_data_independent, run_id='victim')
i = 0
while True:
    ids = led.charge('shared', [ev, ev], run_id=f'victim-{os.getpid()}-{i}')
    print(*ids, flush=True)
    i += 1
"""
)


def _event():
    return gnmax_event(np.tile(np.array([[200, 30, 20]]), (30, 1)), sigma=40.0)


def test_parallel_processes_never_overspend_together(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    ev = _event()
    budget = 3.0
    fitting = 0
    while (
        eps_from_rdp((fitting + 1) * ev.rdp_data_independent, orders=ev.orders, delta=DELTA)[0]
        <= budget
    ):
        fitting += 1
    workers, attempts = 4, 6
    assert 2 <= fitting < workers * attempts  # the budget must run out part-way through
    with Ledger(path) as led:
        led.set_budget(DIGEST, eps=budget, delta=DELTA, name="shared")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(go), str(attempts)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    time.sleep(0.5)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(tuple(map(int, out.split())))
    assert sum(a for a, _ in results) == fitting  # every fitting charge went in, not one more
    assert sum(a + r for a, r in results) == workers * attempts
    with Ledger(path) as led:
        s = led.summary("shared")
        assert s["events"] == fitting and s["spent"] <= budget
        assert s["reservations"] == []
        with pytest.raises(BudgetExceededError):
            led.charge("shared", [ev])


def test_kill_9_during_writes_loses_nothing_committed(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as led:
        led.set_budget(DIGEST, eps=1e9, delta=DELTA, name="shared")
    rng = np.random.default_rng(7)
    reported: list[int] = []
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = proc.stdout.readline()  # it is writing now
        assert first, proc.stderr.read()
        reported += [int(x) for x in first.split()]
        time.sleep(float(rng.uniform(0.0, 0.3)))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        lines = out.splitlines()
        # the last line may have been cut mid-print; only whole lines count as reported
        if lines and not out.endswith("\n"):
            lines = lines[:-1]
        reported += [int(x) for line in lines for x in line.split()]

        with Ledger(path) as led:
            stored = led.events("shared")  # every row parses and passes its checksum
            ids = [s.id for s in stored]
            assert set(reported) <= set(ids)  # nothing a writer saw committed was lost
            # charges of two events are atomic: never one event of a pair without the other
            runs = [s.run_id for s in stored]
            assert all(runs.count(r) == 2 for r in set(runs))
            # the killed run's reservation is reconciled by the next writer
            led.reconcile()
            assert led.reservations("shared") == []
            statuses = [r.status for r in led.reservations("shared", live_only=False)]
            assert statuses and set(statuses) == {"expired"}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert len(reported) >= 8


LINKED_WORKER = (
    PRELUDE
    + """
import os, time
name = sys.argv[4]
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
accepted = refused = 0
for i in range(int(sys.argv[3])):
    try:
        if i % 2:
            led.charge(name, [ev], run_id=f'w{os.getpid()}-{i}')
        else:
            with led.reserve(name, orders=ev.orders, rdp=ev.rdp_data_independent) as res:
                res.commit([ev])
        accepted += 1
    except BudgetExceededError:
        refused += 1
print(accepted, refused)
"""
)


def test_parallel_spend_on_overlapping_datasets_never_overspends_the_shared_records(tmp_path):
    """Runs on a subset and on a superset of the same records, in parallel: every charge on the
    superset counts against the subset's budget inside the same write transaction."""
    from pate.ledger import dataset_identity

    path = tmp_path / "ledger.sqlite3"
    ev = _event()
    budget = 3.0
    fitting = 0
    while (
        eps_from_rdp((fitting + 1) * ev.rdp_data_independent, orders=ev.orders, delta=DELTA)[0]
        <= budget
    ):
        fitting += 1
    rng = np.random.default_rng(5)
    x, y = rng.random((120, 6), dtype=np.float32), rng.integers(0, 4, 120)
    with Ledger(path) as led:
        led.register_identity(dataset_identity(x[:80], y[:80]), name="sub")
        led.set_budget("sub", eps=budget, delta=DELTA)
        led.register_identity(dataset_identity(x, y), name="sup")  # no budget of its own
    go = tmp_path / "go"
    workers, attempts = 4, 6
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                LINKED_WORKER,
                str(path),
                str(go),
                str(attempts),
                "sub" if w % 2 else "sup",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    time.sleep(0.5)
    go.touch()
    accepted = 0
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        accepted += int(out.split()[0])
    assert accepted == fitting
    with Ledger(path) as led:
        s = led.summary("sub")
        assert s["events"] + s["linked_events"] == fitting and s["spent"] <= budget
        assert led.summary("sup")["linked"][0]["spent_and_reserved"] == pytest.approx(s["spent"])
