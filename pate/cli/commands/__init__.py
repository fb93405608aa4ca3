"""Subcommands of the ``pate`` command: one module each, with ``add_parser(subparsers)`` (see
pate.cli)."""
