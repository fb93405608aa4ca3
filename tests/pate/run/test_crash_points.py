"""Crashes inside the aggregate stage, then ``--resume`` (issue #30, items 2 and 3).

The promise under test: nothing is published that the ledger has not charged, whatever write,
fsync or rename fails (an injected ``ENOSPC`` at every call, and a real full tmpfs), and a copy of
a run directory never adopts the other copy's ledger events as its own.

The runs here skip the teachers: their votes are a fixed synthetic matrix (597 public items, 10
teachers, 10 classes) written as the votes stage's output, so each aggregate takes a fraction of a
second; a tight budget (eps 20) makes it ask in several ledger rounds (with noise_seed 0: four
rounds of 12, 2, 1 and 1 queries, then the sanitized release).
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import subprocess
import uuid

import numpy as np
import pytest

from pate.cli import main
from pate.core import io as pate_io
from pate.core.errors import RunDirError
from pate.core.io import atomic_save_npy, atomic_savez
from pate.ledger import Ledger
from pate.run import rundir, stages
from pate.run.config import build, load
from pate.run.pipeline import fork_run
from pate.run.rundir import Run, RunCopyError
from pate.teachers.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[3]
DIGITS = REPO / "configs" / "digits.toml"


def synthetic_votes() -> np.ndarray:
    rng = np.random.default_rng(0)
    votes = np.zeros((597, 10), dtype=np.int64)
    for row, top in zip(votes, rng.integers(0, 10, len(votes))):
        agree = rng.integers(5, 11)
        row[top] += agree
        row += np.bincount(rng.integers(0, 10, 10 - agree), minlength=10)
    return votes


VOTES = synthetic_votes()


def votes_run(
    folder: pathlib.Path,
    ledger: pathlib.Path,
    *,
    budget: float = 20.0,
    seeded: bool = True,
    queries: int | None = None,
) -> Run:
    """A started run whose partition, teachers and votes stages are done (synthetic votes)."""
    overrides = {"privacy": {"budget_eps": budget}, "aggregator": {}}
    if seeded:  # the same rounds, hence the same sequence of writes, in every trial
        overrides["aggregator"]["noise_seed"] = 0
    if queries is not None:
        overrides["aggregator"]["queries"] = queries
    config = load(DIGITS, run_dir=str(folder), ledger=str(ledger), overrides=overrides)
    run = Run.create(config, progress=False)
    run.start()
    atomic_save_npy(run.path(rundir.VOTES), VOTES)
    atomic_savez(run.path(rundir.PARTITION), synthetic=np.zeros(1))  # what fork_run copies
    run.path(rundir.TEACHERS).mkdir()
    for stage in ("partition", "teachers"):
        run.mark(stage, {"synthetic": True})
    run.mark("votes", {"queries": 597, "classes": 10, "teachers": 10})
    stages.preflight(run)  # the ledger file, the dataset and its budget: before any failure
    return run


def aggregate(run_dir) -> dict:
    """The aggregate stage of ``run_dir``, as ``pate run --resume`` runs it."""
    run = Run.open(run_dir, progress=False)
    if run.done("aggregate"):  # e.g. only the fsync of the directory after its marker failed
        return run.stage_info("aggregate")
    stages.preflight(run, stages=("aggregate",))
    return stages.run_stage(run, "aggregate")


def ledger_events(ledger_path, run_dir):
    run_id = json.loads((pathlib.Path(run_dir) / rundir.STATE).read_text())["run_id"] + ":aggregate"
    with Ledger(ledger_path) as ledger:
        (dataset,) = [d["digest"] for d in ledger.datasets()]
        return ledger.events(dataset, run_id=run_id)


def published(run_dir) -> int:
    """Answers in the files a later stage (or a user) could read: ``labels.npy`` and
    ``answered.npy``, whichever exist (a crash may fall between them)."""
    run_dir = pathlib.Path(run_dir)
    counts = [0]
    if (run_dir / rundir.LABELS).exists():
        counts.append(int((np.load(run_dir / rundir.LABELS) >= 0).sum()))
    if (run_dir / rundir.ANSWERED).exists():
        counts.append(int(np.load(run_dir / rundir.ANSWERED).sum()))
    return max(counts)


def charged(ledger_path, run_dir, keys=None) -> int:
    """Answers the ledger holds the charge of for the run (only under ``keys``, if given)."""
    return sum(
        e.event.answered
        for e in ledger_events(ledger_path, run_dir)
        if keys is None or e.reservation in keys
    )


def pending_keys(run_dir) -> set[str]:
    with np.load(pathlib.Path(run_dir) / rundir.PENDING, allow_pickle=False) as pending:
        state = json.loads(pending["state"].tobytes().decode())
    return {key for entry in state["rounds"] for key in entry["keys"]}


class Failing:
    """Raise ``OSError(ENOSPC)`` at the ``k``-th call of ``function`` (counting every call)."""

    def __init__(self, function, k: int) -> None:
        self.function, self.k, self.calls = function, k, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.k:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return self.function(*args, **kwargs)


# where a write can fail: the atomic writer as a whole, each fsync (file and directory), each rename
POINTS = {
    "atomic write": (pate_io, "atomic_writer"),
    "fsync": (os, "fsync"),
    "rename": (os, "replace"),
}


@pytest.mark.parametrize("point", POINTS)
def test_every_failing_write_fsync_and_rename_then_resume_never_publishes_uncharged(
    tmp_path, monkeypatch, point
):
    module, name = POINTS[point]
    original = getattr(module, name)
    k, crashes, rounds = 0, 0, set()
    while True:
        k += 1
        folder = tmp_path / f"k{k}"
        ledger = folder / "ledger.sqlite3"
        run_dir = votes_run(folder / "run", ledger).run_dir
        failing = Failing(original, k)
        crashed = _aggregate_failing(run_dir, monkeypatch, module, name, failing)
        # at the crash: whatever is readable is charged
        assert published(run_dir) <= charged(ledger, run_dir)
        if (run_dir / rundir.PENDING).exists():
            rounds.add(len(pending_keys(run_dir)))
        if not crashed:
            break
        crashes += 1
        aggregate(run_dir)  # --resume
        assert not (run_dir / rundir.PENDING).exists()
        assert 0 < published(run_dir) <= charged(ledger, run_dir)
        # no round charged twice: one committed event per reservation id
        keys = [e.reservation for e in ledger_events(ledger, run_dir)]
        assert len(keys) == len(set(keys)) and None not in keys
        shutil.rmtree(folder)
    assert crashes == failing.calls >= 5  # every call of this run failed once
    assert max(rounds) >= 3  # crashes with several rounds pending


def test_a_pending_round_is_charged_under_its_own_drawn_reservation_exactly_once(
    tmp_path, monkeypatch
):
    """A crash between the pending write and the commit: the round's reservation was marked
    drawn before its noise was drawn, so the ledger counts it as spent and never reclaims it;
    the resume commits the round's events in its place (under the key the pending file names,
    no new reservation) and publishes them."""
    from pate import ledger as ledger_module

    ledger = tmp_path / "ledger.sqlite3"
    run_dir = votes_run(tmp_path / "run", ledger).run_dir
    original = ledger_module.Reservation.commit
    calls = []

    def crash_on_third(self, events):
        calls.append(self.id)
        if len(calls) >= 3:
            raise KeyboardInterrupt("killed between the pending write and the commit")
        return original(self, events)

    monkeypatch.setattr(ledger_module.Reservation, "commit", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        aggregate(run_dir)
    assert len(ledger_events(ledger, run_dir)) == 2 and pending_keys(run_dir) == set(calls)
    with Ledger(ledger) as led:
        (dataset,) = [d["digest"] for d in led.datasets()]
        led.reconcile()  # the process is gone for the ledger: a drawn reservation stays
        status = {r.id: r.status for r in led.reservations(dataset, live_only=False)}
        assert status[calls[2]] == "drawn"
        assert led.summary(dataset)["drawn_reservations"] == 1
    drawn = int(np.load(run_dir / rundir.PENDING)["answered"].sum())
    monkeypatch.setattr(ledger_module.Reservation, "commit", original)
    aggregate(run_dir)
    assert published(run_dir) == drawn == charged(ledger, run_dir)
    events = ledger_events(ledger, run_dir)
    keys = [e.reservation for e in events]
    assert [e.event.mechanism for e in events] == ["confident-gnmax"] * 3 + ["gnss-release"]
    assert len(keys) == len(set(keys)) and keys[:3] == calls
    assert not (run_dir / rundir.PENDING).exists()


# the mechanisms that read the private records themselves (no teachers, no votes.npy)
RECORDS = {
    "private-knn": 'mechanism = "private-knn"\nk = 20\nsampling_rate = 0.3\n'
    "threshold = 10\nsigma1 = 4\nsigma2 = 2",
    "class-means": 'mechanism = "class-means"\nsigma = 3.0',
}


@pytest.fixture(scope="module")
def records_bases(tmp_path_factory, small_digits):
    """mechanism -> a run of it up to its votes stage (the public-fitted embeddings), no ledger."""
    from pate.run.pipeline import Pipeline

    tmp = tmp_path_factory.mktemp("records")
    bases = {}
    for mechanism, lines in RECORDS.items():
        path = small_digits(
            tmp,
            name=f"{mechanism}.toml",
            extra='\n[knn]\nfeatures = "none"\ndims = 16\n',
            replace=(
                (
                    "[partition]\nnum_teachers = 10            # 100 private "
                    'images per teacher\nmode = "random"\n',
                    "",
                ),
                (
                    'mechanism = "confident-gnmax"\nthreshold = 7.0\nsigma1 = 2.0\nsigma2 = 2.0',
                    lines,
                ),
            ),
        )
        config = load(path, run_dir=str(tmp / mechanism), ledger=False)
        Pipeline(config, progress=False).run(until="votes")
        bases[mechanism] = tmp / mechanism
    return bases


@pytest.mark.parametrize("mechanism", RECORDS)
def test_a_failing_write_in_the_records_mechanisms_never_publishes_uncharged(
    records_bases, tmp_path, monkeypatch, mechanism
):
    """Private-kNN and class-means (their own aggregate paths): every atomic write of the stage
    fails once (ENOSPC), then the resume."""
    base = records_bases[mechanism]
    original = pate_io.atomic_writer
    k = 0
    while True:
        k += 1
        ledger = tmp_path / f"ledger{k}.sqlite3"
        raw = json.loads((base / rundir.CONFIG).read_text())
        raw["aggregator"]["noise_seed"] = 0
        run_dir = fork_run(base, build(raw, run_dir=str(tmp_path / f"k{k}"), ledger=str(ledger)))
        failing = Failing(original, k)
        crashed = _aggregate_failing(run_dir, monkeypatch, pate_io, "atomic_writer", failing)
        assert published(run_dir) <= charged(ledger, run_dir)
        if not crashed:
            break
        aggregate(run_dir)
        assert not (run_dir / rundir.PENDING).exists()
        assert 0 < published(run_dir) <= charged(ledger, run_dir)
        if mechanism == "class-means":  # the class scores are published with the labels only
            assert (run_dir / rundir.LABEL_SCORES).exists()
        shutil.rmtree(run_dir)
    assert failing.calls == k - 1 >= 4


def test_a_real_full_disk_at_every_size_never_publishes_uncharged(tmp_path):
    """The run directory on a real 1.2 MB tmpfs, filled to leave 0..384 kB free: the aggregate
    stage fails wherever the disk is full (ENOSPC from the filesystem itself), the space is freed,
    and the resume publishes only what the ledger charged. Skipped where mount is not permitted."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        outcomes = []
        for i, free_kib in enumerate(range(0, 400, 16)):
            ledger = tmp_path / f"ledger{i}.sqlite3"  # the ledger is on another disk
            run_dir = votes_run(mount / f"run{i}", ledger).run_dir
            filler = mount / "filler"
            _fill(mount, filler, leave=free_kib * 1024)
            try:
                aggregate(run_dir)
                outcomes.append("done")
            except (OSError, RunDirError) as exc:
                assert _is_enospc(exc), exc
                outcomes.append("full")
            assert published(run_dir) <= charged(ledger, run_dir)
            filler.unlink()
            if outcomes[-1] == "full":
                aggregate(run_dir)  # --resume, with room again
            assert not (run_dir / rundir.PENDING).exists()
            assert 0 < published(run_dir) <= charged(ledger, run_dir)
            assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
            shutil.rmtree(run_dir)
        assert "full" in outcomes and "done" in outcomes, outcomes
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _aggregate_failing(run_dir, monkeypatch, module, name, failing) -> bool:
    """Run the aggregate stage with ``module.name`` replaced by ``failing``; True when it
    stopped on the injected ENOSPC (raised as is or as the RunDirError naming the file)."""
    original = getattr(module, name)
    monkeypatch.setattr(module, name, failing)
    try:
        aggregate(run_dir)
        return False
    except (OSError, RunDirError) as exc:
        assert _is_enospc(exc), exc
        return True
    finally:
        monkeypatch.setattr(module, name, original)


