"""The aggregate stage."""

from __future__ import annotations

import contextlib

import numpy as np

from pate import config as C
from pate import mechanisms
from pate import rundir as R
from pate.analysis.errors import BudgetExceededError
from pate.io import load_npy, load_npz
from pate.rundir import Run
from pate.stages.budget import _caller, _raise_hint, authorize
from pate.stages.pending import _aggregate_info, _finish_pending, _pending_write, _publish
from pate.stages.records import knn_prior
from pate.stages.release import _release, release_plan
from pate.stages.rounds import _Progress, _ask_in_rounds, _max_fitting


def aggregate(run: Run) -> dict:
    """Noisy labels within the budget; nothing reaches ``labels.npy`` before it is charged.

    With a ledger, the queries are asked in rounds: each round reserves (in the ledger, against
    the budget of the dataset and of every dataset sharing records with it, concurrent runs
    included) the worst case of as many queries as fit, asks them, writes the answers to the
    pending file, and commits their realised cost (always within the reservation). The
    sanitized release's cost is reserved up front and committed when it is drawn. Only after
    the last commit are ``labels.npy``/``answered.npy``/``aggregate.json`` written; a crash in
    between leaves the pending file, which ``--resume`` charges and publishes (or discards).
    """
    from pate.aggregators import OnlineAggregator
    from pate.analysis import PrivacyEvent

    config = run.config
    agg, priv = config["aggregator"], config["privacy"]
    spec = mechanisms.get(agg["mechanism"])
    params = C.aggregator_params(config)
    run_id = run.run_id + ":aggregate"
    run.check_not_a_copy()  # a copied run directory never draws or charges under this run id
    ledger = run.ledger()
    release_reservation, first = None, (None, 0)
    try:
        dataset = authorize(run, ledger) if ledger is not None else None
        if run.path(R.AGGREGATE).exists():  # published: charged before it was written
            run.path(R.PENDING).unlink(missing_ok=True)  # a crash before _publish removed it
            return _aggregate_info(R.read_summary(run.path(R.AGGREGATE), R.AGGREGATE_KEYS))
        if run.path(R.PENDING).exists() or run.path(R.PENDING_SUMMARY).exists():
            return _finish_pending(run, ledger, dataset, run_id)
        if spec.samples_private_records:
            records = _aggregate_once if spec.releases_once else _aggregate_knn
            return records(run, spec, ledger, dataset, run_id)

        votes_all = load_npy(run.path(R.VOTES), what="the votes stage")
        num_queries = votes_all.shape[0]
        queries = min(agg.get("queries", num_queries), num_queries)
        orders = C.orders(config)
        budget_eps, delta = priv["budget_eps"], priv["delta"]
        num_teachers, num_classes = int(votes_all[0].sum()), int(votes_all.shape[1])
        # The sanitized release is planned before any noise is drawn (its parameters are in the
        # config, its cost is data-independent): the answers leave room for it.
        plan = release_plan(config, num_teachers=num_teachers, num_classes=num_classes,
                            orders=orders)
        if plan["release"]:
            from pate import analysis

            release_eps = float(analysis.eps_from_rdp(plan["rdp"], orders=orders, delta=delta,
                                                      conversion=priv["conversion"])[0])
            if release_eps > budget_eps / 2:  # public quantities only: no data looked at
                plan = dict(plan, release=False, fallback=(
                    f"the release alone would cost eps={release_eps:.4g}, more than half of the "
                    f"budget ({budget_eps:g}); it was skipped (raise release_sigma_ss or the "
                    "budget to release a sanitized epsilon)"))
        release_rdp = plan["rdp"] if plan["release"] else np.zeros(orders.size)
        worst = spec.worst_case_query_rdp(params, orders=orders)

        if ledger is not None and plan["release"]:
            try:
                release_reservation = ledger.reserve(dataset, orders=orders, rdp=release_rdp,
                                                     run_id=run_id)
            except BudgetExceededError:
                plan = dict(plan, release=False, fallback=(
                    "the ledger's remaining budget does not cover the sanitized release; it was "
                    "skipped and the data-independent epsilon is reported"))
                release_rdp = np.zeros(orders.size)
        prior = release_rdp.copy()
        if ledger is not None:
            # the first round's reservation, reserved before any noise exists: its prior (what
            # others spent or reserved, the planned release included) starts the aggregator
            first = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=queries,
                                 run_id=run_id)
            if first[0] is None and release_reservation is not None:
                # answers before the release: without room for one query, the release goes
                release_reservation.release()
                release_reservation = None
                plan = dict(plan, release=False, fallback=(
                    "the ledger's remaining budget does not cover the sanitized release and one "
                    "query; the release was skipped and the data-independent epsilon is reported"))
                release_rdp = np.zeros(orders.size)
                first = _max_fitting(ledger, dataset, orders=orders, worst=worst, limit=queries,
                                     run_id=run_id)
            if first[0] is None:
                summary = ledger.summary(dataset)
                raise BudgetExceededError(
                    f"the ledger {ledger.path} has no room for even one query of {spec.title} "
                    f"on this dataset ({dataset[:16]}...: spent and reserved eps="
                    f"{summary['spent_and_reserved']:.6g} of {summary['budget']['eps']:g}); "
                    "nothing was drawn or charged. Use more noise, or "
                    + _raise_hint(run, ledger, dataset, queries * worst),
                    remaining=summary["remaining"])
            prior = first[0].prior_rdp(orders)
        noise = run.noise_streams()
        aggregator = OnlineAggregator(
            spec.name, budget_eps=budget_eps, delta=delta, rng=noise.noise, orders=orders,
            budget_basis=agg["budget_basis"].replace("-", "_"), conversion=priv["conversion"],
            prior_rdp=prior, **params)

        labels = np.full(num_queries, -1, dtype=np.int64)
        answered = np.zeros(num_queries, dtype=bool)
        progress = _Progress()

        def summary_now(events=None, release=None):
            from pate import analysis

            events = list(aggregator.accountant.events) if events is None else events
            s = aggregator.summary()
            # this run's answers alone (the aggregator's own totals include the prior: other
            # runs' spend and the planned release)
            for dd, key in ((False, "eps_data_independent"), (True, "eps_data_dependent")):
                eps, order = analysis.eps_from_rdp(
                    aggregator.accountant.rdp(data_dependent=dd), orders=orders, delta=delta,
                    conversion=priv["conversion"])
                s[key] = float(eps)
                s["order_" + key[4:]] = float(order)
            return dict(
                s, run_id=run_id, dataset=dataset, ledger=None if ledger is None else str(ledger.path),
                events=[e.to_dict() for e in events], queries_offered=int(queries),
                release=release, release_plan={k: v for k, v in plan.items() if k != "rdp"},
                noise_seeded=C.noise_seeded(config), reserved_queries=int(progress.reserved),
                stop_reason=progress.stop_reason, rounds=progress.rounds)

        def ask(start, n):
            # the aggregator stops by itself on the config's budget (prior included)
            result = aggregator.answer(votes_all[start:start + n], on_exhausted="stop")
            k = result.num_asked
            labels[start:start + k] = result.labels[:k]
            answered[start:start + k] = result.answered_mask[:k]
            return k, result.event, result.stop_reason

        _ask_in_rounds(run, ledger, dataset, run_id, orders=orders, worst=worst, limit=queries,
                       first=first, ask=ask, labels=labels, answered=answered,
                       summary=summary_now, progress=progress)
        asked, stop_reason = progress.asked, progress.stop_reason
        if asked == 0 and queries > 0:
            raise BudgetExceededError(
                f"no query could be asked ({stop_reason}); nothing was released or charged. Use "
                "more noise, or " + (_raise_hint(run, ledger, dataset, queries * worst)
                                     if ledger is not None else
                                     f"raise {C.setting('privacy', 'budget_eps', source=_caller(run))}"),
                remaining=aggregator.remaining_eps)
        events = list(aggregator.accountant.events)
        release = None
        if plan["release"]:
            release = _release(config, votes_all[:asked], answered[:asked], noise.release)
            events.append(PrivacyEvent("gnss-release", plan["params"], orders, plan["rdp"],
                                       plan["rdp"], queries=0, answered=0))
            if release_reservation is not None:
                progress.charges.append({"keys": [release_reservation.id],
                                         "events": [events[-1].to_dict()]})
                _pending_write(run, labels, answered, summary_now(events, release),
                               progress.charges)
                release_reservation.commit([events[-1]])
        summary = summary_now(events, release)
        _publish(run, labels, answered, summary)
        return _aggregate_info(summary)
    finally:
        for unused in (release_reservation, first[0]):
            if unused is not None and not unused.closed:
                unused.release()  # nothing was drawn for it
        if ledger is not None:
            ledger.close()


