"""The plan step of a config: the planner fills in what it leaves open, once."""

from __future__ import annotations

import dataclasses

from pate.run.config.run_config import RunConfig


def plan(
    config: RunConfig,
    data=None,
    *,
    facts=None,
    remaining_eps: float | None = None,
):
    """``(planned config, plan)``: ``config`` with what it left to the planner filled in
    (validated once more only then), and the :class:`pate.run.planner.Plan`, made from
    ``facts`` (None: the public facts of ``data``, or of the ``[data]`` source loaded when
    ``data`` is None too: :func:`facts_of`). Raises :class:`pate.run.planner.PlanError`
    naming the setting by its TOML key (``pate.fit`` and ``pate.plan`` reword it:
    :func:`pate.run.config.python_wording`)."""
    from pate.run import planner

    if facts is None:
        data = config.load_data() if data is None else data
        facts = facts_of(config, data)
    filled, made = planner.plan_config(config, facts, remaining_eps=remaining_eps)
    earlier = dict((config.planned or {}).get("filled") or {})
    made = dataclasses.replace(made, filled=dict(earlier, **made.filled))
    if data is not None and data.columns is not None:  # a table: which columns, and how
        from pate.teachers.tables import column_lines

        made = dataclasses.replace(made, columns=tuple(column_lines(data.columns, data.encoder)))
    given, planned = config.to_dict(), filled.to_dict()
    return (config if planned == given else RunConfig.from_dict(planned)), made


def facts_of(config: RunConfig, data):
    """The public facts (:class:`pate.run.planner.Facts`) a plan of ``config`` is made from:
    ``data``'s public sizes with the declared number of private records
    (:meth:`pate.run.config.tables.DataTable.declared_records`; a declaration far from the
    loaded split's count is refused: :func:`pate.run.planner.facts_of`)."""
    from pate.run import planner

    records, basis = config.data.declared_records(data)
    return planner.facts_of(data, records=records, basis=basis)
