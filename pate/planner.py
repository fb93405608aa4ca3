"""The plan: what a run will do and whether it can give a useful student, before any private
record is read, any model trained or any budget spent.

``pate plan`` (CLI), ``pate.plan(...)`` (Python) and the first step of every ``pate run`` /
``pate.fit`` call :func:`plan_config`. It looks only at facts that are not private:

* the number of private records, public items and evaluation items and the input shape
  (tabular: one axis; image: channels x height x width), counted by the loader;
* the number of classes: the data source's declared class count (its class names, or the
  largest label + 1 the loader already uses to check labels);
* the mechanism, its noise parameters, the (eps, delta) target and budget, the conversion;
* optionally, what the ledger has left for the dataset.

Counting records and classes is treated as public metadata, as in every DP library (Opacus'
``make_private_with_epsilon`` takes the sample rate, i.e. the dataset size, as public); nothing
here reads a feature value or a label beyond that count, so planning is not charged to the
ledger. It fills in what the user left open and checks what the user set; a plan that cannot
give a useful student is refused with a :class:`PlanError` naming the setting (``num_teachers=``
in Python, ``[partition] num_teachers`` in a config) and a fix.

Rules (constants below; their sources, and how the heuristic ones were measured, are in
``docs/plan.md``; ``benchmarks/plan_constants.py`` reproduces the measurements):

1. **Noise must not drown the votes** ([P18] Sec. 4: the noise is set relative to the number of
   teachers; their MNIST/SVHN setting is 250 teachers with sigma2 = 40, i.e. sigma2 / T = 0.16,
   and sigma1 = 150, 0.6 T). The argmax noise's standard deviation relative to the ensemble
   (GNMax sigma / T, Confident GNMax sigma2 / T, LNMax sqrt(2) scale / T, Private-kNN
   sigma2 / k) above :data:`DROWNING_NOISE` (0.5) is refused: measured with logistic-regression
   teachers, it halves the labels' accuracy on 10 classes (digits) and costs 10-15 points on 2.
   The planner aims at :data:`TARGET_NOISE` (0.2), where the measured labels lose at most a
   few points against the plurality vote when the teachers see >= 3 records per class.
   Confident GNMax's threshold check with sigma1 / T above :data:`DROWNING_CHECK_NOISE` (2.0)
   is refused: with the default threshold 0.8 T a unanimous vote then passes with probability
   Phi(0.1) = 54 % and a 30 % plurality with Phi(-0.25) = 40 % -- a coin flip, not a check
   (Gaussian tails, not a measurement).
2. **Shards large enough to learn** (heuristic, measured): a teacher needs at least
   :data:`MIN_RECORDS_PER_CLASS` (2) private records per class on average; with 1 per class the
   measured logistic-regression teachers were at chance on breast_cancer (63 %, the majority
   class) and 42 % on digits. The planner's own choice keeps >= :data:`TARGET_RECORDS_PER_CLASS`
   (5) where the budget allows (79 % / 89 % mean teacher accuracy on digits / breast_cancer).
3. **Enough answers for the classes** (heuristic, measured): the budget must buy at least
   :data:`MIN_LABELS_PER_CLASS` (10) answers per class in the worst case (every asked query
   answered, the data-independent guarantee); a logistic-regression student on 10 correct labels
   per class reached 90 % of its all-labels accuracy on digits but closed only 46 % of the gap to
   the majority class on make_classification. Fewer than :data:`TARGET_LABELS_PER_CLASS` (50)
   per class is a warning (71 % of that gap at 50).

Filling in (only what the user left open):

* ``mechanism = "auto"`` (needs ``target_eps``; :func:`auto_mechanism`): when the user asked for
  no teachers (teacher model "auto", number of teachers open) -- what ``pate.fit(private,
  public, target_eps=...)`` does -- **class-means**: one Gaussian release of the clipped class
  sums labels every public item, so the whole target buys one release instead of being split
  over queries. Measured (``pate.fit`` with only ``target_eps``, eps 2, no ledger; these are
  the own-data benchmark's datasets, so that benchmark is not an independent test of this
  choice -- ``docs/own_data.md`` says so): scikit-learn digits as arrays, class-means student
  80-84 % (labels 78-83 %) where every teacher plan is refused (GNMax needs eps ~ 7.8);
  breast_cancer 88.4 % (gap to the majority class closed 0.82-0.93); a 1000-row two-moons
  table 0.71, a 10 000-row mixed table 0.64, the issue's 40 000-row table 0.44 against 0.38
  for 250 teachers with fixed relative noise. A linear rule cannot separate nested classes
  (gaussian quantiles: 0.04); teachers then do not help at these sizes either (plurality vote
  75 %, 2 answers bought). When the user names a teacher model or a number of teachers, GNMax
  ([P18] Sec. 4.1) with ``sigma`` calibrated to ``target_eps`` for the planned queries. The calibration charges every asked
  query as answered (the data-independent worst case), so Confident GNMax's threshold check
  would only discard labels the target has already paid for: measured with the planner's own
  choices (``pate.fit`` with logistic-regression teachers and student, ``target_eps`` only, no
  ledger), digits at eps 8: GNMax 104 labels 72-78 % right, student 78 / 84 %; Confident GNMax
  (threshold 0.8 T) 33-36 labels 88-89 % right, student 55.5 / 57.5 % (two runs each);
  make_classification (8400 private rows, 6 classes, eps 2, 400 teachers): GNMax student
  37.4 %, Confident GNMax 28.8 % (threshold 0.8 T) and 23.8 % (0.5 T). A fixed rule: no data is
  looked at to choose. (``pate.fit`` without ``target_eps`` keeps Confident GNMax with the noise
  given: with fixed noise and a lifetime budget a declined query costs only its check.)
* ``threshold`` (Confident GNMax, left out): 0.8 T ([P18]'s MNIST setting, 200 of 250).
* ``num_teachers``: [P18]'s trade-off -- at a fixed relative noise sigma / T one answer costs
  1 / T^2 as much, so more teachers buy more answers, but each sees fewer records. The planner
  takes the *smallest* T (largest shards) from a grid (:data:`TEACHER_GRID`) whose budget buys
  :data:`TARGET_LABELS_PER_CLASS` answers per class at :data:`TARGET_NOISE` (calibrated noise) or
  whose fixed noise is at most :data:`TARGET_NOISE` x T; it never exceeds
  private records / (:data:`MIN_RECORDS_PER_CLASS` x classes) or :data:`MAX_TEACHERS` (training
  time on a laptop: 1000 linear teachers take ~2 min on 2 cores, ``docs/pipeline.md``).
* ``queries`` (calibrated noise): the largest number of public items whose calibrated noise
  stays at :data:`TARGET_NOISE` x T (asking every public item would spread the budget into
  noise that drowns the votes); at least ``MIN_LABELS_PER_CLASS x classes`` when that is still
  below :data:`DROWNING_NOISE`. With fixed noise: every public item (the ledger stops asking
  when the budget is spent).

A run marked ``[run] smoke_test = true`` (it only checks that the pipeline works; its report
says so first) gets the refusals as warnings.

[P17] Papernot et al., "Semi-supervised Knowledge Transfer for Deep Learning from Private
      Training Data", ICLR 2017.  [P18] Papernot et al., "Scalable Private Learning with PATE",
      ICLR 2018.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from typing import Any

import numpy as np

from pate import mechanisms
from pate.analysis.errors import ConfigError

logger = logging.getLogger("pate")

__all__ = ["Facts", "Plan", "PlanError", "plan_config", "facts_of", "AUTO_MECHANISM",
           "AUTO_NO_TEACHERS", "auto_mechanism",
           "DROWNING_NOISE", "TARGET_NOISE", "DROWNING_CHECK_NOISE", "MIN_RECORDS_PER_CLASS",
           "TARGET_RECORDS_PER_CLASS", "MIN_LABELS_PER_CLASS", "TARGET_LABELS_PER_CLASS",
           "MAX_TEACHERS", "TEACHER_GRID", "THRESHOLD_FRACTION"]

#: Refused above: the argmax noise std relative to the voters (rule 1).
DROWNING_NOISE = 0.5
#: What the planner aims at when it chooses teachers and queries (rule 1).
TARGET_NOISE = 0.2
#: Refused above: Confident GNMax's sigma1 relative to the teachers (rule 1).
DROWNING_CHECK_NOISE = 2.0
#: Refused below: private records per teacher per class (rule 2).
MIN_RECORDS_PER_CLASS = 2
#: The planner's preference when it chooses the number of teachers (rule 2).
TARGET_RECORDS_PER_CLASS = 5
#: Refused below: worst-case answers per class the budget buys (rule 3).
MIN_LABELS_PER_CLASS = 10
#: Warned below; what the planner aims at (rule 3).
TARGET_LABELS_PER_CLASS = 50
#: The most teachers the planner chooses by itself.
MAX_TEACHERS = 1000
#: The numbers of teachers the planner considers.
TEACHER_GRID = (5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1000)
#: Confident GNMax's threshold when the planner sets it: 0.8 x teachers ([P18] MNIST: 200 of 250).
THRESHOLD_FRACTION = 0.8
#: What ``mechanism = "auto"`` becomes with calibrated noise (a fixed rule, see the module
#: docstring).
AUTO_MECHANISM = "gnmax"
#: What ``mechanism = "auto"`` becomes with a target when the user left the teachers open too
#: (teacher model "auto", number of teachers open): one class-means release (module docstring).
AUTO_NO_TEACHERS = "class-means"
#: What ``pate.fit``'s ``mechanism="auto"`` becomes without ``target_eps`` (noise given).
FIXED_NOISE_MECHANISM = "confident-gnmax"

#: How a setting is named to the caller: keyword arguments in Python, TOML keys in a config.
_CONFIG_NAMES = {"num_teachers": "[partition] num_teachers", "queries": "[aggregator] queries",
                 "target_eps": "[aggregator] target_eps", "budget_eps": "[privacy] budget_eps",
                 "mechanism": "[aggregator] mechanism", "delta": "[privacy] delta",
                 "release": "[privacy] release", "smoke_test": "[run] smoke_test"}


def setting_name(key: str, wording: str) -> str:
    """``num_teachers=`` (wording "python") or ``[partition] num_teachers`` ("config")."""
    if wording == "python":
        return f"{key}="
    return _CONFIG_NAMES.get(key, f"[aggregator] {key}")


def _set(key: str, value: float, wording: str) -> str:
    """How to write ``key`` set to a (rounded up) number, in the caller's wording."""
    shown = f"{value:.3g}"
    return f"{key}={shown}" if wording == "python" else f"{setting_name(key, wording)} = {shown}"


