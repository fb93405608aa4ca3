"""``pate run``: sensitive data to a released student and a privacy report, in one command.

Stages, in order, each writing into the run directory (``runs/<name>/`` by default):

=========  =====================================================================================
partition  ``partition.npz``: disjoint shards of the private split, one per teacher
teachers   ``teachers/``: one model per shard (all at once), predictions and accuracy metrics
votes      ``votes.npy``: teacher votes on the public split (sensitive: never printed)
aggregate  ``labels.npy``, ``answered.npy``, ``aggregate.json``: noisy labels within the budget,
           charged to the privacy-budget ledger
student    ``student.pt``, ``student_metrics.json``: the only model that is ever released
analysis   ``analysis.json``: every privacy and utility number, including the sanitized release
report     ``report.json``, ``report.md``, ``report.html``, ``plots/*.png``
=========  =====================================================================================

A stage that finished leaves ``stages/<stage>.json``; ``resume=True`` skips finished stages and
continues an interrupted one from its checkpoints. The aggregate stage writes its answers before
it charges the ledger (under a run-specific id) and, on resume, charges answers it finds on disk
instead of drawing new noise -- no query is ever answered or charged twice. Randomness: one seed
spawns the partition, teacher, noise, student and release streams (:mod:`pate.rng`); with
``[run] secure = true`` the noise and the release noise come from OS entropy.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import pathlib
import secrets
import sys
import time
from typing import Any

import numpy as np

from analysis.errors import ConfigError
from pate.io import atomic_save_npy, atomic_write_json

STAGES = ("partition", "teachers", "votes", "aggregate", "student", "analysis", "report")
_FORMAT = 1


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: pathlib.Path, obj: Any) -> None:
    atomic_write_json(path, obj)


def _save_npy(path: pathlib.Path, array: np.ndarray) -> None:
    atomic_save_npy(path, array)


def _log(message: str) -> None:
    print(f"pate run: {message}", file=sys.stderr, flush=True)


def _comparable(config: dict) -> dict:
    """The parts of a config that must not change on --resume (device may)."""
    out = json.loads(json.dumps(config))
    out["run"].pop("device", None)
    return out


class Pipeline:
    """One run of the whole PATE pipeline (see the module docstring).

    ``config`` is a validated configuration (:func:`pate.config.load`). Creating the object
    checks the run directory (a new one, or ``resume=True`` on one made with the same config)
    but writes nothing; :meth:`run` does the work.
    """

    def __init__(self, config: dict, *, resume: bool = False, progress: bool = True,
                 ledger_path: str | os.PathLike | None = None) -> None:
        from pate import config as config_module

        self.config = config
        self.resume = bool(resume)
        self.progress = bool(progress)
        self.run_dir = config_module.run_directory(config)
        self._ledger_path = ledger_path
        self._data = None
        state_path = self.run_dir / "run.json"
        if state_path.exists():
            if not self.resume:
                raise ConfigError(f"run directory {self.run_dir} already holds a run; pass --resume "
                                  "to continue it, or choose another --run-dir / [run] name")
            state = json.loads(state_path.read_text())
            if state.get("config_comparable") != _comparable(config):
                raise ConfigError(f"--resume: the configuration differs from the one {self.run_dir} "
                                  "was started with (see its config.json); start a new run instead")
            self.state = state
        else:
            if self.run_dir.exists() and any(self.run_dir.iterdir()):
                raise ConfigError(f"run directory {self.run_dir} exists and is not empty; choose "
                                  "another --run-dir / [run] name")
            self.state = None

    # ------------------------------------------------------------------ bookkeeping

    def _start(self) -> None:
        if self.state is not None:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        secure = self.config["run"]["secure"]
        self.state = {
            "format": _FORMAT, "run_id": f"{self.config['run']['name']}-{secrets.token_hex(6)}",
            "created": _now(),
            # Secure runs draw their non-noise streams (partition, teachers, student) from one
            # fresh OS-entropy seed kept here, so that an interrupted run resumes identically.
            "stream_seed": secrets.randbits(63) if secure else self.config["run"]["seed"],
            "config_comparable": _comparable(self.config),
        }
        _write_json(self.run_dir / "config.json", self.config)
        _write_json(self.run_dir / "run.json", self.state)

    def _done(self, stage: str) -> bool:
        return (self.run_dir / "stages" / f"{stage}.json").exists()

    def _mark(self, stage: str, info: dict) -> None:
        (self.run_dir / "stages").mkdir(exist_ok=True)
        _write_json(self.run_dir / "stages" / f"{stage}.json", dict(info, finished=_now()))

    def _streams(self):
        from pate.rng import make_streams

        return make_streams(self.state["stream_seed"])

    def _noise_streams(self):
        from pate.rng import make_streams

        if self.config["run"]["secure"]:
            return make_streams(secure=True)
        return self._streams()

    @property
    def data(self):
        if self._data is None:
            from teachers.data import load_pate_data

            d = self.config["data"]
            self._data = load_pate_data(d["name"], root=d.get("root"), download=d["download"],
                                        public_size=d.get("public_size"), eval_size=d.get("eval_size"))
        return self._data

    def check_data(self) -> None:
        """Checks that need the dataset's sizes (before anything is written)."""
        data = self.data
        k = self.config["partition"]["num_teachers"]
        if k > len(data.private):
            raise ConfigError(f"[partition] num_teachers ({k}) exceeds the {len(data.private)} "
                              f"private records of {data.name}")
        queries = self.config["aggregator"].get("queries")
        if queries is not None and queries > len(data.public):
            raise ConfigError(f"[aggregator] queries ({queries}) exceeds the {len(data.public)} "
                              f"public items of {data.name}")

    # ------------------------------------------------------------------ stages

    def run(self, *, until: str | None = None) -> dict:
        """Run (or resume) every stage up to and including ``until``; returns the report dict
        (or, with ``until`` before the report, the stage summaries)."""
        if until is not None and until not in STAGES:
            raise ValueError(f"until must be one of {', '.join(STAGES)}, got {until!r}")
        self.check_data()
        self._start()
        results = {}
        for stage in STAGES:
            if self._done(stage):
                _log(f"{stage}: already done, skipped")
            else:
                t0 = time.perf_counter()
                _log(f"{stage}: running")
                info = getattr(self, f"_stage_{stage}")() or {}
                info["seconds"] = round(time.perf_counter() - t0, 2)
                self._mark(stage, info)
                _log(f"{stage}: done in {info['seconds']:.1f} s")
            results[stage] = json.loads((self.run_dir / "stages" / f"{stage}.json").read_text())
            if stage == until:
                return results
        return json.loads((self.run_dir / "report.json").read_text())

    def _stage_partition(self) -> dict:
        from pate import partition as P

        cfg = self.config["partition"]
        k, rng = cfg["num_teachers"], self._streams().partition
        private = self.data.private
        if cfg["mode"] == "random":
            part = P.partition_random(len(private), num_teachers=k, rng=rng)
        elif cfg["mode"] == "stratified":
            part = P.partition_stratified(private.y, num_teachers=k, num_classes=self.data.num_classes,
                                          rng=rng)
        else:
            unit_ids = np.load(cfg["unit_ids"], allow_pickle=False)
            if unit_ids.shape[0] != len(private):
                raise ConfigError(f"[partition] unit_ids has {unit_ids.shape[0]} ids but the private "
                                  f"split has {len(private)} records")
            part = P.partition_by_unit(unit_ids, num_teachers=k, rng=rng)
        part.save(self.run_dir / "partition.npz")
        return {"num_teachers": k, "mode": cfg["mode"],
                "neighbouring_relation": part.neighbouring_relation}

    def _stage_teachers(self) -> dict:
        from pate import config as C
        from pate.partition import Partition
        from teachers.ensemble import TeacherConfig, train_teachers

        part = Partition.load(self.run_dir / "partition.npz")
        seeds = self._streams().teacher_seeds(part.num_teachers)
        result = train_teachers(self.data, part.shards, seeds, TeacherConfig(**C.teacher_settings(self.config)),
                                out_dir=self.run_dir / "teachers", resume=True, progress=self.progress)
        summary = result.summary()
        _log(f"teachers: mean accuracy {summary['teacher_accuracy_mean']:.4f}, plurality vote "
             f"{summary['plurality_accuracy']:.4f} on the evaluation split")
        return summary

    def _teacher_predictions(self) -> np.ndarray:
        with np.load(self.run_dir / "teachers" / "predictions.npz", allow_pickle=False) as f:
            return f["public"]

    def _stage_votes(self) -> dict:
        from pate.votes import votes_from_predictions

        votes = votes_from_predictions(self._teacher_predictions(), num_classes=self.data.num_classes)
        _save_npy(self.run_dir / "votes.npy", votes)
        return {"queries": int(votes.shape[0]), "classes": int(votes.shape[1]),
                "teachers": int(votes[0].sum())}

    # -- aggregate: answers first, then the ledger, idempotently

    def _ledger(self):
        setting = self.config["privacy"]["ledger"]
        if setting is False:
            return None
        from pate.ledger import Ledger

        path = self._ledger_path
        if path is None and isinstance(setting, str) and setting:
            path = setting
        return Ledger(path)

    def _dataset_digest(self) -> str:
        import hashlib

        private = self.data.private
        h = hashlib.sha256()
        h.update(f"pate-learn private split {private.x.shape} {private.x.dtype}".encode())
        h.update(np.ascontiguousarray(private.x).tobytes())
        h.update(np.ascontiguousarray(private.y).tobytes())
        return h.hexdigest()

    def _aggregator_params(self) -> dict:
        from pate.config import MECHANISM_PARAMS

        agg = self.config["aggregator"]
        return {k: agg[k] for k in MECHANISM_PARAMS[agg["mechanism"]]}

    def _stage_aggregate(self) -> dict:
        from analysis import PrivacyEvent
        from pate import config as C
        from pate.aggregators import OnlineAggregator

        agg_cfg, priv = self.config["aggregator"], self.config["privacy"]
        summary_path = self.run_dir / "aggregate.json"
        ledger = self._ledger()
        run_id = self.state["run_id"] + ":aggregate"
        try:
            dataset = None
            if ledger is not None:
                dataset = ledger.register_dataset(self._dataset_digest(),
                                                  name=priv.get("dataset") or self.config["data"]["name"])
                if ledger.budget(dataset) is None:
                    ledger.set_budget(dataset, eps=priv["budget_eps"], delta=priv["delta"])
            if summary_path.exists():  # answers were drawn before a crash: charge them, never redraw
                summary = json.loads(summary_path.read_text())
                if ledger is not None and not ledger.events(dataset, run_id=run_id):
                    events = [PrivacyEvent.from_dict(e) for e in summary["events"]]
                    ledger.charge(dataset, events, run_id=run_id)
                return self._aggregate_info(summary)

            votes = np.load(self.run_dir / "votes.npy", allow_pickle=False)
            queries = agg_cfg.get("queries", votes.shape[0])
            orders = C.orders(self.config)
            # The sanitized release is planned before any noise is drawn (its parameters are in
            # the config, its cost is data-independent): its cost is part of the budget, so the
            # answers stop early enough to leave room for it.
            plan = release_plan(self.config, num_teachers=int(votes[0].sum()),
                                num_classes=int(votes.shape[1]), orders=orders)
            budget_eps, delta, reservation = priv["budget_eps"], priv["delta"], None
            if ledger is not None:
                budget = ledger.budget(dataset)  # the ledger's budget is authoritative
                budget_eps, delta = budget.eps, budget.delta
            if plan["release"]:
                import analysis

                release_eps = float(analysis.eps_from_rdp(plan["rdp"], orders=orders, delta=delta,
                                                          conversion=priv["conversion"])[0])
                if release_eps > budget_eps / 2:  # public quantities only: no data looked at
                    plan = dict(plan, release=False, fallback=(
                        f"the release alone would cost eps={release_eps:.4g}, more than half of the "
                        f"budget ({budget_eps:g}); it was skipped (raise release_sigma_ss or the "
                        "budget to release a sanitized epsilon)"))
            release_rdp = plan["rdp"] if plan["release"] else np.zeros(orders.size)
            if ledger is not None:
                from analysis.errors import BudgetExceededError

                # Reserve the worst case of the queries this run may ask (or, if that does not
                # fit, of one query): concurrent runs then cannot spend what this one may need.
                per_query = OnlineAggregator(
                    agg_cfg["mechanism"], budget_eps=budget_eps, delta=delta,
                    rng=np.random.default_rng(0), orders=orders,
                    **self._aggregator_params()).worst_case_query_rdp()

                try:
                    reservation = ledger.reserve(dataset, orders=orders,
                                                 rdp=queries * per_query + release_rdp, run_id=run_id)
                except BudgetExceededError:
                    reservation = ledger.reserve(dataset, orders=orders, rdp=per_query + release_rdp,
                                                 run_id=run_id)
            prior = release_rdp if reservation is None else reservation.prior_rdp(orders) + release_rdp
            noise = self._noise_streams()
            aggregator = OnlineAggregator(
                agg_cfg["mechanism"], budget_eps=budget_eps, delta=delta,
                rng=noise.noise, orders=orders,
                budget_basis=agg_cfg["budget_basis"].replace("-", "_"),
                conversion=priv["conversion"], prior_rdp=prior, **self._aggregator_params())
            result = aggregator.answer(votes[:queries], on_exhausted="stop")
            events = list(aggregator.accountant.events)
            release = None
            if plan["release"]:
                asked = result.num_asked  # the online aggregator asks a prefix of the queries
                release = self._release(votes[:asked], result.answered_mask[:asked], noise.release)
                events.append(PrivacyEvent("gnss-release", plan["params"], orders, plan["rdp"],
                                           plan["rdp"], queries=0, answered=0))
            labels = np.full(votes.shape[0], -1, dtype=np.int64)
            answered = np.zeros(votes.shape[0], dtype=bool)
            labels[:result.labels.shape[0]] = result.labels
            answered[:result.answered_mask.shape[0]] = result.answered_mask
            _save_npy(self.run_dir / "labels.npy", labels)
            _save_npy(self.run_dir / "answered.npy", answered)
            summary = dict(aggregator.summary(), run_id=run_id, dataset=dataset,
                           events=[e.to_dict() for e in events], queries_offered=int(queries),
                           release=release, release_plan={k: v for k, v in plan.items() if k != "rdp"})
            _write_json(summary_path, summary)
            if reservation is not None:
                reservation.commit(events)
            return self._aggregate_info(summary)
        finally:
            if ledger is not None:
                ledger.close()

    def _release(self, votes: np.ndarray, answered: np.ndarray, rng) -> dict:
        """The sanitized data-dependent RDP, drawn once with the config's fixed parameters."""
        import analysis

        priv, params = self.config["privacy"], self._aggregator_params()
        if "sigma" in params:  # plain GNMax: no threshold check
            params = {"threshold": None, "sigma1": None, "sigma2": params["sigma"]}
        return dict(analysis.release_sanitized_epsilon(
            votes, answered=answered, order=priv["release_order"], beta=priv["release_beta"],
            sigma_ss=priv["release_sigma_ss"], delta=priv["delta"], num_teachers=int(votes[0].sum()),
            rng=rng, conversion=priv["conversion"], **params))

    @staticmethod
    def _aggregate_info(summary: dict) -> dict:
        return {"asked": summary["queries_asked"], "answered": summary["queries_answered"],
                "stop_reason": summary.get("stop_reason")}

    def _stage_student(self) -> dict:
        from pate import config as C
        from student.augment import FLIP_DATASETS
        from student.evaluate import evaluation_metrics
        from student.train import Student

        settings = C.student_settings(self.config)
        settings.setdefault("flip", self.config["data"]["name"] in FLIP_DATASETS)
        labels = np.load(self.run_dir / "labels.npy", allow_pickle=False)
        student = Student(**settings, num_classes=self.data.num_classes,
                          random_state=self._streams().student, progress=self.progress,
                          checkpoint_dir=self.run_dir / "student", resume=True)
        (self.run_dir / "student").mkdir(exist_ok=True)
        # Only the public inputs and the released labels reach the student.
        student.fit(self.data.public.x, labels)
        student.save(self.run_dir / "student.pt")
        metrics = evaluation_metrics(self.data.evaluation.y, student.predict(self.data.evaluation.x),
                                     num_classes=self.data.num_classes)
        metrics.update(method=student.settings_["method"], model=student.model_name_,
                       num_labelled=int(np.sum(labels >= 0)), num_public=int(labels.shape[0]))
        _write_json(self.run_dir / "student_metrics.json", metrics)
        _log(f"student: accuracy {metrics['accuracy']:.4f} on the evaluation split")
        return {"accuracy": metrics["accuracy"]}

    def _stage_analysis(self) -> dict:
        from pate.run_analysis import build_analysis

        analysis_doc = build_analysis(self)
        _write_json(self.run_dir / "analysis.json", analysis_doc)
        p = analysis_doc["privacy"]
        _log(f"analysis: eps data-independent {p['eps_data_independent']:.4f}, sanitized "
             f"{p['eps_sanitized']:.4f}, data-dependent (not private) {p['eps_data_dependent']:.4f} "
             f"at delta {p['delta']:g}")
        return {k: p[k] for k in ("eps_data_independent", "eps_sanitized", "eps_guarantee")}

    def _stage_report(self) -> dict:
        from pate.report import write_report

        report = write_report(self.run_dir)
        return {"files": ["report.json", "report.md", "report.html", *report["plots"].values()]}


