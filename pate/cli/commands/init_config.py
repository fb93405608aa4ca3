"""`pate init-config`: an editable copy of a config that ships with pate-learn (docs/cli.md):
:func:`packaged_name` (the packaged name a NAME means), :func:`copy_config` (writes the copy)."""

from __future__ import annotations

import argparse
import pathlib
import re


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "init-config",
        help="write an editable copy of a packaged config (digits, fashion-mnist, ...)",
        description=(
            "Write an editable copy of a config that ships with pate-learn, to change it and run "
            "it with `pate run --config FILE`. The packaged configs also run as they are: "
            "`pate run --config digits`. `--list` shows them; `own-data` is a documented "
            "template for your own data (CSV, .npz or an image folder)."
        ),
    )
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="a packaged config (see --list), e.g. digits, fashion-mnist, own-data",
    )
    p.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="where to write the copy (default: the packaged file name, e.g. "
        "digits.toml, in the working directory; a folder: that name inside it)",
    )
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument(
        "--list",
        action="store_true",
        dest="list_configs",
        help="list the packaged configs and exit",
    )
    p.set_defaults(func=run)


def packaged_name(name: str) -> str:
    """The packaged config ``name`` means (``-``/``_``, case and a ``.toml`` suffix ignored);
    else ``ConfigError`` listing the packaged names."""
    from pate.run.config import packaged_configs
    from pate.teachers.errors import ConfigError

    shipped = packaged_configs()
    text = str(name).strip()
    key = text[: -len(".toml")] if text.lower().endswith(".toml") else text
    key = key.lower().replace("_", "-")
    if key not in shipped:
        listed = ", ".join(shipped) or "(none found: is pate-learn installed?)"
        raise ConfigError(
            f"init-config NAME: {text!r} is not a config that ships with "
            f"pate-learn; the packaged configs are: {listed} "
            "(`pate init-config --list` describes them)"
        )
    return key


def _describe(entry, *, width: int = 110) -> str:
    """The first sentence of a packaged config's opening comment, at most ``width`` characters."""
    words: list[str] = []
    for line in entry.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line.startswith("#") or not line.lstrip("#").strip():
            break
        words += line.lstrip("#").split()
    text = " ".join(words)
    end = re.search(r"\.\s(?!\d)", text)  # "et al. 2018" does not end the sentence
    text = text[: end.start() + 1] if end else text
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def copy_config(name: str, output=None, *, force: bool = False) -> pathlib.Path:
    """Copy the packaged config ``name`` to ``output`` (default: the packaged file's name in the
    working directory; a folder: that name inside it) and return its path; an existing file is
    overwritten only with ``force`` (else ``InputError``)."""
    from pate.analysis.errors import InputError
    from pate.run.config import packaged_configs

    entry = packaged_configs()[packaged_name(name)]
    target = pathlib.Path(entry.name) if output is None else pathlib.Path(output).expanduser()
    if target.is_dir():
        target = target / entry.name
    if not target.parent.is_dir():
        raise InputError(
            f"--output {target}: the folder {target.parent} does not exist; create "
            "it first, or choose another --output"
        )
    from pate.core.io import atomic_write_bytes, naming_write_errors

    content = entry.read_bytes()
    if not force:
        try:
            fh = open(target, "xb")  # exclusive: never replaces a file, even in a race
        except FileExistsError:
            raise InputError(
                f"{target} already exists: pass --force to overwrite it, or choose another --output"
            ) from None
        with naming_write_errors(target):
            try:
                with fh:
                    fh.write(content)
            except BaseException:  # a full disk: no half-written config is left behind
                target.unlink(missing_ok=True)
                raise
        return target
    atomic_write_bytes(target, content)  # --force: replaced in one step
    target.chmod(0o644)
    return target


def run(args: argparse.Namespace) -> int:
    from pate.run.config import packaged_configs
    from pate.teachers.errors import ConfigError

    if args.list_configs:
        if args.name is not None or args.output is not None or args.force:
            raise ConfigError("init-config --list takes no NAME, --output or --force")
        shipped = packaged_configs()
        width = max((len(n) for n in shipped), default=0)
        for name, entry in shipped.items():
            print(f"{name:<{width}}  {_describe(entry)}")
        folder = next(iter(shipped.values()), None)
        if folder is not None:
            print(
                f"\ninstalled in {pathlib.Path(str(folder)).parent}; "
                "run one with `pate run --config NAME`, copy one with `pate init-config NAME`"
            )
        return 0
    if args.name is None:
        raise ConfigError(
            f"init-config needs NAME (a packaged config: {', '.join(packaged_configs())}) or --list"
        )
    target = copy_config(args.name, args.output, force=args.force)
    print(
        f"wrote {target} (a copy of the packaged config {packaged_name(args.name)!r}); "
        f"edit it, then run: pate run --config {target}"
    )
    return 0
