"""The planner's choices: :func:`plan_config` fills in what a config leaves open (the
mechanism, the teachers, the queries, the noise; docs/plan.md, "What it fills in"), then the
checks of :mod:`pate.run.planner.checks` refuse or warn. A table's front-end for a release is
chosen in :mod:`pate.run.planner.front_end`."""

from __future__ import annotations

import dataclasses
import math

from pate import mechanisms
from pate.run.config.keys import frozen
from pate.run.planner import checks
from pate.run.planner.costs import (
    answers_fixed,
    argmax_std,
    calibrated_noise,
    is_number,
    most,
    with_noise,
    worst_eps,
)
from pate.run.planner.front_end import plan_table_front_end, table_size_warning
from pate.run.planner.plan_data import (
    AUTO_MECHANISM,
    AUTO_NO_TEACHERS,
    MAX_TEACHERS,
    MIN_LABELS_PER_CLASS,
    MIN_RECORDS_PER_CLASS,
    TARGET_LABELS_PER_CLASS,
    TARGET_NOISE,
    TARGET_RECORDS_PER_CLASS,
    TEACHER_GRID,
    THRESHOLD_FRACTION,
    Facts,
    Plan,
    PlanError,
    setting_name,
    setting_text,
)
from pate.run.planner.steps import open_threshold, with_auto_mechanism
from pate.teachers.errors import ConfigError


def plan_config(config, facts: Facts, *, remaining_eps: float | None = None) -> tuple:
    """Fill in what ``config`` (a parsed :class:`pate.run.config.RunConfig`) leaves open and
    check the rest against ``facts``; returns ``(filled config, plan)`` or raises
    :class:`PlanError`. Errors name settings as TOML keys (``pate.fit`` rewords them). The noise
    is calibrated by the config's own :meth:`pate.run.config.RunConfig.calibration`, exactly as
    the run will."""
    planning = Planning(config, facts, remaining_eps=remaining_eps)
    planning.choose_mechanism()
    planning.set_budget()
    planning.choose_teachers_and_queries()
    checks.check(planning)
    return planning.finish()


