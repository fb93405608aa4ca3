"""``pate budget``: inspect and set the privacy budget of sensitive datasets in the ledger.
The actions (show, history, set, add-block, list, link, release, digest): docs/ledger.md."""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable

from pate.analysis.errors import InputError

DESCRIPTION = "Show, audit and set the privacy budget of sensitive datasets (the ledger)."
_DATASET_HELP = "dataset digest, name, or unique digest prefix (>= 8 hex digits)"
_LEDGER_HELP = "ledger file (default: $PATE_LEDGER or ~/.local/share/pate/ledger.sqlite3)"


def _fmt(value, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return format(value, spec)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, default=str))


def _load_ids(path: str, strings: bool):
    import numpy as np

    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--ids {path!r} is not a file")
    if p.suffix == ".npy":
        from pate.core.io import load_npy

        return load_npy(p, what="--ids")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"--ids {path!r} is neither a .npy array nor UTF-8 text with one id per line"
        ) from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not strings:
        try:
            return np.array([int(x) for x in lines], dtype=np.int64)
        except ValueError:
            pass
    return np.array(lines, dtype=str)


def _digest(args) -> int:
    from pate.ledger import Ledger, dataset_digest

    if args.ids is not None:
        if args.ledger is not None:
            raise InputError(
                "--ledger goes with --config (the overlap of a config's records); "
                "with --ids only the digest is printed"
            )
        digest = dataset_digest(_load_ids(args.ids, args.strings))
        _print_json({"digest": digest}) if args.json else print(digest)
        return 0
    from pate.run.config import load
    from pate.run.stages.budget import register_config

    with Ledger(args.ledger, create=True) as ledger:
        digest, name, identity = register_config(load(args.config), ledger)
        out = {
            "digest": digest,
            "name": name,
            "records": identity.num_records,
            "config": args.config,
            "ledger": str(ledger.path),
            "overlaps": ledger.overlapping(identity),
        }
    if args.json:
        _print_json(out)
        return 0
    print(digest)
    print(f"name       {name} (pate budget set --dataset takes the name or the id)")
    print(f"records    {identity.num_records} (private split of {args.config})")
    rows = out["overlaps"]
    if not rows:
        print(
            f"ledger     {out['ledger']}: no registered dataset shares records with it "
            "(a run starts it with the config's budget)"
        )
    for r in rows:
        b = r["budget"]
        budget = (
            "no budget"
            if b is None
            else f"eps={b['eps']:g} at delta={b['delta']:g} ({b['basis']}, {b['conversion']})"
        )
        what = (
            "this dataset"
            if r["same"]
            else (f"shares {r['shared_records']} of its {r['num_records']} record(s)")
        )
        print(f"ledger     {r['dataset'][:12]} {r['name'] or '-'}: {what}; {budget}")
    return 0


def run(args) -> int:
    from pate.ledger import Ledger

    action = args.budget_command
    if action == "digest":
        return _digest(args)
    with Ledger(args.ledger, create=(action == "set")) as ledger:
        args.action_function(ledger, args)
    return 0


def _show(ledger, args) -> None:
    summary = ledger.summary(args.dataset)
    _print_json(summary) if args.json else _print_summary(summary)


def _history(ledger, args) -> None:
    rows = ledger.history(args.dataset)
    if args.json:
        _print_json(
            {
                "dataset": ledger.resolve(args.dataset),
                "events": rows,
                "audit": ledger.audit_log(args.dataset),
                "budget_changes": ledger.budget_changes(args.dataset),
            }
        )
    else:
        _print_history(rows)


def _set(ledger, args) -> None:
    budget = ledger.set_budget(
        args.dataset,
        eps=args.eps,
        delta=args.delta,
        data_dependent=args.data_dependent,
        conversion=args.conversion,
        name=args.name,
        reason=args.reason,
    )
    digest = ledger.resolve(args.name or args.dataset)
    if args.json:
        _print_json(
            {
                "dataset": digest,
                "eps": budget.eps,
                "delta": budget.delta,
                "basis": budget.basis,
                "conversion": budget.conversion,
                "ledger": str(ledger.path),
            }
        )
    else:
        print(
            f"budget of {args.name or digest}: eps={budget.eps:g} at delta={budget.delta:g} "
            f"({budget.basis} RDP, {budget.conversion} conversion) in {ledger.path}"
        )


def _add_block(ledger, args) -> None:
    ledger.add_block(args.dataset, args.block)
    blocks = ledger.blocks(args.dataset)
    _print_json(
        {"dataset": ledger.resolve(args.dataset), "blocks": blocks}
    ) if args.json else print(f"blocks of {args.dataset}: {', '.join(blocks)}")


