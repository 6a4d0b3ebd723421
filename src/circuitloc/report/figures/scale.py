"""The figures across models and seeds: top-head score and heads-to-threshold against parameter
count per family and task (`scale`), and the sweep's MHA-vs-GQA cells across seeds (`sweep`)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from circuitloc.metrics import heads_to_label, heads_to_name
from circuitloc.report.figures.style import (
    as_array,
    error_bars,
    family_order,
    frame,
    from_zero,
    params_label,
    style,
)


def _heads_to(df: pl.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(count or bound, bounded) of a Table 1's heads-to-threshold (`metrics.HeadsTo` columns: the
    count and its `_bounded` flag; empty where the conditioning rule refused it)."""
    vals = as_array(df, name)
    cens = df[f"{name}_bounded"].cast(pl.Boolean).fill_null(False).to_numpy() if f"{name}_bounded" in df.columns \
        else np.zeros(len(df), bool)
    return vals, cens


def scale(table1s: dict, threshold: float, title: str = ""):
    """Top head score and heads-to-80% against parameter count, a column per task; one line per
    family and attention type (the toy pair is two points of one size: MHA and GQA), one colour and
    marker each (`style`) in every panel, one legend for the figure. Both rows start at 0 and share
    their y range across tasks; the parameter axis is shared too. A curve that never reached the
    threshold ('> K') is an open triangle at its bound K, labelled '> K'. A percentage the
    conditioning rule refused (clean ≈ floor: empty in Table 1) is marked with an x on the axis and
    'n/a', never plotted."""

    name, pct_label = heads_to_name(threshold), f"{100 * threshold:g}%"
    cols = ["family", "attention", "n_params", "top_head_pct", "top_head_pct_lo", "top_head_pct_hi", name,
            f"{name}_bounded"]
    tables = {t: frame(df, [c for c in cols if c in df.columns]) for t, df in table1s.items()}
    tasks = list(tables)
    fig, axes = plt.subplots(2, max(1, len(tasks)), figsize=(3.6 * max(1, len(tasks)) + 0.4, 6.6), squeeze=False,
                             sharex=True, sharey="row", layout="constrained")
    seen, pct, heads, xs, any_censored, any_refused = {}, [0.0], [0.0], [], False, False
    for c, task in enumerate(tasks):
        t = tables[task]
        stacked = {}  # '> K' labels of models at about the same size and bound: one above the other
        groups = sorted({(str(f), str(a).lower()) for f, a in zip(t["family"].to_list(), t["attention"].to_list())},
                        key=lambda k: family_order(*k))
        for family, attention in groups:
            g = t.filter((pl.col("family").cast(pl.String) == family)
                         & (pl.col("attention").cast(pl.String).str.to_lowercase() == attention)).sort("n_params")
            st = style(family, attention)
            seen[(family, attention)] = st
            x = as_array(g, "n_params")
            xs += list(x)
            y = as_array(g, "top_head_pct")
            kw = {"color": st["color"], "marker": st["marker"], "ls": st["linestyle"], "ms": 7}
            axes[0, c].plot(x, y, **kw)
            for xi in x[~np.isfinite(y)]:  # refused (clean ≈ floor): marked, not plotted
                any_refused = True
                axes[0, c].plot([xi], [0.0], marker="x", color=st["color"], ms=8, ls="none", clip_on=False)
                axes[0, c].annotate("n/a", (xi, 0.0), xytext=(4, 4), textcoords="offset points", fontsize=8,
                                    color=st["color"])
            pct += list(y)
            if "top_head_pct_lo" in g.columns and "top_head_pct_hi" in g.columns:
                lo, hi = as_array(g, "top_head_pct_lo"), as_array(g, "top_head_pct_hi")
                axes[0, c].errorbar(x, y, yerr=error_bars(y, lo, hi), fmt="none",
                                    ecolor=st["color"], elinewidth=1, capsize=3)
                pct += list(hi)
            h, cens = _heads_to(g, name)
            axes[1, c].plot(x, np.where(cens, np.nan, h), **kw)  # the line breaks at a censored size
            heads += list(h)
            if cens.any():
                any_censored = True
                axes[1, c].scatter(x[cens], h[cens], marker="^", s=60, facecolors="white", edgecolors=st["color"],
                                   zorder=3)
                for xi, hi_ in zip(x[cens], h[cens]):
                    k = _label_slot(stacked, xi, hi_)
                    axes[1, c].annotate(heads_to_label(hi_, True), (xi, hi_), xytext=(5, 4 + 10 * k), textcoords="offset points",
                                        fontsize=8, color=st["color"])
        axes[0, c].set_title(task)
        axes[1, c].set_xlabel("parameters (log scale)")
    for ax in axes.ravel():
        ax.grid(True, axis="y", alpha=0.3)
    axes[0, 0].set_ylabel("top head score\n(% damage, one head)")
    axes[1, 0].set_ylabel(f"heads to {pct_label} damage\n(fewer = more concentrated)")
    from_zero(axes[0, 0], pct, top=0.0)
    from_zero(axes[1, 0], np.asarray(heads) + 0.5, pad=0.05)
    axes[1, 0].yaxis.set_major_locator(MaxNLocator(integer=True))
    _log_params(axes[0, 0], xs)
    handles = [Line2D([], [], color=st["color"], marker=st["marker"], ls=st["linestyle"], label=st["label"])
               for _, st in sorted(seen.items(), key=lambda kv: family_order(*kv[0]))]
    if any_censored:
        handles.append(Line2D([], [], color="grey", marker="^", ls="none", markerfacecolor="white",
                              label=f"> K: never reached {pct_label} in K units"))
    if any_refused:
        handles.append(Line2D([], [], color="grey", marker="x", ls="none", label="n/a: clean ≈ floor"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=9,
                   title="family · attention")
    fig.get_layout_engine().set(wspace=0.05)
    if title:
        fig.suptitle(title)
    return fig


def _label_slot(stacked: dict, x: float, bound: float) -> int:
    """How many '> K' labels already stand at this point (the same bound, a size within a tenth of a
    decade: the toy pair's 0.59M and 0.64M), so the next one goes a line higher, not on top of them."""
    key = (round(float(np.log10(max(x, 1.0))), 1), float(bound))
    k = stacked.get(key, 0)
    stacked[key] = k + 1
    return k


def _log_params(ax, xs):
    """A log parameter axis over whole decades (at least one), ticks at each decade only, labelled
    100K / 1M / 1B: no minor labels to overprint."""
    x = np.asarray([v for v in xs if np.isfinite(v) and v > 0], float)
    lo, hi = (x.min(), x.max()) if len(x) else (1e5, 1e6)
    a, b = math.floor(math.log10(lo / 1.3)), math.ceil(math.log10(hi * 1.3))
    if b - a < 1:
        b = a + 1
    ax.set_xscale("log")
    ax.set_xlim(10.0 ** a, 10.0 ** b)
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(params_label))
    # within two decades, 200K and 500K too; wider ranges keep decade labels only
    ax.xaxis.set_minor_formatter(FuncFormatter(_minor_params) if b - a <= 2 else NullFormatter())


