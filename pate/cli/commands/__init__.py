"""Subcommands of the ``pate`` command (one module each; see pate.cli).

``add_noise_arguments(parser, names=None)`` adds one ``--flag`` per noise parameter of the
registered mechanisms (:mod:`pate.mechanisms`), or of the mechanisms ``names`` only; each flag
stores a float (default None) under the parameter's name. ``noise_parameters(args)`` reads them
back as ``{name: value}``, ready for ``MechanismSpec.validate(..., prefix="--")``.
"""


def add_noise_arguments(parser, names=None) -> None:
    """The aggregators' noise parameters, shared by `pate analyze` and `pate aggregate`."""
    from pate import mechanisms

    users: dict[str, list] = {}
    for spec in map(mechanisms.get, mechanisms.REGISTRY if names is None else names):
        for param in spec.params:
            users.setdefault(param.name, []).append((spec, param))
    for name, pairs in users.items():
        spec, param = pairs[0]
        titles = ", ".join(s.title for s, _ in pairs)
        parser.add_argument(
            param.flag, dest=name, type=float, default=None, help=f"{titles}: {param.help}"
        )


def noise_parameters(args) -> dict:
    """``{name: value}`` of every noise flag that ``args`` holds (None where not given)."""
    from pate import mechanisms

    return {
        name: getattr(args, name) for name in mechanisms.all_param_names() if hasattr(args, name)
    }
