"""How the ``pate`` command ends on errors: one line and a documented exit status for expected
errors, "internal error" (exit 70) for bugs, ``--debug`` / PATE_DEBUG=1 for the traceback,
Ctrl-C (exit 130), a closed standard output (exit 0, silent); and the file readers of ``pate.io``
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

import pate.commands.budget as budget_command
from pate import io as pio
from pate.analysis import validation
from pate.analysis.errors import CorruptFileError, InputError, PateError, RunDirError
from pate.cli import EXIT_SOFTWARE, classify, main, raised_on_purpose
from pate.ledger import Ledger, dataset_digest

REPO = pathlib.Path(__file__).resolve().parents[2]
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
    return subprocess.run([PYTHON, "-m", "pate", *map(str, argv)], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=120, **kw)


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
    assert main(["--debug", "analyze", "--votes", str(votes_file), "--mechanism", "gnmax",
                 "--sigma", "-1", "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "check_positive" in err
    assert lines(err)[-1] == "pate analyze: error: --sigma must be > 0, got -1.0"


def test_internal_error_in_a_subprocess_exits_70_and_debug_shows_where(tmp_path, ledger):
    script = tmp_path / "bug.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import pate.commands.budget as b
        from pate.cli import main
        def run(args):
            return {{"a": 1}}["b"]
        b.run = run
        sys.exit(main(sys.argv[1:]))
    """))
    argv = [PYTHON, str(script), "budget", "list", "--ledger", str(ledger)]
    env = {k: v for k, v in os.environ.items() if k != "PATE_DEBUG"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 70, done.stderr
    assert lines(done.stderr) == ["pate budget: internal error: KeyError: 'b' -- this is a bug; rerun "
                                  "with --debug (or PATE_DEBUG=1) for the traceback and report it"]
    done = subprocess.run(argv, cwd=REPO, env={**env, "PATE_DEBUG": "1"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 70
    assert "Traceback (most recent call last)" in done.stderr and 'return {"a": 1}["b"]' in done.stderr


# --- expected errors ------------------------------------------------------------------------


def test_deliberate_bad_value_is_one_line_exit_2(tmp_path, votes_file):
    done = _pate("analyze", "--votes", votes_file, "--mechanism", "gnmax", "--sigma", "-1",
                 "--delta", "1e-5", env={"PATE_DEBUG": ""})
    assert done.returncode == 2
    assert lines(done.stderr) == ["pate analyze: error: --sigma must be > 0, got -1.0"]
    assert done.stdout == ""


@pytest.mark.parametrize("content", [b"", b"\x93NUMPY\x01\x00v\x00{'descr': '<i8'", b"garbage" * 40])
def test_corrupt_votes_file_is_named(capsys, tmp_path, content):
    path = tmp_path / "votes.npy"
    path.write_bytes(content)
    assert main(["analyze", "--votes", str(path), "--mechanism", "gnmax", "--sigma", "4",
                 "--delta", "1e-5"]) == 2
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
    # Ledger.set_budget raises ValueError itself (a `raise` statement in pate/ledger.py).
    digest = dataset_digest(np.arange(7))
    assert main(["budget", "set", "--dataset", digest, "--eps", "1", "--delta", "1e-5",
                 "--name", "five", "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert lines(err)[0].startswith("pate budget: error: name 'five' already names dataset")


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
        "directory path"]


def test_classification():
    def caught(fn, *args):
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the point of the test
            return exc
        raise AssertionError("no exception")

    # Our validation layer and explicit raises in pate-learn's modules: expected.
    assert raised_on_purpose(caught(validation.check_positive, -1.0, "--sigma"))
    assert raised_on_purpose(caught(validation.check_positive, "x", "--sigma"))  # TypeError
    assert raised_on_purpose(caught(dataset_digest, np.array([1, 1])))  # pate/ledger.py
    # Raised by the interpreter or inside numpy: a bug.
    assert not raised_on_purpose(caught(_bug, None))
    assert not raised_on_purpose(caught(np.reshape, np.arange(3), (2, 2)))
    assert not raised_on_purpose(ValueError("never raised"))
    assert classify(caught(_bug, None))[0] == 70
    assert classify(caught(dataset_digest, np.array([1, 1])))[0] == 2
    assert classify(PermissionError(13, "Permission denied", "/x/run")) == (
        2, "Permission denied: /x/run (check the path and its permissions)")
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
    script.write_text(textwrap.dedent("""
        import sys, time
        import pate.commands.budget as b
        from pate.cli import main
        def run(args):
            print("ready", flush=True)
            time.sleep(60)
        b.run = run
        sys.exit(main(sys.argv[1:]))
    """))
    env = {k: v for k, v in os.environ.items() if k != "PATE_DEBUG"}
    # A suite started in the background of a non-interactive shell inherits SIGINT ignored
    # (and Python then installs no KeyboardInterrupt handler): give the child the default, as a
    # terminal's foreground process has.
    proc = subprocess.Popen([PYTHON, str(script), "budget", "list", "--ledger", str(ledger)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
        done = subprocess.run([PYTHON, "-m", "pate", "budget", "list", "--ledger", str(big_ledger),
                               "--json"], cwd=REPO, stdout=write_end, stderr=subprocess.PIPE,
                              timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert done.stderr == b""


@pytest.mark.parametrize("argv", [["budget", "list", "--json"], ["budget", "list"]])
def test_reader_that_stops_early(big_ledger, argv):
    """`pate budget list --json | head -1`: the reader exits after one line."""
    pate = subprocess.Popen([PYTHON, "-m", "pate", *argv, "--ledger", str(big_ledger)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = subprocess.run([PYTHON, "-c", "import sys; print(sys.stdin.readline(), end='')"],
                            stdin=pate.stdout, capture_output=True, timeout=120)
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


# --- pate.io readers ------------------------------------------------------------------------


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
    cases = {"empty.npy": b"", "short.npy": whole_npy[:40], "garbage.npy": b"not numpy " * 20,
             "short.npz": whole_npz[: len(whole_npz) // 2], "garbage.npz": b"PK" + b"\x00" * 64}
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


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes to read-only folders")
def test_ensure_writable_dir_read_only(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match="not writable"):
            pio.ensure_writable_dir(locked, flag="--run-dir")
    finally:
        locked.chmod(0o700)


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
    assert main(["run", "--config", str(small_digits(tmp_path)), "--run-dir", str(run_dir),
                 "--no-ledger", "--until", "aggregate", "--no-progress"]) == 0
    marker = tmp_path / "fired"
    planted = run_dir / "student" / "student_checkpoint.pt"
    planted.parent.mkdir(exist_ok=True)
    torch.save({"format": "pate-learn-student/1", "model": _Payload(marker)}, planted)
    capsys.readouterr()
    assert main(["train-student", "--run-dir", str(run_dir), "--no-progress"]) == 2
    (line,) = lines(capsys.readouterr().err)
    assert line.startswith("pate train-student: error: ") and INTERNAL not in line
    assert str(planted) in line and "not written by pate-learn" in line
    assert f"delete {planted}" in line
    assert not marker.exists() and not (run_dir / "student.pt").exists()
