"""Figures for a paper: shared colour scales, one panel per model, the 80% line drawn.

Every figure takes polars DataFrames (or dicts of them); a pandas frame is converted on entry
(`frame`), so plots work with either while the callers move to polars. seaborn and matplotlib get
numpy arrays. One colour, marker and line style per (model family, attention type) in every figure
(`style`), fixed in advance, never drawn from matplotlib's cycle: a model keeps its colour whichever
other models share its panel."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from circuitloc.report.figures.style import (
    ATTENTION,
    as_array,
    attention_order,
    error_bars,
    frame,
    from_zero,
    style,
)


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
    for layer, head, v in zip(df["layer"].to_list(), df["head"].to_list(), as_array(df, value)):
        grid[li[layer], hi[head]] = v
    return grid, layers, heads


def _heatmap(ax, df: pl.DataFrame, value: str, scale: tuple[float, bool], cbar: bool, label: str):
    import seaborn as sns  # here, not at the top: importing it (pandas, scipy) is a second per figure job

    (vmax, diverging), (grid, layers, heads) = scale, _grid(df, value)  # scale: its row's, from _scale_of
    sns.heatmap(grid, ax=ax, cmap="RdBu_r" if diverging else "viridis", vmin=-vmax if diverging else 0,
                vmax=vmax, cbar=cbar, cbar_kws={"label": label}, xticklabels=False, yticklabels=False)
    _cell_ticks(ax.xaxis, heads, most=8)  # a panel is ~3 inches wide: 8 labels of two digits fit
    _cell_ticks(ax.yaxis, layers, most=16)


# what a guided scan estimates (engine.guided_scan): a unit's drop and what follows from it; other
# per-unit values (induction's attention to B) are measured for every unit
ESTIMATED_VALUES = ("drop", "damage")
ESTIMATED_NOTE = "hatched: unit score estimated by attribution (guided scan), not ablated"


def _hatch_estimated(ax, df: pl.DataFrame) -> bool:
    """Hatch the cells of units a guided scan left to attribution (`estimated`); whether any."""
    from matplotlib.patches import Rectangle

    if "estimated" not in df.columns or not df["estimated"].fill_null(False).any():
        return False
    layers, heads = sorted(df["layer"].unique().to_list()), sorted(df["head"].unique().to_list())
    for r in df.filter(pl.col("estimated").fill_null(False)).iter_rows(named=True):
        ax.add_patch(Rectangle((heads.index(r["head"]), layers.index(r["layer"])), 1, 1, fill=False,
                               hatch="///", edgecolor="0.85", linewidth=0))
    return True


def _scale_of(frames: list[pl.DataFrame], value: str) -> tuple[float, bool]:
    vals = np.concatenate([as_array(f, value) for f in frames]) if frames else np.array([])
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return 1.0, False
    return float(np.abs(vals).max()) or 1.0, bool(vals.min() < 0)


def _title(model: str, cards: dict | None) -> str:
    card = (cards or {}).get(model)
    if not card:
        return model
    return f"{model}\n({style(card.family, card.attention)['label']})"


# -- figures -----------------------------------------------------------------------------------
def heatmaps(scores: dict, value: str = "drop", title: str = "", cbar_label: str | None = None,
             rows: list[tuple[str, str]] | None = None, cards: dict | None = None):
    """Layer x head maps of single-unit values, one column per model; each row shares a scale.
    cards (optional, {model: card}): name each column's family and attention type too."""
    rows = rows or [(value, cbar_label or value)]
    models = list(scores)
    data = {m: frame(scores[m], ["layer", "head", "estimated", *[v for v, _ in rows]]) for m in models}
    hatched = False
    fig, axes = plt.subplots(len(rows), len(models), figsize=(3.2 * len(models) + 1, 3.4 * len(rows) + 0.4),
                             squeeze=False, layout="constrained")
    for r, (val, label) in enumerate(rows):
        scale = _scale_of([data[m] for m in models], val)
        for c, m in enumerate(models):
            ax = axes[r, c]
            _heatmap(ax, data[m], val, scale, c == len(models) - 1, label)
            if val in ESTIMATED_VALUES:
                hatched |= _hatch_estimated(ax, data[m])
            ax.set_title(_title(m, cards) if r == 0 else "", fontsize=10)
            ax.set_xlabel("head")
            ax.set_ylabel("layer" if c == 0 else "")
    title = f"{title}\n{ESTIMATED_NOTE}" if hatched and title else (ESTIMATED_NOTE if hatched else title)
    if title:
        fig.suptitle(title)
    return fig


def curves(curves: dict, cards: dict, threshold: float, method: str = "ranked", title: str = ""):
    """Damage vs units ablated, one line per model, one panel per attention type (MHA first).
    Colour and marker per family and attention type (`style`); models of one family and attention
    type differ by line style, smallest first (solid)."""
    cols = ["method", "step", "damage", "damage_lo", "damage_hi"]
    data = {m: frame(c, cols) for m, c in curves.items()}
    att = {m: cards[m].attention.lower() for m in data}
    fam = {m: cards[m].family for m in data}
    kinds = sorted(set(att.values()), key=attention_order)
    sizes = {}  # (family, attention) -> models by size: a second model of the pair gets another line style
    for m in sorted(data, key=lambda m: (float(cards[m].n_params), m)):
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
            step, dmg = as_array(cm, "step"), as_array(cm, "damage")
            ax.plot(np.r_[0, step], np.r_[0, dmg], marker=st["marker"], ms=3.5, color=st["color"],
                    ls=dashes[rank % len(dashes)] if len(sizes[(fam[m], kind)]) > 1 else "-",
                    label=f"{m} ({st['label']})")
            ys += list(dmg)
            last = max([last, *step[np.isfinite(step)]])
            if "damage_lo" in cm.columns and "damage_hi" in cm.columns:  # bootstrap interval over prompts
                lo, hi = as_array(cm, "damage_lo"), as_array(cm, "damage_hi")
                ax.errorbar(step, dmg, yerr=error_bars(dmg, lo, hi), fmt="none", ecolor=st["color"], elinewidth=1, capsize=2)
                ys += list(lo) + list(hi)
        ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"{round(threshold * 100)}% damage")
        ax.set_title(ATTENTION.get(kind, (None, None, kind.upper()))[2])
        ax.set_xlabel("units ablated")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="lower right")
    from_zero(axes[0, 0], ys, top=1.0, pad=0.05)
    axes[0, 0].set_xlim(-0.4, last + 0.6)  # shared: every panel shows every model's last step
    axes[0, 0].set_ylabel("damage (1 = task gone)")
    if title:
        fig.suptitle(title)
    return fig


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
