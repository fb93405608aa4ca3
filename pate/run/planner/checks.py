"""The planner's checks (docs/plan.md, "What it refuses"): :func:`check` reads the state of
one planning pass (:class:`pate.run.planner.rules.Planning`, after it chose the mechanism, the
teachers, the queries and the noise) and adds its refusals, warnings and checked lines."""

from __future__ import annotations

import math

from pate import mechanisms
from pate.run.planner import quality
from pate.run.planner.costs import argmax_std, calibrated_noise, is_number, worst_eps
from pate.run.planner.front_end import release_dims
from pate.run.planner.plan_data import (
    AUTO_NO_TEACHERS,
    DROWNING_CHECK_NOISE,
    DROWNING_NOISE,
    MIN_LABELS_PER_CLASS,
    MIN_RECORDS_PER_CLASS,
    TARGET_LABELS_PER_CLASS,
    TARGET_NOISE,
    assignment_text,
    setting_name,
    setting_text,
)

#: The largest target epsilon a refusal searches for labels that are not near chance.
_MOST_EPS = 1000.0


def check(planning) -> None:
    """Every check (docs/plan.md, "What it refuses"); refusals go to ``problems``."""
    teachers = planning.teachers
    planning.records = planning.facts.private_records / teachers if teachers else None
    planning.rel = _relative_noise(planning)
    if teachers:
        _check_shards(planning)
    refused = len(planning.problems)
    _check_noise(planning)
    drowned = len(planning.problems) > refused
    _check_threshold_noise(planning)
    planning.agreement = _agreement(planning, planning.noise)
    if planning.agreement is not None and not drowned:  # the noise check named the same cause
        _check_labels(planning)
    if not planning.spec.kind.releases_once:
        _check_answers(planning)


def _relative_noise(planning) -> dict[str, float]:
    """The noise's standard deviations over the voters, by label ("sigma/teachers", ...)."""
    rel: dict[str, float] = {}
    voters, spec, noise = planning.voters, planning.spec, planning.noise
    if voters:
        who = "teachers" if planning.teachers else "k"
        got = argmax_std(spec, noise)
        if got is not None:
            shown = "sqrt(2) scale" if got[0] == "scale" else got[0]
            rel[f"{shown}/{who}"] = got[1] / voters
        if "sigma1" in spec.param_names and is_number(noise.get("sigma1")):
            rel[f"sigma1/{who}"] = float(noise["sigma1"]) / voters
    return rel