def _records_inputs(run: Run, spec) -> tuple:
    """What the aggregate stage of a mechanism that reads the private records starts from:
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
    budget_eps, delta, conversion, plan, prior, prior_rdp) -- the validated parameters, the
    votes stage's embeddings, how many queries are offered, the privacy settings, the (no)
    release plan, and an earlier round whose student embeds this run (:func:`knn_prior`): its
    cost counts against the config's budget."""
    config = run.config
    priv = config["privacy"]
    params = spec.validate(C.aggregator_params(config), prefix="[aggregator] ")
    emb = load_npz(run.path(R.KNN_EMBEDDINGS), what="the votes stage")
    public, private = emb["public"], emb["private"]
    num_classes, num_queries = int(emb["num_classes"]), public.shape[0]
    orders = C.orders(config)
    plan = release_plan(config, num_teachers=max(1, spec.voters(
        params, private_records=int(private.shape[0]))), num_classes=num_classes, orders=orders)
    prior = knn_prior(run)
    prior_rdp = np.zeros(orders.size) if prior is None else np.asarray(prior["rdp"], dtype=float)
    return (params, public, private, emb["private_labels"], num_classes, num_queries,
            min(config["aggregator"].get("queries", num_queries), num_queries), orders,
            priv["budget_eps"], priv["delta"], priv["conversion"], plan, prior, prior_rdp)


