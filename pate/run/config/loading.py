"""Reading a config: the packaged configs (:func:`packaged_configs`), a ``--config`` value
resolved to a file (:func:`resolve_config`), the TOML read (:func:`read_toml`), and
:func:`load` / :func:`from_dict`: the command-line overrides merged in, then
:func:`pate.run.config.schema.normalize`, the planner where settings are left to it, and
:func:`pate.run.config.validation.validate`."""

from __future__ import annotations

import copy
import pathlib
import tomllib
from typing import Any

from pate.run.config.messages import error_at
from pate.run.config.planning import plan_config
from pate.run.config.schema import normalize
from pate.run.config.settings import declared_records, load_data
from pate.run.config.validation import validate
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


def load(
    path,
    *,
    seed: int | None = None,
    device: str | None = None,
    run_dir: str | None = None,
    ledger: str | bool | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> dict:
    """Read, apply the command-line overrides to, normalize and validate a TOML config.

    ``overrides`` maps a table to the keys a command's flags set (``{"aggregator": {"sigma1":
    100.0}}``); ``ledger`` overrides ``[privacy] ledger`` (a path, or False). A relative
    ``[privacy] ledger`` path in the file is resolved against the file's folder.
    """
    path = resolve_config(path)
    raw = read_toml(path)
    path = pathlib.Path(str(path))
    privacy = raw.get("privacy")
    if isinstance(privacy, dict) and isinstance(privacy.get("ledger"), str) and privacy["ledger"]:
        privacy["ledger"] = str(
            (path.parent / pathlib.Path(privacy["ledger"]).expanduser()).resolve()
        )
    run = raw.get("run")
    if isinstance(run, dict) and isinstance(run.get("feature_cache"), str) and run["feature_cache"]:
        run["feature_cache"] = str(
            (path.parent / pathlib.Path(run["feature_cache"]).expanduser()).resolve()
        )
    return from_dict(
        raw,
        source=str(path),
        seed=seed,
        device=device,
        run_dir=run_dir,
        ledger=ledger,
        overrides=overrides,
    )


def from_dict(
    raw: dict,
    *,
    source: str = "config",
    seed: int | None = None,
    device: str | None = None,
    run_dir: str | None = None,
    ledger: str | bool | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    facts=None,
    data=None,
    wording: str = "config",
) -> dict:
    """:func:`load` for a config already in memory (a TOML table as a dict, or a saved
    ``config.json``): overrides, normalisation and validation. ``raw`` is not modified.

    Settings left to the planner (``[partition] num_teachers`` missing or "auto", ``[aggregator]
    queries = "auto"``, ``mechanism = "auto"``, ...: :func:`pate.run.planner.needs_plan`) are filled in
    by :func:`pate.run.planner.plan_config` from ``facts`` (:class:`pate.run.planner.Facts`; when
    None, the public facts of ``data``, or of the ``[data]`` source loaded when ``data`` is None
    too: :func:`plan_facts`), after every other setting is validated; a plan that cannot give
    a useful student raises :class:`pate.run.planner.PlanError` naming the setting in ``wording``
    ("config": TOML keys; "python": keyword arguments)."""
    raw = copy.deepcopy(raw)
    if not isinstance(raw, dict):
        raise error_at(source, "the configuration must be a TOML table")
    for table, values in (overrides or {}).items():
        section = raw.setdefault(table, {})
        if isinstance(section, dict):
            section.update({k: v for k, v in values.items() if v is not None})
    run = raw.setdefault("run", {})
    if isinstance(run, dict):
        if seed is not None:
            run["seed"] = seed
        if device is not None:
            run["device"] = device
        if run_dir is not None:
            run["run_dir"] = str(run_dir)
    if ledger is not None:
        privacy = raw.setdefault("privacy", {})
        if isinstance(privacy, dict):
            privacy["ledger"] = (
                str(pathlib.Path(ledger).expanduser().resolve()) if ledger is not False else False
            )
    config = normalize(raw, source=source)
    from pate.run import planner as P

    if P.needs_plan(config):
        validate(P.probe(config), source=source)  # every other setting, as usual
        if facts is None:
            facts = plan_facts(config, _load_data(config) if data is None else data, wording)
        config, _ = plan_config(config, facts, wording=wording)
    validate(config, source=source)
    return config


def plan_facts(config: dict, data, wording: str = "config"):
    """The public facts (:class:`pate.run.planner.Facts`) a plan of ``config`` is made from:
    ``data``'s public sizes with the declared number of private records
    (:func:`pate.run.config.declared_records`; a declaration far from the loaded split's count is
    refused: :func:`pate.run.planner.facts_of`)."""
    from pate.run import planner as P

    records, basis = declared_records(config, data)
    return P.facts_of(data, records=records, basis=basis, wording=wording)


def _load_data(config: dict):
    """The ``[data]`` source, loaded to count its records for the planner."""
    return load_data(config)