class Planning:
    """The state :func:`plan_config` shares between its phases (the mechanism, the budget, the
    teachers and queries, the checks, the plan), in that order; ``problems`` collects the
    refusals of the checks."""

    def __init__(self, config, facts: Facts, *, remaining_eps: float | None) -> None:
        self.config = dataclasses.replace(config, planned=None)
        self.facts, self.remaining_eps = facts, remaining_eps
        self.order_grid = config.privacy.order_grid()
        self.priv = config.privacy  # the planner never changes [privacy]
        self.smoke = config.run.smoke_test
        self.filled: dict[str, dict] = {}
        self.checked: list[str] = []
        self.warnings: list[str] = []
        self.problems: list[PlanError] = []
        self.target = config.aggregator.target_eps
        self.teachers: int | None = None
        self.voters: float | None = None

    def refuse(self, message: str, key: str, fix: str) -> None:
        self.problems.append(PlanError(message, setting=setting_name(key), fix=fix))

    def set_aggregator(self, **values) -> None:
        self.config = self.config.replace("aggregator", **values)

    # ------------------------------------------------------------------ the mechanism

    def choose_mechanism(self) -> None:
        """``mechanism = "auto"`` resolved (:func:`auto_mechanism`), the spec, and which noise is
        calibrated."""
        if self.config.aggregator.mechanism == "auto":
            self._choose_auto_mechanism()
        spec = self.spec = self.config.aggregator.spec
        if spec.needs_student:
            raise ConfigError(
                f"{setting_text('mechanism', spec.name)} needs the student's "
                "predictions on every query; a run cannot plan it"
            )
        if open_threshold(spec, self.config.aggregator.noise):
            self.config = with_noise(self.config, threshold="auto")
        self.params = dict(self.config.aggregator.given)
        # the noise is calibrated to the target; an open threshold is filled in from the voters
        # (noise_for), never calibrated
        self.calibrated = any(v == "auto" for k, v in self.params.items() if k != "threshold")

    def _choose_auto_mechanism(self) -> None:
        """What ``mechanism = "auto"`` becomes (needs a target), with why, in ``filled``."""
        if self.target is None:
            raise PlanError(
                f"{setting_text('mechanism', 'auto')} chooses the mechanism and "
                "calibrates its noise to a target",
                setting=setting_name("target_eps"),
                fix=f"give {setting_name('target_eps')} (the epsilon this run may "
                "spend), or name a mechanism with its noise",
            )
        self.config = with_auto_mechanism(self.config)
        spec = self.config.aggregator.spec
        if spec.name == AUTO_NO_TEACHERS:
            why = (
                f'mechanism "auto" with a target and no teachers asked for: {spec.title}, '
                f"{spec.kind.title}, for the whole target; name a teacher model or "
                f"num_teachers for teacher votes ({mechanisms.get(AUTO_MECHANISM).title})"
            )
        else:
            why = (
                f'mechanism "auto" with a target and teachers asked for: {spec.title}, noise '
                "calibrated to target_eps for every asked query (a threshold check would "
                "discard answers already paid for)"
            )
        self.filled["mechanism"] = {"value": spec.name, "why": why}

    # ------------------------------------------------------------------ the budget

    def set_budget(self) -> None:
        """The budget and the epsilon this plan may spend, and the label counts it aims at."""
        target, remaining_eps, facts = self.target, self.remaining_eps, self.facts
        # the dataset's lifetime budget when given, else (a new dataset) the run's target, else what
        # the ledger has left for it; else the ledger's budget applies, checked before any training
        # (pate.run.stages.check_budget_fits) -- the plan then assumes no limit of its own
        given = (self.priv.budget_eps, target, remaining_eps)
        self.budget = float(next((eps for eps in given if eps is not None), math.inf))
        self.eps_plan = float(target) if target is not None else self.budget
        if remaining_eps is not None and remaining_eps < self.eps_plan:
            self.warnings.append(
                f"the ledger has eps = {remaining_eps:.4g} left for these records, less "
                f"than the {self.eps_plan:g} this plan may spend: the run stops when it "
                "is spent"
            )
            if not self.calibrated:
                self.eps_plan = float(remaining_eps)
        self.n_pub, self.classes = facts.public_items, max(facts.classes, 2)
        self.need = MIN_LABELS_PER_CLASS * self.classes
        self.want = TARGET_LABELS_PER_CLASS * self.classes
        asked = self.config.aggregator.queries
        self.user_queries = asked if is_number(asked) else None
        self.cap = (
            min(int(self.user_queries), self.n_pub) if self.user_queries is not None else self.n_pub
        )
        self.t_most = max(
            1, min(MAX_TEACHERS, facts.private_records // (MIN_RECORDS_PER_CLASS * self.classes))
        )

    # ------------------------------------------------------------------ noise at a query count

    def noise_for(self, queries: int, voters: float | None) -> dict | None:
        """The final noise parameters for ``queries`` (calibrated or as given)."""
        out = dict(self.params)
        if self.calibrated:
            cal = calibrated_noise(self.config, queries)
            if cal is None:
                return None
            out.update(cal)
        if "threshold" in out and out["threshold"] == "auto" and voters:
            out["threshold"] = THRESHOLD_FRACTION * voters
        return out

    def _noise_or_refuse(self, voters: float | None, at: str) -> dict:
        """The noise for the planned queries; a target no noise reaches is refused."""
        noise = self.noise_for(self.queries, voters)
        if noise is None:
            raise PlanError(
                f"{setting_text('target_eps', self.eps_plan)} is unreachable at {at}",
                setting=setting_name("target_eps"),
                fix=f"raise {setting_name('target_eps')}",
            )
        return noise

    def queries_at(self, voters: float, level: float) -> int:
        """The most queries (<= cap) whose calibrated argmax noise's standard deviation stays
        at ``level`` x voters."""
        if not self.calibrated:
            return self.cap

        def fits(queries: int) -> bool:
            std = argmax_std(self.spec, self.noise_for(queries, voters) or {})
            return std is not None and bool(voters) and std[1] / voters <= level

        return most(fits, self.cap)

    # ------------------------------------------------------------------ teachers and queries

    def choose_teachers_and_queries(self) -> None:
        """The teachers (voters), the queries, the final noise and the worst-case answers."""
        if self.spec.kind.releases_once:
            self._plan_single_release()
        else:
            self._plan_votes()
        if self.queries > self.n_pub:
            self.queries = self.n_pub
        self.set_aggregator(queries=self.queries)

    def _plan_single_release(self) -> None:
        """A mechanism that releases once: one release labels every public item."""
        self.queries = self.cap
        if self.user_queries is None:
            self.filled["queries"] = {
                "value": self.queries,
                "why": "every public item: one release labels them all at no further cost",
            }
        self.noise = self._noise_or_refuse(None, "this delta")
        self.answers = self.queries
        self.voters = None
        self.config = plan_table_front_end(
            self.config, self.facts, self.noise, self.filled, every_item=self.queries >= self.n_pub
        )
        self.warnings.extend(filter(None, [table_size_warning(self.facts)]))

    def _plan_votes(self) -> None:
        """Teacher votes (or sampled records): voters, threshold, queries, noise, answers."""
        spec, params = self.spec, self.params
        if spec.kind.reads_private_records:  # the k nearest private records vote
            k = params.get("k") if "k" in spec.param_names else None
            self.voters = float(k) if is_number(k) else None
        else:
            user_t = self.config.partition.num_teachers
            if is_number(user_t):
                self.teachers = int(user_t)
            else:
                self._choose_num_teachers()
            self.voters = float(self.teachers)
        voters = self.voters
        if "threshold" in params and params["threshold"] in (None, "auto") and voters:
            params["threshold"] = THRESHOLD_FRACTION * voters
            self.config = with_noise(self.config, threshold=params["threshold"])
            self.filled["threshold"] = {
                "value": params["threshold"],
                "why": f"{THRESHOLD_FRACTION:g} x teachers (Papernot et al. 2018: 200 of 250)",
            }
        self._choose_queries()
        self.noise = noise = self._noise_or_refuse(voters, f"delta = {self.priv.delta:g}")
        self.answers = (
            self.queries
            if self.calibrated
            else answers_fixed(
                self.config,
                spec,
                spec.validate(noise),
                self.eps_plan,
                self.queries,
                self.order_grid,
            )
        )

    def _choose_num_teachers(self) -> None:
        """The fewest teachers from :data:`TEACHER_GRID` whose noise stays at :data:`TARGET_NOISE`
        (docs/plan.md, "What it fills in")."""
        facts, classes, params = self.facts, self.classes, self.params
        grid = [t for t in TEACHER_GRID if t <= self.t_most] or [self.t_most]
        preferred = [
            t for t in grid if facts.private_records / t >= TARGET_RECORDS_PER_CLASS * classes
        ]
        enough, std = min(self.want, self.cap), argmax_std(self.spec, params)
        chosen, why = None, ""
        if self.calibrated:
            chosen = next((t for t in grid if self.queries_at(t, TARGET_NOISE) >= enough), None)
            why = (
                f"the fewest teachers (largest shards) whose budget buys {enough} answers at "
                f"noise {TARGET_NOISE:g} x teachers"
            )
        elif std is not None:
            chosen = next((t for t in grid if std[1] / t <= TARGET_NOISE), None)
            why = (
                f"the fewest teachers whose votes the fixed noise {std[0]} = "
                f"{params[std[0]]:g} does not drown (<= {TARGET_NOISE:g} x teachers)"
            )
        if chosen is None:
            chosen = grid[-1]
            why = (
                f"the most teachers the declared {facts.private_records} private records allow "
                f"({MIN_RECORDS_PER_CLASS} per class each, at most {MAX_TEACHERS}); "
                "fewer would drown their votes"
            )
        elif chosen not in preferred and preferred:
            self.warnings.append(
                f"{chosen} teachers see about {facts.private_records / chosen:.0f} "
                f"records each (< {TARGET_RECORDS_PER_CLASS} per class): weak "
                "teachers; a larger budget would allow fewer"
            )
        self.teachers = chosen
        self.config = self.config.replace("partition", num_teachers=chosen)
        self.filled["num_teachers"] = {"value": chosen, "why": why}

    def _choose_queries(self) -> None:
        """The queries asked: as given, else the most the noise allows, else every public item."""
        voters, cap, need = self.voters, self.cap, self.need
        if self.user_queries is None and self.calibrated and voters:
            queries = self.queries_at(voters, TARGET_NOISE)
            why = (
                f"the most public items whose calibrated noise stays at {TARGET_NOISE:g} x "
                "voters (asking all would drown the votes)"
            )
            if queries < min(need, cap):
                queries = min(need, cap)
                why = (
                    f"{MIN_LABELS_PER_CLASS} per class: fewer would not teach a student; the "
                    "noise is then above the planned level"
                )
            queries = max(queries, 1)
            self.filled["queries"] = {"value": queries, "why": why}
        elif self.user_queries is None:
            queries = cap
            self.filled["queries"] = {
                "value": queries,
                "why": "every public item, asked in order until the budget is spent",
            }
        else:
            queries = cap
        self.queries = queries

    # ------------------------------------------------------------------ the plan

    def finish(self) -> tuple:
        """``(filled config, plan)``, or the first refusal (with the others in its fix)."""
        plan = self._plan()
        problems = self.problems
        if problems and not self.smoke:
            first = problems[0]
            more = "; also: " + "; ".join(str(p) for p in problems[1:]) if len(problems) > 1 else ""
            message = str(first)[: -len(f". Fix: {first.fix}")]
            raise PlanError(message, setting=first.setting, fix=first.fix + more, plan=plan)
        return dataclasses.replace(self.config, planned=frozen({"filled": self.filled})), plan

    def _plan(self) -> Plan:
        """The :class:`Plan` of what was chosen and checked (usable when nothing was refused)."""
        spec, noise, answers, target = self.spec, self.noise, self.answers, self.target
        numeric = all(is_number(v) for v in noise.values())
        clean = spec.validate(noise) if numeric else noise
        if spec.kind.releases_once:
            guarantee = self.eps_plan if self.calibrated else None
        else:
            guarantee = (
                worst_eps(self.config, spec, clean, answers, self.order_grid)
                if answers and numeric
                else None
            )
        releases = self.priv.release and (not numeric or spec.release_params(clean) is not None)
        return Plan(
            facts=self.facts,
            mechanism=spec.name,
            num_teachers=self.teachers,
            queries=int(self.queries),
            noise={k: float(v) for k, v in clean.items() if is_number(v)},
            relative_noise=self.rel,
            records_per_teacher=self.records,
            answers=int(answers),
            guarantee_eps=guarantee,
            delta=float(self.priv.delta),
            budget_eps=self.budget,
            target_eps=float(target) if target is not None else None,
            release=releases,
            remaining_eps=self.remaining_eps,
            filled=self.filled,
            checked=tuple(self.checked),
            warnings=tuple(self.warnings)
            + tuple(f"(smoke test, not refused) {p}" for p in self.problems if self.smoke),
            usable=not self.problems,
            label_agreement=self.agreement,
        )
