"""Figures for a paper: shared colour scales, one panel per model, the 80% line drawn.

Every figure takes polars DataFrames (or dicts of them); a pandas frame is converted on entry
(`frame`), so plots work with either while the callers move to polars. seaborn and matplotlib get
numpy arrays. One colour, marker and line style per (model family, attention type) in every figure
(`style`), fixed in advance, never drawn from matplotlib's cycle: a model keeps its colour whichever
other models share its panel.
"""

from __future__ import annotations

import math
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from circuitloc.metrics import heads_to_label, heads_to_name


# -- frames ----------------------------------------------------------------------------------
def frame(df, columns: list[str] | None = None) -> pl.DataFrame:
    """A polars DataFrame of df (polars, or anything pl.DataFrame takes), keeping only `columns`
    when given (those present)."""
    out = df if isinstance(df, pl.DataFrame) else pl.DataFrame(df)
    return out.select([c for c in columns if c in out.columns]) if columns is not None else out


def _np(df: pl.DataFrame, col: str) -> np.ndarray:
    """A column as float numpy (null -> NaN; a non-numeric string such as '> 8' -> NaN)."""
    s = df[col]
    if s.dtype == pl.String:
        s = s.str.strip_chars().cast(pl.Float64, strict=False)
    return s.cast(pl.Float64, strict=False).fill_null(float("nan")).to_numpy()


# -- one style per (family, attention) ---------------------------------------------------------
ATTENTION = {  # marker, line style, name in legends
    "mha": ("o", "-", "MHA"),
    "gqa": ("s", "--", "GQA"),
    "mqa": ("^", ":", "MQA"),
}
# The families this project runs, fixed (colour-blind-safe Okabe-Ito and tab10 colours); any other
# (family, attention) gets one of EXTRA by a stable hash of its name.
COLOURS = {
    ("toy", "mha"): "#0072B2",  # blue
    ("toy", "gqa"): "#E69F00",  # orange
    ("smollm2", "gqa"): "#009E73",  # green
    ("smollm2", "mha"): "#56B4E9",  # sky blue
    ("pythia", "mha"): "#CC79A7",  # pink
    ("pythia", "gqa"): "#D55E00",  # vermillion
    ("qwen2.5", "gqa"): "#6A3D9A",  # purple
    ("qwen2.5", "mha"): "#8C564B",  # brown
}
EXTRA = ["#17BECF", "#BCBD22", "#7F7F7F", "#000000", "#F0E442", "#1F3A93", "#A0522D", "#2E8B57"]
FAMILY_NAMES = {"toy": "toy", "smollm2": "SmolLM2", "pythia": "Pythia", "qwen2.5": "Qwen2.5", "gpt2": "GPT-2",
                "llama": "Llama"}


def style(family: str, attention: str) -> dict:
    """color, marker, linestyle and label ('toy · MHA') of a model family and attention type: the
    same in every figure and panel, whatever else is drawn."""
    family, attention = str(family), str(attention).lower()
    key = (family.lower(), attention)
    colour = COLOURS.get(key) or EXTRA[zlib.crc32(f"{key[0]}|{key[1]}".encode()) % len(EXTRA)]
    marker, ls, name = ATTENTION.get(attention, ("D", "-.", attention.upper()))
    return {"color": colour, "marker": marker, "linestyle": ls,
            "label": f"{FAMILY_NAMES.get(family.lower(), family)} · {name}"}


def _attention_order(kind: str) -> tuple:
    return (list(ATTENTION).index(kind) if kind in ATTENTION else len(ATTENTION), kind)


def _family_order(family: str, attention: str) -> tuple:
    """Legend order: the toy pair first, then families by name; MHA before GQA within one."""
    return (family.lower() != "toy", family.lower(), _attention_order(attention))


# -- axes helpers ------------------------------------------------------------------------------
def _from_zero(ax, values, top: float | None = None, pad: float = 0.08):
    """y from 0 (or below, only when a value is negative) to a little above the largest value."""
    v = np.asarray([x for x in np.ravel(values) if np.isfinite(x)], float)
    lo = min(0.0, float(v.min())) if len(v) else 0.0
    hi = max(float(v.max()) if len(v) else 0.0, top or 0.0)
    span = (hi - lo) or 1.0
    ax.set_ylim(lo - (pad * span if lo < 0 else 0.0), hi + pad * span)


def _params_label(x, _pos=None) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            v = x / div
            return f"{v:.0f}{unit}" if v >= 1 and abs(v - round(v)) < 1e-9 else f"{v:g}{unit}"
    return f"{x:g}"


