"""The report's plots (:data:`PLOT_NAMES`), drawn on matplotlib's Agg canvas (no pyplot;
matplotlib imported only when a plot is drawn). The ``*_public`` plots are drawn from
:func:`publishable_plot_data` alone; which plot is internal: docs/publishing.md."""

from __future__ import annotations

import io
import math

from pate.run.report import formatting
from pate.run.report.content import PLOT_NAMES


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _figure(figsize=(6.4, 4.0)):
    """A matplotlib Figure (no pyplot) and its one Axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.add_subplot()


def _stamp(ax, title: str, subtitle: str, color: str) -> None:
    """The title, with a coloured subtitle saying whether the plot may be published."""
    ax.set_title(title, pad=16)
    ax.text(
        0.5,
        1.01,
        subtitle,
        transform=ax.transAxes,
        ha="center",
        va="bottom",
        fontsize=8,
        color=color,
    )


def _internal_stamp(ax, title: str) -> None:
    _stamp(ax, title, "contains NOT PRIVATE data-dependent figures \u2014 internal only", "#b00020")


def _rdp_axes(ax, plotted: list, ylabel: str) -> None:
    """Log-scaled order axis (and value axis where every plotted value is positive), labels,
    grid and legend of an RDP-per-order plot."""
    ax.set_xscale("log")
    values = [v for v in plotted if math.isfinite(v)]
    if values and min(values) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("Renyi order \u03bb (log scale)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")


def _plot_epsilon(a: dict):
    p, c = a["privacy"], a["curves"]
    fig, ax = _figure()
    curves = [
        (c["eps_data_independent"], "data-independent (publishable)", {"color": "#1f5fa8"}),
        (c["eps_data_dependent"], "data-dependent (NOT PRIVATE)", {"color": "#b00020", "ls": "--"}),
    ]
    _epsilon_axes(
        ax,
        c["answered_count"],
        curves,
        fallback_x=a["queries"]["answered"],
        sanitized=(p["eps_sanitized"], "sanitized"),
        guarantee=p["eps_guarantee"],
        delta=p["delta"],
    )
    _internal_stamp(ax, "Privacy cost against answered queries")
    return fig


def _epsilon_axes(ax, answered_count, curves, *, fallback_x, sanitized, guarantee, delta) -> None:
    """epsilon against answered queries: ``curves`` ((values, label, style)), the sanitized and
    guarantee markers at the end. Shared by the INTERNAL and the publishable plot: each passes
    only what it may show."""
    if answered_count:
        for values, label, style in curves:
            ax.plot(answered_count, values, lw=2, label=label, **style)
        x_end = answered_count[-1]
    else:
        x_end = fallback_x
        ax.text(0.5, 0.5, "no curve recorded", transform=ax.transAxes, ha="center")
    value, label = sanitized
    if value is not None:  # none where the sanitized epsilon is not published
        ax.scatter(
            [x_end],
            [value],
            marker="D",
            color="#2e7d32",
            zorder=3,
            label=f"{label} \u03b5 = {formatting.eps(value)}",
        )
    ax.scatter(
        [x_end],
        [guarantee],
        marker="*",
        s=110,
        color="#1b1f24",
        zorder=3,
        label=f"guarantee \u03b5 = {formatting.eps(guarantee)}",
    )
    ax.set_xlabel("answered queries")
    ax.set_ylabel(f"\u03b5 at \u03b4 = {formatting.delta(delta)}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def _rdp_series(ax, orders, series, order, color, label, style, chosen="chosen order") -> None:
    """One RDP-per-order curve with its chosen order marked."""
    ax.plot(orders, series, color=color, lw=2, marker=".", ms=3, label=label, **style)
    ax.axvline(order, color=color, lw=1, ls=":")
    if order in orders:
        ax.scatter(
            [order],
            [series[orders.index(order)]],
            color=color,
            s=40,
            zorder=3,
            edgecolor="black",
            label=f"{chosen}: \u03bb = {formatting.param(order)}",
        )


def _plot_margins(a: dict):
    vm = a["vote_margins"]
    edges, counts = vm["bin_edges"], vm["counts"]
    fig, ax = _figure()
    if counts:
        widths = [hi - lo for lo, hi in zip(edges[:-1], edges[1:])]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color="#6d6875", edgecolor="white")
    ax.set_xlabel("vote margin (top-1 minus top-2 vote count)")
    ax.set_ylabel("queries")
    ax.set_title(
        "INTERNAL \u2014 derived from private votes, do not publish",
        color="#b00020",
        fontsize=11,
        fontweight="bold",
    )
    ax.grid(alpha=0.3, axis="y")
    return fig


def _plot_rdp(a: dict):
    p = a["privacy"]
    orders = p["orders"]
    fig, ax = _figure()
    independent, dependent = p["rdp_data_independent"], p["rdp_data_dependent"]
    chosen = "chosen order data-independent"
    label = "data-independent (publishable)"
    _rdp_series(ax, orders, independent, p["order_data_independent"], "#1f5fa8", label, {}, chosen)
    chosen, label = "chosen order data-dependent", "data-dependent (NOT PRIVATE)"
    _rdp_series(ax, orders, dependent, p["order"], "#b00020", label, {"ls": "--"}, chosen)
    _rdp_axes(ax, independent + dependent, "RDP of the run at order \u03bb")
    _internal_stamp(ax, "Renyi-DP per order")
    return fig


def _plot_confusion(a: dict):
    u = a["utility"]
    cm = u["confusion_matrix"]
    names = formatting.class_names(u)
    m = len(cm)
    size = min(3.5 + 0.4 * m, 12.0)
    fig, ax = _figure((size + 1.2, size))
    image = ax.imshow(cm, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(m))
    ax.set_yticks(range(m))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(
        f"Student on the evaluation split (accuracy {formatting.pct(u['student_accuracy'])})"
    )
    peak = max((v for row in cm for v in row), default=0)
    if m <= 30:
        for i, row in enumerate(cm):
            for j, value in enumerate(row):
                ax.text(
                    j,
                    i,
                    str(value),
                    ha="center",
                    va="center",
                    fontsize=7 if m > 12 else 8,
                    color="white" if peak and value > peak / 2 else "black",
                )
    return fig


def publishable_plot_data(report: dict) -> dict:
    """The only input of the publishable epsilon and RDP plots: data-independent figures and
    released epsilons copied out of the publishable report (``eps_sanitized`` None where none
    was released); nothing computed from the private votes without sanitization."""
    p, c = report["privacy"], report["curves"]
    return {
        "delta": p["delta"],
        "answered_count": list(c["answered_count"]),
        "eps_data_independent": list(c["eps_data_independent"]),
        "answered": report["queries"]["answered"],
        "eps_guarantee": p["eps_guarantee"],
        "eps_sanitized": p.get("eps_sanitized")
        if (p.get("sanitized") or {}).get("fallback") is None
        else None,
        "orders": list(p["orders"]),
        "rdp_data_independent": list(p["rdp_data_independent"]),
        "order_data_independent": p["order_data_independent"],
    }


def _public_stamp(ax, title: str, shows: str) -> None:
    _stamp(ax, f"{title} \u2014 publishable", f"{shows} only \u2014 may be published", "#2e7d32")


def _plot_epsilon_public(view: dict):
    """The publishable epsilon plot, from :func:`publishable_plot_data` only."""
    fig, ax = _figure()
    _epsilon_axes(
        ax,
        view["answered_count"],
        [
            (
                view["eps_data_independent"],
                "data-independent \u03b5 of the answers",
                {"color": "#1f5fa8"},
            )
        ],
        fallback_x=view["answered"],
        sanitized=(view["eps_sanitized"], "sanitized (released)"),
        guarantee=view["eps_guarantee"],
        delta=view["delta"],
    )
    _public_stamp(
        ax, "Privacy cost against answered queries", "data-independent curve and released epsilons"
    )
    return fig


def _plot_rdp_public(view: dict):
    """The publishable Renyi-DP plot, from :func:`publishable_plot_data` only."""
    orders, series = view["orders"], view["rdp_data_independent"]
    order = view["order_data_independent"]
    fig, ax = _figure()
    _rdp_series(ax, orders, series, order, "#1f5fa8", "data-independent RDP of the queries", {})
    _rdp_axes(ax, series, "data-independent RDP at order \u03bb")
    _public_stamp(ax, "Renyi-DP per order", "data-independent figures")
    return fig


_PLOTTERS = {
    "epsilon_vs_answered": _plot_epsilon,
    "vote_margins": _plot_margins,
    "rdp_per_order": _plot_rdp,
    "confusion_matrix": _plot_confusion,
}
# The publishable plots see only publishable_plot_data(analysis), never the analysis itself.
_PUBLIC_PLOTTERS = {
    "epsilon_vs_answered_public": _plot_epsilon_public,
    "rdp_per_order_public": _plot_rdp_public,
}


def render_plots(report: dict, names=PLOT_NAMES) -> dict[str, bytes]:
    """The plots ``names`` of ``report`` as PNG bytes, keyed by name: give the publishable
    report for the publishable plots, the full one for the internal ones."""
    images = {}
    for name in names:
        if name in _PUBLIC_PLOTTERS:
            images[name] = _png(_PUBLIC_PLOTTERS[name](publishable_plot_data(report)))
        else:
            images[name] = _png(_PLOTTERS[name](report))
    return images