def _list(ledger, args) -> None:
    rows = ledger.datasets()
    if args.json:
        _print_json(rows)
        return
    print(
        f"{'digest':<14} {'name':<20} {'eps':>8} {'delta':>8} {'events':>7} "
        f"{'records':>8}  {'conversion':<10}  basis  (linked)"
    )
    for r in rows:
        linked = (
            f"  (shares records with {', '.join(d[:12] for d in r['linked'])})"
            if r["linked"]
            else ""
        )
        if r["aliases"]:  # the first name, then the later ones
            linked += f"  (also named {', '.join(r['aliases'])})"
        print(
            f"{r['digest'][:12]:<14} {(r['name'] or '-'):<20} {_fmt(r['budget_eps'], 'g'):>8} "
            f"{_fmt(r['budget_delta'], 'g'):>8} {r['events']:>7} {_fmt(r['records'], 'd'):>8}  "
            f"{(r['conversion'] if r['budget_eps'] is not None else '-'):<10}  "
            f"{r['basis']}{linked}"
        )


def _link(ledger, args) -> None:
    ledger.link(args.dataset, args.other, reason=args.reason)
    rows = ledger.linked(args.dataset)
    if args.json:
        _print_json({"dataset": ledger.resolve(args.dataset), "linked": rows})
    else:
        print(
            f"{args.dataset} now shares its spend with: "
            f"{', '.join(r['name'] or r['dataset'][:12] for r in rows)}"
        )


def _release(ledger, args) -> None:
    released = ledger.release(args.reservation)
    _print_json({"reservation": args.reservation, "released": released}) if args.json else print(
        f"reservation {args.reservation} "
        f"{'released' if released else 'was not live (drawn: spent; or closed); nothing to do'}"
    )


def _print_summary(s: dict) -> None:
    b = s["budget"]
    label = f"{s['name']}  ({s['dataset']})" if s["name"] else s["dataset"]
    print(f"dataset    {label}")
    if s.get("aliases"):
        print(f"also named {', '.join(s['aliases'])}")
    print(f"ledger     {s['ledger']}")
    if b is None:
        print(
            "budget     none set (spend is recorded but unlimited); set one with "
            "`pate budget set --dataset ... --eps E --delta D`"
        )
    else:
        print(
            f"budget     eps={b['eps']:g} at delta={b['delta']:g}, judged on {b['basis']} RDP "
            f"with the {b['conversion']} conversion"
        )
    print(
        f"spent      eps={_fmt(s['spent'])}  (committed: {s['events']} event(s) from {s['runs']} run(s)"
        + (
            f", and {s['drawn_reservations']} drawn reservation(s)"
            if s.get("drawn_reservations")
            else ""
        )
        + f"{', worst block' if s['blocks'] else ''})"
    )
    if b is not None:
        print(
            f"           data-independent eps={_fmt(s['spent_data_independent'])}; "
            f"data-dependent eps={_fmt(s['spent_data_dependent'])} (the data-dependent value is not "
            "differentially private itself; do not publish it without a smooth-sensitivity release)"
        )
        print(
            f"reserved   eps={_fmt(s['spent_and_reserved'])}  (spent + "
            f"{sum(r['status'] != 'drawn' for r in s['reservations'])} live reservation(s))"
        )
        print(f"remaining  eps={_fmt(s['remaining'])}")
    if s["orders"]:
        o = s["orders"]
        print(f"orders     {o['count']} shared Renyi orders in [{o['min']:g}, {o['max']:g}]")
    if s["blocks"]:
        print("blocks (Sage: the dataset's loss is the max over blocks)")
        print(f"  {'block':<20} {'events':>7} {'spent':>10} {'+reserved':>10}")
        for r in s["blocks"]:
            print(
                f"  {r['block']:<20} {r['events']:>7} {_fmt(r['spent']):>10} "
                f"{_fmt(r['spent_and_reserved']):>10}"
            )
    if s.get("linked"):
        _print_linked(s)
    changes = [c for c in s.get("budget_changes", []) if c["change"] != "initial"]
    if changes:
        print("budget changes")
    for c in changes:
        prev = c["previous"]
        conv = (
            ""
            if prev["conversion"] == c["conversion"]
            else f", conversion {prev['conversion']} -> {c['conversion']}"
        )
        print(
            f"  {c['time_utc'][:19]}  {c['change']}: eps={prev['eps']:g} -> {c['eps']:g} "
            f"(delta={prev['delta']:g} -> {c['delta']:g}{conv}) after eps={_fmt(c['spent_eps'])} spent"
            f"{'; ' + c['reason'] if c['reason'] else ''}"
        )
    if s["reservations"]:
        print("reservations (drawn: noise was drawn inside it, counted as spent)")
        for r in s["reservations"]:
            print(
                f"  {r['id']}  run {r['run_id']}  pid {r['pid']}@{r['hostname']}  since "
                f"{r['created_utc']}  eps alone={_fmt(r['eps_alone'])}  [{r['status']}]"
            )