def _cell_ticks(axis, labels: list, most: int = 16):
    """Ticks at cell centres, at most `most` of them (every k-th label): no overprint, no bare ticks."""
    step = max(1, math.ceil(len(labels) / most))
    idx = np.arange(0, len(labels), step)
    axis.set_ticks(idx + 0.5, [str(labels[i]) for i in idx], rotation=0)


def _grid(df: pl.DataFrame, value: str):
    """(layer x head array, layers, heads) of one value; NaN where a (layer, head) is missing."""
    layers = sorted(df["layer"].unique().to_list())
    heads = sorted(df["head"].unique().to_list())
    grid = np.full((len(layers), len(heads)), np.nan)
    li = {v: i for i, v in enumerate(layers)}
    hi = {v: i for i, v in enumerate(heads)}
    for layer, head, v in zip(df["layer"].to_list(), df["head"].to_list(), _np(df, value)):
        grid[li[layer], hi[head]] = v
    return grid, layers, heads


def _heatmap(ax, df: pl.DataFrame, value: str, scale: tuple[float, bool], cbar: bool, label: str):
    (vmax, diverging), (grid, layers, heads) = scale, _grid(df, value)  # scale: its row's, from _scale_of
    sns.heatmap(grid, ax=ax, cmap="RdBu_r" if diverging else "viridis", vmin=-vmax if diverging else 0,
                vmax=vmax, cbar=cbar, cbar_kws={"label": label}, xticklabels=False, yticklabels=False)
    _cell_ticks(ax.xaxis, heads, most=8)  # a panel is ~3 inches wide: 8 labels of two digits fit
    _cell_ticks(ax.yaxis, layers, most=16)


def _scale_of(frames: list[pl.DataFrame], value: str) -> tuple[float, bool]:
    vals = np.concatenate([_np(f, value) for f in frames]) if frames else np.array([])
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return 1.0, False
    return float(np.abs(vals).max()) or 1.0, bool(vals.min() < 0)


def _title(model: str, cards: dict | None) -> str:
    card = (cards or {}).get(model)
    if not card:
        return model
    return f"{model}\n({style(card.get('family', model), card.get('attention', '?'))['label']})"


# -- figures -----------------------------------------------------------------------------------
def heatmaps(scores: dict, value: str = "drop", title: str = "", cbar_label: str | None = None,
             rows: list[tuple[str, str]] | None = None, cards: dict | None = None):
    """Layer x head maps of single-unit values, one column per model; each row shares a scale.
    cards (optional, {model: card}): name each column's family and attention type too."""
    rows = rows or [(value, cbar_label or value)]
    models = list(scores)
    data = {m: frame(scores[m], ["layer", "head", *[v for v, _ in rows]]) for m in models}
    fig, axes = plt.subplots(len(rows), len(models), figsize=(3.2 * len(models) + 1, 3.4 * len(rows) + 0.4),
                             squeeze=False, layout="constrained")
    for r, (val, label) in enumerate(rows):
        scale = _scale_of([data[m] for m in models], val)
        for c, m in enumerate(models):
            ax = axes[r, c]
            _heatmap(ax, data[m], val, scale, c == len(models) - 1, label)
            ax.set_title(_title(m, cards) if r == 0 else "", fontsize=10)
            ax.set_xlabel("head")
            ax.set_ylabel("layer" if c == 0 else "")
    if title:
        fig.suptitle(title)
    return fig