#: What a forked run reuses: the files and the finished stages up to the vote matrix.
FORKED_FILES = ("partition.npz", "teachers", "votes.npy")
FORKED_STAGES = ("partition", "teachers", "votes")


def fork_run(source, config: dict) -> pathlib.Path:
    """Start a new run directory (``config``'s) from a finished run's partition, teachers and votes.

    For experiments that vary only what comes after the votes (aggregator, budget, release,
    student): the new directory is then finished with ``Pipeline(config, resume=True).run()``.
    ``config`` must be normalized and validated; it may differ from the source's config anywhere
    after the votes. Its run directory is replaced if it exists. Returns that directory.
    """
    import shutil

    from pate import config as C

    source = pathlib.Path(source)
    missing = [s for s in FORKED_STAGES if not (source / "stages" / f"{s}.json").exists()]
    if missing:
        raise ConfigError(f"{source} has not finished stage(s) {', '.join(missing)}; run "
                          f"`pate run --config ... --until votes` there first")
    state = json.loads((source / "run.json").read_text())
    target = C.run_directory(config)
    if target.resolve() == source.resolve():
        raise ConfigError(f"fork_run: the new run directory is the source itself ({source})")
    if target.exists():
        shutil.rmtree(target)
    (target / "stages").mkdir(parents=True)
    for name in FORKED_FILES:
        (shutil.copytree if (source / name).is_dir() else shutil.copy2)(source / name, target / name)
    for stage in FORKED_STAGES:
        shutil.copy2(source / "stages" / f"{stage}.json", target / "stages" / f"{stage}.json")
    _write_json(target / "config.json", config)
    _write_json(target / "run.json", dict(state, config_comparable=_comparable(config)))
    return target


