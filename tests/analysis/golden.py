"""Reference values for the analysis tests (see ../shared/golden/README.md).

The tests read the full ``golden_public.json`` from ``../shared/golden`` when it is there (as in
CI), and otherwise the compact copy ``tests/analysis/data/golden_compact.json.gz`` that ships with
the repository, so the suite also runs for a user who cloned the repository alone (``PATE_GOLDEN=compact``
forces the compact copy). Both are put
into the same shape by :func:`compact`: per-order arrays carry an ``order_index`` (indices into
``analysis.REFERENCE_ORDERS``), long per-query lists are cut to their first rows, and local
sensitivities to every few distances with a ``distance_index``.

Rebuild the compact copy (from a checkout with ../shared beside it):
    .venv/bin/python tests/analysis/golden.py
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
FULL = HERE.parents[2] / "shared" / "golden" / "golden_public.json"
COMPACT = HERE / "data" / "golden_compact.json.gz"

COMPACT_ORDER_STEP = 9
COMPACT_DISTANCE_STEP = 7
COMPACT_QUERY_ROWS = 40
COMPACT_CUMULATIVE_STEP = 25


def compact(
    full: dict,
    order_step: int = 1,
    distance_step: int = 1,
    query_rows: int | None = None,
    cumulative_step: int = 1,
) -> dict:
    """The subset of the golden file the tests use, subsampled by the given steps."""
    n_orders = len(full["orders"])
    oi = list(range(0, n_orders, order_step))
    if oi[-1] != n_orders - 1:
        oi.append(n_orders - 1)

    def per_order(values):
        return [values[i] for i in oi]

    out = {"order_index": oi, "orders": per_order(full["orders"])}
    out["gnmax_single_query"] = [
        {
            k: (per_order(v) if k in ("rdp_data_independent", "rdp_data_dependent") else v)
            for k, v in case.items()
        }
        for case in full["gnmax_single_query"]
    ]
    out["rdp_gaussian_logq_grid"] = [
        dict(case, rdp_gaussian=per_order(case["rdp_gaussian"]))
        for case in full["rdp_gaussian_logq_grid"]
    ]
    out["gnmax_is_data_independent_always_opt"] = [
        dict(case, per_order=per_order(case["per_order"]))
        for case in full["gnmax_is_data_independent_always_opt"]
    ]
    key = "is_data_independent_always_opt_threshold_per_order"
    out["threshold_is_data_independent_always_opt"] = [
        dict(case, **{key: per_order(case[key])})
        for case in full["threshold_is_data_independent_always_opt"]
    ]
    out["threshold_single_query"] = [
        {k: (per_order(v) if k.startswith("rdp_threshold") else v) for k, v in case.items()}
        for case in full["threshold_single_query"]
    ]
    out["lnmax_single_query"] = [
        dict(case, rdp_pure_eps=per_order(case["rdp_pure_eps"]))
        for case in full["lnmax_single_query"]
    ]

    runs = []
    for run in full["confident_gnmax_runs"]:
        rows = slice(0, query_rows)
        pq = run["per_query"]
        r = {
            k: run[k]
            for k in (
                "name",
                "num_queries",
                "num_teachers",
                "num_classes",
                "threshold",
                "sigma1",
                "sigma2",
                "delta",
                "votes",
            )
        }
        dd = run["data_dependent"]
        r["data_dependent"] = {
            k: (per_order(v) if k.startswith("rdp_total") else v) for k, v in dd.items()
        }
        di = run["data_independent"]
        r["data_independent"] = {
            k: (per_order(v) if k == "rdp_total" else v)
            for k, v in di.items()
            if k != "reference_stdout"
        }
        r["per_query"] = {
            "logpr_answered": pq["logpr_answered"][rows],
            "pr_answered": pq["pr_answered"][rows],
            "logq_gnmax": pq["logq_gnmax"][rows],
            "selected_order_indices": pq["selected_order_indices"],
            "rdp_step1_threshold_at_selected_orders": pq["rdp_step1_threshold_at_selected_orders"][
                rows
            ],
            "rdp_step2_gnmax_at_selected_orders": pq["rdp_step2_gnmax_at_selected_orders"][rows],
            "full_order_curves_first_5_queries": [
                {
                    "query_index": c["query_index"],
                    "rdp_step1": per_order(c["rdp_step1"]),
                    "rdp_step2": per_order(c["rdp_step2"]),
                    "rdp_query": per_order(c["rdp_query"]),
                }
                for c in pq["full_order_curves_first_5_queries"]
            ],
        }
        cum = run["rdp_cumulative_run_analysis"]
        ci = list(
            range(cumulative_step - 1, len(cum["gnmax_conf_eps_cumulative"]), cumulative_step)
        )
        if ci[-1] != len(cum["gnmax_conf_eps_cumulative"]) - 1:
            ci.append(len(cum["gnmax_conf_eps_cumulative"]) - 1)
        r["rdp_cumulative_run_analysis"] = {"query_index": ci, "delta": cum["delta_hardcoded"]} | {
            k: [cum[k][i] for i in ci]
            for k in (
                "gnmax_conf_eps_cumulative",
                "gnmax_conf_expected_answered_cumulative",
                "gnmax_conf_order_opt_cumulative",
                "gnmax_plain_sigma2_eps_cumulative",
                "gnmax_plain_sigma2_order_opt_cumulative",
            )
        }
        sv = run["sampled_variant_not_in_reference"]
        r["sampled"] = {
            "answered_mask": "".join("1" if a else "0" for a in sv["answered_mask"]),
            "rdp_total": per_order(sv["rdp_total"]),
            "eps": sv["eps"],
            "order_opt": sv["order_opt"],
            "num_answered": sv["num_answered"],
        }
        ss = run["smooth_sensitivity"]
        di_ = list(range(0, len(ss["expected_local_sensitivity_ls_cum_final"]), distance_step))
        r["smooth_sensitivity"] = {
            k: v for k, v in ss.items() if not isinstance(v, (list, dict, str))
        }
        r["smooth_sensitivity"]["distance_index"] = di_
        r["smooth_sensitivity"]["ls_cum_final"] = [
            ss["expected_local_sensitivity_ls_cum_final"][i] for i in di_
        ]
        runs.append(r)
    out["confident_gnmax_runs"] = runs

    singles = []
    for case in full["smooth_sensitivity_single_query"]:
        di_ = list(range(0, len(case["local_sensitivity_gnmax_by_distance"]), distance_step))
        c = {k: v for k, v in case.items() if not k.startswith("local_sensitivity")}
        c["distance_index"] = di_
        for k in ("local_sensitivity_gnmax_by_distance", "local_sensitivity_threshold_by_distance"):
            c[k] = [case[k][i] for i in di_]
        singles.append(c)
    out["smooth_sensitivity_single_query"] = singles
    for k in (
        "sigma2_sweep_on_run_200",
        "gnss_rdp",
        "check_conditions_C5_C6",
        "compute_params_for_ss_release",
    ):
        out[k] = full[k]
    return out


def load() -> tuple[dict, str]:
    """(golden values in compact shape, which source was used)."""
    if FULL.exists() and os.environ.get("PATE_GOLDEN") != "compact":
        with FULL.open() as fh:
            return compact(json.load(fh)), "full"
    with gzip.open(COMPACT, "rt") as fh:
        return json.load(fh), "compact"


if __name__ == "__main__":
    with FULL.open() as fh:
        data = compact(
            json.load(fh),
            COMPACT_ORDER_STEP,
            COMPACT_DISTANCE_STEP,
            COMPACT_QUERY_ROWS,
            COMPACT_CUMULATIVE_STEP,
        )
    COMPACT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(COMPACT, "wt", compresslevel=9) as fh:
        json.dump(data, fh, separators=(",", ":"))
    print(f"wrote {COMPACT} ({COMPACT.stat().st_size / 1024:.0f} KiB)")
