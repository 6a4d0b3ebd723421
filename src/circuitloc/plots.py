"""Figures for a paper: shared colour scales, one panel per model, the 80% line drawn."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _grid(df: pd.DataFrame, value: str) -> pd.DataFrame:
    return df.pivot(index="layer", columns="head", values=value).sort_index()


def heatmaps(scores: dict, value: str = "drop", title: str = "", cbar_label: str | None = None,
             rows: list[tuple[str, str]] | None = None):
    """Layer x head maps of single-unit values, one column per model; each row shares a scale."""
    rows = rows or [(value, cbar_label or value)]
    models = list(scores)
    fig, axes = plt.subplots(len(rows), len(models), figsize=(3.2 * len(models) + 1, 3.4 * len(rows)),
                             squeeze=False)
    for r, (val, label) in enumerate(rows):
        vmax = max(float(np.nanmax(np.abs(s[val]))) for s in scores.values()) or 1.0
        diverging = any(float(np.nanmin(s[val])) < 0 for s in scores.values())
        for c, m in enumerate(models):
            ax = axes[r, c]
            sns.heatmap(_grid(scores[m], val), ax=ax, cmap="RdBu_r" if diverging else "viridis",
                        vmin=-vmax if diverging else 0, vmax=vmax, cbar=c == len(models) - 1,
                        cbar_kws={"label": label})
            ax.set_title(m if r == 0 else "")
            ax.set_xlabel("head")
            ax.set_ylabel("layer" if c == 0 else "")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def curves(curves: dict, cards: dict, method: str = "ranked", threshold: float = 0.8, title: str = ""):
    """Damage vs units ablated, one line per model, one panel per attention type."""
    kinds = sorted({cards[m]["attention"] for m in curves})
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4), squeeze=False, sharey=True)
    for ax, kind in zip(axes[0], kinds):
        for m, c in curves.items():
            if cards[m]["attention"] != kind:
                continue
            cm = c[c["method"] == method].sort_values("step")
            line, = ax.plot(np.r_[0, cm["step"]], np.r_[0, cm["damage"]], marker="o", ms=3, label=m)
            if "damage_lo" in cm:  # bootstrap interval over prompts at each step
                yerr = np.clip([cm["damage"] - cm["damage_lo"], cm["damage_hi"] - cm["damage"]], 0, None)
                ax.errorbar(cm["step"], cm["damage"], yerr=yerr, fmt="none", ecolor=line.get_color(), elinewidth=1,
                            capsize=2)
        ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"{int(threshold * 100)}% damage")
        ax.set_title(kind.upper())
        ax.set_xlabel("units ablated")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("damage (1 = task gone)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def scale(table1s: dict):
    """Top head score and heads-to-80% against parameter count, a column per task; one line per
    family and attention type (the toy pair is two points of one size: MHA and GQA)."""
    tasks = list(table1s)
    fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7), squeeze=False)
    markers = {"mha": "o", "gqa": "s"}
    for c, task in enumerate(tasks):
        t = table1s[task]
        for (family, attention), g in t.groupby(["family", "attention"]):
            g = g.sort_values("n_params")
            label = f"{family} ({attention.upper()})"
            axes[0, c].plot(g["n_params"], g["top_head_pct"], marker=markers.get(attention, "^"), label=label)
            h = pd.to_numeric(g["heads_to_80"], errors="coerce")
            axes[1, c].plot(g["n_params"], h, marker=markers.get(attention, "^"), label=label)
            for x, raw in zip(g["n_params"], g["heads_to_80"]):
                if str(raw).startswith(">"):  # never reached 80%: say so instead of plotting a number
                    axes[1, c].annotate(str(raw), (x, 0), fontsize=7)
        axes[0, c].set_title(task)
        for r in range(2):
            axes[r, c].set_xscale("log")
            axes[r, c].set_xlabel("parameters")
        axes[1, c].yaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0, c].set_ylabel("top head score (% damage)")
        axes[1, c].set_ylabel("heads to 80% damage")
        axes[0, c].legend(fontsize=8)
    fig.tight_layout()
    return fig


def stability(panels: list, title: str = ""):
    """One row per (model, split): the two conditions' single-unit drops side by side, on one scale
    per row."""
    if not panels:
        fig, ax = plt.subplots(figsize=(5, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "no two-condition split for this task", ha="center", va="center")
        return fig
    fig, axes = plt.subplots(len(panels), 2, figsize=(8, 0.8 + max(1.8, 0.13 * _height(panels)) * len(panels)),
                             squeeze=False)
    for r, (name, conds) in enumerate(panels):
        vals = [d["drop"].to_numpy(dtype=float) for d in conds.values()]
        vmax = max(float(np.nanmax(np.abs(v))) for v in vals) or 1.0
        diverging = any(float(np.nanmin(v)) < 0 for v in vals)
        for c, (cond, d) in enumerate(conds.items()):
            ax = axes[r, c]
            sns.heatmap(_grid(d, "drop"), ax=ax, cmap="RdBu_r" if diverging else "viridis",
                        vmin=-vmax if diverging else 0, vmax=vmax, cbar=c == 1, cbar_kws={"label": "drop"})
            ax.set_title(f"{name} — {cond}", fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer" if c == 0 else "")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _height(panels) -> int:
    return max(int(d["layer"].max()) + 1 for _, conds in panels for d in conds.values())


def sweep(summary: pd.DataFrame, per_model: pd.DataFrame, title: str = ""):
    """Top head score, heads-to-80% and its fraction against the number of KV heads (MHA on the
    left, MQA on the right), one line per size, seeds as dots (only the toys each row uses). Top
    head: mean and t-interval across seeds. Heads-to-80%: the median (an open marker where it is a
    lower bound), a censored seed ('> K') drawn at its bound K as a triangle."""
    panels = [("top_head_pct", "top head score (% damage)"), ("heads_to_80", "heads to 80% damage"),
              ("heads_to_80_frac", "heads to 80% (fraction of units)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, (m, label) in zip(axes[0], panels):
        censorable = f"{m}_median" in summary
        for i, (size, g) in enumerate(summary.groupby("size", sort=False)):
            g = g.sort_values("kv_heads", ascending=False)
            x = np.arange(len(g)) + (i - 0.5) * 0.08
            if censorable:
                line = ax.plot(x, g[f"{m}_median"], marker="o", label=f"{size}")
                bound = g[f"{m}_median_is_bound"].to_numpy(bool)
                ax.scatter(x[bound], g[f"{m}_median"].to_numpy(float)[bound], s=60, facecolors="white",
                           edgecolors=line[0].get_color(), zorder=3)
                color = line[0].get_color()
            else:
                yerr = np.clip([g[m] - g[f"{m}_lo"], g[f"{m}_hi"] - g[m]], 0, None)
                line = ax.errorbar(x, g[m], yerr=np.nan_to_num(yerr), marker="o", capsize=3, label=f"{size}")
                color = line[0].get_color()
            pos = {kv: j for j, kv in enumerate(g["kv_heads"])}
            for kv, seeds in zip(g["kv_heads"], g["seeds"].astype(str)):
                used = {int(s) for s in seeds.split()}
                pts = per_model[(per_model["size"] == size) & (per_model["kv_heads"] == kv)
                                & per_model["seed"].isin(used)]
                xs = np.full(len(pts), pos[kv] + (i - 0.5) * 0.08)
                if censorable:
                    cens = pts["heads_to_80_censored"].to_numpy(bool)
                    ax.scatter(xs[~cens], pts[m].to_numpy(float)[~cens], s=8, alpha=0.4, color=color)
                    ax.scatter(xs[cens], pts[f"{m}_bound"].to_numpy(float)[cens], s=14, alpha=0.5, marker="^",
                               color=color)
                else:
                    ax.scatter(xs, pts[m], s=8, alpha=0.4, color=color)
            ax.set_xticks(np.arange(len(g)), [str(k) for k in g["kv_heads"]])
        ax.set_xlabel("KV heads (8 query heads: MHA -> MQA)")
        ax.set_ylabel(label + (" (median)" if censorable else ""))
        ax.legend(fontsize=8, title="size")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