def release_plan(config: dict, *, num_teachers: int, num_classes: int, orders) -> dict:
    """Whether this run will release a sanitized data-dependent epsilon, and its RDP cost.

    Decided from public quantities only (mechanism, noise, release parameters, number of teachers
    and classes): no release for LNMax (no smooth-sensitivity analysis), when the data-dependent
    bounds can never beat the data-independent ones at the release order, or when conditions
    C5/C6 fail. The cost curve is [P18] Theorem 23 at every order below 1/(2 beta) and infinite
    above (only those orders can carry it).
    """
    import analysis
    from analysis.sensitivity import _is_data_independent_step1, _is_data_independent_step2

    agg, priv = config["aggregator"], config["privacy"]
    order, beta, sigma_ss = priv["release_order"], priv["release_beta"], priv["release_sigma_ss"]
    params = {"order": order, "beta": beta, "sigma_ss": sigma_ss}
    mechanism = agg["mechanism"]
    reason = None
    if not priv.get("release", True):
        reason = "[privacy] release = false: only the data-independent epsilon is reported"
    elif mechanism == "lnmax":
        reason = "LNMax has no smooth-sensitivity analysis; the data-independent epsilon is reported"
    else:
        sigma2 = agg["sigma2"] if mechanism == "confident-gnmax" else agg["sigma"]
        ind1 = (mechanism == "gnmax"
                or _is_data_independent_step1(num_teachers, agg["threshold"], agg["sigma1"], order))
        if ind1 and _is_data_independent_step2(num_teachers, num_classes, sigma2, order):
            reason = "the data-dependent bounds never beat the data-independent ones at this order"
        elif not all(analysis.check_conditions(sigma=sigma2, num_classes=num_classes, order=order)):
            reason = "conditions C5/C6 do not hold at this order and sigma2"
    rdp = analysis.gnss_rdp_curve(beta=beta, sigma_ss=sigma_ss, orders=orders)
    return {"release": reason is None, "fallback": reason, "params": params, "rdp": rdp}