def _minor_params(x, _pos=None) -> str:
    mant = x / 10 ** math.floor(math.log10(x) + 1e-9)
    return params_label(x) if round(mant, 6) in (2.0, 5.0) else ""


SIZE_STYLES = [("#0072B2", "o"), ("#D55E00", "s"), ("#009E73", "D"), ("#CC79A7", "^"), ("#E69F00", "v"),
               ("#56B4E9", "P")]


def _group_label(ratio: int, kvs: set) -> str:
    """A tick for `ratio` query heads per KV head; `kvs` the KV-head counts drawn there."""
    kind = "MHA" if ratio == 1 else "MQA" if kvs == {1} else "GQA"
    return f"{ratio}\n{kind}"


def sweep(summary, per_model, threshold: float, title: str = ""):
    """Top head score and heads-to-80% (ranked: count and fraction; greedy: fraction, when drawn)
    against the number of query heads per KV head (1 = MHA on the left; sizes with different head
    counts share the axis), one line per size, seeds as dots (only the toys each row uses). Top
    head: mean and t-interval across seeds. Heads-to-80%: the median (an open marker where it is a
    lower bound), a censored seed ('> K') drawn at its bound K as a triangle. A size keeps one
    colour and marker in every panel (its position among the sizes, in the summary's order)."""

    summary, per_model = frame(summary), frame(per_model)
    name, greedy, pct = heads_to_name(threshold), heads_to_name(threshold, "greedy"), f"{100 * threshold:g}%"
    panels = [("top_head_pct", "top head score (% damage)"), (name, f"heads to {pct} damage, ranked"),
              (f"{name}_frac", f"heads to {pct}, ranked (fraction of units)")]
    if f"{greedy}_frac_median" in summary.columns:
        panels.append((f"{greedy}_frac", f"heads to {pct}, greedy (fraction of units)"))
    sizes = list(dict.fromkeys(summary["size"].cast(pl.String).to_list()))
    mha_kv = {s: int(g["kv_heads"].max()) for (s,), g in summary.group_by(pl.col("size").cast(pl.String))}

    def ratio(size, kv):
        return mha_kv[size] // int(kv)

    ratios = sorted({ratio(s, k) for s, k in zip(summary["size"].cast(pl.String).to_list(), summary["kv_heads"].to_list())})
    drawn = {r: {int(k) for s, k in zip(summary["size"].cast(pl.String).to_list(), summary["kv_heads"].to_list())
                 if ratio(s, k) == r} for r in ratios}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False, layout="constrained")

    def shift(i):
        return (i - (len(sizes) - 1) / 2) * 0.08

    for ax, (m, label) in zip(axes[0], panels):
        censorable = f"{m}_median" in summary.columns
        ys = [0.0]
        pos = {r: j for j, r in enumerate(ratios)}
        for i, size in enumerate(sizes):
            colour, marker = SIZE_STYLES[i % len(SIZE_STYLES)]
            g = summary.filter(pl.col("size").cast(pl.String) == size).sort("kv_heads", descending=True)
            x = np.array([pos[ratio(size, k)] for k in g["kv_heads"].to_list()], float) + shift(i)
            if censorable:
                y = as_array(g, f"{m}_median")
                ax.plot(x, y, marker=marker, color=colour, label=str(size))
                bound = g[f"{m}_median_is_bound"].cast(pl.Boolean).fill_null(False).to_numpy()
                ax.scatter(x[bound], y[bound], s=60, marker=marker, facecolors="white", edgecolors=colour, zorder=3)
            else:
                y = as_array(g, m)
                lo, hi = as_array(g, f"{m}_lo"), as_array(g, f"{m}_hi")
                ax.errorbar(x, y, yerr=error_bars(y, lo, hi), marker=marker, color=colour,
                            capsize=3, label=str(size))
                ys += list(hi)
            ys += list(y)
            for kv, seeds in zip(g["kv_heads"].to_list(), g["seeds"].cast(pl.String).fill_null("").to_list()):
                used = [int(s) for s in seeds.split()]
                pts = per_model.filter((pl.col("size").cast(pl.String) == size) & (pl.col("kv_heads") == kv)
                                       & pl.col("seed").is_in(used))
                xs = np.full(len(pts), pos[ratio(size, kv)] + shift(i))
                if censorable:
                    cens = pts[f"{m.removesuffix('_frac')}_censored"].cast(pl.Boolean).fill_null(False).to_numpy()
                    ax.scatter(xs[~cens], as_array(pts, m)[~cens], s=8, alpha=0.4, color=colour)
                    ax.scatter(xs[cens], as_array(pts, f"{m}_bound")[cens], s=14, alpha=0.5, marker="^", color=colour)
                    ys += list(as_array(pts, m)) + list(as_array(pts, f"{m}_bound"))
                else:
                    ax.scatter(xs, as_array(pts, m), s=8, alpha=0.4, color=colour)
                    ys += list(as_array(pts, m))
        ax.set_xticks(np.arange(len(ratios)), [_group_label(r, drawn[r]) for r in ratios])
        ax.set_xlabel("query heads per KV head (MHA → GQA → MQA)")
        ax.set_ylabel(label + (" (median)" if censorable else ""))
        if m.endswith("_frac"):
            from_zero(ax, ys, top=1.0, pad=0.04)
        else:
            from_zero(ax, ys, pad=0.08)
        if m == name:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, title="size")
    if title:
        fig.suptitle(title)
    return fig
