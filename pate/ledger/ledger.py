"""The ``Ledger`` (one SQLite file, many datasets) and the ``Reservation`` it hands out: the
public face of the ledger. Each public method checks its arguments, then runs one transaction of
:class:`pate.ledger.ledger_file.LedgerFile` through the functions of the package's modules."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pate.analysis.errors import InputTypeError
from pate.analysis.validation import check_choice, check_delta, check_positive, check_rdp_curve
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
from pate.ledger.dataset_registry import BASES, CONVERSIONS, Budget
from pate.ledger.identity import DatasetIdentity, check_identity
from pate.ledger.keying import keyed_digest, keyed_identity
from pate.ledger.ledger_file import DEFAULT_TIMEOUT_SECONDS, LedgerConnection
from pate.ledger.recorded_spend import ReservationInfo, StoredEvent

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 900.0


class Ledger:
    """A privacy-budget ledger in the SQLite file ``path`` (default:
    :func:`pate.ledger.default_ledger_path`; docs/ledger.md). ``create``: create the file (and its
    folder) when it does not exist; with ``False`` a missing ledger raises ``LedgerError`` and
    nothing is written to disk. ``timeout``: seconds to wait for another process's write lock
    before raising ``LedgerError``.

    A ``Ledger`` holds one connection: use it from one thread, and open a new ``Ledger`` in each
    process (connections must not cross ``fork``). It is a context manager that closes itself.
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
        if not isinstance(create, bool):
            raise InputTypeError(f"create must be True or False, got {create!r}")
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
        """Add a dataset by its sha256 ``digest`` (idempotent) and return its id: ``digest``
        when it is already a stored id, else ``digest`` keyed with the ledger's secret (a digest
        of ids, or of records from ``dataset_identity(x, y).digest``: a run on those records
        finds it). A ``name`` is its first name, or, if it has one already, one more name that
        resolves it (the first is kept); a name of another dataset is refused (``ValueError``)
        before any write."""
        digest = validation.check_digest(digest)
        name = validation.check_name(name, "name")
        with self._file.transaction(write=True) as conn:
            digest = dataset_registry.stored_id(conn, digest)
            dataset_registry.register(conn, digest, name)
        return digest

    def register_identity(self, identity: DatasetIdentity, *, name: str | None = None) -> str:
        """Register a dataset with its records (idempotent) and return its id
        (:meth:`dataset_id`); the ledger stores its record keys keyed with its secret and links
        the dataset to every registered dataset sharing a record key: from then on their spend
        counts against each other. A dataset registered by digest alone keeps its budget and
        events and gains its records. ``name`` as in :meth:`register_dataset`."""
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
        """Registered datasets that share records with ``identity`` (read only): the dataset of
        the same digest first if registered (``"same": True``, also when registered by digest
        alone), then every dataset holding one of its record keys, with ``shared_records``
        (distinct), ``num_records`` and ``budget``."""
        keyed = keyed_identity(self._file.secret, check_identity(identity))
        with self._file.transaction(write=False) as conn:
            return dataset_registry.overlapping(conn, keyed)

    def linked(self, dataset: str) -> list[dict[str, Any]]:
        """The datasets linked to ``dataset`` (sharing records with it): digest, name, number of
        shared distinct records and budget."""
        with self._resolved(dataset) as (conn, digest):
            return dataset_registry.linked_datasets(conn, digest)

    def link(self, dataset: str, other: str, *, reason: str | None = None) -> None:
        """Declare by hand that ``dataset`` and ``other`` share records (idempotent), e.g. a
        dataset whose budget was set under an id digest and the identity ``pate run``
        registers: their spend then counts against each other. Links are never removed (that
        could only understate spend)."""
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
        """Set the total budget ``(eps, delta)`` of ``dataset`` (registered here if it is a new
        digest). ``data_dependent=True`` judges spend on the realised data-dependent RDP, whose
        epsilon is *not* differentially private itself (Papernot et al. 2018); the default
        judges it on the data-independent RDP. ``conversion`` (``"classic"`` or ``"tight"``) is
        the RDP -> (eps, delta) conversion every epsilon of this dataset is judged with; a run's
        ``[privacy] conversion`` must be the same. Raising, lowering (below what was spent: no
        further spend succeeds) or changing the conversion is the data owner's decision; every
        change is kept in the audit log with the old and new budget, the spend at the time and
        ``reason`` (:meth:`budget_changes`)."""
        eps = check_positive(eps, "eps")
        conversion = check_choice(conversion, "conversion", CONVERSIONS)
        delta = check_delta(delta, "delta")
        if not isinstance(data_dependent, bool):
            raise InputTypeError(f"data_dependent must be True or False, got {data_dependent!r}")
        name = validation.check_name(name, "name")
        reason = validation.check_reason(reason)
        budget = Budget(eps, delta, BASES[1] if data_dependent else BASES[0], conversion)
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
        """Mark reservations of crashed runs ``expired`` (their process is gone, or -- for runs on
        other hosts -- their lease ran out); returns their ids. Every write does this first."""
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
        """The RDP already spent on ``dataset`` at ``orders`` -- what an online aggregator adds its
        own cost to (``OnlineAggregator(..., prior_rdp=...)``) so that it stops before the budget.

        Composes the committed events and (by default) the other live reservations of every
        block in ``blocks`` (default: all) and returns the element-wise max over those blocks, an
        upper bound on each block's curve; the events and live reservations of every dataset
        linked to ``dataset`` count in every block. This is the prior against ``dataset``'s own
        budget (:meth:`constraints` gives one per linked budget too). Orders that some recorded
        event lacks get ``+inf``. ``data_dependent`` defaults to the dataset's budget basis
        (data-independent when no budget is set).
        """
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
        """Every budget a run on ``dataset`` must stay within, each with what is already spent
        against it: the budget of ``dataset`` itself (if set) and of every linked dataset that
        has one. Each entry: ``dataset`` (digest), ``name``, ``budget`` (:class:`Budget`),
        ``shared_records`` (``None`` for ``dataset`` itself), ``linked`` (bool) and ``prior_rdp``
        at ``orders`` on that budget's basis (see :meth:`prior_rdp`). A run's own RDP ``r`` fits
        when, for every entry, ``eps_from_rdp(prior_rdp + r, orders=orders, delta=budget.delta,
        conversion=budget.conversion) <= budget.eps``, exactly as :meth:`reserve` checks it."""
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
        """Reserve an upper bound ``rdp`` (per order of ``orders``) on what a run may spend -- e.g.
        the data-independent cost of the most queries it may ask -- before it spends anything.

        Atomically checks committed events + live reservations + this bound against the budget in
        every block in ``blocks`` (default: every registered block) and raises
        ``BudgetExceededError`` (nothing recorded) if it does not fit. The reservation belongs to
        this process (pid, host); it stays live while the process runs on this host, or until
        ``lease_seconds`` after the last ``heartbeat()`` as seen from other hosts.
        """
        orders = validation.check_grid(orders, "orders")
        curve = check_rdp_curve(rdp, orders, "rdp")
        run_id = validation.check_run_id(run_id)
        lease = check_positive(lease_seconds, "lease_seconds")
        with self._resolved(dataset, write=True) as (conn, digest):
            target = dataset_registry.target_blocks(conn, digest, blocks)
            rid, names = spending.reserve(conn, digest, target, (orders, curve), run_id, lease)
        return Reservation(self, rid, digest, run_id, (orders, curve), names)

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
        """Everything ``pate budget show`` prints, as JSON-able data: budget, spent epsilon
        (committed; worst block) on the budget's basis and on both RDP kinds, spent + reserved,
        remaining, per-block spend, live reservations, event counts. Spend includes the events and live reservations of the datasets linked to this one
        (``linked_events`` counts those events); ``linked`` lists those datasets with their own
        budget and remaining, ``remaining_effective`` is the least remaining epsilon over this
        dataset's and the linked budgets and ``limited_by`` the digest it comes from;
        ``budget_changes`` lists every budget change (:meth:`budget_changes`). Every epsilon is
        converted with its budget's conversion at its delta (each linked dataset's with its own)."""
        with self._resolved(dataset) as (conn, digest):
            out = summaries.summary(conn, digest)
            changes = budget_checks.budget_changes(ledger_file.read_audit(conn, digest))
        return out | {"budget_changes": changes}

    def history(self, dataset: str) -> list[dict[str, Any]]:
        """One row per event, oldest first: run, time, mechanism, queries, answered, blocks, the
        event's own epsilon and the cumulative epsilon (worst block) after it, both on the budget's
        basis at the budget's delta with the budget's conversion (``None`` when no budget is set).
        Events of linked datasets are listed too, with their ``dataset`` digest and ``linked:
        True``; they count in every block."""
        with self._resolved(dataset) as (conn, digest):
            return summaries.history(conn, digest)

    def audit_log(self, dataset: str) -> list[dict[str, Any]]:
        """Budget changes, registrations, names, record links, block registrations, reservation
        draws, expiries and releases, oldest first."""
        with self._resolved(dataset) as (conn, digest):
            return ledger_file.read_audit(conn, digest)


class Reservation:
    """A live upper bound on one run's spend (see :meth:`Ledger.reserve`).

    Use it as a context manager: leaving the block without ``commit`` releases it (also on an
    exception). ``prior_rdp(orders)`` is what the run's online aggregator must add its own cost to.
    """

    def __init__(
        self,
        ledger: Ledger,
        rid: str,
        dataset: str,
        run_id: str,
        curve: tuple[np.ndarray, np.ndarray],
        blocks: tuple[str, ...],
    ) -> None:
        self.ledger, self.id, self.dataset, self.run_id = ledger, rid, dataset, run_id
        self.orders, self.rdp = curve
        self.blocks = blocks
        self.closed = False

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