def _print_history(rows: list[dict]) -> None:
    if not rows:
        print("no events recorded")
        return
    print(
        f"{'id':>5}  {'time (UTC)':<19}  {'run':<12}  {'mechanism':<18} {'queries':>8} {'answered':>8} "
        f"{'eps':>9} {'cumulative':>10}  blocks"
    )
    for r in rows:
        where = (
            f"all (linked dataset {r['dataset'][:12]})"
            if r.get("linked")
            else (",".join(r["blocks"]) or "all")
        )
        print(
            f"{r['id']:>5}  {r['time_utc'][:19]:<19}  {r['run_id'][:12]:<12}  {r['mechanism']:<18} "
            f"{r['queries']:>8} {r['answered']:>8} {_fmt(r['eps']):>9} {_fmt(r['cumulative_eps']):>10}  "
            f"{where}"
        )


def _print_linked(s: dict) -> None:
    """The datasets sharing records with this one, their budgets, and the effective remaining."""
    print(
        f"linked     spend of {len(s['linked'])} dataset(s) sharing records counts here "
        f"({s['linked_events']} event(s)); each also keeps its own budget:"
    )
    for r in s["linked"]:
        b = r["budget"]
        budget = (
            "no budget"
            if b is None
            else f"eps={b['eps']:g} at delta={b['delta']:g} ({b['conversion']})"
        )
        shared = (
            "linked by hand"
            if r["shared_records"] is None
            else f"{r['shared_records']} shared record(s)"
        )
        print(
            f"  {r['dataset'][:12]} {r['name'] or '-'}: {shared}, "
            f"{budget}, remaining eps={_fmt(r['remaining'])}"
        )
    print(
        f"effective  remaining eps={_fmt(s['remaining_effective'])} (least over this and the "
        f"linked budgets; limited by {(s['limited_by'] or '-')[:12]})"
    )


#: ``pate budget ACTION``: its help, whether it takes ``--dataset``, its own arguments, and what
#: it does with the open ledger ("digest" opens none).
_PARSERS: dict[str, tuple[str, bool, dict[str, dict], Callable]] = {
    "show": ("budget, spend, remaining and live reservations of a dataset", True, {}, _show),
    "history": ("every recorded privacy event of a dataset", True, {}, _history),
    "set": (
        "set the (eps, delta) budget of a dataset, registering it if new",
        True,
        {
            "--eps": dict(type=float, required=True, help="total epsilon the dataset may spend"),
            "--delta": dict(type=float, required=True, help="delta of the (eps, delta) budget"),
            "--name": dict(
                help="a readable name for the dataset (a dataset keeps its first name; a "
                "later one is added to its names, and any of them resolves it)"
            ),
            "--data-dependent": dict(
                action="store_true",
                help="judge spend on the realised data-dependent RDP (its epsilon is NOT "
                "differentially private itself; default: data-independent RDP)",
            ),
            "--conversion": dict(
                choices=("classic", "tight"),
                default="classic",
                help="RDP -> (eps, delta) conversion every epsilon of this dataset is judged "
                "with (default: classic); must match the runs' [privacy] conversion",
            ),
            "--reason": dict(help="why the budget is set or changed (kept in the audit log)"),
        },
        _set,
    ),
    "add-block": (
        "register a new time block of records (Sage block accounting)",
        True,
        {"--block": dict(required=True, help="block name, e.g. 2025-06")},
        _add_block,
    ),
    "list": ("every dataset in the ledger", False, {}, _list),
    "link": (
        "declare that two datasets share records (their spend then counts against each other)",
        True,
        {
            "--with": dict(
                dest="other",
                required=True,
                help="the other dataset: digest, name, or unique digest prefix",
            ),
            "--reason": dict(help="why (kept in the audit log)"),
        },
        _link,
    ),
    "release": (
        "give back a live reservation by hand",
        False,
        {"--reservation": dict(required=True, help="reservation id (see `pate budget show`)")},
        _release,
    ),
}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "budget", help="privacy-budget ledger: show, history, set", description=DESCRIPTION
    )
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="budget_command", metavar="ACTION")
    sub.required = True
    for action, (helptext, dataset, arguments, action_function) in _PARSERS.items():
        p = sub.add_parser(action, help=helptext)
        p.set_defaults(action_function=action_function)
        if dataset:
            p.add_argument("--dataset", required=True, help=_DATASET_HELP)
        p.add_argument("--ledger", default=None, help=_LEDGER_HELP)
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        for flag, options in arguments.items():
            p.add_argument(flag, **options)
    p = sub.add_parser(
        "digest",
        help="register a config's private split in the ledger and print its id (or the "
        "digest of record ids)",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config",
        help="run config (TOML): the digest of its private split, as `pate run` "
        "registers it in the ledger",
    )
    source.add_argument(
        "--ids", help=".npy array of explicit record ids, or a text file with one id per line"
    )
    p.add_argument(
        "--strings",
        action="store_true",
        help="treat the ids of a text file as strings even if they look like integers",
    )
    p.add_argument("--ledger", help="with --config: the " + _LEDGER_HELP)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
