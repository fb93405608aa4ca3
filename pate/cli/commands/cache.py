"""`pate cache list|clear`: the on-disk front-end feature cache (docs/feature_cache.md): that
of ``--cache-dir DIR``, else of ``--config FILE|NAME``, else ``$PATE_FEATURE_CACHE``, else
``runs/.feature-cache``.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from pate.analysis.errors import InputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "cache",
        help="list or clear the on-disk cache of front-end features and converted data",
        description=(
            "The front-end features of every split a run computes (ScatterNet, fixed filters), "
            "and the data a run reads converted once (a built-in dataset's training images as "
            "float32, an image folder decoded, an npz decompressed or put in split order), are "
            "kept in a cache folder and reused by later runs and configs on the same data. They "
            "are derived from the PRIVATE records: the folder is owner-only (0700). `list` shows "
            "its entries and their sizes; `clear` deletes the folder (do it when no run is "
            "going; the next run recomputes what it needs)."
        ),
    )
    actions = p.add_subparsers(dest="action", metavar="{list,clear}")
    actions.required = True
    for name, help_text in (
        ("list", "the entries: front-end, rows, shape, size, state"),
        ("clear", "delete every entry (and the folder)"),
    ):
        a = actions.add_parser(name, help=help_text, description=help_text)
        where = a.add_mutually_exclusive_group()
        where.add_argument("--cache-dir", help="the cache folder")
        where.add_argument(
            "--config",
            help="the cache of this config's runs (a TOML file, or a "
            "config shipped with pate-learn)",
        )
        if name == "list":
            a.add_argument("--json", action="store_true", help="print the entries as JSON")
        a.set_defaults(func=run)


def cache_root(args: argparse.Namespace) -> pathlib.Path | None:
    """The folder the command acts on (None: the cache is switched off)."""
    from pate.teachers.feature_cache import resolve_root

    if args.cache_dir is not None:
        if not args.cache_dir:
            raise InputError("--cache-dir must name a folder, got an empty string")
        return pathlib.Path(args.cache_dir).expanduser()
    if args.config is not None:
        from pate.run.config import load

        config = load(args.config, ledger=False)
        return config.run.feature_cache_root(run_dir=config.run.directory())
    return resolve_root(None, runs_root=pathlib.Path("runs"))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    from pate.teachers.feature_cache import ENV, FeatureCache

    root = cache_root(args)
    if root is None:
        print(
            f"the feature cache is off (${ENV} or [run] feature_cache = false): nothing to "
            f"{args.action}"
        )
        return 0
    cache = FeatureCache(root)
    if args.action == "clear":
        count, freed = cache.clear()
        print(
            f"removed {count} entries ({_size(freed)}) and the folder {root}"
            if count
            else f"the feature cache {root} holds no entries; nothing removed"
        )
        return 0
    entries = cache.entries()
    if args.json:
        total = sum(e["bytes"] for e in entries)
        print(json.dumps({"root": str(root), "bytes": total, "entries": entries}, indent=2))
        return 0
    if not entries:
        print(f"the feature cache {root} holds no entries")
        return 0
    print(
        f"{'entry':<14} {'front-end':<14} {'rows':>8} {'shape':<16} {'size':>9}  "
        f"{'created':<20} state"
    )
    for e in entries:
        shape = "x".join(str(s) for s in e["shape"][1:]) if e["shape"] else "-"
        print(
            f"{e['name'][:14]:<14} {e['front_end'] or '-':<14} {e['rows'] or '-':>8} "
            f"{shape:<16} {_size(e['bytes']):>9}  {e['created'] or '-':<20} {e['state']}"
        )
    print(f"{len(entries)} entries, {_size(sum(e['bytes'] for e in entries))} in {root}")
    return 0
