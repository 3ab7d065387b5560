"""Static plots for the report, rendered by matplotlib's SVG backend (no browser, no pyplot state).

Every function returns an inline ``<svg>`` string: text stays text (``svg.fonttype: none``), so labels
are searchable and scale; each bar carries an id ``<name>-bar-<i>`` (tests count them); ids are salted
per figure so several SVGs can share one HTML page.
"""
from __future__ import annotations

import io
import re
from collections.abc import Sequence

import numpy as np

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
FONT = ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica", "sans-serif"]

#: above this many cells a comparison is drawn as horizontal bars: the cell names stay level and full size,
#: where a row of rotated names would need a page-wide figure scaled down until its text is unreadable
HORIZONTAL_CELLS = 12
#: widest figure drawn (inches); the page scales wider ones down, and their text with them
MAX_WIDTH = 12.0


def _figure(width: float, height: float):  # noqa: ANN202 - matplotlib Figure (imported lazily)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=96, layout="constrained")


def to_svg(fig, name: str) -> str:  # noqa: ANN001
    """The figure as an inline ``<svg>`` element (XML prolog, DOCTYPE and RDF metadata removed)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"privcube-{name}",
                                "font.family": "sans-serif", "font.sans-serif": FONT}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return text.replace("<svg ", f'<svg class="plot" role="img" aria-label="{name}" ', 1)


def _tag(bars, name: str, start: int = 0) -> None:  # noqa: ANN001
    for i, b in enumerate(bars):
        b.set_gid(f"{name}-bar-{start + i}")


def plain(text: str) -> str:
    """Text shown as typed: ``$`` escaped so matplotlib does not read it as mathtext."""
    return str(text).replace("$", r"\$")


def _short(label: str, limit: int = 48) -> str:
    label = label if len(label) <= limit else label[: limit - 1] + "…"
    return plain(label)


def hbar(name: str, labels: Sequence[str], values: Sequence[float], *, title: str, xlabel: str,
         colors: Sequence[str] | None = None, legend: dict[str, str] | None = None, log: bool = False) -> str:
    """Horizontal bars, one per label, first label on top; ``legend`` maps a colour to its meaning."""
    n = len(labels)
    fig = _figure(8.0, 1.2 + 0.19 * max(n, 1))
    ax = fig.add_subplot()
    y = np.arange(n)
    bars = ax.barh(y, list(values), color=list(colors) if colors else PALETTE[0], height=0.7)
    _tag(bars, name)
    ax.set_yticks(y, [_short(s) for s in labels], fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)  # first label on top, no empty margin
    ax.set_xlabel(xlabel)
    ax.set_title(plain(title), fontsize=10, loc="left")
    if log and n and min(values) > 0:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    if legend:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=c, label=plain(t)) for c, t in legend.items()], fontsize=8, loc="lower right")
    return to_svg(fig, name)


#: round labels under the trace (every k-th round above it); ~0.25 in each at the widest figure
MAX_TRACE_LABELS = 48


def trace(name: str, rounds: Sequence[int], rho_select: Sequence[float], rho_measure: Sequence[float],
          sigma: Sequence[float], annealed: Sequence[bool], cliques: Sequence[str]) -> str:
    """AIM+GReM selection trace: ρ per round (selection + measurement, stacked; annealed rounds marked)
    above σ per round, each round labelled with the marginal it selected."""
    n = len(rounds)
    fig = _figure(min(MAX_WIDTH, max(8.0, 0.28 * n + 2)), 6.2)  # wider would be scaled down, labels unreadable
    ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    x = np.arange(n)
    b1 = ax.bar(x, rho_select, color=PALETTE[1], label="ρ selection (exponential mech.)")
    b2 = ax.bar(x, rho_measure, bottom=rho_select, color=PALETTE[0], label="ρ measurement (Gaussian)")
    _tag(b1, f"{name}-select")
    _tag(b2, f"{name}-measure")
    top = np.asarray(rho_select, float) + np.asarray(rho_measure, float)
    hit = [i for i in range(n) if annealed[i]]
    if hit:
        ax.scatter(x[hit], top[hit] * 1.04, marker="v", color=PALETTE[3], zorder=3,
                   label="budget annealed after this round")
    ax.set_ylabel("ρ spent")
    ax.set_title("Budget per round", fontsize=10, loc="left")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    ax2.plot(x, sigma, marker="o", color=PALETTE[2])
    ax2.set_ylabel("σ of measurement")
    ax2.grid(axis="y", alpha=0.3)
    step = max(1, int(np.ceil(n / MAX_TRACE_LABELS)))  # at most this many round labels, each readable
    ax2.set_xticks(x[::step], [f"{r}: {_short(c, 28)}" for r, c in zip(rounds[::step], cliques[::step])],
                   rotation=60, ha="right", fontsize=7)
    ax2.set_xlabel("round: selected marginal")
    for a in (ax, ax2):
        a.spines[["top", "right"]].set_visible(False)
    return to_svg(fig, name)


def compare(name: str, title: str, cells: Sequence[str], published: Sequence[float],
            synthetic: Sequence[float] | None = None, ci: tuple[Sequence[float], Sequence[float]] | None = None) -> str:
    """Bars per cell: the published (noisy) answer, with its confidence interval when given, and the
    synthetic records' count beside it when given (horizontal bars, one row per cell, above
    ``HORIZONTAL_CELLS`` cells)."""
    n = len(cells)
    pair = synthetic is not None
    horizontal = n > HORIZONTAL_CELLS
    if horizontal:
        fig = _figure(8.0, 1.4 + 0.2 * n * (1.6 if pair else 1.0))
    else:
        fig = _figure(min(MAX_WIDTH, max(5.0, 0.32 * n * (2 if pair else 1) + 1.5)), 3.6)
    ax = fig.add_subplot()
    x = np.arange(n)
    w = 0.4 if pair else 0.7
    off = -w / 2 if pair else 0.0
    if horizontal:  # first cell on top: the published bar above its synthetic twin
        off = -off
    pub = np.asarray(published, float)
    err = None
    if ci is not None:
        lo, hi = np.asarray(ci[0], float), np.asarray(ci[1], float)
        err = np.vstack([np.clip(pub - lo, 0, None), np.clip(hi - pub, 0, None)])
    label = "published (noisy)" + (" with CI" if err is not None else "")
    style = {"capsize": 2 if err is not None else 0, "error_kw": {"elinewidth": 0.8, "ecolor": "#333"}}
    if horizontal:
        bars = ax.barh(x - off, pub, w, color=PALETTE[0], xerr=err, label=label, **style)
    else:
        bars = ax.bar(x + off, pub, w, color=PALETTE[0], yerr=err, label=label, **style)
    _tag(bars, f"{name}-published")
    if pair:
        draw = ax.barh if horizontal else ax.bar
        sb = draw(x + off if horizontal else x - off, list(synthetic), w, color=PALETTE[1], label="synthetic records")
        _tag(sb, f"{name}-synthetic")
    if horizontal:
        ax.set_yticks(x, [_short(c, 40) for c in cells], fontsize=8)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlabel("count")
        ax.grid(axis="x", alpha=0.3)
    else:
        names = [_short(c, 32) for c in cells]
        tilt = n > 6 or sum(len(c) for c in names) > 48  # long names side by side would overlap
        ax.set_xticks(x, names, rotation=50 if tilt else 0, ha="right" if tilt else "center", fontsize=8,
                      rotation_mode="anchor" if tilt else "default")
        ax.set_ylabel("count")
        ax.grid(axis="y", alpha=0.3)
    ax.set_title(plain(title), fontsize=10, loc="left")
    if horizontal:  # under the plot, clear of the bars
        fig.legend(fontsize=8, loc="outside lower center", ncols=2, frameon=False)
    else:
        ax.legend(fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return to_svg(fig, name)
