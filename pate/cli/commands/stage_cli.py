"""What every stage subcommand shares: its flags are generated from the config schema, mapped onto
the config section of its stage, and the stage function of :mod:`pate.run.stages` is called.

A stage command works on a run directory. The first command of a step-by-step run starts it
from ``--config FILE`` (exactly as ``pate run`` would: ``config.json``, ``run.json``, run id,
ledger); later commands reopen it from its ``config.json``. A command's flags override keys of
its own stage's tables only, and only while that stage has not run (the new config is validated
and saved, so ``pate run --resume`` and the report see it). The ledger, the seed of the
non-noise streams and the run id are fixed when the run starts.

Symbols
-------
``add_stage_arguments(parser, tables)``
    ``--run-dir``, ``--config``, the global run flags and one flag per key of each table.
``add_table_arguments(parser, table)``, ``table_overrides(args, tables)``
    One flag per key of one table; the keys the flags set (``pate run`` uses both for
    ``[cluster]``, whose settings say where the teachers train and may change at any time).
``add_threads_argument(parser)``, ``threads_override(args, overrides)``, ``mark_threads_flag(args, run)``
    ``--threads N`` (``[run] threads``, every stage command and ``pate run``): the override, and
    the mark that makes the stage summary's ``threads.source`` say "flag".
``open_run(args, tables, stage)``
    The :class:`pate.run.rundir.Run` of ``--run-dir``, started or reopened, with the flags applied
    and :func:`pate.run.stages.preflight` passed (sizes, dataset identity, budget).
``run_stage_command(args, stage, tables)``
    ``open_run`` then :func:`pate.run.stages.run_stage`; prints the stage's summary.
"""

from __future__ import annotations

import argparse
import json
import sys

#: The stage whose outputs each config table determines (a table may change only before it ran).
TABLE_STAGE = {
    "run": "partition",
    "data": "partition",
    "partition": "partition",
    "teachers": "teachers",
    "aggregator": "aggregate",
    "privacy": "aggregate",
    "student": "student",
    "cluster": None,
}  # [cluster]: where, not what (any time)

#: Flag names that differ from ``--<key with dashes>``.
FLAG_NAMES = {
    ("data", "name"): "--data",
    ("data", "root"): "--data-root",
    ("student", "threshold"): "--confidence-threshold",
}

#: Keys that are not flags of a stage command (fixed when the run starts, or global flags).
NOT_FLAGS = {
    ("run", "name"),
    ("run", "run_dir"),
    ("run", "seed"),
    ("run", "device"),
    ("run", "secure"),
    ("run", "smoke_test"),
    ("privacy", "ledger"),
}


def _flag(table: str, key: str) -> str:
    return FLAG_NAMES.get((table, key), "--" + key.replace("_", "-"))


def _dest(table: str, key: str) -> str:
    return f"cfg__{table}__{key}"


def _json_table(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def _orders(text: str):
    if text in ("default", "reference"):
        return text
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'default', 'reference' or a comma-separated list of orders, got {text!r}"
        ) from None


def _image_size(text: str):
    try:
        sizes = [int(n) for n in text.lower().split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be N or HxW (e.g. 32 or 32x48), got {text!r}"
        ) from None
    return sizes[0] if len(sizes) == 1 else sizes


def _number_or_auto(text: str):
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or 'auto', got {text!r}") from None


