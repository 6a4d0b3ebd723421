"""The report's first page: the run's answer before its archive. The claims table, the headline
Table 1 in the paper's form and the headline figures, each with a caption that says what to read in
it, then the workflow's own description. Written as reStructuredText, the text Snakemake's report
opens on (plan.hooks.html_report.report_text); figures are embedded, so the page stands alone."""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from circuitloc import io
from circuitloc.report.tables.paper import table1_form

CLAIM_COLUMNS = ("claim", "models", "measured", "interval", "verdict", "reason", "testable_when")
TABLE1_READ = ("One row per model. The top unit is the one whose ablation alone does most damage on the scoring "
               "prompts; its score is measured on the held-out prompts. Heads-to columns count the units ablated "
               "together before the damage reaches the threshold, greedy first; '> K' means the K steps computed "
               "never got there. The effective number of units is exp(entropy of the positive drops): 1 when one "
               "unit carries the task, at most the unit count K ('of K'), so compare it only between rows of equal K.\n")
_SPECIAL = re.compile(r"([\\*`|_<>\[\]:#+=~^-])")


@dataclass(frozen=True)
class Figure:
    """A headline figure: its PNG, a title and what to read in it."""
    png: str
    title: str
    read: str


def _cell(v) -> str:
    """A value as inline text: empty for missing, floats to 4 significant digits, and every
    character reStructuredText reads as markup escaped (a cell is text, never markup)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    text = f"{v:.4g}" if isinstance(v, float) else str(v)
    return _SPECIAL.sub(r"\\\1", " ".join(text.split())) or ""


def rst_table(df: pl.DataFrame, title: str, columns=None) -> str:
    """`df` (its `columns` where given and present) as a titled list-table."""
    cols = [c for c in (columns or df.columns) if c in df.columns]
    if not cols or df.height == 0:
        return f"**{title}**: no rows in this run.\n"
    lines = [f".. list-table:: {_cell(title)}", "   :header-rows: 1", ""]
    for row in [cols] + [[r[c] for c in cols] for r in df.iter_rows(named=True)]:
        cells = [_cell(v) for v in row]
        lines.append("   * - " + (cells[0] or "\\ "))
        lines += ["     - " + (c or "\\ ") for c in cells[1:]]
    return "\n".join(lines) + "\n"


def figure_rst(fig: Figure) -> str:
    """The figure embedded as a data URI, under its title, with what to read in it."""
    data = "data:image/png;base64," + base64.b64encode(Path(fig.png).read_bytes()).decode("ascii")
    # a URI may run over several lines (joined without whitespace): docutils refuses lines > 10,000 chars
    uri = "\n".join("   " + data[i:i + 76] for i in range(0, len(data), 76))
    return f"**{_cell(fig.title)}.** {fig.read}\n\n.. image::\n{uri}\n   :width: 100%\n"


def landing(claims: pl.DataFrame, table1: pl.DataFrame | None, headline: tuple[str, str],
            figures: list[Figure], tail: str) -> str:
    """The first page: the claims, Table 1 of the `headline` (task, ablation), the figures, then
    `tail` (the workflow's description)."""
    task, ablation = headline
    parts = [
        "The answer\n==========\n",
        ("What this run measured, before the archive of every table and figure (the menu's Results, "
         "by task and ablation; the workflow graph under Workflow). Percentages are of the task's clean "
         "metric above its floor, on prompts held out from the ranking, with 95% bootstrap intervals.\n"),
        rst_table(claims, "The paper's claims (arXiv 2605.08853), checked on this run", CLAIM_COLUMNS),
        ("A verdict is only as strong as its numbers: a toy pair is one seed, so a claim about MHA against GQA "
         "is 'not testable (one seed)' on toys. Not testable means this run lacks the models, prompts or "
         "draws the claim needs (the reason says which; testable_when says what would decide it); inconclusive, "
         "that it measured them but the intervals reach across the claim's cut. An interval with a note "
         "(widened for skewed prompts, or may under-cover with few prompts) says so in the claim's interval "
         "and in Table 1's note column.\n"),
    ]
    if table1 is not None:
        parts += [rst_table(table1_form(table1), f"Table 1: {task}, {ablation} ablation"), TABLE1_READ]
    parts += [figure_rst(f) for f in figures]
    parts += ["About this workflow\n===================\n", tail]
    return "\n".join(parts)


def headline_figures(task: str, ablation: str, fig1: str | None, fig2: str | None, scale: str | None) -> list[Figure]:
    """The headline figures of (task, ablation) that this run makes, with what to read in each."""
    out = []
    if fig1:
        out.append(Figure(fig1, f"Figure 1: {task} heatmaps, {ablation} ablation",
                          "Each cell is one unit's drop when ablated alone on the scoring prompts: the clean "
                          "metric minus the ablated one, in the metric's own units (IOI: logit difference; "
                          "induction: rise of the ICL loss), not normalised to damage (layer by head, one panel "
                          "per model, a shared colour scale): a concentrated circuit is one or a few bright "
                          "cells."))
    if fig2:
        out.append(Figure(fig2, f"Figure 2: {task} ablation curves, {ablation} ablation",
                          "Damage (1 = the task is gone) as units are ablated together in the order of their "
                          "single-unit drop, largest first (the ranked curve), on held-out prompts: a curve "
                          "that crosses the dashed threshold within a step or two is a concentrated circuit."))
    if scale:
        out.append(Figure(scale, f"Scale figure, {ablation} ablation",
                          "The top head score as % damage (top row) and the ranked curve's heads-to count "
                          "(bottom row) against the parameter count, per family and attention "
                          "type: if architecture matters more than scale, MHA and GQA separate while each "
                          "family's line stays flat."))
    return out


def write_landing(files: dict, headline: tuple[str, str], out) -> None:
    """The first page from the run's files (plan.jobs.targets.landing_inputs, plus `workflow`: the
    workflow's description), atomically."""
    table1 = io.read_csv(files["table1"]) if "table1" in files else None
    figs = headline_figures(*headline, files.get("fig1"), files.get("fig2"), files.get("scale"))
    text = landing(io.read_csv(files["claims"]), table1, headline, figs, Path(files["workflow"]).read_text())
    io.write_text(text, out)