def _setting(key: str, value: Any, wording: str) -> str:
    if wording == "python":
        return f"{key}={value!r}"
    shown = f'"{value}"' if isinstance(value, str) else f"{value:g}" if isinstance(value, float) \
        else str(value).lower() if isinstance(value, bool) else value
    return f"{setting_name(key, wording)} = {shown}"


class PlanError(ConfigError):
    """A plan that cannot give a useful student: ``setting`` names what to change (in the
    caller's wording), ``fix`` says to what; the message holds both."""

    def __init__(self, message: str, *, setting: str, fix: str, plan: "Plan | None" = None):
        super().__init__(f"{message}. Fix: {fix}")
        self.setting = setting
        self.fix = fix
        self.plan = plan


@dataclasses.dataclass(frozen=True)
class Facts:
    """The non-private facts a plan is made from (see the module docstring)."""

    private_records: int
    classes: int
    public_items: int
    input_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("private_records", "classes", "public_items"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ConfigError(f"plan facts: {name} must be a count >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))

    @property
    def kind(self) -> str:
        """"image" (channels x height x width) or "tabular" (anything else, flattened)."""
        return "image" if len(self.input_shape) == 3 else "tabular"


def facts_of(data) -> Facts:
    """The facts of a loaded :class:`pate.teachers.data.PateData`: its split sizes, declared
    class count and input shape (no record is read)."""
    return Facts(private_records=len(data.private), classes=int(data.num_classes),
                 public_items=len(data.public), input_shape=tuple(data.input_shape))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run will do and what to expect (see the module docstring)."""

    facts: Facts
    mechanism: str
    num_teachers: int | None
    queries: int
    noise: dict
    relative_noise: dict
    records_per_teacher: float | None
    answers: int
    guarantee_eps: float | None
    delta: float
    budget_eps: float
    target_eps: float | None
    release: bool
    remaining_eps: float | None
    filled: dict
    checked: tuple[str, ...]
    warnings: tuple[str, ...]
    usable: bool = True

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["facts"] = dict(out["facts"], kind=self.facts.kind, input_shape=list(self.facts.input_shape))
        out["checked"], out["warnings"] = list(self.checked), list(self.warnings)
        return out

    def lines(self) -> list[str]:
        """The plan in plain words, one line each (what ``pate plan`` prints)."""
        f = self.facts
        shape = "x".join(map(str, f.input_shape))
        out = [f"data        {f.private_records} private records, {f.public_items} public items, "
               f"{f.classes} classes, {f.kind} inputs ({shape})"]
        mech = self.mechanism + (f", {self.num_teachers} teachers" if self.num_teachers else "")
        out.append(f"mechanism   {mech}")
        if self.records_per_teacher is not None:
            out.append(f"shards      {self.records_per_teacher:.0f} private records per teacher "
                       f"({self.records_per_teacher / max(f.classes, 1):.1f} per class)")
        if self.noise:
            out.append("noise       " + ", ".join(f"{k} = {v:.4g}" for k, v in self.noise.items()))
        if self.relative_noise:
            out.append("relative    " + ", ".join(f"{k} = {v:.3g}" for k, v in self.relative_noise.items())
                       + f" (argmax noise refused above {DROWNING_NOISE:g}, planned at "
                         f"{TARGET_NOISE:g}; sigma1 refused above {DROWNING_CHECK_NOISE:g})")
        out.append(f"queries     {self.queries} public items asked; the budget buys at least "
                   f"{self.answers} answers (worst case: every asked query answered)")
        target = f", target eps = {self.target_eps:g}" if self.target_eps is not None else ""
        guarantee = (f"eps <= {self.guarantee_eps:.4g}" if self.guarantee_eps is not None
                     else "stops at the budget")
        out.append(f"guarantee   {guarantee} at delta = {self.delta:g} (budget eps = "
                   f"{self.budget_eps:g}{target}; sanitized release "
                   f"{'on' if self.release else 'off'})")
        if self.remaining_eps is not None:
            out.append(f"ledger      eps = {self.remaining_eps:.4g} left for these records")
        for key, item in self.filled.items():
            out.append(f"chosen      {key} = {item['value']}: {item['why']}")
        for line in self.checked:
            out.append(f"checked     {line}")
        for line in self.warnings:
            out.append(f"WARNING     {line}")
        return out


# ------------------------------------------------------------------------------ arithmetic

def _release_rdp(config: dict, spec, params: dict, grid):
    from pate import analysis

    priv = config["privacy"]
    if not (bool(priv.get("release", True)) and spec.release_params(params) is not None):
        return None
    return analysis.gnss_rdp_curve(beta=priv["release_beta"], sigma_ss=priv["release_sigma_ss"],
                                   orders=grid)


def _worst_eps(config: dict, spec, params: dict, n: int, grid) -> float:
    """The data-independent eps of ``n`` asked queries, all answered (with the release)."""
    from pate.analysis.rdp import eps_from_rdp

    orders = grid
    rdp = n * spec.worst_case_query_rdp(params, orders=orders)
    extra = _release_rdp(config, spec, params, grid)
    if extra is not None:
        rdp = rdp + extra
    return float(eps_from_rdp(rdp, orders=orders, delta=config["privacy"]["delta"],
                              conversion=config["privacy"]["conversion"])[0])


def _answers_fixed(config: dict, spec, params: dict, budget: float, cap: int, grid) -> int:
    """How many queries, all answered, fixed noise ``params`` buys within ``budget`` (<= cap)."""
    if cap <= 0 or _worst_eps(config, spec, params, 1, grid) > budget:
        return 0
    lo, hi = 1, cap
    if _worst_eps(config, spec, params, hi, grid) <= budget:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _worst_eps(config, spec, params, mid, grid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def _calibrated(config: dict, queries: int, calibration) -> dict | None:
    """The ``"auto"`` noise of ``config`` calibrated for ``queries`` (pate.config.calibration),
    None when the target is unreachable."""
    trial = copy.deepcopy(config)
    trial["aggregator"]["queries"] = int(queries)
    if trial["aggregator"].get("threshold") == "auto":
        trial["aggregator"]["threshold"] = 1.0  # set after the teachers; calibration ignores it
    try:
        return calibration(trial)["calibrated"]
    except ConfigError:
        return None


def _voters(spec, num_teachers, params) -> float | None:
    if spec.kind.reads_private_records:
        return float(params["k"]) if "k" in spec.param_names and _num(params.get("k")) else None
    return float(num_teachers) if num_teachers else None


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _argmax_std(spec, params: dict) -> tuple[str, float] | None:
    """(name, std) of the noise on the vote counts' argmax."""
    if "sigma2" in spec.param_names and _num(params.get("sigma2")):
        return "sigma2", float(params["sigma2"])
    if spec.kind.trains_teachers and "sigma" in spec.param_names and _num(params.get("sigma")):
        return "sigma", float(params["sigma"])
    if "scale" in spec.param_names and _num(params.get("scale")):
        return "scale", math.sqrt(2.0) * float(params["scale"])
    return None


# ------------------------------------------------------------------------------ the plan

def plan_config(config: dict, facts: Facts, *, calibration, orders, wording: str = "config",
                remaining_eps: float | None = None) -> tuple[dict, Plan]:
    """Fill in what ``config`` (normalised: :func:`pate.config.normalize`) leaves open and check
    the rest against ``facts``; returns ``(filled config, plan)`` or raises :class:`PlanError`.
    ``wording`` ("python" or "config") is how errors name settings. The config is not modified.
    ``calibration`` and ``orders`` are :func:`pate.config.calibration` and
    :func:`pate.config.orders` (the config layer passes them: :func:`pate.config.plan_config`;
    this module never imports it), so the noise is calibrated exactly as the run will."""
    if wording not in ("python", "config"):
        raise ValueError(f"wording must be 'python' or 'config', got {wording!r}")
    config = copy.deepcopy(config)
    config.pop("planned", None)
    order_grid = orders(config)
    agg, priv, part = config["aggregator"], config["privacy"], config.setdefault("partition", {})
    smoke = bool(config["run"].get("smoke_test", False))
    filled: dict[str, dict] = {}
    checked: list[str] = []
    warnings: list[str] = []
    problems: list[PlanError] = []

    def refuse(message: str, key: str, fix: str) -> None:
        problems.append(PlanError(message, setting=setting_name(key, wording), fix=fix))

    target = agg.get("target_eps")
    if agg["mechanism"] == "auto":
        if target is None:
            raise PlanError(f"{_setting('mechanism', 'auto', wording)} chooses the mechanism and "
                            "calibrates its noise to a target", setting=setting_name("target_eps", wording),
                            fix=f"give {setting_name('target_eps', wording)} (the epsilon this run may "
                                "spend), or name a mechanism with its noise")
        chosen = auto_mechanism(config)
        agg["mechanism"] = chosen
        spec = mechanisms.get(chosen)
        for key in spec.calibrated:
            agg.setdefault(key, "auto")
        if chosen == AUTO_NO_TEACHERS:
            part.pop("num_teachers", None)  # no teachers: nothing to split them by
            why = ("mechanism \"auto\" with a target and no teachers asked for: one class-means "
                   "release labels every public item for the whole target (no per-query cost); "
                   "name a teacher model or num_teachers for teacher votes (GNMax)")
        else:
            why = ("mechanism \"auto\" with a target and teachers asked for: GNMax, noise "
                   "calibrated to target_eps for every asked query (a threshold check would "
                   "discard answers already paid for)")
        filled["mechanism"] = {"value": chosen, "why": why}
    spec = mechanisms.get(agg["mechanism"])
    if spec.needs_student:
        raise ConfigError(f"{_setting('mechanism', spec.name, wording)} needs the student's "
                          "predictions on every query; a run cannot plan it")
    if _open_threshold(spec, agg):
        agg["threshold"] = "auto"
    params = {k: agg[k] for k in spec.param_names if k in agg}
    calibrated = any(v == "auto" for v in params.values())
    # the dataset's lifetime budget when given, else (a new dataset) the run's target, else what
    # the ledger has left for it; else the ledger's budget applies, checked before any training
    # (pate.stages.check_budget_fits) -- the plan then assumes no limit of its own
    budget = priv.get("budget_eps")
    budget = float(budget if budget is not None else target if target is not None
                   else remaining_eps if remaining_eps is not None else math.inf)
    eps_plan = float(target) if target is not None else budget
    if remaining_eps is not None and remaining_eps < eps_plan:
        warnings.append(f"the ledger has eps = {remaining_eps:.4g} left for these records, less "
                        f"than the {eps_plan:g} this plan may spend: the run stops when it is spent")
        if not calibrated:
            eps_plan = float(remaining_eps)
    n_pub, classes = facts.public_items, max(facts.classes, 2)
    need = MIN_LABELS_PER_CLASS * classes
    want = TARGET_LABELS_PER_CLASS * classes
    user_queries = agg.get("queries") if _num(agg.get("queries")) else None
    cap = min(int(user_queries), n_pub) if user_queries is not None else n_pub
    std_key = {"sigma2": "sigma2", "sigma": "sigma", "scale": "scale"}

    def noise_for(queries: int, voters: float | None) -> dict | None:
        """The final noise parameters for ``queries`` (calibrated or as given)."""
        out = dict(params)
        if calibrated:
            cal = _calibrated(config, queries, calibration)
            if cal is None:
                return None
            out.update(cal)
        if "threshold" in out and out["threshold"] == "auto" and voters:
            out["threshold"] = THRESHOLD_FRACTION * voters
        return out

    def relative(noise: dict | None, voters: float | None) -> float:
        got = _argmax_std(spec, noise or {})
        return math.inf if got is None or not voters else got[1] / voters

    def queries_at(voters: float, level: float) -> int:
        """The most queries (<= cap) whose calibrated noise stays at ``level`` x voters."""
        if not calibrated:
            return cap
        if relative(noise_for(1, voters), voters) > level:
            return 0
        lo, hi = 1, cap
        if relative(noise_for(hi, voters), voters) <= level:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if relative(noise_for(mid, voters), voters) <= level:
                lo = mid
            else:
                hi = mid
        return lo

    teachers = None
    t_most = max(1, min(MAX_TEACHERS, facts.private_records // (MIN_RECORDS_PER_CLASS * classes)))
    if spec.kind.releases_once:  # class-means: one release labels every public item
        queries = cap
        if user_queries is None:
            filled["queries"] = {"value": queries, "why": "every public item: one release labels "
                                                          "them all at no further cost"}
        noise = noise_for(queries, None)
        if noise is None:
            raise PlanError(f"{_setting('target_eps', eps_plan, wording)} is unreachable at this "
                            "delta", setting=setting_name("target_eps", wording),
                            fix=f"raise {setting_name('target_eps', wording)}")
        answers = queries
        voters = None
        _plan_kernel(config, facts, noise, filled)
    else:
        if spec.kind.reads_private_records:
            voters = _voters(spec, None, params)
        else:
            user_t = part.get("num_teachers")
            t_max = t_most
            if _num(user_t):
                teachers = int(user_t)
            else:
                grid = [t for t in TEACHER_GRID if t <= t_max] or [t_max]
                preferred = [t for t in grid
                             if facts.private_records / t >= TARGET_RECORDS_PER_CLASS * classes]
                chosen, why = None, ""
                for t in grid:
                    if calibrated:
                        if queries_at(t, TARGET_NOISE) >= min(want, cap):
                            chosen = t
                            why = (f"the fewest teachers (largest shards) whose budget buys "
                                   f"{min(want, cap)} answers at noise {TARGET_NOISE:g} x teachers")
                            break
                    else:
                        std = _argmax_std(spec, params)
                        if std is not None and std[1] / t <= TARGET_NOISE:
                            chosen = t
                            why = (f"the fewest teachers whose votes the fixed noise "
                                   f"{std[0]} = {params[std[0]]:g} does not drown "
                                   f"(<= {TARGET_NOISE:g} x teachers)")
                            break
                if chosen is None:
                    chosen = grid[-1]
                    why = (f"the most teachers the {facts.private_records} private records allow "
                           f"({MIN_RECORDS_PER_CLASS} per class each, at most {MAX_TEACHERS}); "
                           "fewer would drown their votes")
                elif chosen not in preferred and preferred:
                    warnings.append(f"{chosen} teachers see {facts.private_records / chosen:.0f} "
                                    f"records each (< {TARGET_RECORDS_PER_CLASS} per class): weak "
                                    "teachers; a larger budget would allow fewer")
                teachers = chosen
                part["num_teachers"] = teachers
                filled["num_teachers"] = {"value": teachers, "why": why}
            voters = float(teachers)
        if "threshold" in params and params["threshold"] in (None, "auto") and voters:
            agg["threshold"] = params["threshold"] = THRESHOLD_FRACTION * voters
            filled["threshold"] = {"value": params["threshold"],
                                   "why": f"{THRESHOLD_FRACTION:g} x teachers (Papernot et al. "
                                          "2018: 200 of 250)"}
        if user_queries is None and calibrated and voters:
            queries = queries_at(voters, TARGET_NOISE)
            why = (f"the most public items whose calibrated noise stays at {TARGET_NOISE:g} x "
                   "voters (asking all would drown the votes)")
            if queries < min(need, cap):
                queries = min(need, cap)
                why = (f"{MIN_LABELS_PER_CLASS} per class: fewer would not teach a student; the "
                       "noise is then above the planned level")
            queries = max(queries, 1)
            filled["queries"] = {"value": queries, "why": why}
        elif user_queries is None:
            queries = cap
            filled["queries"] = {"value": queries, "why": "every public item, asked in order "
                                                          "until the budget is spent"}
        else:
            queries = cap
        noise = noise_for(queries, voters)
        if noise is None:
            raise PlanError(f"{_setting('target_eps', eps_plan, wording)} is unreachable at "
                            f"delta = {priv['delta']:g}", setting=setting_name("target_eps", wording),
                            fix=f"raise {setting_name('target_eps', wording)}")
        answers = queries if calibrated else _answers_fixed(
            config, spec, spec.validate(noise), eps_plan, queries, order_grid)
    if queries > n_pub:
        queries = n_pub
    agg["queries"] = queries

    # ------------------------------------------------------------------ checks
    records = facts.private_records / teachers if teachers else None
    rel: dict[str, float] = {}
    if voters:
        who = "teachers" if teachers else "k"
        got = _argmax_std(spec, noise)
        if got is not None:
            shown = "sqrt(2) scale" if got[0] == "scale" else got[0]
            rel[f"{shown}/{who}"] = got[1] / voters
        if "sigma1" in spec.param_names and _num(noise.get("sigma1")):
            rel[f"sigma1/{who}"] = float(noise["sigma1"]) / voters
    if teachers:
        least = MIN_RECORDS_PER_CLASS * classes
        if teachers > facts.private_records:
            refuse(f"{_setting('num_teachers', teachers, wording)} exceeds the "
                   f"{facts.private_records} private records", "num_teachers",
                   f"{_set('num_teachers', max(1, facts.private_records // least), wording)} or "
                   "fewer, or leave it out and the planner chooses")
        elif records < least:
            t_ok = max(1, facts.private_records // least)
            refuse(f"{teachers} teachers leave {records:.1f} private records per teacher "
                   f"({records / classes:.2f} per class for {classes} classes): shards too small "
                   f"to learn (at least {MIN_RECORDS_PER_CLASS} per class)", "num_teachers",
                   f"{_set('num_teachers', t_ok, wording)} or fewer for "
                   f"{facts.private_records} private records, or leave it out and the planner "
                   "chooses, or bring more private records")
        else:
            checked.append(f"{records:.0f} records per teacher >= {least} "
                           f"({MIN_RECORDS_PER_CLASS} per class)")
    main = next((k for k in rel if not k.startswith("sigma1")), None)
    if main is not None:
        level = rel[main]
        if level > DROWNING_NOISE:
            key = main.split("/")[0].replace("sqrt(2) ", "")
            if calibrated:
                ok = dict(noise)
                ok[std_key.get(key, key)] = TARGET_NOISE * voters / (math.sqrt(2) if key == "scale" else 1)
                if "sigma1" in ok and params.get("sigma1") == "auto":
                    ok["sigma1"] = 3.75 * ok.get("sigma2", 0)
                eps_needed = _worst_eps(config, spec, spec.validate(ok), queries, order_grid)
                fewer = queries_at(voters, DROWNING_NOISE)
                more = "" if spec.kind.reads_private_records or teachers >= t_most else (
                    f", or more teachers ({setting_name('num_teachers', wording)}; each answer costs "
                    "1/teachers^2 as much at the same relative noise) if the private records allow")
                fewer_text = (f", or ask fewer queries ({_set('queries', fewer, wording)})"
                              if fewer >= need else "")
                refuse(f"the noise calibrated for {queries} queries at "
                       f"{_setting('target_eps', eps_plan, wording)} is {main} = {level:.3g}: it "
                       f"drowns the votes (refused above {DROWNING_NOISE:g})", "target_eps",
                       f"{_set('target_eps', eps_needed, wording)} or more{fewer_text}" + more
                       + ("" if spec.kind.reads_private_records else
                          f", or {_setting('mechanism', 'class-means', wording)} (one release "
                          "labels every public item, no cost per query)"))
            else:
                good = TARGET_NOISE * voters / (math.sqrt(2) if key == "scale" else 1)
                refuse(f"{_setting(key, float(noise[key]), wording)} is {main} = {level:.3g}: it "
                       f"drowns the votes (refused above {DROWNING_NOISE:g})", key,
                       f"{_set(key, good, wording)} ({TARGET_NOISE:g} x {voters:g} voters), or "
                       "more voters")
        else:
            checked.append(f"noise {main} = {level:.3g} <= {DROWNING_NOISE:g}")
            if level > TARGET_NOISE + 1e-9:
                warnings.append(f"noise {main} = {level:.3g} is above the planned "
                                f"{TARGET_NOISE:g}: expect many answered labels to differ from "
                                "the plurality vote")
    s1 = next((k for k in rel if k.startswith("sigma1")), None)
    if s1 is not None:
        if rel[s1] > DROWNING_CHECK_NOISE:
            key = "target_eps" if params.get("sigma1") == "auto" else "sigma1"
            refuse(f"the threshold check's noise is {s1} = {rel[s1]:.3g}: the check is a coin flip "
                   f"(refused above {DROWNING_CHECK_NOISE:g})", key,
                   f"{_set('sigma1', 0.6 * voters, wording)} (0.6 x voters, Papernot et al. "
                   "2018)" if key == "sigma1" else
                   f"a larger {setting_name('target_eps', wording)} or fewer queries")
        else:
            checked.append(f"threshold check noise {s1} = {rel[s1]:.3g} <= {DROWNING_CHECK_NOISE:g}")
    if not spec.kind.releases_once:
        if n_pub < need:
            refuse(f"{n_pub} public items cannot give {MIN_LABELS_PER_CLASS} labels per class "
                   f"for {classes} classes", "queries", f"bring at least {need} public items")
        elif answers < need:
            if user_queries is not None and user_queries < need:
                refuse(f"{_setting('queries', int(user_queries), wording)} asks for fewer labels than "
                       f"{MIN_LABELS_PER_CLASS} per class for {classes} classes", "queries",
                       f"{setting_name('queries', wording)} >= {need}, or leave it out and the "
                       "planner chooses")
            else:
                key = "target_eps" if target is not None else "budget_eps"
                ok = dict(noise)
                eps_needed = _worst_eps(config, spec, spec.validate(ok), need, order_grid)
                refuse(f"the budget ({_setting(key, eps_plan, wording)}) buys {answers} answers in "
                       f"the worst case, fewer than {MIN_LABELS_PER_CLASS} per class for {classes} "
                       "classes", key,
                       f"{_set(key, eps_needed, wording)} or more, or "
                       f"{_setting('mechanism', 'class-means', wording)} (one release labels "
                       "every public item)")
        else:
            checked.append(f"{answers} worst-case answers >= {need} ({MIN_LABELS_PER_CLASS} per class)")
            if answers < min(want, n_pub):
                warnings.append(f"the budget guarantees {answers} answers (worst case; more "
                                "when a threshold check declines queries), fewer than "
                                f"{TARGET_LABELS_PER_CLASS} per class: a student on so few labels "
                                "may be weak unless it also learns from the unlabelled public "
                                "items; a larger eps buys more")
    clean = spec.validate(noise) if all(_num(v) for v in noise.values()) else noise
    guarantee = _worst_eps(config, spec, clean, answers, order_grid) if answers and all(
        _num(v) for v in clean.values()) and not spec.kind.releases_once else None
    if spec.kind.releases_once and calibrated:
        guarantee = eps_plan
    numeric = all(_num(v) for v in clean.values())
    releases = bool(priv.get("release", True)) and (
        not numeric or spec.release_params(clean) is not None)
    plan = Plan(facts=facts, mechanism=spec.name, num_teachers=teachers, queries=int(queries),
                noise={k: float(v) for k, v in clean.items() if _num(v)}, relative_noise=rel,
                records_per_teacher=records, answers=int(answers), guarantee_eps=guarantee,
                delta=float(priv["delta"]), budget_eps=budget,
                target_eps=float(target) if target is not None else None,
                release=releases,
                remaining_eps=remaining_eps, filled=filled, checked=tuple(checked),
                warnings=tuple(warnings) + tuple(f"(smoke test, not refused) {p}" for p in problems
                                                 if smoke),
                usable=not problems)
    if problems and not smoke:
        first = problems[0]
        more = "; also: " + "; ".join(str(p) for p in problems[1:]) if len(problems) > 1 else ""
        message = str(first)[:-len(f". Fix: {first.fix}")]
        raise PlanError(message, setting=first.setting, fix=first.fix + more, plan=plan)
    config["planned"] = {"filled": filled}
    return config, plan


def _plan_kernel(config: dict, facts: Facts, noise: dict, filled: dict) -> None:
    """A class-means release on a table labels through random Fourier features (``[knn] features
    = "kernel"``, the default there) when the user named no front-end; their PCA dimensions, when
    left open, from the sizes and the calibrated noise (:func:`pate.class_means.kernel_dims`).
    Both go into the filled ``config`` and ``filled`` (sizes and noise only: free)."""
    from pate.class_means import kernel_dims

    knn = config.get("knn") or {}
    sigma = noise.get("sigma")
    if len(facts.input_shape) != 1 or knn.get("features", "kernel") != "kernel" or not _num(sigma):
        return
    if "features" not in knn:
        filled["features"] = {"value": "kernel", "why": "a table: the release labels through "
                                                         "random Fourier features of the public-"
                                                         "standardised columns (a nonlinear rule)"}
    if "dims" not in knn:
        dims = kernel_dims(private_records=facts.private_records, num_classes=max(facts.classes, 2),
                           sigma=float(sigma), public_items=facts.public_items)
        filled["dims"] = {"value": dims, "why": f"{dims} public principal axes of the kernel "
                                                "features: (records per class / sigma) ** 0.75 "
                                                "(more records or less noise afford more)"}
        knn = dict(knn, dims=dims)
    config["knn"] = dict(knn, features="kernel")


def log_plan(plan: Plan) -> None:
    """The plan on the ``pate`` logger (one line each)."""
    for line in plan.lines():
        (logger.warning if line.startswith("WARNING") else logger.info)("plan: %s", line)


def _open_threshold(spec, agg: dict) -> bool:
    return "threshold" in spec.param_names and agg.get("threshold") in (None, "auto") \
        and not spec.kind.reads_private_records


def needs_plan(config: dict) -> bool:
    """Whether a normalised config leaves a setting to the planner: ``mechanism = "auto"``, no
    (or "auto") ``[partition] num_teachers`` for a mechanism with teachers, ``queries = "auto"``
    or no queries with calibrated noise, or no (or "auto") Confident GNMax threshold."""
    agg = config["aggregator"]
    if agg.get("mechanism") == "auto" or agg.get("queries") == "auto":
        return True
    spec = mechanisms.REGISTRY.get(agg.get("mechanism"))
    if spec is None:
        return False  # validation names the mechanism
    if not spec.kind.reads_private_records and (config.get("partition") or {}).get(
            "num_teachers", "auto") == "auto":
        return True
    calibrated = any(agg.get(k) == "auto" for k in spec.param_names)
    return (calibrated and "queries" not in agg) or _open_threshold(spec, agg)


def auto_mechanism(config: dict) -> str:
    """What ``mechanism = "auto"`` becomes with a target: class-means when the user asked for no
    teachers (teacher model "auto" and the number of teachers open), else GNMax (module
    docstring, rule 4). Reads the config only."""
    teachers = (config.get("teachers") or {}).get("model", "auto")
    count = (config.get("partition") or {}).get("num_teachers", "auto")
    return AUTO_NO_TEACHERS if teachers == "auto" and count in (None, "auto") else AUTO_MECHANISM


def probe(config: dict) -> dict:
    """``config`` with placeholders where the planner will fill in (to validate everything else
    first, with the usual messages)."""
    out = copy.deepcopy(config)
    agg = out["aggregator"]
    if agg.get("mechanism") == "auto":
        agg["mechanism"] = auto_mechanism(config) if "target_eps" in agg else AUTO_MECHANISM
        if agg["mechanism"] == AUTO_NO_TEACHERS:
            out.setdefault("partition", {}).pop("num_teachers", None)
        if "target_eps" in agg:
            for key in mechanisms.get(agg["mechanism"]).calibrated:
                agg.setdefault(key, "auto")
    spec = mechanisms.REGISTRY.get(agg["mechanism"])
    if spec is None:
        return out
    if not spec.kind.reads_private_records and out.setdefault("partition", {}).get(
            "num_teachers", "auto") == "auto":
        out["partition"]["num_teachers"] = 1
    if agg.get("queries") == "auto" or ("queries" not in agg and any(
            agg.get(k) == "auto" for k in spec.param_names)):
        agg["queries"] = 1
    if _open_threshold(spec, agg):
        agg["threshold"] = 1.0
    return out


def plan_for(config: dict, facts: Facts, *, calibration, orders, wording: str = "config",
             remaining_eps: float | None = None) -> Plan:
    """The plan of a config whose settings are all set (a filled one, from
    :func:`pate.config.from_dict`): the checks of :func:`plan_config`, with what the planner had
    filled in (the config's ``planned`` entry) reported as chosen. Raises :class:`PlanError`."""
    _, plan = plan_config(config, facts, calibration=calibration, orders=orders, wording=wording,
                          remaining_eps=remaining_eps)
    filled = dict((config.get("planned") or {}).get("filled") or {})
    return dataclasses.replace(plan, filled=dict(filled, **plan.filled))


def ledger_remaining(path, data, identity=None) -> float | None:
    """What the ledger at ``path`` (:func:`pate.config.ledger_path`) has left for the private
    records of ``data`` (None: no ledger, no ledger file yet, or the records are not
    registered). Reads the ledger, writes nothing."""
    if path is None or not path.is_file():
        return None
    from pate.ledger import Ledger, dataset_identity

    if identity is None:
        identity = dataset_identity(data.private.x, data.private.y)
    with Ledger(path, create=False) as ledger:
        if not any(d["digest"] == identity.digest for d in ledger.datasets()):
            return None
        summary = ledger.summary(identity.digest)
    left = summary.get("remaining_effective", summary.get("remaining"))
    return None if left is None else float(left)


def write_plan(path, plan: Plan) -> None:
    """``plan.json`` of a run directory (atomic)."""
    from pate.io import atomic_write_json

    atomic_write_json(path, plan.to_dict())
