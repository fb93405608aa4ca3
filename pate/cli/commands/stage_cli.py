"""The step-by-step stage commands (:data:`STAGE_COMMANDS`) and what they share with ``pate
run``: flags generated from the config's tables, a run directory started or reopened
(:func:`open_run`). docs/cli.md."""

from __future__ import annotations

import argparse
import json

from pate.cli.commands.analyze import orders_flag
from pate.run import rundir

#: The stage whose outputs each config table with flags determines (a table may change only
#: before it ran; ``[run]`` has its own checks in :func:`open_run`).
TABLE_STAGE = {
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


def _json_table(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def _image_size(text: str):
    try:
        sizes = [int(n) for n in text.lower().split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be N or HxW (e.g. 32 or 32x48), got {text!r}"
        ) from None
    return sizes[0] if len(sizes) == 1 else sizes


def _class_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


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


def mark_threads_flag(args, run) -> None:
    """Record that ``[run] threads`` came from ``--threads`` (the stage summary says "flag")."""
    if getattr(args, "threads", None) is not None:
        run.context.threads_source = "flag"


def add_start_arguments(parser: argparse.ArgumentParser, tables: tuple[str, ...]) -> None:
    """``--seed``, ``--device`` and ``--ledger`` / ``--no-ledger`` (how a new run starts: ``pate
    run``, ``pate plan``, the first stage command) and the flags of ``tables``' keys;
    :func:`start_flags` reads them."""
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
        help="no ledger: no budget is enforced (the report says so in its first paragraph)",
    )
    for table in tables:
        add_table_arguments(parser, table)


def start_flags(args) -> dict:
    """The keywords of :func:`pate.run.config.build` that the flags set: ``seed``, ``device``,
    ``ledger`` (False with ``--no-ledger``) and the ``overrides`` ``{table: {key: value}}`` of
    the table flags (:func:`add_table_arguments`) and ``--threads`` (``[run] threads``)."""
    overrides: dict[str, dict] = {}
    for name, value in vars(args).items():
        if name.startswith("cfg__") and value is not None:
            _, table, key = name.split("__", 2)
            overrides.setdefault(table, {})[key] = value
    if getattr(args, "threads", None) is not None:
        overrides.setdefault("run", {})["threads"] = args.threads
    ledger = False if args.no_ledger else args.ledger
    return {"seed": args.seed, "device": args.device, "ledger": ledger, "overrides": overrides}


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
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--json", action="store_true", help="print the stage's summary as JSON")
    add_threads_argument(parser)
    add_start_arguments(parser, tables)


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
        flag = FLAG_NAMES.get((table, key), "--" + key.replace("_", "-"))
        dest = f"cfg__{table}__{key}"
        wants = want if isinstance(want, tuple) else (want,)
        helptext = f"[{table}] {key}"
        if bool in wants:
            group.add_argument(flag, dest=dest, action="store_true", default=None, help=helptext)
            group.add_argument(
                "--no-" + flag[2:], dest=dest, action="store_false", help=f"{helptext} = false"
            )
            continue
        metavar, suffix = key.upper(), ""
        if (table, key) == ("data", "image_size"):
            parse, suffix = _image_size, " (N or HxW: imagefolder images are resized to it)"
        elif (table, key) == ("data", "classes"):
            parse, metavar = _class_names, "NAME,NAME,..."
            suffix = " (the declared class names, comma-separated)"
        elif dict in wants:
            parse, suffix = _json_table, " (JSON object)"
        elif list in wants:
            parse = orders_flag
        elif float in wants and str in wants:
            parse = _number_or_auto
            suffix = " (a number, or auto: calibrated for --target-eps and --queries)"
        else:
            parse = wants[0]
        group.add_argument(flag, dest=dest, metavar=metavar, type=parse, help=helptext + suffix)


def open_run(args, stage: str):
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
    flags = start_flags(args)
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
        flags.pop("seed")  # None: refused above
        config = build(run.config.to_dict(), where=str(run_dir / "config.json"), **flags)
        if config.privacy.ledger_path() != run.ledger_path:
            raise ConfigError(
                f"{run_dir} charges the ledger {run.ledger_path or '(none: off)'} "
                "since it started; --ledger/--no-ledger cannot change that: use a "
                "new --run-dir"
            )
        changed = sorted(t for t in TABLE_STAGE if getattr(config, t) != getattr(run.config, t))
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
        config = load(args.config, run_dir=str(run_dir), **flags)
        if config.needs_plan:  # settings left to the planner: filled in from the data's sizes
            config, _ = planning.plan(config, config.load_data(run_dir=run_dir))
        run = Run.create(config, progress=progress, run_dir=run_dir)  # writes nothing yet
    mark_threads_flag(args, run)
    stages.preflight(run, stages=(stage,))
    if save:
        run.update_config(config)
    return run


def run_stage_command(args, stage: str, describe) -> int:
    """Open the run, run ``stage`` with :func:`pate.run.stages.run_stage`, print its summary
    (``describe(run, info)``)."""
    from pate.run import stages

    run = open_run(args, stage)
    info = stages.run_stage(run, stage)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        # skipped: the stage does not apply to this run (e.g. no teachers: Private-kNN)
        text = (
            f"skipped, it does not apply to this run: {info['reason']}"
            if info.get("skipped")
            else describe(run, info)
        )
        print(f"{stage}: {text}")
        later = rundir.STAGES[rundir.STAGES.index(stage) + 1 :]
        if later:
            print(f"next: pate {rundir.COMMANDS[later[0]]} --run-dir {run.run_dir}")
    return 0


def _describe_partition(run, info) -> str:
    return (
        f"{info['num_teachers']} teachers ({info['mode']}) on {run.data.name}; guarantee: "
        f"{info['neighbouring_relation']}; INTERNAL (do not publish): "
        f"{len(run.data.private)} private records, shards of {info['shard_size_min']} to "
        f"{info['shard_size_max']}"
    )


def _describe_teachers(run, info) -> str:
    return (
        f"{info.get('num_teachers', '?')} teachers; INTERNAL (do not publish): mean accuracy "
        f"{100 * info['teacher_accuracy_mean']:.2f} %, plurality vote "
        f"{100 * info['plurality_accuracy']:.2f} % on the evaluation split "
        f"({run.path(rundir.TEACHER_METRICS)})"
    )


def _describe_votes(run, info) -> str:
    if "embedding" in info:  # Private-kNN: embeddings for its neighbour search, no votes
        return (
            f"Private-kNN embeddings ({info['features']} features -> PCA of the public split, "
            f"{info['dims']} dims) of {info['queries']} public items and the private ones "
            f"(INTERNAL, do not publish: {info['private_records']}); wrote "
            f"{run.run_dir / info['embedding']}"
        )
    return (
        f"{info['queries']} queries x {info['classes']} classes from {info['teachers']} "
        f"teachers; wrote {run.path(rundir.VOTES)}"
    )


def _describe_aggregate(run, info) -> str:
    from pate import mechanisms

    s = rundir.read_summary(run.path(rundir.AGGREGATE), rundir.AGGREGATE_KEYS)
    lines = [
        f"{s['mechanism']}: asked {s['queries_asked']} of {s['queries_offered']}, answered "
        f"{s['queries_answered']}"
    ]
    if s["stop_reason"]:
        lines.append(f"stopped: {s['stop_reason']}")
    if mechanisms.get(s["mechanism"]).kind.reads_private_records:
        lines.append(
            f"eps of the asked queries at delta={s['delta']:g}: data-independent "
            f"{s['eps_data_independent']:.4f} (a cost that does not depend on the data; "
            "no data-dependent bound, no sanitized release)"
        )
    else:
        lines.append(
            f"eps of these answers at delta={s['delta']:g}: data-independent "
            f"{s['eps_data_independent']:.4f}, data-dependent "
            f"{s['eps_data_dependent']:.4f} (depends on the votes, not private to "
            "publish as is)"
        )
    if s["release"] is not None:
        lines.append(
            "the sanitized release was drawn and charged too: `pate analyze --run-dir` "
            "reports the guarantee (answers + release)"
        )
    ledger = (
        f"the ledger {s['ledger']}"
        if s["ledger"]
        else "no ledger (--no-ledger: no budget was enforced)"
    )
    lines.append("charged to " + ledger)
    if s["noise_seeded"]:
        lines.append(
            "WARNING: the noise was seeded (--noise-seed): the answers are reproducible "
            "and NOT private"
        )
    return "\n".join(lines)


def _describe_student(run, info) -> str:
    m = rundir.read_summary(run.path(rundir.STUDENT_METRICS), rundir.STUDENT_METRICS_KEYS)
    return (
        f"{m['method']} {m['model']}: trained on {m['num_labelled']} labelled of "
        f"{m['num_public']} public items in {m['train_seconds']:.1f} s; accuracy "
        f"{m['accuracy']:.4f} on {m['num_examples']} evaluation items (INTERNAL unless the "
        "evaluation data is declared public)"
    )


#: The step-by-step commands, one per stage (``pate <rundir.COMMANDS[stage]>``): the config
#: tables whose keys are its flags, its one-line help, its description and its summary line.
STAGE_COMMANDS = {
    "partition": (
        ("data", "partition"),
        "split the sensitive records into disjoint teacher shards (first step of a run)",
        "Start a run directory from --config (or continue one) and assign every record of "
        "the private split to exactly one teacher: <run-dir>/partition.npz. The same stage "
        "as `pate run`: mode random (each record's teacher is a keyed hash of the record, so "
        "adding or removing a record changes one teacher) or unit (--unit-ids: one "
        "privacy-unit id per record, e.g. a patient; all records of a unit go to the same "
        "teacher, so the guarantee is per unit). The dataset's identity and budget are checked "
        "in the ledger before anything is written. Next: pate train-teachers --run-dir DIR.",
        _describe_partition,
    ),
    "teachers": (
        ("teachers", "cluster"),  # [cluster]: local or on Ray (docs/cluster.md)
        "train one teacher per shard of the partition (all teachers at once)",
        "Train one model per shard of <run-dir>/partition.npz on the private split. "
        "Same-architecture torch teachers are trained simultaneously with torch.func (vmap), "
        "in chunks that fit in memory; other models one after another; scikit-learn "
        "estimators (--model sklearn:package.module.Class) with joblib. Running the command "
        "again continues an interrupted stage to the same teachers. Prints per-teacher and "
        "plurality-vote accuracy on the evaluation split (internal figures: do not publish).",
        _describe_teachers,
    ),
    "votes": (
        (),
        "count the teachers' votes on the public split (writes votes.npy)",
        "Build the (queries, classes) vote matrix from the teachers' predictions on the "
        "public split and write <run-dir>/votes.npy for `pate aggregate`. Only its shape is "
        "printed.",
        _describe_votes,
    ),
    "aggregate": (
        ("aggregator", "privacy"),
        "noisy labels from the teachers' votes, charged to the ledger before release",
        "Answer the public queries of the run in order with the noisy aggregator, stopping "
        "before the (eps, delta) budget could be exceeded. The ledger's budget is the one "
        "authority (a config or flag budget that differs from it is refused before anything "
        "is drawn); answers are drawn only inside a ledger reservation that covers their "
        "worst case and are charged before labels.npy is written. Noise comes from OS "
        "entropy unless --noise-seed is given (then the run is NOT private). The "
        "data-dependent epsilon is printed for information: it depends on the votes and is "
        "not private to publish.",
        _describe_aggregate,
    ),
    "student": (
        ("student",),
        "train the student (FixMatch or supervised) on the public split and released labels",
        "Train the student on the public inputs and the labels released by `pate aggregate` "
        "(only after they were charged), semi-supervised (FixMatch: the unanswered public "
        "items are unlabelled data) or supervised. Evaluates on the held-out evaluation "
        "split and writes student.pt and student_metrics.json into the run directory.",
        _describe_student,
    ),
}


def add_parser(subparsers) -> None:
    """One subcommand per entry of :data:`STAGE_COMMANDS`."""
    import functools

    for stage, (tables, helptext, description, describe) in STAGE_COMMANDS.items():
        parser = subparsers.add_parser(
            rundir.COMMANDS[stage], help=helptext, description=description
        )
        add_stage_arguments(parser, tables)
        parser.set_defaults(
            func=functools.partial(run_stage_command, stage=stage, describe=describe)
        )