def _thread_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(
            f"must be an integer >= 1 (the number of CPU threads), "
            f"got {text!r}; leave it out to use the CPUs this "
            "process may use"
        )
    return value


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: ``[run] threads`` (pate.core.threads; docs/threads.md)."""
    parser.add_argument(
        "--threads",
        type=_thread_count,
        metavar="N",
        help="[run] threads: CPU threads to compute with (default: "
        "$OMP_NUM_THREADS, else the CPUs this process may use: its affinity "
        "and cgroup quota)",
    )


def threads_override(args, overrides: dict) -> dict:
    """``overrides`` with ``--threads`` as ``{"run": {"threads": N}}`` where it was given."""
    if getattr(args, "threads", None) is not None:
        overrides = dict(overrides, run=dict(overrides.get("run", {}), threads=args.threads))
    return overrides


def mark_threads_flag(args, run) -> None:
    """Record that ``[run] threads`` came from ``--threads`` (the stage summary says "flag")."""
    if getattr(args, "threads", None) is not None:
        run.context.threads_source = "flag"


def add_stage_arguments(parser: argparse.ArgumentParser, tables: tuple[str, ...]) -> None:
    """The run-directory flags and one flag per key of ``tables`` (from the config schema)."""
    parser.add_argument(
        "--run-dir",
        required=True,
        help="the run directory (started by the first command with --config)",
    )
    parser.add_argument(
        "--config",
        help="TOML file or packaged config name (digits, fashion-mnist, "
        "...) that starts the run (needed only when --run-dir "
        "holds no run yet)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="[run] seed of a new run: its keys (the partition's; then not private: the report "
        "says so), teacher and student streams; never the noise",
    )
    parser.add_argument("--device", help="[run] device: auto, cpu, cuda, cuda:N")
    ledger = parser.add_mutually_exclusive_group()
    ledger.add_argument(
        "--ledger",
        help="privacy-budget ledger of a new run (default: [privacy] "
        "ledger, $PATE_LEDGER, or ~/.local/share/pate/ledger.sqlite3)",
    )
    ledger.add_argument(
        "--no-ledger",
        action="store_true",
        help="start the run without a ledger: no budget is enforced (the report "
        "says so in its first paragraph)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--json", action="store_true", help="print the stage's summary as JSON")
    add_threads_argument(parser)
    for table in tables:
        add_table_arguments(parser, table)


def add_table_arguments(parser: argparse.ArgumentParser, table: str) -> None:
    """One flag per key of the config table ``table`` (``pate run`` uses it for ``[cluster]``)."""
    from pate import mechanisms
    from pate.run.config import keys_of

    declared = {name: field.metadata["kind"] for name, field in keys_of(table).items()}
    if table == "aggregator":  # the mechanisms' noise parameters: a number or "auto"
        declared.update({name: (float, str) for name in mechanisms.all_param_names()})
    group = parser.add_argument_group(f"[{table}] settings (override the config's)")
    for key, want in declared.items():
        if (table, key) in NOT_FLAGS:
            continue
        flag, dest = _flag(table, key), _dest(table, key)
        wants = want if isinstance(want, tuple) else (want,)
        helptext = f"[{table}] {key}"
        if bool in wants:
            group.add_argument(flag, dest=dest, action="store_true", default=None, help=helptext)
            group.add_argument(
                "--no-" + flag[2:], dest=dest, action="store_false", help=f"{helptext} = false"
            )
        elif dict in wants:
            group.add_argument(
                flag,
                dest=dest,
                metavar=key.upper(),
                type=_json_table,
                help=f"{helptext} (JSON object)",
            )
        elif (table, key) == ("data", "image_size"):
            group.add_argument(
                flag,
                dest=dest,
                metavar=key.upper(),
                type=_image_size,
                help=f"{helptext} (N or HxW: imagefolder images are resized to it)",
            )
        elif (table, key) == ("data", "classes"):
            group.add_argument(
                flag,
                dest=dest,
                metavar="NAME,NAME,...",
                type=lambda text: [name.strip() for name in text.split(",")],
                help=f"{helptext} (the declared class names, comma-separated)",
            )
        elif list in wants:
            group.add_argument(flag, dest=dest, metavar=key.upper(), type=_orders, help=helptext)
        elif float in wants and str in wants:
            group.add_argument(
                flag,
                dest=dest,
                metavar=key.upper(),
                type=_number_or_auto,
                help=f"{helptext} (a number, or auto: calibrated for --target-eps and --queries)",
            )
        else:
            group.add_argument(flag, dest=dest, metavar=key.upper(), type=wants[0], help=helptext)


def table_overrides(args, tables) -> dict[str, dict]:
    """The config keys of ``tables`` that the flags set: ``{table: {key: value}}``."""
    return _overrides(args, tables)


def _overrides(args, tables) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, value in vars(args).items():
        if name.startswith("cfg__") and value is not None:
            _, table, key = name.split("__", 2)
            if table in tables:
                out.setdefault(table, {})[key] = value
    return out


def open_run(args, tables: tuple[str, ...], stage: str):
    """The run of ``--run-dir`` with the flags applied, preflight for ``stage`` passed (see
    module doc). Everything is checked first (the flags, the device, the data, the ledger's
    dataset and budget); the new config is written only after that, so a refused command
    changes no file of the run."""
    import pathlib

    from pate.run import stages
    from pate.run.config import build, load, planning
    from pate.run.rundir import STATE, Run
    from pate.teachers.errors import ConfigError

    run_dir = pathlib.Path(args.run_dir)
    overrides = threads_override(args, _overrides(args, tables))
    ledger = False if args.no_ledger else args.ledger
    progress = not args.no_progress
    if (run_dir / STATE).exists():
        run = Run.open(run_dir, progress=progress)
        if args.config is not None:
            raise ConfigError(
                f"--run-dir {run_dir} already holds a run (its config is "
                f"{run_dir / 'config.json'}); drop --config, or use a new --run-dir"
            )
        if args.seed is not None:
            raise ConfigError(
                f"--seed: the seed of {run_dir} was fixed when the run started; "
                "use a new --run-dir for another seed"
            )
        config = build(
            run.config.to_dict(),
            where=str(run_dir / "config.json"),
            overrides=overrides,
            device=args.device,
            ledger=None if ledger is None else ledger,
        )
        if config.privacy.ledger_path() != run.ledger_path:
            raise ConfigError(
                f"{run_dir} charges the ledger {run.ledger_path or '(none: off)'} "
                "since it started; --ledger/--no-ledger cannot change that: use a "
                "new --run-dir"
            )
        changed = sorted(
            t for t in TABLE_STAGE if t != "run" and getattr(config, t) != getattr(run.config, t)
        )
        finished = [t for t in changed if TABLE_STAGE[t] is not None and run.done(TABLE_STAGE[t])]
        if finished:
            raise ConfigError(
                f"{run_dir}: stage {TABLE_STAGE[finished[0]]!r} already ran with the "
                f"[{finished[0]}] settings in its config.json; a flag cannot change "
                "them now: use a new --run-dir"
            )
        save = bool(changed) or config.run != run.config.run
        # in memory only: preflight below checks it (device, data, the ledger's budget), and
        # config.json / run.json are rewritten only once it passed (a refused command changes
        # no file)
        run.config = config
    else:
        save = False
        if args.config is None:
            raise ConfigError(
                f"--run-dir {run_dir} holds no run yet: pass --config FILE to start "
                "one (e.g. --config configs/digits.toml)"
            )
        config = load(
            args.config,
            seed=args.seed,
            device=args.device,
            run_dir=str(run_dir),
            ledger=ledger,
            overrides=overrides,
        )
        if config.needs_plan:  # settings left to the planner: filled in from the data's sizes
            config, _ = planning.plan(config, config.load_data(run_dir=run_dir))
        run = Run.create(config, progress=progress, run_dir=run_dir)  # writes nothing yet
    mark_threads_flag(args, run)
    stages.preflight(run, stages=(stage,))
    if save:
        run.update_config(config)
    return run


def run_stage_command(args, stage: str, tables: tuple[str, ...], describe=None) -> int:
    """Open the run, run ``stage`` with :func:`pate.run.stages.run_stage`, print its summary."""
    from pate.run import stages

    run = open_run(args, tables, stage)
    info = stages.run_stage(run, stage)
    if info.get("skipped"):  # the stage does not apply to this run (e.g. no teachers: Private-kNN)
        describe = lambda run, info: f"skipped, it does not apply to this run: {info['reason']}"  # noqa: E731
    if args.json:
        json.dump(info, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        text = (
            describe(run, info)
            if describe is not None
            else ", ".join(f"{k} {v}" for k, v in info.items() if not isinstance(v, (dict, list)))
        )
        print(f"{stage}: {text}")
        from pate.run import rundir

        later = rundir.STAGES[rundir.STAGES.index(stage) + 1 :]
        if later:
            print(f"next: pate {rundir.COMMANDS[later[0]]} --run-dir {run.run_dir}")
    return 0


def epsilon_summary(privacy: dict) -> str:
    """The epsilon figures of an analysis (``analysis.json``/``report.json`` ``privacy``) in one
    line: the guarantee, the data-independent epsilon and -- only where a sanitized
    data-dependent epsilon was released (and, in report.json, charged) -- that one."""
    text = (
        f"guarantee {privacy['eps_guarantee']:.4f}, data-independent "
        f"{privacy['eps_data_independent']:.4f}"
    )
    sanitized = privacy.get("sanitized") or {}
    if sanitized.get("fallback", "none") is None and "eps_sanitized" in privacy:
        return text + f", sanitized {privacy['eps_sanitized']:.4f}"
    return text + " (no sanitized release)"
