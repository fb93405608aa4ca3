"""The ``Ledger`` (one SQLite file, many datasets) and the ``Reservation`` it hands out: the
public face of the ledger. Each public method checks its arguments, then runs one transaction of
:class:`pate.ledger.ledger_file.LedgerFile` through the functions of the package's modules."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pate.analysis.errors import InputTypeError
from pate.analysis.validation import check_bool, check_delta, check_positive, check_rdp_curve
from pate.core.errors import LedgerError
from pate.ledger import (
    budget_checks,
    dataset_registry,
    ledger_file,
    recorded_spend,
    spending,
    summaries,
    validation,
)
from pate.ledger.composition import prior
from pate.ledger.dataset_registry import BASES, Budget
from pate.ledger.identity import DatasetIdentity, check_identity
from pate.ledger.keying import keyed_digest, keyed_identity
from pate.ledger.ledger_file import DEFAULT_TIMEOUT_SECONDS, LedgerConnection
from pate.ledger.recorded_spend import ReservationInfo, StoredEvent

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 900.0


class Ledger:
    """A privacy-budget ledger in the SQLite file ``path`` (default:
    :func:`pate.ledger.default_ledger_path`; docs/ledger.md). ``create=False``: a missing ledger
    raises ``LedgerError`` and nothing is written. ``timeout``: seconds to wait for another
    process's write lock before raising ``LedgerError``. One connection: use it from one thread,
    a new ``Ledger`` in each process; a context manager that closes itself.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        if path is None:
            path = ledger_file.default_ledger_path()
        if not isinstance(path, (str, os.PathLike)):
            raise InputTypeError(f"path must be a file path, got {type(path).__name__}")
        create = check_bool(create, "create")
        self.timeout = check_positive(timeout, "timeout")
        self.path = pathlib.Path(path).expanduser()
        self._file = ledger_file.LedgerFile(self.path, create=create, timeout=self.timeout)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._file.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    @contextlib.contextmanager
    def _resolved(
        self, dataset: str, *, write: bool = False
    ) -> Iterator[tuple[LedgerConnection, str]]:
        """A transaction and the id of ``dataset`` in it."""
        with self._file.transaction(write=write) as conn:
            yield conn, dataset_registry.resolve(conn, dataset)

    def resolve(self, dataset: str) -> str:
        """The id of ``dataset`` given as its id, a name, a digest (of ids or records; the ledger
        keys it) or a unique prefix (>= 8) of its id."""
        with self._resolved(dataset) as (_, digest):
            return digest

    def dataset_id(self, identity: DatasetIdentity) -> str:
        """The id (64 hex) under which this ledger keeps the records of ``identity``: keyed with
        the ledger's secret (:mod:`pate.ledger.keying`), so it tells nothing about the records
        to whoever lacks the key file. Computes only; nothing is registered."""
        return keyed_digest(self._file.secret, check_identity(identity).digest)

    def register_dataset(self, digest: str, *, name: str | None = None) -> str:
        """Add a dataset by its sha256 ``digest`` (of ids or records; idempotent) and return its
        id: ``digest`` if it is a stored id, else ``digest`` keyed with the ledger's secret.
        ``name``: its first name, else one more name that resolves it; a name of another dataset
        is refused (``ValueError``) before any write."""
        digest = validation.check_digest(digest)
        name = validation.check_name(name, "name")
        with self._file.transaction(write=True) as conn:
            digest = dataset_registry.stored_id(conn, digest)
            dataset_registry.register(conn, digest, name)
        return digest

    def register_identity(self, identity: DatasetIdentity, *, name: str | None = None) -> str:
        """Register a dataset with its records (idempotent; its keyed record keys stored) and
        return its id (:meth:`dataset_id`); it is linked to every registered dataset sharing a
        record: their spend counts against each other. ``name`` as in :meth:`register_dataset`."""
        keyed = keyed_identity(self._file.secret, check_identity(identity))
        name = validation.check_name(name, "name")
        with self._file.transaction(write=True) as conn:
            dataset_registry.register(conn, keyed.digest, name)
            shared = dataset_registry.add_records(conn, keyed)
            label = dataset_registry.label(conn, keyed.digest)
        if shared:
            logger.info(
                "dataset %s shares records with %d registered dataset(s); their spend "
                "counts against each other",
                label,
                len(shared),
            )
        return keyed.digest

    def overlapping(self, identity: DatasetIdentity) -> list[dict[str, Any]]:
        """Registered datasets sharing records with ``identity`` (read only): its own first if
        registered (``"same": True``), then the others, with ``shared_records`` (distinct),
        ``num_records`` and ``budget``."""
        keyed = keyed_identity(self._file.secret, check_identity(identity))
        with self._file.transaction(write=False) as conn:
            return dataset_registry.overlapping(conn, keyed)

    def linked(self, dataset: str) -> list[dict[str, Any]]:
        """The datasets linked to ``dataset`` (sharing records with it): digest, name, number of
        shared distinct records and budget."""
        with self._resolved(dataset) as (conn, digest):
            return dataset_registry.linked_datasets(conn, digest)

    def link(self, dataset: str, other: str, *, reason: str | None = None) -> None:
        """Declare by hand that ``dataset`` and ``other`` share records (idempotent): their spend
        then counts against each other. Links are never removed (that could understate spend)."""
        reason = validation.check_reason(reason)
        with self._resolved(dataset, write=True) as (conn, digest):
            pair = (digest, dataset_registry.resolve(conn, other))
            dataset_registry.add_link(conn, pair, (dataset, other), reason)

    def datasets(self) -> list[dict[str, Any]]:
        """Every dataset: digest, name (its first), ``aliases`` (its later names, oldest first),
        budget (``budget_eps``, ``budget_delta``, ``basis``, ``conversion``), number of events,
        number of records (``None`` when registered by digest alone) and the digests of the
        datasets linked to it."""
        with self._file.transaction(write=False) as conn:
            return dataset_registry.list_datasets(conn)

    def set_budget(
        self,
        dataset: str,
        *,
        eps: float,
        delta: float,
        data_dependent: bool = False,
        conversion: str = "classic",
        name: str | None = None,
        reason: str | None = None,
    ) -> Budget:
        """Set the total budget ``(eps, delta)`` of ``dataset`` (registered if a new digest).
        ``data_dependent=True`` judges spend on the realised data-dependent RDP, whose epsilon is
        *not* differentially private itself (Papernot et al. 2018). ``conversion``: the RDP ->
        (eps, delta) conversion of every epsilon of this dataset (a run's must match). Every
        change is audited with the old budget, the spend at the time and ``reason``
        (:meth:`budget_changes`)."""
        eps = check_positive(eps, "eps")
        delta = check_delta(delta, "delta")
        basis = BASES[1] if check_bool(data_dependent, "data_dependent") else BASES[0]
        name = validation.check_name(name, "name")
        reason = validation.check_reason(reason)
        budget = Budget(eps, delta, basis, conversion)  # checks the conversion
        with self._file.transaction(write=True) as conn:
            digest = dataset_registry.resolve_or_register(conn, dataset, name)
            old_eps, spent = budget_checks.write_budget(conn, digest, budget, reason)
            label = name or dataset_registry.label(conn, digest)
        if old_eps is not None and spent > 0:
            logger.warning(
                "budget of dataset %s changed from eps=%g to eps=%g after eps=%.4g was "
                "spent (recorded in the audit log)",
                label,
                old_eps,
                eps,
                spent,
            )
        return budget

    def budget_changes(self, dataset: str) -> list[dict[str, Any]]:
        """Every budget change of ``dataset``, oldest first: ``time_utc``, the new ``eps``,
        ``delta``, ``basis``, ``conversion``, the ``previous`` budget (``None`` for the first),
        ``change`` (``"initial"``, ``"raised"``, ``"lowered"`` or ``"unchanged"``, on eps at equal
        delta, basis and conversion, else ``"changed"``), ``spent_eps`` at the time and
        ``reason``."""
        return budget_checks.budget_changes(self.audit_log(dataset))

    def budget(self, dataset: str) -> Budget | None:
        """The budget of ``dataset``; ``None`` when none was set (spend is then recorded, unlimited)."""
        with self._resolved(dataset) as (conn, digest):
            return dataset_registry.budget_of(conn, digest)

    def add_block(self, dataset: str, name: str) -> None:
        """Register a time block of records of ``dataset`` (Sage). It starts with fresh budget."""
        block = validation.check_name(name, "block")
        if block is None:
            raise InputTypeError("block must be a non-empty string, got None")
        with self._resolved(dataset, write=True) as (conn, digest):
            dataset_registry.add_block(conn, digest, block)

    def blocks(self, dataset: str) -> list[str]:
        """Names of the registered blocks of ``dataset``, oldest first."""
        with self._resolved(dataset) as (conn, digest):
            return list(dataset_registry.block_names(conn, digest).values())

    def events(self, dataset: str, *, run_id: str | None = None) -> list[StoredEvent]:
        """The recorded events of ``dataset`` (optionally one run's), oldest first."""
        with self._resolved(dataset) as (conn, digest):
            return recorded_spend.stored_events(conn, digest, run_id)

    def reservations(self, dataset: str, *, live_only: bool = True) -> list[ReservationInfo]:
        """Reservations of ``dataset``: the live ones (default) or all, oldest first."""
        with self._resolved(dataset) as (conn, digest):
            return recorded_spend.reservation_infos(conn, digest, live_only)

    def reconcile(self, dataset: str | None = None) -> list[str]:
        """Mark ``expired`` the reservations of crashed runs (process gone; on other hosts: lease
        run out) and return their ids; every write does this first."""
        with self._file.transaction(write=True) as conn:
            digests = None if dataset is None else [dataset_registry.resolve(conn, dataset)]
            return spending.reconcile(conn, digests)

    def prior_rdp(
        self,
        dataset: str,
        *,
        orders: Any,
        blocks: Sequence[str] | None = None,
        include_reservations: bool = True,
        exclude_reservation: str | None = None,
        data_dependent: bool | None = None,
    ) -> np.ndarray:
        """The RDP already spent on ``dataset`` at ``orders``, what an online aggregator adds its
        own cost to (``OnlineAggregator(..., prior_rdp=...)``): the committed events and (by
        default) live reservations, composed per block of ``blocks`` (default: all; linked
        datasets' spend counts in every block), element-wise max over the blocks; ``+inf`` at
        an order some event lacks. The prior against ``dataset``'s own budget only
        (:meth:`constraints`: every budget). ``data_dependent``: default the budget's basis."""
        orders = validation.check_grid(orders, "orders")
        with self._resolved(dataset) as (conn, digest):
            target = dataset_registry.target_blocks(conn, digest, blocks)
            return prior(
                conn,
                digest,
                orders,
                target,
                exclude_reservation,
                data_dependent,
                include_reservations,
            )

    def constraints(
        self,
        dataset: str,
        *,
        orders: Any,
        blocks: Sequence[str] | None = None,
        exclude_reservation: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every budget a run on ``dataset`` must stay within (its own if set, and every linked
        dataset's): ``dataset`` (digest), ``name``, ``budget`` (:class:`Budget`),
        ``shared_records`` (``None`` for ``dataset`` itself), ``linked`` and ``prior_rdp`` at
        ``orders`` on that budget's basis (:meth:`prior_rdp`). A run's own RDP ``r`` fits when
        ``eps_from_rdp(prior_rdp + r, ...)`` is within each ``budget`` (:meth:`reserve`'s check)."""
        orders = validation.check_grid(orders, "orders")
        with self._resolved(dataset) as (conn, digest):
            target = dataset_registry.target_blocks(conn, digest, blocks)
            return budget_checks.constraints(conn, digest, orders, target, exclude_reservation)

    def reserve(
        self,
        dataset: str,
        *,
        orders: Any,
        rdp: Any,
        run_id: str | None = None,
        blocks: Sequence[str] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Reservation:
        """Reserve an upper bound ``rdp`` (per order of ``orders``) on what a run may spend,
        before it spends anything; ``BudgetExceededError`` (nothing recorded) unless committed
        events + live reservations + this bound fit the budget in every block of ``blocks``
        (default: all). It belongs to this process: live while the process runs on this host,
        or (seen from other hosts) until ``lease_seconds`` after the last ``heartbeat()``."""
        orders = validation.check_grid(orders, "orders")
        curve = check_rdp_curve(rdp, orders, "rdp")
        run_id = validation.check_run_id(run_id)
        lease = check_positive(lease_seconds, "lease_seconds")
        with self._resolved(dataset, write=True) as (conn, digest):
            target = dataset_registry.target_blocks(conn, digest, blocks)
            rid, names = spending.reserve(conn, digest, target, (orders, curve), run_id, lease)
        return Reservation(self, rid, digest, run_id, orders, curve, names)

    def charge(
        self,
        dataset: str,
        events: Sequence[Any],
        *,
        run_id: str | None = None,
        blocks: Sequence[str] | None = None,
    ) -> list[int]:
        """Check and record ``events`` in one transaction (no reservation). Raises
        ``BudgetExceededError`` and records nothing if they do not fit. Returns the event ids."""
        events = validation.check_events(events)
        run_id = validation.check_run_id(run_id)
        with self._resolved(dataset, write=True) as (conn, digest):
            target = dataset_registry.target_blocks(conn, digest, blocks)
            spending.reconcile_group(conn, digest)
            return spending.record(conn, digest, events, target, run_id, None)

    def commit(self, reservation_id: str, events: Sequence[Any]) -> list[int]:
        """Record ``events`` in place of reservation ``reservation_id`` (live or drawn: e.g. a
        drawn one whose run crashed after drawing, by the run's resume) and close it; spend
        within the reservation always fits. Returns the event ids."""
        events = validation.check_events(events)
        with self._file.transaction(write=True) as conn:
            return spending.commit(conn, reservation_id, events)

    def mark_drawn(self, reservation_id: str) -> None:
        """Mark a live reservation drawn BEFORE any noise is drawn inside it (committed
        durably): from then on its whole bound counts as spent and it is never reclaimed, even if
        its process dies; only :meth:`commit` (the round's events) or :meth:`forfeit` closes it.
        ``LedgerError`` if it is no longer live (nothing may be drawn then)."""
        with self._file.transaction(write=True) as conn:
            spending.mark_drawn(conn, reservation_id)

    def forfeit(self, reservation_id: str) -> list[int]:
        """Close a drawn reservation whose answers were lost (its run died before keeping them)
        as one event of its whole bound (``"lost-drawn-answers"``): the budget stays spent."""
        with self._file.transaction(write=True) as conn:
            return spending.forfeit(conn, reservation_id)

    def release(self, reservation_id: str) -> bool:
        """Give back a live reservation (nothing spent). Returns False if it was no longer live."""
        if not isinstance(reservation_id, str) or not reservation_id:
            raise InputTypeError(
                f"reservation_id must be a non-empty string, got {reservation_id!r}"
            )
        with self._file.transaction(write=True) as conn:
            return spending.release(conn, reservation_id)

    def _heartbeat(self, reservation_id: str) -> None:
        with self._file.transaction(write=True) as conn:
            spending.heartbeat(conn, reservation_id)

    def summary(self, dataset: str) -> dict[str, Any]:
        """What ``pate budget show`` prints, as JSON-able data: budget, spent epsilon (committed;
        worst block) on the budget's basis and on both RDP kinds, spent + reserved, remaining,
        per-block spend, live reservations, event counts (``linked_events``: of linked datasets,
        whose spend counts here), ``linked`` (each with its own budget and remaining),
        ``remaining_effective`` (the least remaining over all those budgets) and ``limited_by``
        (its digest), ``budget_changes``. Each epsilon is at its own budget's delta and conversion.
        """
        with self._resolved(dataset) as (conn, digest):
            return summaries.summary(conn, digest)

    def history(self, dataset: str) -> list[dict[str, Any]]:
        """One row per event (linked datasets' too: ``linked: True``, counted in every block),
        oldest first: run, time, mechanism, queries, answered, blocks, its own epsilon and the
        cumulative (worst block) epsilon after it, on the budget (``None`` without a budget)."""
        with self._resolved(dataset) as (conn, digest):
            return summaries.history(conn, digest)

    def audit_log(self, dataset: str) -> list[dict[str, Any]]:
        """Budget changes, registrations, names, record links, block registrations, reservation
        draws, expiries and releases, oldest first."""
        with self._resolved(dataset) as (conn, digest):
            return ledger_file.read_audit(conn, digest)


@dataclasses.dataclass(eq=False, repr=False)
class Reservation:
    """A live upper bound ``rdp`` at ``orders`` on one run's spend (see :meth:`Ledger.reserve`).

    Use it as a context manager: leaving the block without ``commit`` releases it (also on an
    exception). ``prior_rdp(orders)`` is what the run's online aggregator must add its own cost to.
    """

    ledger: Ledger
    id: str
    dataset: str
    run_id: str
    orders: np.ndarray
    rdp: np.ndarray
    blocks: tuple[str, ...]
    closed: bool = False

    def __repr__(self) -> str:
        return f"Reservation(id={self.id!r}, run_id={self.run_id!r}, dataset={self.dataset[:12]!r})"

    @property
    def budget(self) -> Budget | None:
        return self.ledger.budget(self.dataset)

    def _others(self, orders: Any) -> dict[str, Any]:
        """The spend of others in this run's blocks at ``orders`` (default: the reservation's)."""
        orders = self.orders if orders is None else orders
        return {
            "orders": orders,
            "blocks": list(self.blocks) or None,
            "exclude_reservation": self.id,
        }

    def prior_rdp(self, orders: Any = None) -> np.ndarray:
        """RDP already spent or reserved by *others* in this run's blocks (element-wise max over
        blocks) at ``orders`` (default: the reservation's orders)."""
        return self.ledger.prior_rdp(self.dataset, **self._others(orders))

    def constraints(self, orders: Any = None) -> list[dict[str, Any]]:
        """Every budget this run must stay within (:meth:`Ledger.constraints`), others' spend as
        prior, at ``orders`` (default: the reservation's orders)."""
        return self.ledger.constraints(self.dataset, **self._others(orders))

    def heartbeat(self) -> None:
        """Renew the lease (only needed for runs that other hosts might otherwise reclaim)."""
        self.ledger._heartbeat(self.id)

    def commit(self, events: Sequence[Any]) -> list[int]:
        """Record the run's realised ``events`` and release the rest of the reservation, atomically.
        Spend within the reservation always fits; beyond it, it must fit the remaining budget or
        ``BudgetExceededError`` is raised, nothing is recorded and the reservation stays live.
        Release answers only after this returns."""
        if self.closed:
            raise LedgerError(
                f"reservation {self.id} is already closed; reserve again for more spend"
            )
        ids = self.ledger.commit(self.id, events)
        self.closed = True
        return ids

    def mark_drawn(self) -> None:
        """:meth:`Ledger.mark_drawn`: call it before drawing any noise inside this reservation;
        from then on it is spent (a release gives nothing back)."""
        self.ledger.mark_drawn(self.id)

    def release(self) -> None:
        """Give the whole reservation back (nothing spent); a drawn one stays spent."""
        if not self.closed:
            self.ledger.release(self.id)
            self.closed = True

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.closed:
            with contextlib.suppress(LedgerError):
                self.release()