def curves(curves: dict, cards: dict, method: str = "ranked", threshold: float = 0.8, title: str = ""):
    """Damage vs units ablated, one line per model, one panel per attention type (MHA first).
    Colour and marker per family and attention type (`style`); models of one family and attention
    type differ by line style, smallest first (solid)."""
    cols = ["method", "step", "damage", "damage_lo", "damage_hi"]
    data = {m: frame(c, cols) for m, c in curves.items()}
    att = {m: str(cards[m]["attention"]).lower() for m in data}
    fam = {m: str(cards[m].get("family", m)) for m in data}
    kinds = sorted(set(att.values()), key=_attention_order)
    sizes = {}  # (family, attention) -> models by size: a second model of the pair gets another line style
    for m in sorted(data, key=lambda m: (float(cards[m].get("n_params") or 0), m)):
        sizes.setdefault((fam[m], att[m]), []).append(m)
    dashes = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4.2), squeeze=False, sharex=True, sharey=True,
                             layout="constrained")
    ys, last = [0.0, threshold], 1.0
    for ax, kind in zip(axes[0], kinds):
        for m, c in data.items():
            if att[m] != kind:
                continue
            st = style(fam[m], kind)
            rank = sizes[(fam[m], kind)].index(m)
            cm = c.filter(pl.col("method") == method).sort("step")
            step, dmg = _np(cm, "step"), _np(cm, "damage")
            ax.plot(np.r_[0, step], np.r_[0, dmg], marker=st["marker"], ms=3.5, color=st["color"],
                    ls=dashes[rank % len(dashes)] if len(sizes[(fam[m], kind)]) > 1 else "-",
                    label=f"{m} ({st['label']})")
            ys += list(dmg)
            last = max([last, *step[np.isfinite(step)]])
            if "damage_lo" in cm.columns and "damage_hi" in cm.columns:  # bootstrap interval over prompts
                lo, hi = _np(cm, "damage_lo"), _np(cm, "damage_hi")
                yerr = np.nan_to_num(np.clip([dmg - lo, hi - dmg], 0, None))
                ax.errorbar(step, dmg, yerr=yerr, fmt="none", ecolor=st["color"], elinewidth=1, capsize=2)
                ys += list(lo) + list(hi)
        ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"{round(threshold * 100)}% damage")
        ax.set_title(ATTENTION.get(kind, (None, None, kind.upper()))[2])
        ax.set_xlabel("units ablated")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="lower right")
    _from_zero(axes[0, 0], ys, top=1.0, pad=0.05)
    axes[0, 0].set_xlim(-0.4, last + 0.6)  # shared: every panel shows every model's last step
    axes[0, 0].set_ylabel("damage (1 = task gone)")
    if title:
        fig.suptitle(title)
    return fig


