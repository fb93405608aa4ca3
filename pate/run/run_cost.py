"""The privacy cost of a run, recomputed from what its stages saved with :mod:`pate.analysis`
and checked against the events the aggregator charged: nothing here trusts a number it did not
compute. A run whose mechanism reads the private records has no votes, no teachers and no
data-dependent analysis: its cost is the data-independent cost of its asked queries (or of its
one release), which its data-dependent cost repeats; its sanitized release carries the fallback."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pate import analysis, mechanisms
from pate.analysis.errors import CorruptFileError
from pate.core.io import load_npy
from pate.run import rundir
from pate.run.config import PrivacyTable
from pate.run.rundir import Run

#: The most points of a curve of ``analysis.json`` (evenly spaced over the asked queries).
_CURVE_POINTS = 300


def composition(per_query: np.ndarray, orders: np.ndarray, delta: float, k: int) -> dict:
    """Basic and advanced composition of k queries (each (eps0, delta/(2k))-DP) at total delta.

    Basic: (k eps0, delta/2). Advanced (Dwork, Rothblum, Vadhan 2010):
    eps = sqrt(2 k ln(2/delta)) eps0 + k eps0 (e^eps0 - 1) at delta/2 + k delta0 = delta.
    """
    delta0 = delta / (2 * k) if k else 0.0
    eps0 = float(analysis.eps_from_rdp(per_query, orders=orders, delta=delta0)[0]) if k else 0.0
    advanced = math.sqrt(2 * k * math.log(2 / delta)) * eps0 + k * eps0 * math.expm1(eps0)
    return {
        "per_query_eps": eps0,
        "per_query_delta": delta0,
        "basic_eps": k * eps0,
        "advanced_eps": advanced,
        "delta": delta,
        "queries_composed": int(k),
    }


@dataclasses.dataclass(frozen=True)
class Saved:
    """What the earlier stages saved, cut to the asked queries, with the accounting settings of
    the config. A run that reads the private records has no votes (the module docstring): its
    ``votes`` are zeros, one row an asked query, and ``num_teachers`` the records voting on one."""

    summary: dict
    spec: mechanisms.MechanismSpec
    orders: np.ndarray
    delta: float
    conversion: str
    answered_all: np.ndarray
    labels: np.ndarray
    asked: int
    answered: np.ndarray
    votes: np.ndarray
    num_teachers: int

    @property
    def params(self) -> dict:
        return self.summary["params"]

    @property
    def reads_records(self) -> bool:
        """The mechanism reads the private records: no votes, no teachers (the module docstring)."""
        return self.spec.kind.reads_private_records

    def eps(self, rdp) -> tuple:
        """``(epsilon, order)`` of the RDP curve ``rdp`` at the config's delta and conversion."""
        return analysis.eps_from_rdp(
            rdp, orders=self.orders, delta=self.delta, conversion=self.conversion
        )


@dataclasses.dataclass(frozen=True)
class Cost:
    """The realised cost recomputed per query (rows: asked queries; columns: orders), its totals
    and their epsilons at the config's delta."""

    ind: np.ndarray
    dep: np.ndarray
    rdp_ind: np.ndarray
    rdp_dep: np.ndarray
    eps_ind: float
    order_ind: float
    eps_dep: float
    order_dep: float


def _votes(run: Run, spec, summary: dict, asked: int) -> tuple[np.ndarray, int]:
    """The votes of the asked queries and the number of voters on one query."""
    if spec.kind.reads_private_records:
        # no saved histograms: an asked query's cost does not depend on them, only their number
        votes = np.zeros((asked, 2), dtype=np.int64)
        # the records voting on one query, counted as declared (the exact count is internal)
        num_teachers = spec.voters(
            summary["params"], private_records=run.config.data.declared_records(run.data)[0]
        )
        return votes, num_teachers
    votes_all = load_npy(run.path(rundir.VOTES), what="the votes stage")
    return votes_all[:asked], int(votes_all[0].sum())


def load_saved(run: Run) -> Saved:
    """Read the aggregate stage's summary, answered mask and labels (and the votes stage's votes)."""
    config = run.config
    priv = config.privacy
    summary = rundir.read_summary(run.path(rundir.AGGREGATE), rundir.AGGREGATE_KEYS)
    spec = mechanisms.get(summary["mechanism"])
    orders = config.privacy.order_grid()
    delta, conversion = priv.delta, priv.conversion
    answered_all = load_npy(run.path(rundir.ANSWERED), what="the aggregate stage")
    labels = load_npy(run.path(rundir.LABELS), what="the aggregate stage")
    asked = int(summary["queries_asked"])
    votes, num_teachers = _votes(run, spec, summary, asked)
    return Saved(
        summary=summary,
        spec=spec,
        orders=orders,
        delta=delta,
        conversion=conversion,
        answered_all=answered_all,
        labels=labels,
        asked=asked,
        answered=answered_all[:asked],
        votes=votes,
        num_teachers=num_teachers,
    )


