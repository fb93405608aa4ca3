"""The kinds of mechanism: what a mechanism (a spec's class attribute ``kind``) reads and how its
answers are drawn and charged, each step of a run named as ``"module:function"`` (the layer above
imports it when a run needs it). The built-in kinds (vote, sample, release): docs/aggregators.md."""

from __future__ import annotations

import dataclasses
import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from pate.analysis.errors import InputError


@dataclasses.dataclass(frozen=True)
class MechanismKind:
    """A kind of mechanism (see the module docstring): ``name`` and ``title`` in prose.

    ``reads_private_records``: the mechanism reads the private records itself, not teachers' votes
    (a run has no partition and no teachers; its votes stage writes public-fitted embeddings of
    both splits). ``releases_once``: one noisy release labels every query, its one event charged
    before it is drawn (``spec.draw`` does not apply; implies ``reads_private_records``).
    ``gives_label_scores``: the labelling rule's class scores (post-processing of the release) are
    published with the labels, for a student trained on soft targets. ``votes_stage``
    (``function(run) -> info``) and ``aggregate_loop`` (``function(run, spec, ledger, dataset,
    run_id) -> info``, once the ledger and budget are resolved): ``"module:function"``.
    """

    name: str
    title: str
    reads_private_records: bool
    votes_stage: str
    aggregate_loop: str
    releases_once: bool = False
    gives_label_scores: bool = False

    def __post_init__(self) -> None:
        for field in ("votes_stage", "aggregate_loop"):
            module, _, function = str(getattr(self, field)).partition(":")
            if not (module and function.isidentifier()):
                raise InputError(
                    f'kind {self.name!r}: {field} must be "module:function", got '
                    f"{getattr(self, field)!r}"
                )
        if self.releases_once and not self.reads_private_records:
            raise InputError(
                f"kind {self.name!r}: a mechanism that releases once reads the "
                "private records (set reads_private_records=True)"
            )

    def step(self, field: str) -> Callable[..., Any]:
        """The function that ``field`` ("votes_stage" or "aggregate_loop") names, imported now."""
        module, _, function = getattr(self, field).partition(":")
        step: Callable[..., Any] = getattr(importlib.import_module(module), function)
        return step

    @property
    def trains_teachers(self) -> bool:
        """A run of this kind trains teachers on a partition of the private records."""
        return not self.reads_private_records


_STAGES = "pate.run.stages."
VOTE = MechanismKind(
    "vote",
    "a noisy answer per query from the teachers' votes",
    reads_private_records=False,
    votes_stage=_STAGES + "votes:teacher_votes",
    aggregate_loop=_STAGES + "aggregate_votes:aggregate_votes",
)
SAMPLE = MechanismKind(
    "sample",
    "a noisy answer per query from a fresh sample of the private records",
    reads_private_records=True,
    votes_stage=_STAGES + "votes:record_embeddings",
    aggregate_loop=_STAGES + "aggregate_sample:aggregate_sample",
)
RELEASE = MechanismKind(
    "release",
    "one noisy release of the private records that labels every query",
    reads_private_records=True,
    votes_stage=_STAGES + "votes:record_embeddings",
    aggregate_loop=_STAGES + "aggregate_release:aggregate_release",
    releases_once=True,
    gives_label_scores=True,
)

KINDS: Mapping[str, MechanismKind] = types.MappingProxyType(
    {kind.name: kind for kind in (VOTE, SAMPLE, RELEASE)}
)
