"""The planner's rules: :func:`plan_config` fills in what a config leaves open and checks
the rest (module :mod:`pate.planner` lists every rule and its source), and the helpers
of the plan step (``needs_plan``, ``probe``, ``plan_for``, ``ledger_remaining``, ...)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math

from pate import mechanisms
from pate.analysis.errors import ConfigError
from pate.planner.costs import (answers_fixed, argmax_std, calibrated_noise, is_number,
                                voters_of, worst_eps)
from pate.planner.model import (AUTO_MECHANISM, AUTO_NO_TEACHERS, DROWNING_CHECK_NOISE,
                                DROWNING_NOISE, Facts, MAX_TEACHERS, MIN_LABELS_PER_CLASS,
                                MIN_RECORDS_PER_CLASS, Plan, PlanError, TARGET_LABELS_PER_CLASS,
                                TARGET_NOISE, TARGET_RECORDS_PER_CLASS, TEACHER_GRID,
                                THRESHOLD_FRACTION, assignment_text, setting_name, setting_text)

logger = logging.getLogger("pate")


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
            raise PlanError(f"{setting_text('mechanism', 'auto', wording)} chooses the mechanism and "
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
        raise ConfigError(f"{setting_text('mechanism', spec.name, wording)} needs the student's "
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
    user_queries = agg.get("queries") if is_number(agg.get("queries")) else None
    cap = min(int(user_queries), n_pub) if user_queries is not None else n_pub
    std_key = {"sigma2": "sigma2", "sigma": "sigma", "scale": "scale"}

    def noise_for(queries: int, voters: float | None) -> dict | None:
        """The final noise parameters for ``queries`` (calibrated or as given)."""
        out = dict(params)
        if calibrated:
            cal = calibrated_noise(config, queries, calibration)
            if cal is None:
                return None
            out.update(cal)
        if "threshold" in out and out["threshold"] == "auto" and voters:
            out["threshold"] = THRESHOLD_FRACTION * voters
        return out

    def relative(noise: dict | None, voters: float | None) -> float:
        got = argmax_std(spec, noise or {})
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
            raise PlanError(f"{setting_text('target_eps', eps_plan, wording)} is unreachable at this "
                            "delta", setting=setting_name("target_eps", wording),
                            fix=f"raise {setting_name('target_eps', wording)}")
        answers = queries
        voters = None
        _plan_kernel(config, facts, noise, filled)
    else:
        if spec.kind.reads_private_records:
            voters = voters_of(spec, None, params)
        else:
            user_t = part.get("num_teachers")
            t_max = t_most
            if is_number(user_t):
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
                        std = argmax_std(spec, params)
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
            raise PlanError(f"{setting_text('target_eps', eps_plan, wording)} is unreachable at "
                            f"delta = {priv['delta']:g}", setting=setting_name("target_eps", wording),
                            fix=f"raise {setting_name('target_eps', wording)}")
        answers = queries if calibrated else answers_fixed(
            config, spec, spec.validate(noise), eps_plan, queries, order_grid)
    if queries > n_pub:
        queries = n_pub
    agg["queries"] = queries

    # ------------------------------------------------------------------ checks
    records = facts.private_records / teachers if teachers else None
    rel: dict[str, float] = {}
    if voters:
        who = "teachers" if teachers else "k"
        got = argmax_std(spec, noise)
        if got is not None:
            shown = "sqrt(2) scale" if got[0] == "scale" else got[0]
            rel[f"{shown}/{who}"] = got[1] / voters
        if "sigma1" in spec.param_names and is_number(noise.get("sigma1")):
            rel[f"sigma1/{who}"] = float(noise["sigma1"]) / voters
    if teachers:
        least = MIN_RECORDS_PER_CLASS * classes
        if teachers > facts.private_records:
            refuse(f"{setting_text('num_teachers', teachers, wording)} exceeds the "
                   f"{facts.private_records} private records", "num_teachers",
                   f"{assignment_text('num_teachers', max(1, facts.private_records // least), wording)} or "
                   "fewer, or leave it out and the planner chooses")
        elif records < least:
            t_ok = max(1, facts.private_records // least)
            refuse(f"{teachers} teachers leave {records:.1f} private records per teacher "
                   f"({records / classes:.2f} per class for {classes} classes): shards too small "
                   f"to learn (at least {MIN_RECORDS_PER_CLASS} per class)", "num_teachers",
                   f"{assignment_text('num_teachers', t_ok, wording)} or fewer for "
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
                eps_needed = worst_eps(config, spec, spec.validate(ok), queries, order_grid)
                fewer = queries_at(voters, DROWNING_NOISE)
                more = "" if spec.kind.reads_private_records or teachers >= t_most else (
                    f", or more teachers ({setting_name('num_teachers', wording)}; each answer costs "
                    "1/teachers^2 as much at the same relative noise) if the private records allow")
                fewer_text = (f", or ask fewer queries ({assignment_text('queries', fewer, wording)})"
                              if fewer >= need else "")
                refuse(f"the noise calibrated for {queries} queries at "
                       f"{setting_text('target_eps', eps_plan, wording)} is {main} = {level:.3g}: it "
                       f"drowns the votes (refused above {DROWNING_NOISE:g})", "target_eps",
                       f"{assignment_text('target_eps', eps_needed, wording)} or more{fewer_text}" + more
                       + ("" if spec.kind.reads_private_records else
                          f", or {setting_text('mechanism', 'class-means', wording)} (one release "
                          "labels every public item, no cost per query)"))
            else:
                good = TARGET_NOISE * voters / (math.sqrt(2) if key == "scale" else 1)
                refuse(f"{setting_text(key, float(noise[key]), wording)} is {main} = {level:.3g}: it "
                       f"drowns the votes (refused above {DROWNING_NOISE:g})", key,
                       f"{assignment_text(key, good, wording)} ({TARGET_NOISE:g} x {voters:g} voters), or "
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
                   f"{assignment_text('sigma1', 0.6 * voters, wording)} (0.6 x voters, Papernot et al. "
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
                refuse(f"{setting_text('queries', int(user_queries), wording)} asks for fewer labels than "
                       f"{MIN_LABELS_PER_CLASS} per class for {classes} classes", "queries",
                       f"{setting_name('queries', wording)} >= {need}, or leave it out and the "
                       "planner chooses")
            else:
                key = "target_eps" if target is not None else "budget_eps"
                ok = dict(noise)
                eps_needed = worst_eps(config, spec, spec.validate(ok), need, order_grid)
                refuse(f"the budget ({setting_text(key, eps_plan, wording)}) buys {answers} answers in "
                       f"the worst case, fewer than {MIN_LABELS_PER_CLASS} per class for {classes} "
                       "classes", key,
                       f"{assignment_text(key, eps_needed, wording)} or more, or "
                       f"{setting_text('mechanism', 'class-means', wording)} (one release labels "
                       "every public item)")
        else:
            checked.append(f"{answers} worst-case answers >= {need} ({MIN_LABELS_PER_CLASS} per class)")
            if answers < min(want, n_pub):
                warnings.append(f"the budget guarantees {answers} answers (worst case; more "
                                "when a threshold check declines queries), fewer than "
                                f"{TARGET_LABELS_PER_CLASS} per class: a student on so few labels "
                                "may be weak unless it also learns from the unlabelled public "
                                "items; a larger eps buys more")
    clean = spec.validate(noise) if all(is_number(v) for v in noise.values()) else noise
    guarantee = worst_eps(config, spec, clean, answers, order_grid) if answers and all(
        is_number(v) for v in clean.values()) and not spec.kind.releases_once else None
    if spec.kind.releases_once and calibrated:
        guarantee = eps_plan
    numeric = all(is_number(v) for v in clean.values())
    releases = bool(priv.get("release", True)) and (
        not numeric or spec.release_params(clean) is not None)
    plan = Plan(facts=facts, mechanism=spec.name, num_teachers=teachers, queries=int(queries),
                noise={k: float(v) for k, v in clean.items() if is_number(v)}, relative_noise=rel,
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
    if len(facts.input_shape) != 1 or knn.get("features", "kernel") != "kernel" or not is_number(sigma):
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