def _heads_to(df: pl.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(count or bound, bounded) of a Table 1's heads-to-threshold (`metrics.HeadsTo` columns: the
    count and its `_bounded` flag; empty where the conditioning rule refused it)."""
    vals = _np(df, name)
    cens = df[f"{name}_bounded"].cast(pl.Boolean).fill_null(False).to_numpy() if f"{name}_bounded" in df.columns \
        else np.zeros(len(df), bool)
    return vals, cens


def scale(table1s: dict, title: str = "", threshold: float = 0.8):
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
                        key=lambda k: _family_order(*k))
        for family, attention in groups:
            g = t.filter((pl.col("family").cast(pl.String) == family)
                         & (pl.col("attention").cast(pl.String).str.to_lowercase() == attention)).sort("n_params")
            st = style(family, attention)
            seen[(family, attention)] = st
            x = _np(g, "n_params")
            xs += list(x)
            y = _np(g, "top_head_pct")
            kw = {"color": st["color"], "marker": st["marker"], "ls": st["linestyle"], "ms": 7}
            axes[0, c].plot(x, y, **kw)
            for xi in x[~np.isfinite(y)]:  # refused (clean ≈ floor): marked, not plotted
                any_refused = True
                axes[0, c].plot([xi], [0.0], marker="x", color=st["color"], ms=8, ls="none", clip_on=False)
                axes[0, c].annotate("n/a", (xi, 0.0), xytext=(4, 4), textcoords="offset points", fontsize=8,
                                    color=st["color"])
            pct += list(y)
            if "top_head_pct_lo" in g.columns and "top_head_pct_hi" in g.columns:
                lo, hi = _np(g, "top_head_pct_lo"), _np(g, "top_head_pct_hi")
                axes[0, c].errorbar(x, y, yerr=np.nan_to_num(np.clip([y - lo, hi - y], 0, None)), fmt="none",
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
    _from_zero(axes[0, 0], pct, top=0.0)
    _from_zero(axes[1, 0], np.asarray(heads) + 0.5, pad=0.05)
    axes[1, 0].yaxis.set_major_locator(MaxNLocator(integer=True))
    _log_params(axes[0, 0], xs)
    handles = [Line2D([], [], color=st["color"], marker=st["marker"], ls=st["linestyle"], label=st["label"])
               for _, st in sorted(seen.items(), key=lambda kv: _family_order(*kv[0]))]
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
    ax.xaxis.set_major_formatter(FuncFormatter(_params_label))
    # within two decades, 200K and 500K too; wider ranges keep decade labels only
    ax.xaxis.set_minor_formatter(FuncFormatter(_minor_params) if b - a <= 2 else NullFormatter())


def _minor_params(x, _pos=None) -> str:
    mant = x / 10 ** math.floor(math.log10(x) + 1e-9)
    return _params_label(x) if round(mant, 6) in (2.0, 5.0) else ""


def stability(panels: list, title: str = ""):
    """One row per (model, split): the two conditions' single-unit drops side by side, on one scale
    per row."""
    if not panels:
        fig, ax = plt.subplots(figsize=(5, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no two-condition split for this task", ha="center", va="center")
        return fig
    panels = [(name, {cond: frame(d, ["layer", "head", "drop"]) for cond, d in conds.items()})
              for name, conds in panels]
    fig, axes = plt.subplots(len(panels), 2, figsize=(8, 0.8 + max(1.8, 0.13 * _height(panels)) * len(panels)),
                             squeeze=False, layout="constrained")
    for r, (name, conds) in enumerate(panels):
        scale = _scale_of(list(conds.values()), "drop")
        for c, (cond, d) in enumerate(conds.items()):
            ax = axes[r, c]
            _heatmap(ax, d, "drop", scale, c == 1, "drop")
            ax.set_title(f"{name} — {cond}", fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer" if c == 0 else "")
    if title:
        fig.suptitle(title)
    return fig


def _height(panels) -> int:
    return max(int(d["layer"].max()) + 1 for _, conds in panels for d in conds.values())


SIZE_STYLES = [("#0072B2", "o"), ("#D55E00", "s"), ("#009E73", "D"), ("#CC79A7", "^"), ("#E69F00", "v"),
               ("#56B4E9", "P")]


def _group_label(ratio: int, kvs: set) -> str:
    """A tick for `ratio` query heads per KV head; `kvs` the KV-head counts drawn there."""
    kind = "MHA" if ratio == 1 else "MQA" if kvs == {1} else "GQA"
    return f"{ratio}\n{kind}"


def sweep(summary, per_model, title: str = "", threshold: float = 0.8):
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
    ratio = lambda size, kv: mha_kv[size] // int(kv)  # noqa: E731
    ratios = sorted({ratio(s, k) for s, k in zip(summary["size"].cast(pl.String).to_list(), summary["kv_heads"].to_list())})
    drawn = {r: {int(k) for s, k in zip(summary["size"].cast(pl.String).to_list(), summary["kv_heads"].to_list())
                 if ratio(s, k) == r} for r in ratios}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False, layout="constrained")
    shift = lambda i: (i - (len(sizes) - 1) / 2) * 0.08
    for ax, (m, label) in zip(axes[0], panels):
        censorable = f"{m}_median" in summary.columns
        ys = [0.0]
        pos = {r: j for j, r in enumerate(ratios)}
        for i, size in enumerate(sizes):
            colour, marker = SIZE_STYLES[i % len(SIZE_STYLES)]
            g = summary.filter(pl.col("size").cast(pl.String) == size).sort("kv_heads", descending=True)
            x = np.array([pos[ratio(size, k)] for k in g["kv_heads"].to_list()], float) + shift(i)
            if censorable:
                y = _np(g, f"{m}_median")
                ax.plot(x, y, marker=marker, color=colour, label=str(size))
                bound = g[f"{m}_median_is_bound"].cast(pl.Boolean).fill_null(False).to_numpy()
                ax.scatter(x[bound], y[bound], s=60, marker=marker, facecolors="white", edgecolors=colour, zorder=3)
            else:
                y = _np(g, m)
                lo, hi = _np(g, f"{m}_lo"), _np(g, f"{m}_hi")
                ax.errorbar(x, y, yerr=np.nan_to_num(np.clip([y - lo, hi - y], 0, None)), marker=marker, color=colour,
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
                    ax.scatter(xs[~cens], _np(pts, m)[~cens], s=8, alpha=0.4, color=colour)
                    ax.scatter(xs[cens], _np(pts, f"{m}_bound")[cens], s=14, alpha=0.5, marker="^", color=colour)
                    ys += list(_np(pts, m)) + list(_np(pts, f"{m}_bound"))
                else:
                    ax.scatter(xs, _np(pts, m), s=8, alpha=0.4, color=colour)
                    ys += list(_np(pts, m))
        ax.set_xticks(np.arange(len(ratios)), [_group_label(r, drawn[r]) for r in ratios])
        ax.set_xlabel("query heads per KV head (MHA → GQA → MQA)")
        ax.set_ylabel(label + (" (median)" if censorable else ""))
        if m.endswith("_frac"):
            _from_zero(ax, ys, top=1.0, pad=0.04)
        else:
            _from_zero(ax, ys, pad=0.08)
        if m == name:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, title="size")
    if title:
        fig.suptitle(title)
    return fig