def _check_charged(
    run: Run, summary: dict, orders: np.ndarray, *, rdp_dep: np.ndarray, rdp_ind: np.ndarray
) -> None:
    """Raise unless the events the aggregator charged are stated for adding or removing one
    record and compose to the recomputed totals."""
    events = [analysis.PrivacyEvent.from_dict(e) for e in summary["events"]]
    stated_for = sorted({e.relation for e in events} - {analysis.ADD_REMOVE})
    if stated_for:  # an aggregate.json written before the stable (keyed-hash) partition
        raise CorruptFileError(
            f"{run.path(rundir.AGGREGATE)} holds privacy events analysed for {', '.join(stated_for)} "
            "neighbours (written by a pate-learn whose teacher split reshuffled the records when "
            "one was added); this pate-learn states every guarantee for adding or removing one "
            "record and cannot report that run's. Start a new run directory",
            path=run.path(rundir.AGGREGATE),
        )
    charged = analysis.RdpAccountant(orders).compose(
        *[e for e in events if e.mechanism != "gnss-release"]
    )
    if not (
        np.allclose(charged.rdp(), rdp_dep, rtol=1e-9, atol=0)
        and np.allclose(charged.rdp(False), rdp_ind, rtol=1e-9, atol=0)
    ):
        raise RuntimeError(
            "the recomputed privacy cost differs from the cost the aggregator charged; "
            "the run directory may have been modified"
        )


def realised_cost(run: Run, saved: Saved) -> Cost:
    """Realised cost, recomputed per query; its total must equal the charged event."""
    s = saved
    ind = s.spec.per_query_rdp(
        s.votes, s.params, answered=s.answered, orders=s.orders, data_dependent=False
    )
    dep = (
        ind
        if s.reads_records
        else s.spec.per_query_rdp(
            s.votes, s.params, answered=s.answered, orders=s.orders, data_dependent=True
        )
    )
    rdp_dep, rdp_ind = dep.sum(axis=0), ind.sum(axis=0)
    _check_charged(run, s.summary, s.orders, rdp_dep=rdp_dep, rdp_ind=rdp_ind)
    (eps_dep, order_dep), (eps_ind, order_ind) = s.eps(rdp_dep), s.eps(rdp_ind)
    return Cost(
        ind=ind,
        dep=dep,
        rdp_ind=rdp_ind,
        rdp_dep=rdp_dep,
        eps_ind=eps_ind,
        order_ind=order_ind,
        eps_dep=eps_dep,
        order_dep=order_dep,
    )


def sanitized_release(saved: Saved, cost: Cost, priv: PrivacyTable) -> dict:
    """The sanitized release: drawn (and charged) by the aggregate stage, with the parameters
    fixed in the config; without one, nothing data-dependent is released."""
    release = saved.summary.get("release")
    if release is None:
        orders, delta = saved.orders, saved.delta
        lam = priv.release_order
        idx = int(np.argmin(np.abs(orders - lam)))
        eps_at = float(
            cost.rdp_ind[idx]
            + analysis.conversion_term(order=orders[idx], delta=delta, conversion=saved.conversion)
        )
        release = {
            "order": float(orders[idx]),
            "beta": priv.release_beta,
            "sigma_ss": priv.release_sigma_ss,
            "noise_std": 0.0,
            "rdp_gnss": 0.0,
            "smooth_sensitivity": 0.0,
            "eps_data_independent": eps_at,
            "fallback": saved.summary["release_plan"]["fallback"],
            # nothing data-dependent is released: the data-independent epsilon holds at
            # every order, so its best order may be used
            "eps_sanitized": float(cost.eps_ind),
            "eps_sanitized_upper_2std": float(cost.eps_ind),
        }
    return dict(release)


def guarantee(saved: Saved, cost: Cost, release: dict) -> tuple[float, dict | None]:
    """The epsilon of what the run releases, and the earlier rounds composed into it (or None)."""
    guarantee_rdp = cost.rdp_ind
    if release.get("fallback") is None and release.get("noise_std", 0.0) != 0.0:
        # the smooth-sensitivity release at every order (inf where Theorem 23 does not hold)
        guarantee_rdp = guarantee_rdp + analysis.gnss_rdp_curve(
            beta=release["beta"], sigma_ss=release["sigma_ss"], orders=saved.orders
        )
    # Earlier rounds whose released student embeds this run ([knn] features = "student"):
    # what this run releases depends on them too, so their cost is composed in.
    prior = saved.summary.get("prior")
    if prior is not None:
        prior_rdp = np.asarray(prior["rdp"], dtype=float)
        guarantee_rdp = guarantee_rdp + prior_rdp
        prior = {"runs": prior["runs"], "eps": float(saved.eps(prior_rdp)[0])}
    return saved.eps(guarantee_rdp)[0], prior


def curves(saved: Saved, cost: Cost) -> dict:
    """Epsilon after each asked query, against the number answered so far."""
    asked = saved.asked
    idx = np.unique(np.round(np.linspace(0, asked - 1, min(asked, _CURVE_POINTS))).astype(int))
    if not asked:
        return {"answered_count": [], "eps_data_independent": [], "eps_data_dependent": []}
    eps_i, _ = saved.eps(np.cumsum(cost.ind, axis=0)[idx])
    eps_d, _ = saved.eps(np.cumsum(cost.dep, axis=0)[idx])
    return {
        "answered_count": np.cumsum(saved.answered)[idx].astype(int).tolist(),
        "eps_data_independent": eps_i.tolist(),
        "eps_data_dependent": eps_d.tolist(),
    }