def _is_enospc(exc: BaseException) -> bool:
    """ENOSPC, raised as is or as the RunDirError naming the file (pate.core.io.naming_write_errors)."""
    for e in (exc, exc.__cause__):
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
    return False


def _fill(mount: pathlib.Path, filler: pathlib.Path, *, leave: int) -> None:
    """Write ``filler`` until only ``leave`` bytes of ``mount`` are free."""
    st = os.statvfs(mount)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(filler, "wb") as fh:
        try:
            fh.write(b"\0" * size)
        except OSError:
            pass


def test_a_pending_file_of_another_format_is_refused_with_it_named_not_published(tmp_path, capsys):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = votes_run(tmp_path / "run", ledger).run_dir
    labels = np.zeros(597, dtype=np.int64)
    state = json.dumps({"format": 1, "summary": {}, "rounds": []}).encode()
    atomic_savez(
        run_dir / rundir.PENDING,
        labels=labels,
        answered=labels >= 0,
        state=np.frombuffer(state, dtype=np.uint8),
    )
    assert main(["aggregate", "--run-dir", str(run_dir), "--no-progress"]) == 2
    (refusal,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "pending file of format 1" in refusal and "reads format 2" in refusal
    assert published(run_dir) == 0 and charged(ledger, run_dir) == 0
    (run_dir / rundir.PENDING).unlink()
    assert main(["aggregate", "--run-dir", str(run_dir), "--no-progress"]) == 0
    assert 0 < published(run_dir) <= charged(ledger, run_dir)


def test_a_pending_file_of_another_run_is_not_published(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    runs = [votes_run(tmp_path / name, ledger).run_dir for name in ("a", "b")]
    from pate import ledger as ledger_module

    original = ledger_module.Reservation.commit
    ledger_module.Reservation.commit = lambda self, events: (_ for _ in ()).throw(
        KeyboardInterrupt("killed before the commit")
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            aggregate(runs[0])
    finally:
        ledger_module.Reservation.commit = original
    shutil.copy2(runs[0] / rundir.PENDING, runs[1] / rundir.PENDING)
    with pytest.raises(ConfigError, match="not of this run"):
        aggregate(runs[1])
    assert published(runs[1]) == 0 and charged(ledger, runs[1]) == 0


# ---------------------------------------------------------------- item 3: copies of a run directory

# two copies that both aggregate under one ledger: each asks 30 queries in one round, well
# within a large budget (the copies' answers, not the budget, are under test)
COPIES = {"budget": 1000.0, "seeded": False, "queries": 30}


def crash_before_commit(run_dir):
    """The aggregate stage of ``run_dir``, killed between its first round's pending write and
    the round's ledger commit."""
    from pate import ledger as ledger_module

    original = ledger_module.Reservation.commit

    def crash(self, events):
        raise KeyboardInterrupt("killed between the pending write and the commit")

    ledger_module.Reservation.commit = crash
    try:
        with pytest.raises(KeyboardInterrupt):
            aggregate(run_dir)
    finally:
        ledger_module.Reservation.commit = original


def test_a_copied_run_directory_is_refused_before_drawing(tmp_path, capsys):
    ledger = tmp_path / "ledger.sqlite3"
    original = votes_run(tmp_path / "original", ledger, **COPIES).run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    assert main(["aggregate", "--run-dir", str(copy), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    run_id = json.loads((original / rundir.STATE).read_text())["run_id"]
    assert f"is a copy of run {run_id}" in err and "fork_run" in err, err
    with pytest.raises(RunCopyError, match="is a copy of run"):
        stages.run_stage(Run.open(copy, progress=False), "aggregate")  # without preflight
    assert published(copy) == 0 and not (copy / rundir.PENDING).exists()
    assert charged(ledger, original) == 0  # nothing drawn, nothing charged
    # the remedy: a fork of the copy is a run of its own
    config = build(
        json.loads((copy / rundir.CONFIG).read_text()),
        run_dir=str(tmp_path / "fork"),
        ledger=str(ledger),
    )
    fork = fork_run(copy, config)
    aggregate(fork)
    assert 0 < published(fork) <= charged(ledger, fork)
    # and the original goes on
    aggregate(original)
    assert 0 < published(original) <= charged(ledger, original)


def test_a_run_directory_moved_on_the_same_filesystem_goes_on(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    run_dir = votes_run(tmp_path / "before", ledger, seeded=False).run_dir
    moved = tmp_path / "after"
    os.rename(run_dir, moved)
    aggregate(moved)
    assert 0 < published(moved) <= charged(ledger, moved)


@pytest.mark.parametrize("crashed", ["original", "copy"])
def test_copies_crash_complete_resume_never_publish_uncharged(tmp_path, crashed):
    """The scenario of issue #30 item 3: a run directory copied after its votes stage; copy A
    crashes between a round's pending write and its commit, copy B completes, A resumes. Ends
    with a refusal of whichever directory is the copy, and never with uncharged answers."""
    ledger = tmp_path / "ledger.sqlite3"
    original = votes_run(tmp_path / "original", ledger, **COPIES).run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    a, b = (original, copy) if crashed == "original" else (copy, original)
    if a == copy:
        with pytest.raises(RunCopyError):
            aggregate(a)
        assert not (a / rundir.PENDING).exists()
    else:
        crash_before_commit(a)
        assert (a / rundir.PENDING).exists()
    if b == copy:
        with pytest.raises(RunCopyError):
            aggregate(b)
    else:
        aggregate(b)
    if a == copy:
        with pytest.raises(RunCopyError):
            aggregate(a)
    else:
        keys = pending_keys(a)
        aggregate(a)
        assert 0 < published(a) <= charged(ledger, a, keys=keys | _new_keys(ledger, a, keys))
    for run_dir in (a, b):
        assert published(run_dir) <= charged(ledger, run_dir)
    assert published(copy) == 0


def _new_keys(ledger, run_dir, before) -> set[str]:
    return {e.reservation for e in ledger_events(ledger, run_dir)} - before


def test_without_the_copy_check_resume_charges_its_own_rounds_as_a_separate_release(
    tmp_path, monkeypatch
):
    """The same scenario with the directory check off (a run started before it existed). A's
    round was marked drawn before its noise was drawn: B (same run id, no pending file) cannot
    tell it from a crash of its own and forfeits it -- its whole bound stays charged, under A's
    key --; B's events are never taken for A's; A's resume finds its round charged under its own
    key and publishes it: what A publishes is covered by the events under A's keys alone."""
    from pate.analysis import PrivacyEvent

    ledger = tmp_path / "ledger.sqlite3"
    a = votes_run(tmp_path / "a", ledger, **COPIES).run_dir
    b = tmp_path / "b"
    shutil.copytree(a, b)
    monkeypatch.setattr(Run, "check_not_a_copy", lambda self: None)
    crash_before_commit(a)
    a_keys = pending_keys(a)
    assert ledger_events(ledger, a) == [] and len(a_keys) == 1  # one round drawn, not charged
    with np.load(a / rundir.PENDING, allow_pickle=False) as pending:
        (a_round,) = json.loads(pending["state"].tobytes().decode())["rounds"]
    aggregate(b)
    lost = [e for e in ledger_events(ledger, b) if e.event.mechanism == "lost-drawn-answers"]
    assert {e.reservation for e in lost} == a_keys  # A's drawn round stays spent
    b_keys = {e.reservation for e in ledger_events(ledger, b)} - a_keys
    b_answers = published(b)
    assert b_answers == charged(ledger, b, keys=b_keys) > 0
    aggregate(a)
    a_events = [e for e in ledger_events(ledger, a) if e.reservation not in b_keys]
    # A's round, charged as its whole drawn bound under its own key, then A's sanitized release
    assert [e.event.mechanism for e in a_events] == ["lost-drawn-answers", "gnss-release"]
    assert a_keys <= {e.reservation for e in a_events}
    (own,) = [PrivacyEvent.from_dict(e) for e in a_round["events"]]
    assert np.all(own.rdp_data_independent <= a_events[0].event.rdp_data_independent + 1e-12)
    assert 0 < published(a) == own.answered
    # the labels differ: two releases with independent noise, each charged
    assert not np.array_equal(np.load(a / rundir.LABELS), np.load(b / rundir.LABELS))


def test_run_json_records_the_directory_and_a_fork_gets_its_own(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    run = votes_run(tmp_path / "run", ledger)
    recorded = json.loads((run.run_dir / rundir.STATE).read_text())["directory"]
    st = run.run_dir.stat()
    assert (recorded["device"], recorded["inode"]) == (st.st_dev, st.st_ino)
    config = build(
        json.loads((run.run_dir / rundir.CONFIG).read_text()),
        run_dir=str(tmp_path / f"fork-{uuid.uuid4().hex[:6]}"),
        ledger=str(ledger),
    )
    fork = fork_run(run.run_dir, config)
    forked = json.loads((fork / rundir.STATE).read_text())["directory"]
    assert forked["inode"] != recorded["inode"] and forked["path"] == str(fork.resolve())


def test_the_directory_check_reads_the_inode_and_tolerates_a_renumbered_device(tmp_path):
    ledger = tmp_path / "ledger.sqlite3"
    run = votes_run(tmp_path / "run", ledger)
    state = json.loads((run.run_dir / rundir.STATE).read_text())
    recorded = state["directory"]
    # the same path and inode under another device number (a reboot renumbered it): the same run
    Run(
        run.run_dir, run.config, dict(state, directory=dict(recorded, device=-1))
    ).check_not_a_copy()
    # another inode at the same path (the directory was replaced by a copy of itself): refused
    with pytest.raises(RunCopyError, match="is a copy of run"):
        Run(
            run.run_dir,
            run.config,
            dict(state, directory=dict(recorded, inode=recorded["inode"] + 1)),
        ).check_not_a_copy()
    # a run started before the check (no directory recorded): not checked
    Run(
        run.run_dir, run.config, {k: v for k, v in state.items() if k != "directory"}
    ).check_not_a_copy()


@pytest.mark.parametrize("found", [1, 2, 4, None])
def test_a_run_of_another_format_is_refused_with_it_named_before_its_files_are_read(
    tmp_path, found
):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rundir.STATE).write_text(json.dumps({"format": found, "run_id": "old"}))
    (run_dir / rundir.CONFIG).write_text("{}")  # not a config of this version: never read
    with pytest.raises(ConfigError) as refused:
        Run.open(run_dir)
    assert f"run format {found!r}" in str(refused.value)
    assert f"reads run format {rundir.FORMAT} only" in str(refused.value)
