"""How the ``pate`` command ends on errors: one line and a documented exit status for expected
errors, "internal error" (exit 70) for bugs, ``--debug`` / PATE_DEBUG=1 for the traceback,
Ctrl-C (exit 130), a closed standard output (exit 0, silent); and the file readers of ``pate.core.io``
that name the file when it is missing or corrupt."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pate.cli.commands.budget as budget_command
from pate.analysis import validation
from pate.analysis.errors import CorruptFileError, InputError, PateError
from pate.cli import EXIT_SOFTWARE, classify, main
from pate.core import io as pio
from pate.core.errors import RunDirError
from pate.ledger import Ledger, dataset_digest
from pate.run import rundir

REPO = pathlib.Path(__file__).resolve().parents[3]
PYTHON = sys.executable
INTERNAL = "internal error"


def lines(text: str) -> list[str]:
    return text.strip("\n").split("\n") if text.strip() else []


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path, create=True) as led:
        led.set_budget(dataset_digest(np.arange(5)), eps=1.0, delta=1e-5, name="five")
    return path


@pytest.fixture(scope="module")
def big_ledger(tmp_path_factory):
    """A ledger whose `pate budget list --json` is far larger than a pipe's buffer (64 KiB)."""
    path = tmp_path_factory.mktemp("big") / "ledger.sqlite3"
    with Ledger(path, create=True) as led:
        for i in range(1000):
            led.set_budget(dataset_digest(np.arange(i + 1)), eps=1.0, delta=1e-5, name=f"ds{i:04d}")
    return path


@pytest.fixture
def votes_file(tmp_path):
    path = tmp_path / "votes.npy"
    np.save(path, np.array([[3, 1, 0], [0, 4, 0]]))
    return path


def _bug(args):
    """A command with a bug: the interpreter raises TypeError (as the bug of issue #13 did)."""
    count = 3
    return count[0]


def _raises_here(args):
    raise TypeError("raised by a module that is not pate-learn's")


