"""The figure jobs: read the artifacts, hand them to `plots` and save PNG and PDF atomically."""

from __future__ import annotations

import polars as pl

from circuitloc import io
from circuitloc.modelcard import ModelCard
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.report.figures import plots
from circuitloc.report.figures import scale as scale_plots
from circuitloc.report.records import FigureFiles, TableJob


def save(fig, png, pdf):
    """The figure as PNG and PDF, then closed."""
    import matplotlib.pyplot as plt

    io.save_figure(fig, png)
    io.save_figure(fig, pdf)
    plt.close(fig)


def _noted(title: str, note: str) -> str:
    """The title with a note on its own line (which models a sampled figure shows)."""
    return f"{title}\n{note}" if note else title


def fig_heatmap(job: TableJob, scores: dict, out: FigureFiles, note: str = ""):
    """Figure 1: layer x head maps of single-unit drops (and, for induction, attention to B).
    `note`: a second title line (a sweep's figure shows a sample of its models)."""

    rows = list(registry.task(job.task).heatmap)  # induction: the attention to B beside the drops
    data = {m: io.read_parquet(p) for m, p in scores.items()}
    save(plots.heatmaps(data, rows=rows, title=_noted(f"{job.task}: single-unit {job.ablation} ablation", note)),
         out.png, out.pdf)


def fig_curves(job: TableJob, cards: dict, curves: dict, out: FigureFiles, note: str = ""):
    """Figure 2: damage against units ablated in rank order, one line per model, with the job's
    threshold marked (`note`: as for fig_heatmap)."""

    data = {m: io.read_parquet(p) for m, p in curves.items()}
    save(plots.curves(data, {m: ModelCard.read(p) for m, p in cards.items()}, job.threshold, "ranked",
                      title=_noted(f"{job.task}: cumulative {job.ablation} ablation (ranked)", note)), out.png, out.pdf)


def fig_scale(tables: dict, png, pdf, threshold: float, ablation: str = ""):
    """Top head score and heads-to-threshold against parameter count, a column per task (Table 1
    CSVs, read as they are: count and bounded flag, no label to parse back)."""

    pct = f"{100 * threshold:g}%"
    title = f"Top head and heads-to-{pct} against scale ({ablation} ablation)" if ablation else ""
    save(scale_plots.scale({t: io.read_csv(p) for t, p in tables.items()}, title=title, threshold=threshold), png, pdf)


def fig_stability(task, primary: str, panels: list, png, pdf):
    """The stability figure: the panels `writers.write_stability` returns (primary ablation)."""

    save(plots.stability(panels, title=f"{task}: single-unit drops under two input conditions "
                                       f"({primary} ablation)"), png, pdf)


def fig_sweep(job: TableJob, ci: float, summary: pl.DataFrame, per_model: pl.DataFrame, out: FigureFiles):
    """The sweep figure from `writers.write_sweep`'s summary and per-model rows."""

    t = job.threshold
    save(scale_plots.sweep(summary, per_model, threshold=t, title=f"{job.task}: {job.ablation} ablation across seeds "
                           f"(top head: mean and {int(ci * 100)}% interval; heads-to-{100 * t:g}%: median)"),
         out.png, out.pdf)
