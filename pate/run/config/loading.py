"""Reading a config: the packaged configs, a ``--config`` value resolved to a file, the TOML
read, the command-line settings merged in (:func:`load`, :func:`build`); nothing is planned
and no data is read (:func:`pate.run.config.planning.plan`)."""

from __future__ import annotations

import copy
import pathlib
import tomllib
from typing import Any

from pate.run.config.errors import SettingError
from pate.run.config.run_config import RunConfig
from pate.teachers.errors import ConfigError

#: Where the configs that ship with pate-learn lie: the folder ``configs`` of the package
#: ``pate`` (package data of the wheel; the top-level ``configs`` of a checkout links to it).
CONFIGS_PACKAGE = "pate"
CONFIGS_FOLDER = "configs"


def packaged_configs() -> dict[str, Any]:
    """The configs that ship with pate-learn (the folder ``pate/configs`` of the installed
    package): ``{name: file}``, sorted, the name being the file's stem with ``_`` written ``-``
    (``fashion_mnist.toml`` is ``fashion-mnist``); a file is a :class:`pathlib.Path` or, for a
    zipped install, an :class:`importlib.resources.abc.Traversable`."""
    from importlib import resources

    folder = resources.files(CONFIGS_PACKAGE).joinpath(CONFIGS_FOLDER)
    if not folder.is_dir():
        return {}
    found = {
        entry.name[: -len(".toml")].replace("_", "-"): entry
        for entry in folder.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    }
    return dict(sorted(found.items()))


def resolve_config(name_or_path) -> Any:
    """The file a ``--config`` value names: an existing file path is that file; otherwise the
    packaged config of that name (:func:`packaged_configs`; ``-`` and ``_`` are the same, case
    and a ``.toml`` suffix are ignored: ``fashion-mnist``, ``fashion_mnist.toml``); otherwise
    ``FileNotFoundError`` naming the value and listing the packaged names. Returns a
    :class:`pathlib.Path` (or a Traversable for a packaged config of a zipped install)."""
    path = pathlib.Path(name_or_path).expanduser()
    if path.is_file():
        return path
    text = str(name_or_path).strip()
    key = text[: -len(".toml")] if text.lower().endswith(".toml") else text
    key = key.lower().replace("_", "-")
    shipped = packaged_configs()
    if "/" not in text and "\\" not in text and key in shipped:
        return shipped[key]
    if path.is_dir():
        return path  # read_toml says that it is a directory
    names = ", ".join(shipped) or "(none found: is pate-learn installed?)"
    raise FileNotFoundError(
        f"--config {text}: no such file (relative paths are taken from the working directory "
        f"{pathlib.Path.cwd()}), and not the name of a config that ships with pate-learn: "
        f"{names}. Pass a path to a TOML file, or a packaged name (`pate init-config NAME` "
        f"writes an editable copy)"
    )


def read_toml(path) -> dict:
    """A TOML file as a dict; a missing file or bad TOML is one clear error (shared by every
    command that takes ``--config``). ``path`` is a file path or the name of a packaged config
    (:func:`resolve_config`)."""
    path = resolve_config(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(f"--config file not found: {path}") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"--config {path} is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None


def load(path, **options: Any) -> RunConfig:
    """A TOML config (a file or a packaged name) read and :func:`build` with ``options``; an
    error starts with the file's path. A relative ``[privacy] ledger`` or ``[run]
    feature_cache`` path in the file is resolved against the file's folder."""
    path = resolve_config(path)
    raw = read_toml(path)
    folder = pathlib.Path(str(path)).parent
    for table, name in (("privacy", "ledger"), ("run", "feature_cache")):
        section = raw.get(table)
        if isinstance(section, dict) and isinstance(section.get(name), str) and section[name]:
            section[name] = str((folder / pathlib.Path(section[name]).expanduser()).resolve())
    return build(raw, where=str(path), **options)


def build(
    raw: dict,
    *,
    where: str | None = None,
    seed: int | None = None,
    device: str | None = None,
    run_dir: str | None = None,
    ledger: str | bool | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> RunConfig:
    """A config in memory (a TOML table as a dict, or a saved ``config.json``; not modified)
    with the command line's settings (None: as the config says): ``overrides`` maps a table
    to the keys a command's flags set (``{"aggregator": {"sigma1": 100.0}}``), ``ledger``
    overrides ``[privacy] ledger`` (a path, or False); then parsed and validated once. An error
    starts with ``where`` (the file), when given."""
    raw = copy.deepcopy(raw)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: the configuration must be a TOML table")
    run = {"seed": seed, "device": device, "run_dir": None if run_dir is None else str(run_dir)}
    for table, values in [*(overrides or {}).items(), ("run", run)]:
        section = raw.setdefault(table, {})
        if isinstance(section, dict):
            section.update({k: v for k, v in values.items() if v is not None})
    privacy = raw.setdefault("privacy", {})
    if ledger is not None and isinstance(privacy, dict):
        privacy["ledger"] = (
            str(pathlib.Path(ledger).expanduser().resolve()) if ledger is not False else False
        )
    try:
        return RunConfig.from_dict(raw)
    except SettingError as exc:
        if where is not None:
            exc.args = (f"{where}: {exc}",)
        raise
