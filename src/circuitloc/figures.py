"""The figure jobs: read the artifacts, hand them to `plots` and save PNG and PDF atomically."""

from __future__ import annotations

import polars as pl

from . import io
from . import metrics as M


def save(fig, png, pdf):
    """The figure as PNG and PDF, then closed."""
    import matplotlib.pyplot as plt

    io.save_figure(fig, png)
    io.save_figure(fig, pdf)
    plt.close(fig)


def fig_heatmap(task, ablation, scores: dict, png, pdf):
    """Figure 1: layer x head maps of single-unit drops (and, for induction, attention to B)."""
    from . import plots

    rows = [("drop", "single-unit drop")]
    if task == "induction":
        rows.append(("attn_score", "attention to B (ABA offset)"))
    data = {m: io.read_parquet(p) for m, p in scores.items()}
    save(plots.heatmaps(data, rows=rows, title=f"{task}: single-unit {ablation} ablation"), png, pdf)


def fig_curves(task, ablation, cards: dict, curves: dict, threshold, png, pdf):
    """Figure 2: damage against units ablated in rank order, one line per model."""
    from . import plots

    data = {m: io.read_parquet(p) for m, p in curves.items()}
    save(plots.curves(data, {m: io.read_card(p) for m, p in cards.items()}, "ranked", threshold,
                      title=f"{task}: cumulative {ablation} ablation (ranked)"), png, pdf)


def fig_scale(tables: dict, png, pdf, ablation: str = ""):
    """Top head score and heads-to-80% against parameter count, a column per task (Table 1 CSVs)."""
    from . import plots

    title = f"Top head and heads-to-80% against scale ({ablation} ablation)" if ablation else ""
    save(plots.scale({t: _heads_to_labels(io.read_csv(p)) for t, p in tables.items()}, title=title), png, pdf)


def _heads_to_labels(t: pl.DataFrame) -> pl.DataFrame:
    """heads_to_80 as plots.scale reads it: 'K', or '> K' where bounded (annotated, not plotted)."""
    labels = [M.heads_to_label(c, b) for c, b in zip(t["heads_to_80"], t["heads_to_80_bounded"])]
    return t.with_columns(pl.Series("heads_to_80", labels, dtype=pl.String))


def fig_stability(task, primary: str, panels: list, png, pdf):
    """The stability figure: the panels `writers.write_stability` returns (primary ablation)."""
    from . import plots

    save(plots.stability(panels, title=f"{task}: single-unit drops under two input conditions "
                                       f"({primary} ablation)"), png, pdf)


def fig_sweep(task, ablation, ci, summary: pl.DataFrame, per_model: pl.DataFrame, png, pdf):
    """The sweep figure from `writers.write_sweep`'s summary and per-model rows."""
    from . import plots

    save(plots.sweep(summary, per_model, title=f"{task}: {ablation} ablation across seeds "
                     f"(top head: mean and {int(ci * 100)}% interval; heads-to-80%: median)"), png, pdf)