def _pate(*argv, env=None, **kw):
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [PYTHON, "-m", "pate", *map(str, argv)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


# --- unexpected errors ----------------------------------------------------------------------


@pytest.mark.parametrize("func", [_bug, _raises_here])
def test_unexpected_error_is_an_internal_error(monkeypatch, capsys, ledger, func):
    monkeypatch.delenv("PATE_DEBUG", raising=False)
    monkeypatch.setattr(budget_command, "run", func)
    assert main(["budget", "list", "--ledger", str(ledger)]) == EXIT_SOFTWARE == 70
    err = capsys.readouterr().err
    assert len(lines(err)) == 1, err
    assert err.startswith("pate budget: internal error: TypeError: ")
    assert "this is a bug; rerun with --debug (or PATE_DEBUG=1)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["before", "after", "env"])
def test_debug_shows_the_traceback(monkeypatch, capsys, ledger, how):
    monkeypatch.delenv("PATE_DEBUG", raising=False)
    monkeypatch.setattr(budget_command, "run", _bug)
    argv = ["budget", "list", "--ledger", str(ledger)]
    if how == "before":
        argv = ["--debug", *argv]
    elif how == "after":
        argv = [*argv, "--debug"]
    else:
        monkeypatch.setenv("PATE_DEBUG", "1")
    assert main(argv) == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "in _bug" in err and "return count[0]" in err
    assert lines(err)[-1].startswith("pate budget: internal error: TypeError:")


def test_debug_traceback_for_expected_errors_too(capsys, votes_file):
    assert (
        main(
            [
                "--debug",
                "analyze",
                "--votes",
                str(votes_file),
                "--mechanism",
                "gnmax",
                "--sigma",
                "-1",
                "--delta",
                "1e-5",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "check_positive" in err
    assert lines(err)[-1] == "pate analyze: error: --sigma must be > 0, got -1.0"


def test_internal_error_in_a_subprocess_exits_70_and_debug_shows_where(tmp_path, ledger):
    script = tmp_path / "bug.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        import pate.cli.commands.budget as b
        from pate.cli import main
        def run(args):
            return {"a": 1}["b"]
        b.run = run
        sys.exit(main(sys.argv[1:]))
    """)
    )
    argv = [PYTHON, str(script), "budget", "list", "--ledger", str(ledger)]
    env = {k: v for k, v in os.environ.items() if k != "PATE_DEBUG"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 70, done.stderr
    assert lines(done.stderr) == [
        "pate budget: internal error: KeyError: 'b' -- this is a bug; rerun "
        "with --debug (or PATE_DEBUG=1) for the traceback and report it"
    ]
    done = subprocess.run(
        argv, cwd=REPO, env={**env, "PATE_DEBUG": "1"}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 70
    assert (
        "Traceback (most recent call last)" in done.stderr and 'return {"a": 1}["b"]' in done.stderr
    )


# --- expected errors ------------------------------------------------------------------------


def test_deliberate_bad_value_is_one_line_exit_2(tmp_path, votes_file):
    done = _pate(
        "analyze",
        "--votes",
        votes_file,
        "--mechanism",
        "gnmax",
        "--sigma",
        "-1",
        "--delta",
        "1e-5",
        env={"PATE_DEBUG": ""},
    )
    assert done.returncode == 2
    assert lines(done.stderr) == ["pate analyze: error: --sigma must be > 0, got -1.0"]
    assert done.stdout == ""


@pytest.mark.parametrize(
    "content", [b"", b"\x93NUMPY\x01\x00v\x00{'descr': '<i8'", b"garbage" * 40]
)
def test_corrupt_votes_file_is_named(capsys, tmp_path, content):
    path = tmp_path / "votes.npy"
    path.write_bytes(content)
    assert (
        main(
            [
                "analyze",
                "--votes",
                str(path),
                "--mechanism",
                "gnmax",
                "--sigma",
                "4",
                "--delta",
                "1e-5",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(lines(err)) == 1 and err.startswith("pate analyze: error: ")
    assert str(path) in err and INTERNAL not in err


def test_missing_file_exit_2(capsys, tmp_path):
    assert main(["budget", "digest", "--ids", str(tmp_path / "none.npy")]) == 2
    err = capsys.readouterr().err
    assert lines(err) == [f"pate budget: error: --ids {str(tmp_path / 'none.npy')!r} is not a file"]


def test_ledger_error_exit_3(capsys, ledger):
    assert main(["budget", "show", "--dataset", "nosuchname", "--ledger", str(ledger)]) == 3
    err = capsys.readouterr().err
    assert len(lines(err)) == 1 and err.startswith("pate budget: error: ") and "nosuchname" in err


def test_value_error_raised_on_purpose_by_a_library_module_exit_2(capsys, ledger):
    # Ledger.set_budget raises ValueError itself (a `raise` statement in pate/ledger/datasets.py).
    digest = dataset_digest(np.arange(7))
    assert (
        main(
            [
                "budget",
                "set",
                "--dataset",
                digest,
                "--eps",
                "1",
                "--delta",
                "1e-5",
                "--name",
                "five",
                "--ledger",
                str(ledger),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert lines(err)[0].startswith("pate budget: error: name 'five' already names another dataset")


@pytest.mark.parametrize("write", ["mkdir", "atomic_write_json"])
def test_unwritable_output_path_is_named(monkeypatch, capsys, ledger, tmp_path, write):
    """An OSError of a path that cannot be written (here: a folder under a plain file) is an
    expected error, exit 2, and the message names the path."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    target = blocker / "run"

    def run(args):
        if write == "mkdir":
            target.mkdir(parents=True, exist_ok=True)
        else:
            pio.atomic_write_json(target / "summary.json", {"a": 1})

    monkeypatch.setattr(budget_command, "run", run)
    assert main(["budget", "list", "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert len(lines(err)) == 1 and err.startswith("pate budget: error: ")
    assert str(target) in err and INTERNAL not in err


def test_run_dir_error_from_a_command_exit_2(monkeypatch, capsys, ledger, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")

    def run(args):
        pio.ensure_writable_dir(blocker, flag="--run-dir")

    monkeypatch.setattr(budget_command, "run", run)
    assert main(["budget", "list", "--ledger", str(ledger)]) == 2
    assert lines(capsys.readouterr().err) == [
        f"pate budget: error: --run-dir {blocker} exists and is not a directory; choose a "
        "directory path"
    ]


def test_classification():
    def caught(fn, *args):
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the point of the test
            return exc
        raise AssertionError("no exception")

    # Our validation and every deliberate raise in pate-learn: typed errors, exit 2.
    assert classify(caught(validation.check_positive, -1.0, "--sigma"))[0] == 2
    assert classify(caught(validation.check_positive, "x", "--sigma"))[0] == 2  # a TypeError
    assert isinstance(caught(validation.check_positive, "x", "--sigma"), TypeError)
    # Raised by the interpreter or inside numpy, or a plain ValueError: a bug.
    assert classify(caught(np.reshape, np.arange(3), (2, 2)))[0] == 70
    assert classify(ValueError("never raised"))[0] == 70
    assert classify(caught(_bug, None))[0] == 70
    assert classify(caught(dataset_digest, np.array([1, 1])))[0] == 2
    assert classify(PermissionError(13, "Permission denied", "/x/run")) == (
        2,
        "Permission denied: /x/run (check the path and its permissions)",
    )
    assert classify(OSError(28, "No space left on device", "/x/run/votes.npy"))[0] == 2
    assert classify(OSError(5, "Input/output error"))[0] == 70
    assert classify(CorruptFileError("f is bad", path="f")) == (2, "f is bad")
    assert classify(PateError("budget gone"))[0] == 3


# --- Ctrl-C ---------------------------------------------------------------------------------


def test_keyboard_interrupt_in_process(monkeypatch, capsys, ledger):
    def run(args):
        raise KeyboardInterrupt

    monkeypatch.delenv("PATE_DEBUG", raising=False)
    monkeypatch.setattr(budget_command, "run", run)
    assert main(["budget", "list", "--ledger", str(ledger)]) == 130
    assert lines(capsys.readouterr().err) == ["pate budget: interrupted"]


def test_ctrl_c_exits_130_without_traceback(tmp_path, ledger):
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        import pate.cli.commands.budget as b
        from pate.cli import main
        def run(args):
            print("ready", flush=True)
            time.sleep(60)
        b.run = run
        sys.exit(main(sys.argv[1:]))
    """)
    )
    env = {k: v for k, v in os.environ.items() if k != "PATE_DEBUG"}
    # A suite started in the background of a non-interactive shell inherits SIGINT ignored
    # (and Python then installs no KeyboardInterrupt handler): give the child the default, as a
    # terminal's foreground process has.
    proc = subprocess.Popen(
        [PYTHON, str(script), "budget", "list", "--ledger", str(ledger)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert lines(err) == ["pate budget: interrupted"]


# --- closed standard output -----------------------------------------------------------------


def test_closed_pipe_is_silent_exit_0(big_ledger):
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [PYTHON, "-m", "pate", "budget", "list", "--ledger", str(big_ledger), "--json"],
            cwd=REPO,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert done.stderr == b""


@pytest.mark.parametrize("argv", [["budget", "list", "--json"], ["budget", "list"]])
def test_reader_that_stops_early(big_ledger, argv):
    """`pate budget list --json | head -1`: the reader exits after one line."""
    pate = subprocess.Popen(
        [PYTHON, "-m", "pate", *argv, "--ledger", str(big_ledger)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader = subprocess.run(
        [PYTHON, "-c", "import sys; print(sys.stdin.readline(), end='')"],
        stdin=pate.stdout,
        capture_output=True,
        timeout=120,
    )
    pate.stdout.close()
    err = pate.stderr.read()
    assert pate.wait(timeout=120) == 0, err
    assert err == b""
    assert reader.stdout.strip()  # it did read the first line


def test_full_output_still_arrives(big_ledger):
    done = _pate("budget", "list", "--ledger", big_ledger, "--json")
    assert done.returncode == 0 and done.stderr == ""
    assert len(json.loads(done.stdout)) == 1000


def test_other_broken_pipes_are_not_swallowed(monkeypatch, capsys, ledger):
    """A BrokenPipeError that is not a closed standard output (e.g. a dead worker) is a bug."""

    def run(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(budget_command, "run", run)
    assert main(["budget", "list", "--ledger", str(ledger)]) == 70
    assert "internal error: BrokenPipeError" in capsys.readouterr().err


# --- pate.core.io readers ------------------------------------------------------------------------


def test_read_json(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2]}')
    assert pio.read_json(good) == {"a": [1, 2]}
    bad = tmp_path / "summary.json"
    bad.write_text('{"a": 1,\n "b": }')
    with pytest.raises(CorruptFileError, match="line 2 column 7") as info:
        pio.read_json(bad, what="teacher summary, written by `pate train-teachers`")
    assert info.value.path == str(bad) and str(bad) in str(info.value)
    assert "pate train-teachers" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InputError)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(CorruptFileError, match="binary.json"):
        pio.read_json(binary)
    with pytest.raises(FileNotFoundError, match="pate vote") as info:
        pio.read_json(tmp_path / "none.json", what="votes summary (written by `pate vote`)")
    assert str(tmp_path / "none.json") in str(info.value)
    with pytest.raises(CorruptFileError, match="is a directory"):
        pio.read_json(tmp_path)


def test_load_npy_and_npz(tmp_path):
    arr = np.arange(12).reshape(3, 4)
    pio.atomic_save_npy(tmp_path / "a.npy", arr)
    pio.atomic_savez(tmp_path / "z.npz", x=arr, y=np.ones(2))
    np.testing.assert_array_equal(pio.load_npy(tmp_path / "a.npy"), arr)
    loaded = pio.load_npz(tmp_path / "z.npz")
    assert sorted(loaded) == ["x", "y"]
    np.testing.assert_array_equal(loaded["x"], arr)

    whole_npy = (tmp_path / "a.npy").read_bytes()
    whole_npz = (tmp_path / "z.npz").read_bytes()
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    cases = {
        "empty.npy": b"",
        "short.npy": whole_npy[:40],
        "garbage.npy": b"not numpy " * 20,
        "short.npz": whole_npz[: len(whole_npz) // 2],
        "garbage.npz": b"PK" + b"\x00" * 64,
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    for name in [*cases, "obj.npy"]:
        loader = pio.load_npz if name.endswith(".npz") else pio.load_npy
        with pytest.raises(CorruptFileError) as info:
            loader(tmp_path / name, what="--votes")
        assert str(tmp_path / name) in str(info.value) and "--votes" in str(info.value)
        assert info.value.path == str(tmp_path / name)
    with pytest.raises(CorruptFileError, match="pickled"):
        pio.load_npy(tmp_path / "obj.npy")
    with pytest.raises(CorruptFileError, match="not a .npy array"):
        pio.load_npy(tmp_path / "z.npz")
    with pytest.raises(CorruptFileError, match="not an .npz archive"):
        pio.load_npz(tmp_path / "a.npy")
    with pytest.raises(FileNotFoundError, match="none.npy"):
        pio.load_npy(tmp_path / "none.npy")
    with pytest.raises(TypeError, match="path"):
        pio.load_npy(3)


def test_ensure_writable_dir(tmp_path):
    made = pio.ensure_writable_dir(tmp_path / "a" / "b", flag="--run-dir")
    assert made.is_dir() and list(made.iterdir()) == []  # the write probe is removed
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker, blocker / "sub"):
        with pytest.raises(RunDirError) as info:
            pio.ensure_writable_dir(target, flag="--run-dir")
        assert info.value.path == str(target) and info.value.flag == "--run-dir"
        assert str(target) in str(info.value) and "--run-dir" in str(info.value)
        assert classify(info.value)[0] == 2


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes to read-only folders"
)
def test_ensure_writable_dir_read_only(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match="not writable"):
            pio.ensure_writable_dir(locked, flag="--run-dir")
    finally:
        locked.chmod(0o700)


# --- bad input is refused before any work or charge (issue #30) ------------------------------


def _npz_config(tmp_path, small_digits, digits, **replace):
    """configs/digits.toml (short training) on an npz copy of the digits splits, with
    ``replace``'s arrays swapped in."""
    arrays = dict(
        x_private=digits.private.x,
        y_private=digits.private.y,
        x_public=digits.public.x,
        x_evaluation=digits.evaluation.x,
        y_evaluation=digits.evaluation.y,
        class_names=np.array([str(i) for i in range(10)]),  # the label set, declared
    )
    arrays.update(replace)
    np.savez(tmp_path / "data.npz", **arrays)
    return small_digits(
        tmp_path,
        replace=(
            (
                'name = "digits"\n\n[partition]',
                f'name = "npz:{tmp_path / "data.npz"}"\nrecords = 1000\n\n[partition]',
            ),
        ),
    )


def _spoiled(array, index, value, dtype=np.float64):
    array = np.array(array, dtype=dtype)
    array[index] = value
    return array


@pytest.mark.parametrize("command", ["run", "partition"])
@pytest.mark.parametrize(
    "key, index, value, message",
    [
        (
            "x_private",
            (3, 0, 2, 5),
            np.nan,
            "private split (x_private): row 3, position (0, 2, 5) is nan",
        ),
        (
            "x_private",
            (7, 0, 0, 0),
            np.inf,
            "private split (x_private): row 7, position (0, 0, 0) is inf",
        ),
        (
            "x_public",
            (8, 0, 1, 1),
            np.nan,
            "public split (x_public): row 8, position (0, 1, 1) is nan",
        ),
        (
            "x_evaluation",
            (0, 0, 7, 7),
            -np.inf,
            "evaluation split (x_evaluation): row 0, position (0, 7, 7) is -inf",
        ),
        (
            "y_private",
            9,
            2.5,
            "private split (y_private): row 9 is 2.5, not an integer class index",
        ),
        (
            "y_private",
            4,
            10**7,
            "private split: row 4 has label 10000000, outside the declared 10 classes",
        ),
    ],
)
def test_bad_records_are_refused_before_any_work_file_or_charge(
    capsys, tmp_path, small_digits, digits, command, key, index, value, message
):
    """On main these were trained on and charged (NaN private features: exit 0; NaN public
    features: two ledger events, then a failure in the student stage), truncated (2.5 -> 2) or
    sized into 10**7 + 1 classes (17 GB in the teachers stage)."""

    dtype = np.int64 if isinstance(value, int) else np.float64
    config = _npz_config(
        tmp_path, small_digits, digits, **{key: _spoiled(_array(digits, key), index, value, dtype)}
    )
    run_dir, ledger_path = tmp_path / "run", tmp_path / "ledger.sqlite3"
    status = main(
        [
            command,
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
            "--ledger",
            str(ledger_path),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(lines(err)) == 1 and err.startswith(f"pate {command}: error: npz:"), err
    assert message in err and "nothing was trained, written or charged" in err
    assert not run_dir.exists() and not ledger_path.exists()  # no run, no ledger, no charge


def _array(digits, key):
    xy, split = key.split("_")
    part = getattr(digits, split)
    return part.x if xy == "x" else part.y


# --- a full disk is an expected error (issue #30) --------------------------------------------


def _fail_fsync_of(monkeypatch, fragment: str, code: int = 28):
    """Make ``os.fsync`` fail with ``code`` (ENOSPC) for files whose path holds ``fragment``, as
    a full disk does when the data reaches it; every other file is written as usual."""
    real = os.fsync
    failed = []

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if fragment in path:
            failed.append(path)
            raise OSError(code, os.strerror(code))  # no file name, like the real one
        return real(fd)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file is written")
    monkeypatch.setattr(os, "fsync", fsync)
    return failed


@pytest.mark.parametrize("code, name", [(28, "ENOSPC"), (122, "EDQUOT"), (30, "EROFS")])
def test_a_full_disk_during_a_write_is_one_line_exit_2_and_keeps_the_old_file(
    monkeypatch, capsys, ledger, tmp_path, code, name
):
    """Was "internal error ... this is a bug" (exit 70): the OSError of a write names no file."""
    target = tmp_path / "out" / "summary.json"
    target.parent.mkdir()
    target.write_text('{"old": true}\n')
    failed = _fail_fsync_of(monkeypatch, "summary.json", code)
    monkeypatch.setattr(
        budget_command, "run", lambda args: pio.atomic_write_json(target, {"new": True})
    )
    assert main(["budget", "list", "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert failed and len(lines(err)) == 1, err
    assert err.startswith(
        f"pate budget: error: cannot write {target}: {os.strerror(code)} ({name}); "
    )
    assert INTERNAL not in err
    assert target.read_text() == '{"old": true}\n'  # the old content, whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]  # no temp file


def test_an_unnamed_full_disk_error_is_expected():
    status, message = classify(OSError(28, "No space left on device"))
    assert status == 2 and message.startswith("No space left on device while writing an output")
    assert classify(OSError(28, "No space left on device", "/x/labels.npy")) == (
        2,
        "No space left on device: /x/labels.npy (free space on that file system and run the "
        "command again)",
    )


def test_a_full_disk_in_the_aggregate_stage_charges_nothing_unpublished(
    monkeypatch, capsys, tmp_path, small_digits, one_torch_thread
):
    """The answers reach the pending file inside their ledger reservation: a full disk there
    gives the reservation back (nothing charged); a full disk when the charged answers are
    published keeps the pending file, and --resume publishes them without charging again."""
    ledger_path, run_dir = tmp_path / "ledger.sqlite3", tmp_path / "run"
    argv = [
        "run",
        "--config",
        str(small_digits(tmp_path)),
        "--run-dir",
        str(run_dir),
        "--ledger",
        str(ledger_path),
        "--no-progress",
    ]
    assert main([*argv, "--until", "votes"]) == 0
    capsys.readouterr()

    def charged() -> int:
        run_id = json.loads((run_dir / "run.json").read_text())["run_id"] + ":aggregate"
        with Ledger(ledger_path) as led:
            (dataset,) = [d["digest"] for d in led.datasets()]
            return sum(e.event.answered for e in led.events(dataset, run_id=run_id))

    def temp_files():
        return sorted(str(p) for p in run_dir.rglob("*.tmp"))

    with monkeypatch.context() as patch:  # the disk fills while the answers are saved pending
        failed = _fail_fsync_of(patch, "aggregate.pending")
        assert main([*argv, "--resume", "--until", "aggregate"]) == 2
    err = capsys.readouterr().err
    assert failed and lines(err)[-1].startswith(
        f"pate run: error: cannot write {run_dir / rundir.PENDING}: No space left on "
        "device (ENOSPC); free space"
    ), err
    assert charged() == 0 and not (run_dir / "labels.npy").exists() and temp_files() == []

    with monkeypatch.context() as patch:  # charged, then the disk fills while publishing
        failed = _fail_fsync_of(patch, "labels.npy")
        assert main([*argv, "--resume", "--until", "aggregate"]) == 2
    err = capsys.readouterr().err
    assert failed and f"cannot write {run_dir / 'labels.npy'}: No space left" in lines(err)[-1]
    spent = charged()
    assert spent > 0 and (run_dir / rundir.PENDING).exists() and temp_files() == []

    assert main([*argv, "--resume", "--until", "aggregate"]) == 0  # space freed
    answered = np.load(run_dir / "answered.npy")
    assert charged() == spent == int(answered.sum())  # published what was charged, once
    assert not (run_dir / rundir.PENDING).exists()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 300 KiB tmpfs (a disk that fills up), where this machine lets us mount one."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_real_full_disk_ends_pate_run_with_one_line(tmp_path, small_digits, small_tmpfs):
    ledger_path, run_dir = tmp_path / "ledger.sqlite3", small_tmpfs / "run"
    done = _pate(
        "run",
        "--config",
        small_digits(tmp_path),
        "--run-dir",
        run_dir,
        "--ledger",
        ledger_path,
        "--no-progress",
        env={"PATE_DEBUG": "", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2, done.stderr
    last = lines(done.stderr)[-1]
    assert last.startswith(f"pate run: error: cannot write {run_dir}/"), done.stderr
    assert "No space left on device (ENOSPC); free space" in last and INTERNAL not in done.stderr
    assert [line for line in lines(done.stderr) if "error" in line] == [last]
    assert sorted(small_tmpfs.rglob("*.tmp")) == []  # no half-written file
    with Ledger(ledger_path) as led:  # nothing was charged
        assert all(led.events(d["digest"]) == [] for d in led.datasets())


@pytest.mark.parametrize("force", [False, True])
def test_init_config_on_a_full_disk_leaves_no_half_written_config(capsys, small_tmpfs, force):
    with open(small_tmpfs / "filler", "wb", buffering=0) as fh:  # fill the disk to the last page
        with pytest.raises(OSError, match="No space left"):
            while True:
                fh.write(b"\0" * 4096)
    target = small_tmpfs / "digits.toml"
    status = main(
        ["init-config", "digits", "--output", str(target), *(["--force"] if force else [])]
    )
    err = capsys.readouterr().err
    assert status == 2 and len(lines(err)) == 1, err
    assert err.startswith(
        f"pate init-config: error: cannot write {target}: No space left on device"
    )
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler"]


class _Payload:
    """Unpickling this creates ``marker``: proof that a pickle was loaded (code ran)."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "a"))


def test_a_crafted_student_checkpoint_is_one_line_exit_2(tmp_path, small_digits, capsys):
    """A student checkpoint that torch.load(weights_only=True) refuses (here: a pickled object)
    is named, said not to be pate-learn's, exit 2 (main: exit 70, "internal error")."""
    torch = pytest.importorskip("torch")
    run_dir = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--config",
                str(small_digits(tmp_path)),
                "--run-dir",
                str(run_dir),
                "--no-ledger",
                "--until",
                "aggregate",
                "--no-progress",
            ]
        )
        == 0
    )
    marker = tmp_path / "fired"
    planted = run_dir / "student" / "student_checkpoint.pt"
    planted.parent.mkdir(exist_ok=True)
    torch.save({"format": "pate-learn-student/1", "model": _Payload(marker)}, planted)
    capsys.readouterr()
    assert main(["train-student", "--run-dir", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    # one error line, no traceback (a logged warning before it may share stderr: say which)
    errors = [line for line in lines(err) if line.startswith("pate train-student: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    (line,) = errors
    assert INTERNAL not in line
    assert str(planted) in line and "not written by pate-learn" in line
    assert f"delete {planted}" in line
    assert not marker.exists() and not (run_dir / "student.pt").exists()