def _check_shards(planning) -> None:
    """Shards large enough to learn."""
    teachers, records, classes = planning.teachers, planning.records, planning.classes
    private_records = planning.facts.private_records
    least = MIN_RECORDS_PER_CLASS * classes
    t_ok = max(1, private_records // least)
    if teachers > private_records:
        planning.refuse(
            f"{setting_text('num_teachers', teachers)} exceeds the declared "
            f"{private_records} private records",
            "num_teachers",
            f"{assignment_text('num_teachers', t_ok)} or "
            "fewer, or leave it out and the planner chooses",
        )
    elif records < least:
        planning.refuse(
            f"{teachers} teachers leave {records:.1f} private records per teacher "
            f"({records / classes:.2f} per class for {classes} classes): shards too small "
            f"to learn (at least {MIN_RECORDS_PER_CLASS} per class)",
            "num_teachers",
            f"{assignment_text('num_teachers', t_ok)} or fewer for the declared "
            f"{private_records} private records, or leave it out and the planner "
            "chooses, or bring more private records",
        )
    else:
        planning.checked.append(
            f"{records:.0f} records per teacher >= {least} ({MIN_RECORDS_PER_CLASS} per class)"
        )


def _check_noise(planning) -> None:
    """The argmax noise must not drown the votes."""
    main = next((k for k in planning.rel if not k.startswith("sigma1")), None)
    if main is None:
        return
    level = planning.rel[main]
    if level > DROWNING_NOISE:
        key = main.split("/")[0].replace("sqrt(2) ", "")
        if planning.calibrated:
            _refuse_drowning_calibrated(planning, main, level, key)
        else:
            good = TARGET_NOISE * planning.voters / (math.sqrt(2) if key == "scale" else 1)
            planning.refuse(
                f"{setting_text(key, float(planning.noise[key]))} is {main} = "
                f"{level:.3g}: it drowns the votes (refused above {DROWNING_NOISE:g})",
                key,
                f"{assignment_text(key, good)} ({TARGET_NOISE:g} x "
                f"{planning.voters:g} voters), or more voters",
            )
    else:
        planning.checked.append(f"noise {main} = {level:.3g} <= {DROWNING_NOISE:g}")


def _refuse_drowning_calibrated(planning, main: str, level: float, key: str) -> None:
    """Drowning noise, calibrated: the refusal names the target and what would work."""
    spec, voters, queries = planning.spec, planning.voters, planning.queries
    ok = dict(planning.noise)
    ok[key] = TARGET_NOISE * voters / (math.sqrt(2) if key == "scale" else 1)
    if "sigma1" in ok and planning.params.get("sigma1") == "auto":
        ok["sigma1"] = 3.75 * ok.get("sigma2", 0)
    eps_needed = worst_eps(planning.config, spec, spec.validate(ok), queries, planning.order_grid)
    fewer = planning.queries_at(voters, DROWNING_NOISE)
    more = (
        ""
        if spec.kind.reads_private_records or planning.teachers >= planning.t_most
        else (
            f", or more teachers ({setting_name('num_teachers')}; each answer costs "
            "1/teachers^2 as much at the same relative noise) if the private records allow"
        )
    )
    fewer_text = (
        f", or ask fewer queries ({assignment_text('queries', fewer)})"
        if fewer >= planning.need
        else ""
    )
    planning.refuse(
        f"the noise calibrated for {queries} queries at "
        f"{setting_text('target_eps', planning.eps_plan)} is {main} = {level:.3g}: it "
        f"drowns the votes (refused above {DROWNING_NOISE:g})",
        "target_eps",
        f"{assignment_text('target_eps', eps_needed)} or more{fewer_text}"
        + more
        + (
            ""
            if spec.kind.reads_private_records
            else f", or {setting_text('mechanism', AUTO_NO_TEACHERS)} "
            f"({mechanisms.get(AUTO_NO_TEACHERS).kind.title})"
        ),
    )


def _check_threshold_noise(planning) -> None:
    """Confident GNMax's threshold check: not a coin flip."""
    rel = planning.rel
    s1 = next((k for k in rel if k.startswith("sigma1")), None)
    if s1 is None:
        return
    if rel[s1] > DROWNING_CHECK_NOISE:
        key = "target_eps" if planning.params.get("sigma1") == "auto" else "sigma1"
        planning.refuse(
            f"the threshold check's noise is {s1} = {rel[s1]:.3g}: the check is a coin "
            f"flip (refused above {DROWNING_CHECK_NOISE:g})",
            key,
            f"{assignment_text('sigma1', 0.6 * planning.voters)} (0.6 x voters, "
            "Papernot et al. 2018)"
            if key == "sigma1"
            else f"a larger {setting_name('target_eps')} or fewer queries",
        )
    else:
        planning.checked.append(
            f"threshold check noise {s1} = {rel[s1]:.3g} <= {DROWNING_CHECK_NOISE:g}"
        )


def _agreement(planning, noise: dict) -> float | None:
    """The predicted share of labels equal to the noiseless rule's
    (:mod:`pate.run.planner.quality`; None when the mechanism fits neither model)."""
    if all(is_number(v) for v in noise.values()):
        noise = planning.spec.validate(noise)  # with the defaults (count_weight)
    std = argmax_std(planning.spec, noise)
    if planning.voters and std is not None:
        return quality.vote_agreement(
            voters=planning.voters, noise_std=std[1], classes=planning.classes
        )
    if planning.spec.kind.releases_once and all(
        is_number(noise.get(k)) for k in ("sigma", "count_weight")
    ):
        return quality.class_means_agreement(
            records_per_class=planning.facts.private_records / planning.classes,
            sigma=float(noise["sigma"]),
            dims=release_dims(
                planning.config, planning.facts, float(noise["sigma"]), planning.filled
            ),
            count_weight=float(noise["count_weight"]),
            classes=planning.classes,
        )
    return None


def _check_labels(planning) -> None:
    """Labels near chance are refused, weak ones warned, each naming the smallest target
    epsilon whose calibrated noise the model calls useful (:data:`quality.WEAK_LABELS`)."""
    agreement, classes = planning.agreement, planning.classes
    share = quality.closed(agreement, classes)
    said = (
        f"the plan predicts {100 * agreement:.0f} % of the labels equal to the noiseless "
        f"{'vote' if planning.voters else 'rule'}'s (chance: {100 / classes:.0f} %; model: "
        "docs/plan.md)"
    )
    if share >= quality.WEAK_LABELS:
        planning.checked.append(said)
        return

    def useful(eps: float) -> bool:
        trial = planning.config.replace("aggregator", target_eps=eps)
        noise = calibrated_noise(trial, planning.queries)
        agreement = None if noise is None else _agreement(planning, dict(planning.noise, **noise))
        return agreement is not None and quality.closed(agreement, classes) >= (quality.WEAK_LABELS)

    key = (
        "target_eps"
        if planning.calibrated
        else (argmax_std(planning.spec, planning.noise) or ("sigma",))[0]
    )
    eps = (
        quality.smallest_eps(useful, planning.eps_plan, most=_MOST_EPS)
        if planning.calibrated
        else 0
    )
    fix = (
        f"{assignment_text(key, eps)} or more"
        if eps
        else f"less noise ({setting_name(key)}) or more private records per class"
    )
    if share < quality.NEAR_CHANCE:
        planning.refuse(f"{said}: the labels would be near chance", key, fix)
    else:
        planning.warnings.append(f"{said}: weak labels; {fix}")


def _check_answers(planning) -> None:
    """Enough worst-case answers to teach a student."""
    need, classes, answers = planning.need, planning.classes, planning.answers
    if planning.n_pub < need:
        planning.refuse(
            f"{planning.n_pub} public items cannot give {MIN_LABELS_PER_CLASS} labels per "
            f"class for {classes} classes",
            "queries",
            f"bring at least {need} public items",
        )
    elif answers < need:
        user_queries = planning.user_queries
        if user_queries is not None and user_queries < need:
            planning.refuse(
                f"{setting_text('queries', int(user_queries))} asks for fewer labels "
                f"than {MIN_LABELS_PER_CLASS} per class for {classes} classes",
                "queries",
                f"{setting_name('queries')} >= {need}, or leave it out and the planner chooses",
            )
        else:
            key = "target_eps" if planning.target is not None else "budget_eps"
            spec = planning.spec
            eps_needed = worst_eps(
                planning.config, spec, spec.validate(planning.noise), need, planning.order_grid
            )
            planning.refuse(
                f"the budget ({setting_text(key, planning.eps_plan)}) buys {answers} "
                f"answers in the worst case, fewer than {MIN_LABELS_PER_CLASS} per class for "
                f"{classes} classes",
                key,
                f"{assignment_text(key, eps_needed)} or more, or "
                f"{setting_text('mechanism', AUTO_NO_TEACHERS)} "
                f"({mechanisms.get(AUTO_NO_TEACHERS).kind.title})",
            )
    else:
        planning.checked.append(
            f"{answers} worst-case answers >= {need} ({MIN_LABELS_PER_CLASS} per class)"
        )
        student = planning.config.student
        learns_unlabelled = (student.method or "fixmatch") == "fixmatch" and not str(
            student.model or "auto"
        ).startswith(("python:", "sklearn:"))
        if answers < min(planning.want, planning.n_pub) and not learns_unlabelled:
            asked = planning.user_queries is not None and answers >= planning.queries
            planning.warnings.append(
                (
                    f"{setting_text('queries', planning.queries)} asks for"
                    if asked
                    else f"the budget guarantees {answers} answers (worst case),"
                )
                + f" fewer than {TARGET_LABELS_PER_CLASS} labels per class for a student "
                "that learns from its labels alone; "
                + ("ask more queries" if asked else "a larger eps buys more")
                + ", or a student that also learns from the unlabelled public items "
                '(the torch student with [student] method = "fixmatch")'
            )