def _records_summary(spec, params, events, *, config, orders, delta, conversion, budget_eps,
                     asked, answered, offered, stop_reason, run_id, dataset, ledger, plan,
                     reserved, rounds, prior, **mechanism_part) -> dict:
    """``aggregate.json`` of a mechanism that reads the private records: the realised cost of
    ``events`` is the data-independent one (there is no data-dependent bound), no sanitized
    release; ``prior`` the earlier rounds this run's embedding depends on (their cost is in the
    guarantee); ``mechanism_part`` the mechanism's own entry (e.g. ``knn={...}``)."""
    from pate import analysis

    rdp = sum((e.rdp_data_independent for e in events), np.zeros(orders.size))
    eps, order = analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)
    return {
        "mechanism": spec.name, "params": dict(params), "budget_eps": budget_eps,
        "delta": delta, "budget_basis": config["aggregator"]["budget_basis"].replace("-", "_"),
        "conversion": conversion, "queries_asked": int(asked), "queries_answered": int(answered),
        "eps_data_independent": float(eps), "order_data_independent": float(order),
        "eps_data_dependent": float(eps), "order_data_dependent": float(order),
        "prior_included": False, "stop_reason": stop_reason, "run_id": run_id,
        "dataset": dataset, "ledger": None if ledger is None else str(ledger.path),
        "events": [e.to_dict() for e in events], "queries_offered": int(offered),
        "release": None, "release_plan": {k: v for k, v in plan.items() if k != "rdp"},
        "noise_seeded": C.noise_seeded(config), "reserved_queries": int(reserved),
        "rounds": rounds, **mechanism_part, "prior": prior}


