"""The ``pate`` command: argparse subcommands, one module each under ``pate.cli.commands``
(each defines ``add_parser(subparsers)``, which sets ``func``, and imports no torch at import
time, so that ``pate analyze`` starts fast). :func:`main` runs one command and returns its exit
status; how errors end (one line, exit 2 input / 3 budget / 70 a bug / 130 Ctrl-C; ``--debug``
or ``PATE_DEBUG=1`` for the traceback; a closed standard output ends quietly): docs/cli.md,
"Errors and exit status". The error's type alone decides: every deliberate error is a
``PateError``; anything else is a bug."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
import traceback

# One line per subcommand module; keep this list sorted by pipeline stage.
COMMAND_MODULES = (
    "pate.cli.commands.init_config",
    "pate.cli.commands.plan",
    "pate.cli.commands.run",
    "pate.cli.commands.stage_cli",  # partition, train-teachers, vote, aggregate, train-student
    "pate.cli.commands.analyze",
    "pate.cli.commands.report",
    "pate.cli.commands.export",
    "pate.cli.commands.budget",
    "pate.cli.commands.cache",
)

EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_SOFTWARE = 70  # sysexits.h EX_SOFTWARE
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

DEBUG_HELP = "on any error, print the full traceback (also: environment PATE_DEBUG=1)"

# The errnos of a path that cannot be created or written: expected, the message names the path.
_PATH_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EACCES EPERM EROFS ENOSPC EDQUOT ENOTDIR EISDIR EEXIST ENAMETOOLONG ELOOP ENOENT"
    ).split()
    if hasattr(errno, name)
)

# The errnos of a full disk or a read-only file system: expected even where no file is named
# (pate.core.io names the file of every write it does; a library's write may not).
_NO_ROOM_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS") if hasattr(errno, name)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pate",
        description="PATE: private aggregation of teacher ensembles, with an auditable privacy report.",
    )
    from pate import __version__

    parser.add_argument("--version", action="version", version=f"pate-learn {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    _add_debug_flag(sub)
    return parser


def _add_debug_flag(subparsers: argparse._SubParsersAction) -> None:
    """Let ``--debug`` also come after the command (``pate budget show ... --debug``)."""
    for child in subparsers.choices.values():
        # SUPPRESS: absent after the command, the top-level value stays.
        child.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
        for action in child._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_debug_flag(action)


def _env_debug() -> bool:
    return os.environ.get("PATE_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: str | None = None
    options = argv[: argv.index("--")] if "--" in argv else argv
    debug = _env_debug() or "--debug" in options  # until the arguments are parsed
    from pate.core import threads

    threads.prepare_environment()  # idle OpenMP threads sleep: before anything loads torch
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        debug = _env_debug() or bool(getattr(args, "debug", False))
        with _progress_log(command):
            status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
        return status
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        _say(f"{_prog(command)}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not _stdout_closed():
            return _report(sys.exc_info()[1], command, debug)
        _silence_stdout()
        return 0
    except Exception as exc:
        return _report(exc, command, debug)


@contextlib.contextmanager
def _progress_log(command: str | None):
    """The library's ``logging.getLogger("pate")`` messages (stage progress, warnings) as
    ``pate <command>: ...`` lines on stderr while one command runs; removed afterwards."""
    import logging

    logger, handler = logging.getLogger("pate"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{_prog(command)}: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _prog(command: str | None) -> str:
    return f"pate {command}" if command else "pate"


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed as well: nothing left to tell
        pass


def _report(exc: BaseException, command: str | None, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
        sys.stderr.flush()
    status, message = classify(exc)
    if status == EXIT_SOFTWARE:
        _say(
            f"{_prog(command)}: internal error: {_type_name(exc)}: {message} -- this is a bug; "
            "rerun with --debug (or PATE_DEBUG=1) for the traceback and report it"
        )
    else:
        _say(f"{_prog(command)}: error: {message}")
    return status


def classify(exc: BaseException) -> tuple[int, str]:
    """``(exit status, message)`` of an exception that ended a command (see the docstring)."""
    from pate.analysis.errors import PateError

    if isinstance(exc, PateError):
        code = EXIT_INPUT if isinstance(exc, (ValueError, TypeError, OSError)) else EXIT_BUDGET
        return code, _message(exc)
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return EXIT_INPUT, _os_message(exc)
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS and exc.filename is not None:
        return EXIT_INPUT, _os_message(exc)
    if isinstance(exc, OSError) and exc.errno in _NO_ROOM_ERRNOS:
        return EXIT_INPUT, (
            f"{exc.strerror or _message(exc)} while writing an output (rerun with "
            "--debug to see which); free space on that file system (or write "
            "elsewhere) and run the command again"
        )
    return EXIT_SOFTWARE, _message(exc)


def _message(exc: BaseException) -> str:
    return str(exc) or _type_name(exc)


def _os_message(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        target = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        hint = (
            ""
            if isinstance(exc, FileNotFoundError)
            else " (free space on that file system and run the command again)"
            if exc.errno in _NO_ROOM_ERRNOS - {errno.EROFS}
            else " (check the path and its permissions)"
        )
        return f"{exc.strerror}: {target}{hint}"
    return _message(exc)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (so a BrokenPipeError is it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False  # not a real file (captured output): the broken pipe was something else
    try:
        import select

        poller = select.poll()
    except (ImportError, AttributeError):  # no poll() on this platform: assume standard output
        return True
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _silence_stdout() -> None:
    """Point standard output at devnull, so that the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, ValueError, OSError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
