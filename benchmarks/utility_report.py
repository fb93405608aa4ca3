"""The output files of one run of benchmarks/utility.py: ``utility_fmnist.json`` (its rows and
meta), ``utility_fmnist.md`` (a table of the rows) and ``utility_fmnist.png`` (accuracy against
the guarantee eps, one line per method, the true-label ceilings as grey lines).
"""

from __future__ import annotations

import itertools
import json
import pathlib

METHODS = (
    "PATE",
    "Private-kNN",
    "Private-kNN, 2 rounds",
    "Noisy class means",
    "Noisy class means, scatternet_cnn student",
    "Noisy class means, scatternet_cnn student, soft targets",
    "Noisy class means, scatternet_cnn student, soft targets, times its rule",
    "DP-SGD CNN",
    "DP-SGD ScatterNet+linear",
)


def label(row: dict) -> str:
    """A row's method as shown: PATE rows name their ensemble size."""
    if row["method"].startswith("PATE") and row.get("teachers"):
        return row["method"].replace("PATE", f"PATE {row['teachers']} teachers", 1)
    return row["method"]


def write_outputs(rows: list[dict], out: pathlib.Path, meta: dict, *, quiet: bool = False) -> None:
    """utility_fmnist.json, utility_fmnist.md (the table) and utility_fmnist.png in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "utility_fmnist.json").write_text(
        json.dumps({"rows": rows, "meta": meta}, indent=2) + "\n"
    )
    lines = [
        "| method | kind | target ε | ε | answered / asked | label acc. | accuracy | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows,
        key=lambda r: (
            r["target_eps"],
            r["kind"] != "guarantee",
            METHODS.index(r["method"]) if r["method"] in METHODS else 9,
            r.get("teachers") or 0,
        ),
    ):
        answered = "-" if r.get("answered") is None else f"{r['answered']} / {r['asked']}"
        label_acc = "-" if r.get("label_accuracy") is None else f"{100 * r['label_accuracy']:.1f} %"
        lines.append(
            f"| {label(r)} | {r['kind']} | {r['target_eps']:g} | {r['eps']:.3f} | "
            f"{answered} | {label_acc} | {100 * r['accuracy']:.1f} % | {r['seconds']:.0f} |"
        )
    (out / "utility_fmnist.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    guarantees = [r for r in rows if r["kind"] == "guarantee"]
    order = {
        label(r): (
            next((i for i, m in enumerate(METHODS) if r["method"] == m), 9),
            r.get("teachers") or 0,
        )
        for r in guarantees
    }
    shown = sorted(order, key=order.get)
    # one line per method, however many: zip with a fixed marker string once dropped the
    # ninth method (DP-SGD ScatterNet+linear) from the plot without a word
    for name, marker in zip(shown, itertools.cycle("osD^vP*Xhp<>")):
        pts = sorted((r["eps"], 100 * r["accuracy"]) for r in guarantees if label(r) == name)
        ax.plot(*zip(*pts), marker=marker, label=name)
    ceilings = meta.get("ceilings", {})
    for name, style in (
        ("scatternet_logreg_9000_true_labels", ":"),
        ("fixmatch_9000_true_labels", "--"),
    ):
        if ceilings.get(name):
            ax.axhline(
                100 * ceilings[name]["accuracy"],
                color="grey",
                ls=style,
                lw=1,
                label=ceilings[name]["label"],
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"guarantee epsilon (delta = {meta['delta']:g})")
    ax.set_ylabel("accuracy, last 1000 test images (%)")
    ax.set_title("Fashion-MNIST: accuracy vs privacy", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "utility_fmnist.png", dpi=90)
    plt.close(fig)