def _aggregate_knn(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a mechanism that samples the private records (Private-kNN).

    Same protocol as :func:`aggregate`: each round first reserves in the ledger the worst case
    of as many queries as fit; only then are the round's kNN histograms drawn
    (:func:`pate.knn.knn_votes`: a fresh Poisson sample of the private records per query) and
    the noisy answers (``spec.draw``), both from the run's noise stream; the answers go to the
    pending file and the round's event is committed. Every asked query costs the same
    data-independent RDP, so how many fit is decided from public quantities only. Without a
    ledger the config's budget decides it. The histograms are never saved; nothing is released
    beyond the answers (no smooth-sensitivity release)."""
    from pate import analysis
    from pate.knn import knn_votes

    config = run.config
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
     budget_eps, delta, conversion, plan, prior, prior_rdp) = _records_inputs(run, spec)
    worst = spec.worst_case_query_rdp(params, orders=orders)

    def eps_of(rdp):
        return float(analysis.eps_from_rdp(rdp, orders=orders, delta=delta,
                                           conversion=conversion)[0])

    labels = np.full(num_queries, -1, dtype=np.int64)
    answered = np.zeros(num_queries, dtype=bool)
    events: list = []
    progress = _Progress()

    def summary_now():
        rdp = sum((e.rdp_data_independent for e in events), np.zeros(orders.size))
        eps, order = analysis.eps_from_rdp(rdp, orders=orders, delta=delta, conversion=conversion)
        return _records_summary(
            spec, params, events, config=config, orders=orders, delta=delta,
            conversion=conversion, budget_eps=budget_eps, asked=progress.asked,
            answered=int(answered[:progress.asked].sum()), offered=queries,
            stop_reason=progress.stop_reason, run_id=run_id, dataset=dataset, ledger=ledger,
            plan=plan, reserved=progress.reserved, rounds=progress.rounds, prior=prior,
            knn={"histograms": "drawn per round after its reservation; never saved",
                 "private_records": int(private.shape[0])})

    # How many queries the config's budget allows (the ledger checks its own, linked datasets
    # and concurrent runs included): earlier rounds + n x the per-query cost, public quantities.
    lo, hi = 0, queries
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps_of(prior_rdp + mid * worst) <= budget_eps else (lo, mid - 1)
    allowed = lo
    first = (None, 0)
    try:
        if ledger is not None:
            first = _max_fitting(ledger, dataset, orders=orders, worst=worst,
                                 limit=max(1, allowed), run_id=run_id)
        if allowed == 0 or (ledger is not None and first[0] is None):
            where = ("the config's budget" if allowed == 0 else
                     f"the ledger {ledger.path} (spent and reserved on this dataset: eps="
                     f"{ledger.summary(dataset)['spent_and_reserved']:.6g})")
            raise BudgetExceededError(
                f"{where} has no room for even one query of {spec.title} (eps={budget_eps:g} at "
                f"delta={delta:g}; one query costs eps={eps_of(worst):.6g}"
                + ("" if prior is None else f", the earlier rounds eps={eps_of(prior_rdp):.6g}")
                + "); nothing was drawn or "
                "charged. Use more noise, a lower sampling_rate, or "
                + (_raise_hint(run, ledger, dataset, max(1, queries) * worst)
                   if ledger is not None else
                   f"raise {C.setting('privacy', 'budget_eps', source=_caller(run))}"))
        noise = run.noise_streams().noise

        def ask(start, n):
            # Drawn only now, inside the round's reservation: the samples, the histograms, the
            # noise. Every query costs the same, so all n are asked.
            hist = knn_votes(public[start:start + n], private, private_labels, k=params["k"],
                             sampling_rate=params["sampling_rate"], num_classes=num_classes,
                             rng=noise)
            got, ok, _ = spec.draw(hist, params, noise)
            event = spec.event(hist, params, answered=ok, orders=orders)
            labels[start:start + n], answered[start:start + n] = got, ok
            events.append(event)
            return n, event, None

        _ask_in_rounds(run, ledger, dataset, run_id, orders=orders, worst=worst, limit=allowed,
                       first=first, ask=ask, labels=labels, answered=answered,
                       summary=summary_now, progress=progress)
        if progress.stop_reason is None and progress.asked < queries:
            progress.stop_reason = (
                f"privacy budget: budget_eps does not cover one more query after "
                f"{progress.asked} of {queries} (each costs the same data-independent RDP)")
        summary = summary_now()
        _publish(run, labels, answered, summary)
        return _aggregate_info(summary)
    finally:
        if first[0] is not None and not first[0].closed:
            first[0].release()  # nothing was drawn for it


def _aggregate_once(run: Run, spec, ledger, dataset: str | None, run_id: str) -> dict:
    """The aggregate stage of a mechanism whose one release labels every query (class-means).

    The same charge-before-publish protocol as :func:`aggregate`, in one round: the release's
    data-independent cost (public arithmetic: it depends on the noise only) is checked against
    the config's budget (earlier rounds included) and reserved in the ledger; only then are the
    private class sums computed and released with noise from the run's noise stream
    (``pate.class_means.noisy_class_means``), the queries labelled from the release (and the
    public rows: ``[knn] rule``, ``pate.class_means.labelling_rule``), the labels
    put in the pending file and the event committed. The release itself is never saved."""
    from pate import analysis
    from pate.class_means import LOGISTIC_RIDGE, labelling_rule, noisy_class_means

    config = run.config
    (params, public, private, private_labels, num_classes, num_queries, queries, orders,
     budget_eps, delta, conversion, plan, prior, prior_rdp) = _records_inputs(run, spec)
    event = spec.event(np.zeros((queries, num_classes)), params,
                       answered=np.ones(queries, dtype=bool), orders=orders)
    events = [event] if queries else []

    def eps_of(rdp):
        return float(analysis.eps_from_rdp(rdp, orders=orders, delta=delta,
                                           conversion=conversion)[0])

    labels = np.full(num_queries, -1, dtype=np.int64)
    answered = np.zeros(num_queries, dtype=bool)
    scores = np.full((num_queries, num_classes), np.nan)
    cost = eps_of(prior_rdp + event.rdp_data_independent)
    if queries and cost > budget_eps:
        raise BudgetExceededError(
            f"the config's budget (eps={budget_eps:g} at delta={delta:g}) does not cover the one "
            f"release of {spec.title} (eps={eps_of(event.rdp_data_independent):.6g}"
            + ("" if prior is None else f", with the earlier rounds eps={cost:.6g}")
            + "); nothing was drawn or charged. Use more noise (a larger sigma), or raise the "
            "budget")
    reservation = None
    if queries and ledger is not None:
        try:
            reservation = ledger.reserve(dataset, orders=orders, rdp=event.rdp_data_independent,
                                         run_id=run_id)
        except BudgetExceededError as exc:
            raise BudgetExceededError(
                f"{exc}; the one release of {spec.title} does not fit, nothing was drawn or "
                "charged. Use more noise, or "
                + _raise_hint(run, ledger, dataset, event.rdp_data_independent)) from None
    with (reservation if reservation is not None else contextlib.nullcontext()):
        geometry = None
        if queries:
            # Drawn only now, inside the reservation: the class sums and their noise.
            release = noisy_class_means(public, private, private_labels, sigma=params["sigma"],
                                        count_weight=params["count_weight"],
                                        num_classes=num_classes, rng=run.noise_streams().noise)
            # post-processing: the release and the public rows only
            rule = C.class_means_rule(config)
            scores[:queries] = labelling_rule(release, public, rule).scores(public[:queries])
            labels[:queries] = np.argmax(scores[:queries], axis=1)   # the rule's predict
            answered[:queries] = True
            geometry = {"clip_radius": release.geometry.radius,
                        "dims": int(public.shape[1]), "rule": rule,
                        **({"ridge": LOGISTIC_RIDGE} if rule == "logistic" else {})}
        summary = _records_summary(
            spec, params, events, config=config, orders=orders, delta=delta,
            conversion=conversion, budget_eps=budget_eps, asked=queries, answered=queries,
            offered=queries, stop_reason=None, run_id=run_id, dataset=dataset, ledger=ledger,
            plan=plan, reserved=queries, rounds=1 if queries else 0, prior=prior,
            records={"statistic": "the noisy class sums: drawn once after the reservation; "
                                  "never saved", "private_records": int(private.shape[0]),
                     **(geometry or {})})
        if reservation is not None:
            _pending_write(run, labels, answered, summary,
                           [{"keys": [reservation.id], "events": [e.to_dict() for e in events]}],
                           scores)
            reservation.commit(events)
    _publish(run, labels, answered, summary, scores)
    return _aggregate_info(summary)
