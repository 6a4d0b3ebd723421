"""The report's figures from Python (docs/api.md): a layer x head map of a scores column and the
damage curves, drawn by the functions the figure jobs call (`report.figures.plots`), for the frames of
`Run.scores` and `Run.curves`. Not imported with the rest of the API (`circuitloc.plot_scores`
imports it on first use): the report's plotting sets matplotlib's file backend (Agg)."""

from __future__ import annotations

from circuitloc.metrics import DEFAULT_THRESHOLD
from circuitloc.report.figures import plots


def plot_scores(models: dict, value: str = "drop", title: str = ""):
    """Layer x head maps of one scores column (`value`: drop, damage, ...), one per model, side by
    side on one scale: `models` {Model: its scores frame}. A matplotlib figure."""
    return plots.heatmaps({m.name: s for m, s in models.items()}, value, title,
                          cards={m.name: m.card for m in models})


def plot_curves(models: dict, threshold: float = DEFAULT_THRESHOLD, method: str = "ranked", title: str = ""):
    """Damage against units ablated, one line per model, one panel per attention type (MHA, GQA),
    `threshold` dashed: `models` {Model: its curves frame}; `method` ranked or greedy. A
    matplotlib figure."""
    return plots.curves({m.name: c for m, c in models.items()}, {m.name: m.card for m in models},
                        float(threshold), method, title)
