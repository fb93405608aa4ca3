"""The ``pate`` command: argparse subcommands, one module each under ``pate.commands``.

Each command module defines ``add_parser(subparsers)`` (which sets ``func``) and must not
import torch at module import time, so that ``pate analyze`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# One line per subcommand module; keep this list sorted by pipeline stage.
COMMAND_MODULES = (
    "pate.commands.run",
    "pate.commands.partition",
    "pate.commands.train_teachers",
    "pate.commands.vote",
    "pate.commands.aggregate",
    "pate.commands.train_student",
    "pate.commands.analyze",
    "pate.commands.report",
    "pate.commands.budget",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pate",
        description="PATE: private aggregation of teacher ensembles, with an auditable privacy report.")
    from pate import __version__
    parser.add_argument("--version", action="version", version=f"pate-learn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        # Input errors: one clear line, no traceback, non-zero exit.
        print(f"pate {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # typed pate errors (budget, ledger) also end cleanly
        from analysis.errors import PateError
        if isinstance(exc, PateError):
            print(f"pate {args.command}: error: {exc}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
